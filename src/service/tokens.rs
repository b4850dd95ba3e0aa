//! Application tokens: issuing, managing and authenticating them.
//!
//! A token value is 64 characters from [A-Za-z0-9] drawn from the OS CSPRNG
//! (about 381 bits). Only its SHA-256 is stored; the value is returned once,
//! by `create` and `reissue`, and never logged. Every request looks the token
//! up afresh, so a change made with the command line holds from the very next
//! request of every running instance.
//!
//! Where that lookup goes to the database on every request (PostgreSQL,
//! MySQL), a balance request's lookup rides in the same statement
//! ([`authenticate`] with a `balances::LookupRequest`): the token service
//! knows that one endpoint's read so that the hottest request costs one
//! round trip, not two.

use std::{
    collections::HashMap,
    fmt,
    str::FromStr,
    sync::{Arc, Mutex, PoisonError},
};

use chrono::{DateTime, Utc};

use entity::{app_token, project, token_permission};
use rand::{Rng, TryRngCore, distr::Alphanumeric, rngs::OsRng};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, DatabaseConnection, DbBackend, DbErr, EntityTrait, QueryFilter, QueryOrder,
    Statement, Value,
    sea_query::{Asterisk, Expr, ExprTrait, Func, IntoIden, Query, SelectStatement},
};
use sha2::{Digest, Sha256};

use super::{
    AdminError,
    balances::{self, LookupRequest, LookupShape, Prefetched},
    now, projects,
    token_reads::{TokenRead, TokenReadQueue},
    validate,
};
use crate::db::{CachedSql, ReadRow, Reader};

/// Length of a token value.
pub const TOKEN_LEN: usize = 64;

/// The "key accesses": which v2 endpoint a token may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// `GET /v2/master-account/balance`
    Balance,
    /// `POST /v2/payment/order/complete`
    Complete,
}

impl Permission {
    /// Every permission, in declaration order: `ALL[p as usize] == p`, which
    /// [`Principal`] relies on.
    pub const ALL: [Permission; 2] = [Permission::Balance, Permission::Complete];

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Balance => "master-account/balance",
            Permission::Complete => "payment/order/complete",
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Permission {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Permission::ALL
            .into_iter()
            .find(|p| p.as_str() == text)
            .ok_or_else(|| {
                format!(
                    "unknown permission {text:?}; known: {}",
                    Permission::ALL.map(Permission::as_str).join(", ")
                )
            })
    }
}

/// A freshly drawn token value. Its `Debug` output is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenValue(String);

impl TokenValue {
    fn generate() -> Self {
        let value: String = OsRng
            .unwrap_err()
            .sample_iter(Alphanumeric)
            .take(TOKEN_LEN)
            .map(char::from)
            .collect();
        TokenValue(value)
    }

    /// The value itself, to be shown to the operator exactly once.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for TokenValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenValue([redacted])")
    }
}

/// Lower-case hex SHA-256 of a token value, as stored.
///
/// Every authenticated request computes it, so the digits are written into
/// one buffer: `hex::encode` builds its string a `char` at a time, which
/// cost more instructions than the rest of this function.
pub fn hash(value: &str) -> String {
    let mut digits = [0u8; 64];
    hex::encode_to_slice(Sha256::digest(value.as_bytes()), &mut digits)
        .expect("a SHA-256 digest is 32 bytes, 64 hex digits");
    std::str::from_utf8(&digits)
        .expect("hex digits are ASCII")
        .to_owned()
}

/// A token as listed: never its value.
#[derive(Debug, Clone)]
pub struct TokenInfo {
    pub token: app_token::Model,
    pub permissions: Vec<Permission>,
}

async fn permissions_of<C: sea_orm::ConnectionTrait>(
    db: &C,
    token_id: i64,
) -> Result<Vec<Permission>, DbErr> {
    let mut permissions: Vec<Permission> = token_permission::Entity::find()
        .filter(token_permission::Column::TokenId.eq(token_id))
        .all(db)
        .await?
        .into_iter()
        .filter_map(|row| row.permission.parse().ok())
        .collect();
    permissions.sort();
    permissions.dedup();
    Ok(permissions)
}

