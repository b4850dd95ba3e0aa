//! The authentication chain of every v2 request (docs/api.md, "Authentication").
//!
//! The checks that need no database come first ([`bearer_token`]): EMPTY_TOKEN,
//! INVALID_TOKEN, and TOKEN_NOT_FOUND for a value no token can have. Then one
//! read of the token ([`authenticate`]) answers TOKEN_NOT_FOUND,
//! TOKEN_DISABLED, EMPTY_ACCESS and PROJECT_NOT_FOUND, in that order. The
//! endpoint's permission (ACCESS_DENIED) is checked by the caller, which
//! knows the endpoint ([`Principal::may`]).
//!
//! A balance request's account is read in the token's own statement (see
//! `store`), so the hottest request costs one statement; it comes back with
//! the principal, and `balances::lookup` uses it only for exactly the
//! account it was read for.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use chrono::{DateTime, Utc};

use super::tokens::{self, Permission, TOKEN_LEN};
use crate::store::{AccountKey, AccountRow, Store, StoreError, now};

/// Who is calling: the outcome of a successful authentication.
#[derive(Debug, Clone)]
pub struct Principal {
    pub token_id: i64,
    pub project_id: i64,
    /// The stored hash of the caller's token, to read it again with an
    /// account (`balances::lookup`).
    pub token_hash: String,
    /// Which of [`Permission::ALL`] the token holds, by position.
    granted: [bool; Permission::ALL.len()],
}

impl Principal {
    pub fn may(&self, permission: Permission) -> bool {
        self.granted[permission as usize]
    }
}

/// An authenticated request: who is calling and, when an account was asked,
/// what the token's statement found of it.
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub principal: Principal,
    pub account: Option<(AccountKey, AccountRow)>,
}

/// Why a request is not authenticated, in the order the checks run.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("authorization header missing")]
    EmptyToken,
    #[error("token length is not 64")]
    InvalidToken,
    #[error("token not found")]
    TokenNotFound,
    #[error("token disabled")]
    TokenDisabled,
    #[error("token has no permissions")]
    EmptyAccess,
    #[error("project missing or inactive")]
    ProjectNotFound,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Extracts the token from an `Authorization` header value: the scheme word
/// `Bearer` is matched case-insensitively, surrounding blanks are ignored.
/// `Ok(None)` means there is no token at all (EMPTY_TOKEN).
pub fn token_from_header(header: Option<&str>) -> Result<Option<&str>, AuthError> {
    let header = header.map_or("", str::trim);
    if header.is_empty() {
        return Ok(None);
    }
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::InvalidToken);
    }
    let token = rest.trim();
    Ok((!token.is_empty()).then_some(token))
}

/// The steps of the chain that need no database: the token of an
/// `Authorization` header, or EMPTY_TOKEN, INVALID_TOKEN (not Bearer, not
/// 64 characters) or TOKEN_NOT_FOUND (64 characters that no token has).
pub fn bearer_token(header: Option<&str>) -> Result<&str, AuthError> {
    let token = token_from_header(header)?.ok_or(AuthError::EmptyToken)?;
    if token.chars().count() != TOKEN_LEN {
        return Err(AuthError::InvalidToken);
    }
    if !token.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(AuthError::TokenNotFound);
    }
    Ok(token)
}

/// The rest of the chain for a token [`bearer_token`] accepted, reading
/// `account` of the token's project in the same statement when given. A
/// successful authentication records the token's use through `usage`.
pub async fn authenticate(
    store: &Arc<dyn Store>,
    usage: &UsageRecorder,
    token: &str,
    account: Option<AccountKey>,
) -> Result<Authenticated, AuthError> {
    let token_hash = tokens::hash(token);
    let row = store
        .read_token(&token_hash, account.as_ref())
        .await?
        .ok_or(AuthError::TokenNotFound)?;
    let at = now();
    // A replaced value past its grace period is gone, as a deleted token is;
    // an expired token still exists, as a disabled one does.
    if row.grace_until.is_some_and(|until| until <= at) {
        return Err(AuthError::TokenNotFound);
    }
    if !row.active || row.expires_at.is_some_and(|expiry| expiry <= at) {
        return Err(AuthError::TokenDisabled);
    }
    let granted =
        Permission::ALL.map(|permission| row.permissions.iter().any(|p| p == permission.as_str()));
    if !granted.contains(&true) {
        return Err(AuthError::EmptyAccess);
    }
    if row.project_active != Some(true) {
        return Err(AuthError::ProjectNotFound);
    }
    usage.record(store, row.token_id, &token_hash, row.last_used_at, at);
    Ok(Authenticated {
        principal: Principal {
            token_id: row.token_id,
            project_id: row.project_id,
            token_hash,
            granted,
        },
        account: account.zip(row.account),
    })
}

/// Records when token values are used: `last_used_at` of the value, written
/// at most once a minute per value and off the request path, so authentication stays a read.
///
/// The database value alone would let every request of a burst that starts
/// before the first write lands spawn a write of its own (64 at once under
/// load, each queuing for SQLite's one writer), so the process also keeps
/// when it last recorded each value (by its hash, so that a reissued
/// token's new value is recorded from its first use).
#[derive(Debug, Default)]
pub struct UsageRecorder {
    recorded_at: Mutex<HashMap<String, DateTime<Utc>>>,
}

/// How stale `last_used_at` may get.
const USAGE_RESOLUTION: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

impl UsageRecorder {
    fn record(
        &self,
        store: &Arc<dyn Store>,
        token_id: i64,
        token_hash: &str,
        last_used_at: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) {
        let fresh = |t: DateTime<Utc>| now - t <= USAGE_RESOLUTION;
        if last_used_at.is_some_and(fresh) || !self.claim(token_hash, now) {
            return;
        }
        let store = Arc::clone(store);
        let token_hash = token_hash.to_owned();
        tokio::spawn(async move {
            if let Err(err) = store.record_token_use(token_id, &token_hash, now).await {
                tracing::debug!(token_id, error = %err, "could not record last use");
            }
        });
    }

    /// True when this process has not recorded the value `token_hash`
    /// within the last minute; it then counts as recorded at `now`.
    fn claim(&self, token_hash: &str, now: DateTime<Utc>) -> bool {
        let mut recorded_at = self
            .recorded_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match recorded_at.get(token_hash) {
            Some(&t) if now - t <= USAGE_RESOLUTION => false,
            _ => {
                recorded_at.insert(token_hash.to_owned(), now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A principal indexes its permissions by discriminant.
    #[test]
    fn permissions_are_listed_in_declaration_order() {
        for (index, permission) in Permission::ALL.into_iter().enumerate() {
            assert_eq!(permission as usize, index, "{permission}");
            let mut granted = [false; Permission::ALL.len()];
            granted[index] = true;
            let principal = Principal {
                token_id: 1,
                project_id: 1,
                token_hash: String::new(),
                granted,
            };
            for other in Permission::ALL {
                assert_eq!(principal.may(other), other == permission);
            }
        }
    }

    /// A burst of requests of one value records its use once a minute.
    #[test]
    fn usage_is_recorded_once_a_minute_per_value() {
        let usage = UsageRecorder::default();
        let start = now();
        assert!(usage.claim("a", start));
        assert!(!usage.claim("a", start));
        assert!(usage.claim("b", start), "another value");
        assert!(!usage.claim("a", start + chrono::TimeDelta::seconds(60)));
        assert!(usage.claim("a", start + chrono::TimeDelta::seconds(61)));
    }
}
