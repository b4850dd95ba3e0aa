//! An operation-log row references its account, `(user_id, server_id)` →
//! `balances`, instead of its user, `user_id` → `users`.
//!
//! Every writer changes the balance row first and logs the change after it,
//! in the same transaction (a completion, `balance set`), so a log row
//! always has its account; an account has its user (its own foreign key),
//! so the new key says all the old one did, and more: no log row can name
//! an account that does not exist.
//!
//! What it changes is the check's cost. PostgreSQL checks a foreign key by
//! locking the referenced row (`FOR KEY SHARE`), which writes that row's
//! page: with the key on `users`, every completion dirtied a user's page,
//! a random one of thousands at 10^6 users, and the first write to a page
//! after a checkpoint puts the whole page in the WAL. The balance row the
//! key now references is the one the completion has just updated, in a
//! page already written. Measured at 10^6 users with pgbench running a
//! completion's statement (docs/benchmarks.md, step 32): WAL per completion
//! 5 546 and 5 654 → 3 844 bytes, completions a second +13 %; no change at
//! 10^3, where the users' pages stay in memory anyway. InnoDB takes a shared
//! lock on the parent row in the same way, and SQLite reads its page.
//!
//! The cost, once: PostgreSQL reads the whole log to check the new key;
//! MariaDB copies the log table (adding a checked foreign key is not done
//! in place); SQLite copies it too (it cannot change a foreign key in place).
//! A log row without its account (which the old key allowed: written by
//! something other than masterpay, or with foreign keys off) stops the
//! migration with a foreign-key error and changes nothing.
//! Measured at 10^6 in README's upgrade note.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

use crate::m20261124_000002_balances_keyed_by_account::{SchemaPart::ForeignKey, mysql_has, run};

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261124_000005_log_rows_reference_their_account"
    }
}

/// The new key's clause.
const ACCOUNT_KEY: &str =
    r#"FOREIGN KEY ("user_id", "server_id") REFERENCES "balances" ("user_id", "server_id")"#;
/// The key migration 000001 created.
const USER_KEY: &str = r#"FOREIGN KEY ("user_id") REFERENCES "users" ("id")"#;

/// SQLite: `operation_log` copied into a table that differs from the
/// original (migration 000001) only in `user_key`, which then takes its
/// name. Ids are kept, and so is the table's `AUTOINCREMENT` high-water
/// mark, so no id is ever handed out twice; the two indexes are made again.
/// The copy checks every row against the new key as it is inserted.
fn sqlite_rebuild(user_key: &str) -> Vec<String> {
    const COLUMNS: &str = r#""id", "kind", "order_ref", "user_id", "server_id", "balance_type", "amount_cents", "balance_before_cents", "balance_after_cents", "created_at""#;
    vec![
        format!(
            r#"CREATE TABLE "operation_log_rebuilt" ( "id" integer NOT NULL PRIMARY KEY AUTOINCREMENT, "kind" varchar(16) NOT NULL, "order_ref" integer NULL, "user_id" integer NOT NULL, "server_id" integer NOT NULL, "balance_type" varchar(8) NOT NULL, "amount_cents" integer NOT NULL, "balance_before_cents" integer NOT NULL, "balance_after_cents" integer NOT NULL, "created_at" timestamp_with_timezone_text NOT NULL, FOREIGN KEY ("order_ref") REFERENCES "payment_orders" ("id") ON DELETE RESTRICT, {user_key} ON DELETE RESTRICT )"#
        ),
        format!(
            r#"INSERT INTO "operation_log_rebuilt" ({COLUMNS}) SELECT {COLUMNS} FROM "operation_log" ORDER BY "id""#
        ),
        // The old mark is at least every id copied.
        r#"DELETE FROM "sqlite_sequence" WHERE "name" = 'operation_log_rebuilt'"#.to_owned(),
        r#"INSERT INTO "sqlite_sequence" ("name", "seq") SELECT 'operation_log_rebuilt', "seq" FROM "sqlite_sequence" WHERE "name" = 'operation_log'"#.to_owned(),
        r#"DROP TABLE "operation_log""#.to_owned(),
        r#"ALTER TABLE "operation_log_rebuilt" RENAME TO "operation_log""#.to_owned(),
        r#"CREATE UNIQUE INDEX "ux_log_order" ON "operation_log" ("order_ref")"#.to_owned(),
        r#"CREATE INDEX "ix_log_account" ON "operation_log" ("user_id", "server_id", "balance_type", "id")"#.to_owned(),
    ]
}

/// PostgreSQL, MariaDB and MySQL: the key `add` added and the key `drop`
/// dropped. PostgreSQL runs both in the migration's transaction. MariaDB
/// and MySQL do both in one `ALTER TABLE`, which is done all or not at all
/// but commits by itself, before the migration is recorded: a process
/// stopped in between finds the keys already swapped on its next start, so
/// what is still to do is read from `information_schema` first (as in
/// migration 000004). InnoDB's index for either key is `ix_log_account`,
/// whose first columns are `(user_id, server_id)`.
async fn swap_keys(
    manager: &SchemaManager<'_>,
    add: (&str, &str),
    drop: &str,
) -> Result<Vec<String>, DbErr> {
    let (name, key) = add;
    if manager.get_database_backend() == DbBackend::Postgres {
        return Ok(vec![
            format!(
                r#"ALTER TABLE "operation_log" ADD CONSTRAINT "{name}" {key} ON DELETE RESTRICT"#
            ),
            format!(r#"ALTER TABLE "operation_log" DROP CONSTRAINT "{drop}""#),
        ]);
    }
    let mut parts = Vec::new();
    if mysql_has(manager, "operation_log", ForeignKey(drop)).await? {
        parts.push(format!("DROP FOREIGN KEY `{drop}`"));
    }
    if !mysql_has(manager, "operation_log", ForeignKey(name)).await? {
        parts.push(format!(
            "ADD CONSTRAINT `{name}` {} ON DELETE RESTRICT",
            key.replace('"', "`")
        ));
    }
    Ok(if parts.is_empty() {
        Vec::new()
    } else {
        vec![format!("ALTER TABLE `operation_log` {}", parts.join(", "))]
    })
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// In one transaction, as migrations 000002 and 000004: SQLite's copy
    /// is several statements.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let steps = match manager.get_database_backend() {
            DbBackend::Sqlite => sqlite_rebuild(ACCOUNT_KEY),
            _ => swap_keys(manager, ("fk_log_account", ACCOUNT_KEY), "fk_log_user").await?,
        };
        run(manager, steps).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let steps = match manager.get_database_backend() {
            DbBackend::Sqlite => sqlite_rebuild(USER_KEY),
            _ => swap_keys(manager, ("fk_log_user", USER_KEY), "fk_log_account").await?,
        };
        run(manager, steps).await
    }
}
