//! On PostgreSQL, pages of `payment_orders` and `balances` keep 10 % free
//! (`fillfactor = 90`), so that a completion's updates stay in their page.
//!
//! PostgreSQL writes an updated row as a new version. When the new version
//! fits in the old one's page and no indexed column changed, the update is
//! "heap-only" (HOT): no index is touched. Otherwise every index of the
//! table gets an entry for the new version: four on `payment_orders`, one
//! on `balances`, each a random index page to read, dirty and (first after
//! a checkpoint) write whole to the WAL. A completion changes only
//! unindexed columns (an order's status and completion time, an account's
//! amounts), so what decides is the room in the page. Orders are inserted
//! by the panel and completed once each, so an order page filled to the
//! brim by inserts has no room for its rows' completions. Measured at 10^6
//! users and orders (docs/benchmarks.md, step 30): heap-only updates and
//! WAL bytes per completion before and after.
//!
//! `fillfactor` applies to pages filled from now on; existing pages keep
//! their rows, and gain room only as `VACUUM` frees it. SQLite and MariaDB
//! have no such setting (InnoDB updates rows in place).

use sea_orm_migration::{
    prelude::*,
    sea_orm::{ConnectionTrait, DbBackend},
};

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261124_000003_room_for_in_page_updates"
    }
}

const TABLES: [&str; 2] = ["payment_orders", "balances"];

/// `ALTER TABLE <table> <action>` for each table, on PostgreSQL only. Each is
/// metadata only: no table rewrite, a lock that blocks neither reads nor
/// writes.
async fn alter_on_postgres(manager: &SchemaManager<'_>, action: &str) -> Result<(), DbErr> {
    if manager.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let db = manager.get_connection();
    for table in TABLES {
        db.execute_unprepared(&format!(r#"ALTER TABLE "{table}" {action}"#))
            .await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        alter_on_postgres(manager, "SET (fillfactor = 90)").await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        alter_on_postgres(manager, "RESET (fillfactor)").await
    }
}
