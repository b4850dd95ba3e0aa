//! A balance row is keyed by its account, (user_id, server_id), instead of
//! a surrogate `id` that nothing reads.
//!
//! Every statement finds a balance by its account: the lookups, the credits'
//! `ON CONFLICT (user_id, server_id)`, `balance set`, the audit. With the
//! account as the primary key, SQLite stores the rows in that key's B-tree
//! (`WITHOUT ROWID`) and MariaDB's InnoDB clusters them by it, so a lookup
//! reads one B-tree where it read two (the unique index, then the row by
//! its id), and a credit finds and rewrites its row in the one B-tree.
//! PostgreSQL keeps rows in a heap either way; there the unique index simply
//! becomes the primary key. Measured on SQLite at 10^6 accounts
//! (docs/benchmarks.md, step 29): `pread` calls per balance request 3.0 →
//! 2.4, and a completion's reads and writes unchanged, where an index
//! holding the amounts beside the key would have made every credit write
//! one page more.

use sea_orm_migration::{
    prelude::*,
    sea_orm::{ConnectionTrait, DbBackend, Statement},
};

use crate::m20261122_000001_create_schema::MAX_CENTS;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261124_000002_balances_keyed_by_account"
    }
}

/// SQLite's `balances_rebuilt`: `balances` as the first migration created
/// it, with `id` (its column definition or nothing), `key` (a primary-key
/// clause or nothing) and `rowid` (`WITHOUT ROWID` or nothing); with
/// `project`, also the user's project and the foreign key to the user
/// through it (migration `m20261124_000004_balances_carry_their_project`).
pub(crate) fn sqlite_balances(id: &str, key: &str, rowid: &str, project: bool) -> String {
    let (project_column, user_key) = if project {
        (
            r#""project_id" integer NOT NULL, "#,
            r#"("user_id", "project_id") REFERENCES "users" ("id", "project_id")"#,
        )
    } else {
        ("", r#"("user_id") REFERENCES "users" ("id")"#)
    };
    format!(
        r#"CREATE TABLE "balances_rebuilt" ({id}"user_id" integer NOT NULL, "server_id" integer NOT NULL CHECK ("server_id" >= 0), "main_cents" integer NOT NULL DEFAULT 0 CHECK ("main_cents" BETWEEN 0 AND {MAX_CENTS}), "bonus_cents" integer NOT NULL DEFAULT 0 CHECK ("bonus_cents" BETWEEN 0 AND {MAX_CENTS}), "updated_at" timestamp_with_timezone_text NOT NULL, {project_column}{key}FOREIGN KEY {user_key} ON DELETE RESTRICT){rowid}"#
    )
}

/// The rows of `balances` into the table `create` makes, which then takes
/// its name (SQLite cannot change a table's primary key in place). Only
/// while nothing references `balances`: since migration 000005 the log's
/// key does (`ON DELETE RESTRICT`), so with log rows present the `DROP
/// TABLE` here would fail; a later rebuild of `balances` must rebuild
/// `operation_log` with it (000005's `down` runs before this one's).
pub(crate) fn sqlite_rebuild(create: String) -> Vec<String> {
    vec![
        create,
        r#"INSERT INTO "balances_rebuilt" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at") SELECT "user_id", "server_id", "main_cents", "bonus_cents", "updated_at" FROM "balances" ORDER BY "user_id", "server_id""#.to_owned(),
        r#"DROP TABLE "balances""#.to_owned(),
        r#"ALTER TABLE "balances_rebuilt" RENAME TO "balances""#.to_owned(),
    ]
}

const UNIQUE_ACCOUNT: &str =
    r#"CREATE UNIQUE INDEX "ux_balances_user_server" ON "balances" ("user_id", "server_id")"#;

/// Runs `steps` in order. On MariaDB each step is one `ALTER TABLE`, which
/// commits by itself: as one statement the change is all done or not at
/// all, so a failure leaves the table as it was and the next start applies
/// the migration again. A crash after it commits and before the migration
/// is recorded leaves it done, so each migration reads back from
/// `information_schema` what is still to do ([`mysql_has`]). Changing the primary key copies the
/// table, which takes longer than the service's statement timeout
/// (`max_statement_time`, set on every pool connection by `db::connect`) on
/// a large one, so there the timeout is lifted for the steps and set back
/// afterwards, failed or not. (MySQL has no such variable: there the steps
/// run as they are.) On PostgreSQL the steps run in the migration's
/// transaction, and its pool's `statement_timeout` is lifted for that
/// transaction only (`SET LOCAL`): filling a column of a large table takes
/// longer than a request's statement may.
///
/// On SQLite the steps first read the schema table. A pooled connection
/// keeps the schema it last read in memory, and SQLite checks that copy
/// against the file only when a statement runs, not when one is prepared:
/// `CREATE INDEX` is refused at prepare time if the copy still holds an index
/// that another connection has dropped since ("index ... already exists";
/// migration 000004 rolled back and applied again on one pool failed so in
/// 5 of 150 test runs). Running a read first reloads a stale copy.
pub(crate) async fn run(manager: &SchemaManager<'_>, steps: Vec<String>) -> Result<(), DbErr> {
    let db = manager.get_connection();
    let backend = manager.get_database_backend();
    if backend == DbBackend::Sqlite {
        exists(manager, "SELECT COUNT(*) FROM sqlite_schema").await?;
    }
    if backend == DbBackend::Postgres {
        db.execute_unprepared("SET LOCAL statement_timeout = 0")
            .await?;
    }
    let timeout = match backend {
        DbBackend::MySql => db
            .query_one_raw(sea_orm_migration::sea_orm::Statement::from_string(
                backend,
                "SELECT CAST(@@SESSION.max_statement_time AS CHAR)",
            ))
            .await
            .ok()
            .flatten()
            .and_then(|row| row.try_get_by_index::<String>(0).ok()),
        _ => None,
    };
    if timeout.is_some() {
        db.execute_unprepared("SET SESSION max_statement_time = 0")
            .await?;
    }
    let mut result = Ok(());
    for step in steps {
        result = db.execute_unprepared(&step).await.map(|_| ());
        if result.is_err() {
            break;
        }
    }
    if let Some(seconds) = timeout {
        // A number as MariaDB printed it, e.g. "2.000000".
        let seconds: f64 = seconds.trim().parse().unwrap_or(0.0);
        db.execute_unprepared(&format!("SET SESSION max_statement_time = {seconds}"))
            .await?;
    }
    result
}

/// Whether `sql` (a `COUNT(*)` over `information_schema`) counts anything.
async fn exists(manager: &SchemaManager<'_>, sql: &str) -> Result<bool, DbErr> {
    let db = manager.get_connection();
    let row = db
        .query_one_raw(Statement::from_string(manager.get_database_backend(), sql))
        .await?;
    let count: i64 = match row {
        Some(row) => row.try_get_by_index(0)?,
        None => 0,
    };
    Ok(count > 0)
}

/// A part of a MariaDB or MySQL table that a migration adds or drops.
pub(crate) enum SchemaPart<'a> {
    Column(&'a str),
    Index(&'a str),
    ForeignKey(&'a str),
}

/// MariaDB and MySQL: whether `table` has `part`. There each `ALTER TABLE`
/// commits by itself, before the migration is recorded, so a migration
/// reads what of it is already done ([`run`]); `IF [NOT] EXISTS` would not
/// do, MySQL does not have it.
pub(crate) async fn mysql_has(
    manager: &SchemaManager<'_>,
    table: &str,
    part: SchemaPart<'_>,
) -> Result<bool, DbErr> {
    let (view, schema, condition) = match part {
        SchemaPart::Column(name) => ("columns", "table_schema", format!("column_name = '{name}'")),
        SchemaPart::Index(name) => (
            "statistics",
            "table_schema",
            format!("index_name = '{name}'"),
        ),
        SchemaPart::ForeignKey(name) => (
            "table_constraints",
            "constraint_schema",
            format!("constraint_type = 'FOREIGN KEY' AND constraint_name = '{name}'"),
        ),
    };
    exists(
        manager,
        &format!(
            "SELECT COUNT(*) FROM information_schema.{view} WHERE {schema} = DATABASE() \
             AND table_name = '{table}' AND {condition}"
        ),
    )
    .await
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// In one transaction on every backend (sea-orm's default is PostgreSQL
    /// only): SQLite's rebuild is four statements, and a process that
    /// loses a start-up race (`db::migrate` retries) must find either the
    /// old table or the new one, never a half-made copy. MariaDB commits an
    /// `ALTER TABLE` by itself whatever is asked, so there the change is one
    /// statement (see [`run`]).
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let steps = match manager.get_database_backend() {
            DbBackend::Sqlite => sqlite_rebuild(sqlite_balances(
                "",
                r#"PRIMARY KEY ("user_id", "server_id"), "#,
                " WITHOUT ROWID",
                false,
            )),
            DbBackend::Postgres => vec![
                r#"ALTER TABLE "balances" DROP CONSTRAINT "balances_pkey""#.to_owned(),
                r#"ALTER TABLE "balances" DROP COLUMN "id""#.to_owned(),
                r#"ALTER TABLE "balances" ADD CONSTRAINT "balances_pkey" PRIMARY KEY USING INDEX "ux_balances_user_server""#.to_owned(),
            ],
            // Done already, by a process stopped before it was recorded.
            _ if !mysql_has(manager, "balances", SchemaPart::Column("id")).await? => Vec::new(),
            _ => vec![
                "ALTER TABLE `balances` DROP COLUMN `id`, \
                 ADD PRIMARY KEY (`user_id`, `server_id`), \
                 DROP INDEX `ux_balances_user_server`"
                    .to_owned(),
            ],
        };
        run(manager, steps).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let steps = match manager.get_database_backend() {
            DbBackend::Sqlite => {
                let mut steps = sqlite_rebuild(sqlite_balances(
                    r#""id" integer NOT NULL PRIMARY KEY AUTOINCREMENT, "#,
                    "",
                    "",
                    false,
                ));
                steps.push(UNIQUE_ACCOUNT.to_owned());
                steps
            }
            DbBackend::Postgres => vec![
                UNIQUE_ACCOUNT.to_owned(),
                r#"ALTER TABLE "balances" DROP CONSTRAINT "balances_pkey""#.to_owned(),
                r#"ALTER TABLE "balances" ADD COLUMN "id" bigserial PRIMARY KEY"#.to_owned(),
            ],
            _ if mysql_has(manager, "balances", SchemaPart::Column("id")).await? => Vec::new(),
            _ => vec![
                "ALTER TABLE `balances` \
                 ADD UNIQUE INDEX `ux_balances_user_server` (`user_id`, `server_id`), \
                 DROP PRIMARY KEY, \
                 ADD COLUMN `id` bigint NOT NULL AUTO_INCREMENT PRIMARY KEY FIRST"
                    .to_owned(),
            ],
        };
        run(manager, steps).await
    }
}
