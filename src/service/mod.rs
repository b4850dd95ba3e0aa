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

/// `Debug` for a type whose content must not show (a secret, a key):
/// `$text` alone.
macro_rules! debug_as {
    ($type:ty, $text:literal) => {
        impl std::fmt::Debug for $type {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($text)
            }
        }
    };
}

pub mod admin_audit;
pub mod admin_sessions;
pub mod admins;
pub mod auth;
pub mod balances;
pub mod keyset;
pub mod ledger;
pub mod ledger_check;
pub mod orders;
pub mod outbox;
pub mod overview;
pub mod projects;
pub mod servers;
pub mod tokens;
pub mod users;
pub mod validate;
pub mod webhook_delivery;
pub mod webhook_destination;
pub mod webhook_endpoints;
pub mod webhook_events;
pub mod webhook_redelivery;
pub mod webhook_secrets;
pub mod webhook_signature;

use sea_orm::{ConnectionTrait, DbErr, EntityTrait, PrimaryKeyTrait, QuerySelect, SqlErr};

/// `n` and the noun's form for it, for people: `1 order`, `2 orders`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Errors of the administrative operations (the panel, the command line).
/// A refusal names the field it is about (`name`, `email`, `password`,
/// `reason`...), so that the panel shows it next to that field.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0} {1} does not exist")]
    NotFound(&'static str, i64),
    /// A field's value breaks a rule: the field, and why.
    #[error("{1}")]
    Invalid(&'static str, String),
    /// A field's value is taken: the field, and by what.
    #[error("{1}")]
    Conflict(&'static str, String),
    #[error("database error: {0}")]
    Db(#[from] DbErr),
}

impl AdminError {
    /// `field` refused with a sentence: for `map_err` on the checks of
    /// `validate`, which answer the sentence alone.
    pub(crate) fn invalid(field: &'static str) -> impl FnOnce(String) -> AdminError {
        move |message| AdminError::Invalid(field, message)
    }

    /// Maps a unique-constraint violation to a conflict of `field`.
    pub(crate) fn conflict_on_unique(
        err: DbErr,
        field: &'static str,
        message: impl FnOnce() -> String,
    ) -> Self {
        match err.sql_err() {
            Some(SqlErr::UniqueConstraintViolation(_)) => AdminError::Conflict(field, message()),
            _ => AdminError::Db(err),
        }
    }
}

/// The row `id` of `entity`, or [`AdminError::NotFound`] naming it `kind`;
/// with `lock`, locked until the end of the write transaction `db`.
pub(crate) async fn find_row<E, C>(
    db: &C,
    _entity: E,
    kind: &'static str,
    id: i64,
    lock: bool,
) -> Result<E::Model, AdminError>
where
    E: EntityTrait,
    C: ConnectionTrait,
    <E::PrimaryKey as PrimaryKeyTrait>::ValueType: From<i64>,
{
    let query = E::find_by_id(id);
    let query = if lock { query.lock_exclusive() } else { query };
    query.one(db).await?.ok_or(AdminError::NotFound(kind, id))
}

pub use crate::store::{database::begin_write, now};

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