async fn replace_permissions<C: sea_orm::ConnectionTrait>(
    db: &C,
    token_id: i64,
    permissions: &[Permission],
) -> Result<(), DbErr> {
    token_permission::Entity::delete_many()
        .filter(token_permission::Column::TokenId.eq(token_id))
        .exec(db)
        .await?;
    let mut unique = permissions.to_vec();
    unique.sort();
    unique.dedup();
    for permission in unique {
        token_permission::ActiveModel {
            token_id: Set(token_id),
            permission: Set(permission.as_str().to_owned()),
            ..Default::default()
        }
        .insert(db)
        .await?;
    }
    Ok(())
}

/// Issues a token for a project. Returns its record and its value, which is
/// not stored anywhere and cannot be shown again.
pub async fn create(
    db: &DatabaseConnection,
    project_id: i64,
    name: &str,
    permissions: &[Permission],
) -> Result<(TokenInfo, TokenValue), AdminError> {
    let name = validate::check_name("token", name).map_err(AdminError::Invalid)?;
    projects::get(db, project_id).await?;
    let value = TokenValue::generate();
    let txn = super::begin_write(db).await?;
    let token = app_token::ActiveModel {
        project_id: Set(project_id),
        name: Set(name),
        token_hash: Set(hash(value.expose())),
        active: Set(true),
        created_at: Set(now()),
        last_used_at: Set(None),
        ..Default::default()
    }
    .insert(&txn)
    .await?;
    replace_permissions(&txn, token.id, permissions).await?;
    let permissions = permissions_of(&txn, token.id).await?;
    txn.commit().await?;
    Ok((TokenInfo { token, permissions }, value))
}

pub async fn list(db: &DatabaseConnection, project_id: i64) -> Result<Vec<TokenInfo>, AdminError> {
    projects::get(db, project_id).await?;
    let tokens = app_token::Entity::find()
        .filter(app_token::Column::ProjectId.eq(project_id))
        .order_by_asc(app_token::Column::Id)
        .all(db)
        .await?;
    let mut out = Vec::with_capacity(tokens.len());
    for token in tokens {
        let permissions = permissions_of(db, token.id).await?;
        out.push(TokenInfo { token, permissions });
    }
    Ok(out)
}

async fn get(db: &DatabaseConnection, id: i64) -> Result<app_token::Model, AdminError> {
    app_token::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or(AdminError::NotFound("token", id))
}

/// Renames a token and/or replaces its permissions.
pub async fn edit(
    db: &DatabaseConnection,
    id: i64,
    name: Option<&str>,
    permissions: Option<&[Permission]>,
) -> Result<TokenInfo, AdminError> {
    let name = name
        .map(|n| validate::check_name("token", n))
        .transpose()
        .map_err(AdminError::Invalid)?;
    let token = get(db, id).await?;
    let txn = super::begin_write(db).await?;
    let mut model: app_token::ActiveModel = token.into();
    if let Some(name) = name {
        model.name = Set(name);
    }
    let token = model.update(&txn).await?;
    if let Some(permissions) = permissions {
        replace_permissions(&txn, id, permissions).await?;
    }
    let permissions = permissions_of(&txn, id).await?;
    txn.commit().await?;
    Ok(TokenInfo { token, permissions })
}

pub async fn set_active(
    db: &DatabaseConnection,
    id: i64,
    active: bool,
) -> Result<app_token::Model, AdminError> {
    let mut model: app_token::ActiveModel = get(db, id).await?.into();
    model.active = Set(active);
    Ok(model.update(db).await?)
}

/// Deletes a token and its permissions; its value gets TOKEN_NOT_FOUND.
pub async fn delete(db: &DatabaseConnection, id: i64) -> Result<(), AdminError> {
    get(db, id).await?;
    let txn = super::begin_write(db).await?;
    token_permission::Entity::delete_many()
        .filter(token_permission::Column::TokenId.eq(id))
        .exec(&txn)
        .await?;
    app_token::Entity::delete_by_id(id).exec(&txn).await?;
    txn.commit().await?;
    Ok(())
}

