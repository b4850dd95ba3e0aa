//! A balance row carries its user's project (`project_id`), and the database
//! keeps the two equal: the foreign key is `(user_id, project_id)` →
//! `users (id, project_id)`, which replaces `user_id` → `users (id)`.
//!
//! A balance lookup names the user by id within the token's project. The
//! project check needed the user's row, so a lookup read two B-trees:
//! `users` for the project, `balances` for the amounts. With the project in
//! the balance row, a lookup of an account that has a balance reads the
//! balance row alone, and reads `users` only when there is none (to tell a
//! user without a balance, zero, from no such user). At 10^6 users neither
//! B-tree fits SQLite's page cache, so that is one page read from the file
//! less per request (docs/benchmarks.md, step 31); on PostgreSQL, where the
//! lookup is read joined to the token's statement, a heap page and an index
//! descent less.
//!
//! The cost, once: SQLite copies `balances`; PostgreSQL fills the column
//! with an `UPDATE` of every row, under locks that stop reads and writes of
//! `users` and `balances` until it commits; MariaDB copies the table to
//! add the foreign key and gives it an index `(user_id, project_id)` of its
//! own (the primary key `(user_id, server_id)` cannot serve it). Measured
//! at 10^6 users in README's upgrade note.
//!
//! A user never changes project, and the foreign key refuses a balance whose
//! project is not its user's, so the copy cannot go stale. The unique index
//! `users (id, project_id)` is what a composite foreign key must point to on
//! every backend (`id` alone is already unique).

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

use crate::m20261124_000002_balances_keyed_by_account::{
    SchemaPart::{Column, ForeignKey, Index},
    mysql_has, run, sqlite_balances, sqlite_rebuild,
};

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261124_000004_balances_carry_their_project"
    }
}

/// The primary key migration 000002 gave `balances`.
const ACCOUNT_KEY: &str = r#"PRIMARY KEY ("user_id", "server_id"), "#;

const USERS_ID_PROJECT: &str =
    r#"CREATE UNIQUE INDEX "ux_users_id_project" ON "users" ("id", "project_id")"#;

/// SQLite: `balances` rebuilt with `project_id`, filled from each row's
/// user, under the composite foreign key (SQLite cannot add a foreign key
/// to a table in place). A left join, so that a row without its user (only
/// possible if foreign keys were ever off) stops the migration at
/// `NOT NULL` instead of being left behind.
fn sqlite_up() -> Vec<String> {
    vec![
        USERS_ID_PROJECT.to_owned(),
        sqlite_balances("", ACCOUNT_KEY, " WITHOUT ROWID", true),
        r#"INSERT INTO "balances_rebuilt" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at", "project_id") SELECT "b"."user_id", "b"."server_id", "b"."main_cents", "b"."bonus_cents", "b"."updated_at", "u"."project_id" FROM "balances" AS "b" LEFT JOIN "users" AS "u" ON "u"."id" = "b"."user_id" ORDER BY "b"."user_id", "b"."server_id""#.to_owned(),
        r#"DROP TABLE "balances""#.to_owned(),
        r#"ALTER TABLE "balances_rebuilt" RENAME TO "balances""#.to_owned(),
    ]
}

