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
//! less per request (docs/benchmarks.md, step 31).
//!
//! A user never changes project, and the foreign key refuses a balance whose
//! project is not its user's, so the copy cannot go stale. The unique index
//! `users (id, project_id)` is what a composite foreign key must point to on
//! every backend (`id` alone is already unique).

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

use crate::{
    m20261122_000001_create_schema::MAX_CENTS,
    m20261124_000002_balances_keyed_by_account::{run, sqlite_balances, sqlite_rebuild},
};

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261124_000004_balances_carry_their_project"
    }
}

const USERS_ID_PROJECT: &str =
    r#"CREATE UNIQUE INDEX "ux_users_id_project" ON "users" ("id", "project_id")"#;

/// SQLite: `balances` rebuilt with `project_id`, filled from each row's
/// user, under the composite foreign key (SQLite cannot add a foreign key
/// to a table in place).
fn sqlite_up() -> Vec<String> {
    vec![
        USERS_ID_PROJECT.to_owned(),
        format!(
            r#"CREATE TABLE "balances_rebuilt" ("user_id" integer NOT NULL, "server_id" integer NOT NULL CHECK ("server_id" >= 0), "main_cents" integer NOT NULL DEFAULT 0 CHECK ("main_cents" BETWEEN 0 AND {MAX_CENTS}), "bonus_cents" integer NOT NULL DEFAULT 0 CHECK ("bonus_cents" BETWEEN 0 AND {MAX_CENTS}), "updated_at" timestamp_with_timezone_text NOT NULL, "project_id" integer NOT NULL, PRIMARY KEY ("user_id", "server_id"), FOREIGN KEY ("user_id", "project_id") REFERENCES "users" ("id", "project_id") ON DELETE RESTRICT) WITHOUT ROWID"#
        ),
        r#"INSERT INTO "balances_rebuilt" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at", "project_id") SELECT "b"."user_id", "b"."server_id", "b"."main_cents", "b"."bonus_cents", "b"."updated_at", "u"."project_id" FROM "balances" AS "b" JOIN "users" AS "u" ON "u"."id" = "b"."user_id" ORDER BY "b"."user_id", "b"."server_id""#.to_owned(),
        r#"DROP TABLE "balances""#.to_owned(),
        r#"ALTER TABLE "balances_rebuilt" RENAME TO "balances""#.to_owned(),
    ]
}

/// SQLite: `balances` as migration 000002 left it.
fn sqlite_down() -> Vec<String> {
    let mut steps = sqlite_rebuild(sqlite_balances(
        "",
        r#"PRIMARY KEY ("user_id", "server_id"), "#,
        " WITHOUT ROWID",
    ));
    steps.push(r#"DROP INDEX "ux_users_id_project""#.to_owned());
    steps
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// In one transaction on every backend, as migration 000002 (SQLite's
    /// rebuild is several statements). MariaDB commits each `ALTER TABLE`
    /// by itself, so there every step can run again after a failure or a
    /// crash part-way (`IF [NOT] EXISTS`, the fill only where still NULL).
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
            _ => vec![
                "ALTER TABLE `users` ADD UNIQUE INDEX IF NOT EXISTS `ux_users_id_project` (`id`, `project_id`)".to_owned(),
                "ALTER TABLE `balances` ADD COLUMN IF NOT EXISTS `project_id` bigint NULL".to_owned(),
                "UPDATE `balances` JOIN `users` ON `users`.`id` = `balances`.`user_id` \
                 SET `balances`.`project_id` = `users`.`project_id` WHERE `balances`.`project_id` IS NULL"
                    .to_owned(),
                "ALTER TABLE `balances` MODIFY `project_id` bigint NOT NULL, \
                 DROP FOREIGN KEY IF EXISTS `fk_balances_user`, \
                 ADD CONSTRAINT `fk_balances_user_project` FOREIGN KEY IF NOT EXISTS (`user_id`, `project_id`) \
                 REFERENCES `users` (`id`, `project_id`) ON DELETE RESTRICT"
                    .to_owned(),
            ],
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
            _ => vec![
                "ALTER TABLE `balances` DROP FOREIGN KEY IF EXISTS `fk_balances_user_project`, \
                 ADD CONSTRAINT `fk_balances_user` FOREIGN KEY IF NOT EXISTS (`user_id`) \
                 REFERENCES `users` (`id`) ON DELETE RESTRICT"
                    .to_owned(),
                "ALTER TABLE `balances` DROP INDEX IF EXISTS `fk_balances_user_project`, \
                 DROP COLUMN IF EXISTS `project_id`"
                    .to_owned(),
                "ALTER TABLE `users` DROP INDEX IF EXISTS `ux_users_id_project`".to_owned(),
            ],
        };
        run(manager, steps).await
    }
}