/// Gives a token a new value, keeping its id, name, permissions and state;
/// the old value stops working at once.
pub async fn reissue(
    db: &DatabaseConnection,
    id: i64,
) -> Result<(app_token::Model, TokenValue), AdminError> {
    let value = TokenValue::generate();
    let mut model: app_token::ActiveModel = get(db, id).await?.into();
    model.token_hash = Set(hash(value.expose()));
    Ok((model.update(db).await?, value))
}

/// Who is calling: the outcome of a successful authentication.
#[derive(Debug, Clone, Copy)]
pub struct Principal {
    pub token_id: i64,
    pub project_id: i64,
    /// Which of [`Permission::ALL`] the token holds, by position (a fixed
    /// array: the principal is copied into every request, so no heap).
    granted: [bool; Permission::ALL.len()],
}

impl Principal {
    pub fn may(&self, permission: Permission) -> bool {
        self.granted[permission as usize]
    }
}

/// Why a request is not authenticated, in the order the checks run
/// (DESIGN.md section 2).
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
    #[error("database unavailable: {0}")]
    Db(#[from] DbErr),
}

/// Extracts the token from an `Authorization` header value: the scheme word
/// `Bearer` is matched case-insensitively, surrounding blanks are ignored.
/// `Ok(None)` means there is no token at all (EMPTY_TOKEN).
pub fn token_from_header(header: Option<&str>) -> Result<Option<&str>, AuthError> {
    let Some(header) = header.map(str::trim) else {
        return Ok(None);
    };
    if header.is_empty() {
        return Ok(None);
    }
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::InvalidToken);
    }
    let token = rest.trim();
    if token.is_empty() {
        Ok(None)
    } else {
        Ok(Some(token))
    }
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

/// Runs the rest of the seed's section-5 chain, up to the project check,
/// for a token [`bearer_token`] accepted. The endpoint permission
/// (ACCESS_DENIED) is checked by the caller, which knows the endpoint.
///
/// One statement reads the token, its project's state and which of the
/// known permissions it holds, so a request costs one round trip to the
/// database instead of three (and sees all three in one snapshot). On SQLite
/// the row may come from a per-connection cache that is used only while the
/// database has not changed since it was read (`Reader::one_cached`); so on
/// every backend a change made with the command line holds from the next
/// request.
/// A successful authentication records the token's use through `usage`.
///
/// With `lookup`, the statement also reads that balance of the token's
/// project (`auth_statement_with_lookup`): a balance request then costs one
/// round trip to the database and one statement instead of two. It is read
/// whatever the token turns out to be, and returned only with a principal;
/// the endpoint uses it only for exactly this lookup of this project, after
/// its own checks (`balances::lookup`). Used where every read goes to the
/// database (PostgreSQL, MySQL); on SQLite the token alone is read, from a
/// per-connection cache that a joined read would always miss.
///
/// With `reads` on PostgreSQL, the statement (with or without a lookup) is
/// read together with other requests' (`token_reads`): one statement for
/// many.
pub async fn authenticate(
    db: &Reader,
    usage: &UsageRecorder,
    reads: Option<&Arc<TokenReadQueue>>,
    token: &str,
    lookup: Option<LookupRequest>,
) -> Result<(Principal, Option<Prefetched>), AuthError> {
    let token_hash = hash(token);
    let reads = reads.filter(|_| db.backend() == DbBackend::Postgres);
    let joined = lookup.and_then(|request| {
        let (shape, values) = balances::lookup_params(&request)?;
        Some((request, shape, values))
    });
    let (row, lookup) = match (joined, reads) {
        (joined, Some(reads)) => {
            let read = match joined {
                Some((request, shape, values)) => {
                    TokenRead::with_lookup(token_hash, request, shape, values)
                }
                None => TokenRead::token(token_hash),
            };
            let (row, request) = reads.read(db, read).await;
            (row?.map(ReadRow::Sqlx), request)
        }
        (Some((request, shape, values)), None) => {
            let stmt = auth_statement_with_lookup(db.backend(), token_hash, shape, values);
            (db.one(stmt).await?, Some(request))
        }
        (None, None) => {
            let stmt = auth_statement(db.backend(), token_hash);
            (db.one_cached(stmt).await?, None)
        }
    };
    let row = row.ok_or(AuthError::TokenNotFound)?;
    let token_id = row.i64(0)?;
    let project_id = row.i64(1)?;
    let active = row.bool(2)?;
    let last_used_at = row.opt_datetime(3)?;
    let project_active = row.opt_bool(4)?;
    if !active {
        return Err(AuthError::TokenDisabled);
    }
    let mut granted = [false; Permission::ALL.len()];
    for permission in Permission::ALL {
        let column = AUTH_PERMISSION_COLUMNS + permission as usize;
        granted[permission as usize] = row.i64(column)? > 0;
    }
    if !granted.contains(&true) {
        return Err(AuthError::EmptyAccess);
    }
    if project_active != Some(true) {
        return Err(AuthError::ProjectNotFound);
    }
    usage.record(db.pool(), token_id, last_used_at);
    // A lookup whose columns cannot be read (a value out of range) is left to
    // the endpoint, which reads it again and answers for it in its own place
    // in the chain: the token itself is fine.
    let prefetched = lookup.and_then(|request| {
        let first = AUTH_PERMISSION_COLUMNS + Permission::ALL.len();
        balances::prefetched(&row, first, project_id, request).ok()
    });
    let principal = Principal {
        token_id,
        project_id,
        granted,
    };
    Ok((principal, prefetched))
}