/// SQLite: `balances` as migration 000002 left it.
fn sqlite_down() -> Vec<String> {
    let mut steps = sqlite_rebuild(sqlite_balances("", ACCOUNT_KEY, " WITHOUT ROWID", false));
    steps.push(r#"DROP INDEX "ux_users_id_project""#.to_owned());
    steps
}

/// What of the change is already in a MariaDB or MySQL database. There each
/// `ALTER TABLE` commits by itself, so a migration cut off part-way (a
/// crash, a lost connection) leaves some of it done; the next start does
/// the rest. Read from `information_schema` rather than with
/// `IF [NOT] EXISTS`, which MySQL does not have.
struct MySqlState {
    users_index: bool,
    column: bool,
    old_key: bool,
    new_key: bool,
    new_key_index: bool,
}

impl MySqlState {
    async fn read(manager: &SchemaManager<'_>) -> Result<MySqlState, DbErr> {
        Ok(MySqlState {
            users_index: mysql_has(manager, "users", Index("ux_users_id_project")).await?,
            column: mysql_has(manager, "balances", Column("project_id")).await?,
            old_key: mysql_has(manager, "balances", ForeignKey("fk_balances_user")).await?,
            new_key: mysql_has(manager, "balances", ForeignKey("fk_balances_user_project")).await?,
            new_key_index: mysql_has(manager, "balances", Index("fk_balances_user_project"))
                .await?,
        })
    }

    /// The steps of `up` still to run. InnoDB gives the new foreign key an
    /// index of its own, `(user_id, project_id)`: the primary key
    /// `(user_id, server_id)` cannot serve it.
    fn up(&self) -> Vec<String> {
        let mut steps = Vec::new();
        if !self.users_index {
            steps.push(
                "ALTER TABLE `users` ADD UNIQUE INDEX `ux_users_id_project` (`id`, `project_id`)"
                    .to_owned(),
            );
        }
        if !self.column {
            steps.push("ALTER TABLE `balances` ADD COLUMN `project_id` bigint NULL".to_owned());
        }
        steps.push(
            "UPDATE `balances` JOIN `users` ON `users`.`id` = `balances`.`user_id` \
             SET `balances`.`project_id` = `users`.`project_id` WHERE `balances`.`project_id` IS NULL"
                .to_owned(),
        );
        let mut last = vec!["MODIFY `project_id` bigint NOT NULL".to_owned()];
        if self.old_key {
            last.push("DROP FOREIGN KEY `fk_balances_user`".to_owned());
        }
        if !self.new_key {
            last.push(
                "ADD CONSTRAINT `fk_balances_user_project` FOREIGN KEY (`user_id`, `project_id`) \
                 REFERENCES `users` (`id`, `project_id`) ON DELETE RESTRICT"
                    .to_owned(),
            );
        }
        steps.push(format!("ALTER TABLE `balances` {}", last.join(", ")));
        steps
    }

    /// The steps of `down` still to run.
    fn down(&self) -> Vec<String> {
        let mut keys = Vec::new();
        if self.new_key {
            keys.push("DROP FOREIGN KEY `fk_balances_user_project`".to_owned());
        }
        if !self.old_key {
            keys.push(
                "ADD CONSTRAINT `fk_balances_user` FOREIGN KEY (`user_id`) \
                 REFERENCES `users` (`id`) ON DELETE RESTRICT"
                    .to_owned(),
            );
        }
        let mut column = Vec::new();
        if self.new_key_index {
            column.push("DROP INDEX `fk_balances_user_project`".to_owned());
        }
        if self.column {
            column.push("DROP COLUMN `project_id`".to_owned());
        }
        let mut steps: Vec<String> = [keys, column]
            .into_iter()
            .filter(|parts| !parts.is_empty())
            .map(|parts| format!("ALTER TABLE `balances` {}", parts.join(", ")))
            .collect();
        if self.users_index {
            steps.push("ALTER TABLE `users` DROP INDEX `ux_users_id_project`".to_owned());
        }
        steps
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// In one transaction on every backend, as migration 000002 (SQLite's
    /// rebuild is several statements). MariaDB and MySQL commit each
    /// `ALTER TABLE` by itself; there the steps still to run are read from
    /// the schema first ([`MySqlState`]).
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let steps = match manager.get_database_backend() {
            DbBackend::Sqlite => sqlite_up(),
            DbBackend::Postgres => vec![
                r#"ALTER TABLE "users" ADD CONSTRAINT "ux_users_id_project" UNIQUE ("id", "project_id")"#.to_owned(),
                r#"ALTER TABLE "balances" ADD COLUMN "project_id" bigint"#.to_owned(),
                r#"UPDATE "balances" SET "project_id" = "users"."project_id" FROM "users" WHERE "users"."id" = "balances"."user_id""#.to_owned(),
                r#"ALTER TABLE "balances" ALTER COLUMN "project_id" SET NOT NULL"#.to_owned(),
                r#"ALTER TABLE "balances" ADD CONSTRAINT "fk_balances_user_project" FOREIGN KEY ("user_id", "project_id") REFERENCES "users" ("id", "project_id") ON DELETE RESTRICT"#.to_owned(),
                r#"ALTER TABLE "balances" DROP CONSTRAINT "fk_balances_user""#.to_owned(),
            ],
            _ => MySqlState::read(manager).await?.up(),
        };
        run(manager, steps).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let steps = match manager.get_database_backend() {
            DbBackend::Sqlite => sqlite_down(),
            DbBackend::Postgres => vec![
                r#"ALTER TABLE "balances" ADD CONSTRAINT "fk_balances_user" FOREIGN KEY ("user_id") REFERENCES "users" ("id") ON DELETE RESTRICT"#.to_owned(),
                r#"ALTER TABLE "balances" DROP CONSTRAINT "fk_balances_user_project""#.to_owned(),
                r#"ALTER TABLE "balances" DROP COLUMN "project_id""#.to_owned(),
                r#"ALTER TABLE "users" DROP CONSTRAINT "ux_users_id_project""#.to_owned(),
            ],
            _ => MySqlState::read(manager).await?.down(),
        };
        run(manager, steps).await
    }
}
