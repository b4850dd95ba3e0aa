//! The rules, shared by the HTTP API and the command line.
//!
//! Nothing here knows about HTTP: each operation takes plain values and
//! returns a domain result or an error enum of its own, which `api/` maps to
//! status codes and `cli/` to one-line messages. The hottest reads and
//! writes go through the `store::Store` trait (`auth`, `balances::lookup`,
//! `orders::create` and `orders::complete`); everything else (reading and
//! cancelling orders, the history, administration) is written once on
//! sea-orm for every backend, every write that touches more than one row in
//! one transaction.

pub mod admin_audit;
pub mod admins;
pub mod audit;
pub mod auth;
pub mod balances;
pub mod history;
pub mod orders;
pub mod panel_access;
pub mod projects;
pub mod servers;
pub mod tokens;
pub mod users;
pub mod validate;

use sea_orm::{
    DatabaseConnection, DatabaseTransaction, DbErr, SqlErr, SqliteTransactionMode,
    TransactionOptions, TransactionTrait,
};

/// Errors of the administrative operations (the command line).
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0} {1} does not exist")]
    NotFound(&'static str, i64),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    #[error("database error: {0}")]
    Db(#[from] DbErr),
}

impl AdminError {
    /// Maps a unique-constraint violation to a conflict with `message`.
    pub(crate) fn conflict_on_unique(err: DbErr, message: impl FnOnce() -> String) -> Self {
        match err.sql_err() {
            Some(SqlErr::UniqueConstraintViolation(_)) => AdminError::Conflict(message()),
            _ => AdminError::Db(err),
        }
    }
}

/// Starts a transaction that writes. On SQLite it takes the write lock at
/// once (`BEGIN IMMEDIATE`): a deferred transaction that reads first and
/// writes later fails with SQLITE_BUSY instead of waiting when another
/// connection wrote in between.
pub async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    match db.get_database_backend() {
        sea_orm::DbBackend::Sqlite => {
            db.begin_with_options(TransactionOptions {
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                ..Default::default()
            })
            .await
        }
        _ => db.begin().await,
    }
}

pub use crate::store::now;

/// `len` characters from [A-Za-z0-9] drawn from the OS CSPRNG: token values,
/// the panel's secrets and order ids (about 5.95 bits each).
pub fn random_alphanumeric(len: usize) -> String {
    use rand::{Rng, TryRngCore, distr::Alphanumeric, rngs::OsRng};
    OsRng
        .unwrap_err()
        .sample_iter(Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}
