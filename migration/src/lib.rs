//! Schema migrations of masterpay, one file per migration.
//!
//! The database enforces what it can on all three backends: unique order ids
//! and token hashes, foreign keys, non-negative money, one log row per order.
//! Every lookup the API makes is served by an index.

pub use sea_orm_migration::prelude::*;

mod m20261122_000001_create_schema;
mod m20261124_000002_balances_keyed_by_account;
mod m20261124_000003_room_for_in_page_updates;
mod m20261124_000004_balances_carry_their_project;
mod m20261124_000005_log_rows_reference_their_account;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_create_schema::Migration),
            Box::new(m20261124_000002_balances_keyed_by_account::Migration),
            Box::new(m20261124_000003_room_for_in_page_updates::Migration),
            Box::new(m20261124_000004_balances_carry_their_project::Migration),
            Box::new(m20261124_000005_log_rows_reference_their_account::Migration),
        ]
    }
}
