//! Schema migrations of masterpay, one file per migration.
//!
//! The database enforces what it can on all three backends: unique order ids
//! and token hashes, foreign keys, non-negative money, one log row per order.
//! Every lookup the API makes is served by an index.
//!
//! `m20261122_000001_create_schema` creates the whole schema; no release
//! predates it. From the first tagged release on, migrations are only
//! appended: one that a release has shipped is never edited again.

pub use sea_orm_migration::prelude::*;

mod m20261122_000001_create_schema;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![Box::new(m20261122_000001_create_schema::Migration)]
    }
}