/// Index of the first permission column of [`auth_statement`].
pub(crate) const AUTH_PERMISSION_COLUMNS: usize = 5;

/// The statement behind [`authenticate`]: the token by its hash, its
/// project's state (left-joined: NULL when the project is gone), and for
/// each of [`Permission::ALL`] how many rows grant it (0 or 1).
pub(crate) fn auth_statement(backend: DbBackend, token_hash: String) -> Statement {
    static SQL: CachedSql = CachedSql::new();
    SQL.statement(backend, auth_params(token_hash), auth_query)
}

/// [`auth_statement`] with `request`'s balance lookup joined to it for the
/// token's project (`balances::join_lookup`): one statement, one round trip
/// and one snapshot for both. `shape` and `lookup`: `balances::lookup_params`.
pub(crate) fn auth_statement_with_lookup(
    backend: DbBackend,
    token_hash: String,
    shape: LookupShape,
    lookup: Vec<Value>,
) -> Statement {
    static SQL: [CachedSql; LookupShape::COUNT] = [const { CachedSql::new() }; LookupShape::COUNT];
    let mut params = auth_params(token_hash);
    let split = params.len();
    params.extend(lookup);
    SQL[shape.index()].statement(backend, params, |mut params| {
        let lookup = params.split_off(split);
        let mut query = auth_query(params);
        let project = (
            app_token::Entity.into_iden(),
            app_token::Column::ProjectId.into_iden(),
        );
        balances::join_lookup(&mut query, shape, project, lookup);
        query
    })
}

/// The token hash, then the name of each of [`Permission::ALL`].
fn auth_params(token_hash: String) -> Vec<Value> {
    let mut params = vec![Value::from(token_hash)];
    params.extend(Permission::ALL.map(|p| Value::from(p.as_str())));
    params
}

