//! Schema migrations of masterpay, one file per migration.
//!
//! The database enforces what it can on all three backends: unique order ids
//! and token hashes, foreign keys, non-negative money, one log row per order.
//! Every lookup the API makes is served by an index.
//!
//! `m20261122_000001_create_schema` creates the schema; each later file
//! changes it, and a migration that has run anywhere is never edited again.

pub use sea_orm_migration::prelude::*;

mod m20261122_000001_create_schema;
mod m20261125_000001_order_life;
mod m20261125_000002_administrators;
mod m20261125_000003_panel;
mod m20261126_000001_completion_refusals;
mod m20261126_000002_session_by_link;
mod m20261127_000001_token_rotation;
mod m20261127_000002_panel_activity;
mod m20261129_000001_webhooks;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_create_schema::Migration),
            Box::new(m20261125_000001_order_life::Migration),
            Box::new(m20261125_000002_administrators::Migration),
            Box::new(m20261125_000003_panel::Migration),
            Box::new(m20261126_000001_completion_refusals::Migration),
            Box::new(m20261126_000002_session_by_link::Migration),
            Box::new(m20261127_000001_token_rotation::Migration),
            Box::new(m20261127_000002_panel_activity::Migration),
            Box::new(m20261129_000001_webhooks::Migration),
        ]
    }
}