fn auth_query(params: Vec<Value>) -> SelectStatement {
    let mut params = params.into_iter();
    let token_hash = params.next().expect("token hash parameter");
    let mut query = Query::select();
    query
        .column((app_token::Entity, app_token::Column::Id))
        .column((app_token::Entity, app_token::Column::ProjectId))
        .column((app_token::Entity, app_token::Column::Active))
        .column((app_token::Entity, app_token::Column::LastUsedAt))
        .column((project::Entity, project::Column::Active))
        .from(app_token::Entity)
        .left_join(
            project::Entity,
            Expr::col((project::Entity, project::Column::Id))
                .equals((app_token::Entity, app_token::Column::ProjectId)),
        )
        .and_where(Expr::col((app_token::Entity, app_token::Column::TokenHash)).eq(token_hash));
    for permission in params {
        query.expr(Expr::from(
            Query::select()
                .expr(Func::count(Expr::col(Asterisk)))
                .from(token_permission::Entity)
                .and_where(
                    Expr::col((token_permission::Entity, token_permission::Column::TokenId))
                        .equals((app_token::Entity, app_token::Column::Id)),
                )
                .and_where(
                    Expr::col((
                        token_permission::Entity,
                        token_permission::Column::Permission,
                    ))
                    .eq(permission),
                )
                .to_owned(),
        ));
    }
    query
}

/// Records when tokens are used: `last_used_at`, written at most once a
/// minute per token and off the request path, so authentication stays a read.
///
/// The database value alone would let every request of a burst that starts
/// before the first write lands spawn a write of its own (64 at once under
/// load, each queuing for SQLite's one writer), so the process also keeps
/// when it last recorded each token.
#[derive(Debug, Default)]
pub struct UsageRecorder {
    recorded_at: Mutex<HashMap<i64, DateTime<Utc>>>,
}

/// How stale `last_used_at` may get.
const USAGE_RESOLUTION: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

impl UsageRecorder {
    fn record(&self, db: &DatabaseConnection, token_id: i64, last_used_at: Option<DateTime<Utc>>) {
        let now = now();
        let fresh = |t: DateTime<Utc>| now - t <= USAGE_RESOLUTION;
        if last_used_at.is_some_and(fresh) || !self.claim(token_id, now) {
            return;
        }
        let db = db.clone();
        tokio::spawn(async move {
            let result = app_token::Entity::update_many()
                .col_expr(
                    app_token::Column::LastUsedAt,
                    sea_orm::sea_query::Expr::value(now),
                )
                .filter(app_token::Column::Id.eq(token_id))
                .exec(&db)
                .await;
            if let Err(err) = result {
                tracing::debug!(token_id, error = %err, "could not record last use");
            }
        });
    }

    /// True when this process has not recorded `token_id` within the last
    /// minute; it then counts as recorded at `now`.
    fn claim(&self, token_id: i64, now: DateTime<Utc>) -> bool {
        let mut recorded_at = self
            .recorded_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match recorded_at.get(&token_id) {
            Some(&t) if now - t <= USAGE_RESOLUTION => false,
            _ => {
                recorded_at.insert(token_id, now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cached token lookup is exactly what the builder renders.
    #[test]
    fn cached_auth_statement_matches_the_builder() {
        for backend in [DbBackend::Sqlite, DbBackend::Postgres, DbBackend::MySql] {
            for value in ["a", "b"] {
                let hash = super::hash(value);
                let cached = auth_statement(backend, hash.clone());
                let fresh = backend.build(&auth_query(auth_params(hash)));
                assert_eq!(cached.sql, fresh.sql);
                assert_eq!(cached.values, fresh.values);
            }
        }
    }

    /// Stored hashes are lower-case hex SHA-256 (FIPS 180-2 test vector):
    /// tokens issued before any change to `hash` must still be found.
    #[test]
    fn token_hashes_are_lower_case_hex_sha256() {
        assert_eq!(
            super::hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(super::hash(""), hex::encode(Sha256::digest(b"")));
    }

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
                granted,
            };
            for other in Permission::ALL {
                assert_eq!(principal.may(other), other == permission);
            }
        }
    }

    /// A burst of requests of one token records its use once a minute.
    #[test]
    fn usage_is_recorded_once_a_minute_per_token() {
        let usage = UsageRecorder::default();
        let start = now();
        assert!(usage.claim(1, start));
        assert!(!usage.claim(1, start));
        assert!(usage.claim(2, start), "another token");
        assert!(!usage.claim(1, start + chrono::TimeDelta::seconds(60)));
        assert!(usage.claim(1, start + chrono::TimeDelta::seconds(61)));
    }
}
