//! Application tokens: issuing and managing them (authenticating them is
//! `auth`).
//!
//! A token value is 64 characters from [A-Za-z0-9] drawn from the OS CSPRNG
//! (about 381 bits). Only its SHA-256 is stored; the value is returned once,
//! by `create` and `reissue`, and never logged. Every request reads the token
//! afresh, so a change made here holds from the very next request of every
//! running instance.

use std::{fmt, str::FromStr};

use chrono::{DateTime, TimeDelta, Utc};

use entity::{app_token, token_permission};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr,
    EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{
    AdminError,
    admin_audit::{Actor, AuditedChange, Change, toggle_action},
    keyset::{Keyset, Listed, any_contains},
    now, projects, validate,
};

/// Length of a token value.
pub const TOKEN_LEN: usize = 64;

/// The "key accesses": which v2 endpoint a token may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// `GET /v2/master-account/balance`
    Balance,
    /// `POST /v2/payment/order/complete`
    Complete,
    /// `POST /v2/payment/order/create`
    Create,
    /// `GET /v2/payment/order`
    Read,
    /// `POST /v2/payment/order/cancel`
    Cancel,
    /// `GET /v2/master-account/operations`
    Operations,
}

impl Permission {
    /// Every permission, in declaration order: `ALL[p as usize] == p`, which
    /// `auth::Principal` relies on.
    pub const ALL: [Permission; 6] = [
        Permission::Balance,
        Permission::Complete,
        Permission::Create,
        Permission::Read,
        Permission::Cancel,
        Permission::Operations,
    ];

    /// Each permission's name and the endpoint it allows, as `METHOD
    /// /path`, in declaration order (as [`Permission::ALL`]).
    const NAMES: [(&'static str, &'static str); 6] = [
        ("master-account/balance", "GET /v2/master-account/balance"),
        ("payment/order/complete", "POST /v2/payment/order/complete"),
        ("payment/order/create", "POST /v2/payment/order/create"),
        ("payment/order/read", "GET /v2/payment/order"),
        ("payment/order/cancel", "POST /v2/payment/order/cancel"),
        (
            "master-account/operations",
            "GET /v2/master-account/operations",
        ),
    ];

    pub fn as_str(self) -> &'static str {
        Permission::NAMES[self as usize].0
    }

    /// The endpoint the permission allows, as `METHOD /path`.
    pub fn endpoint(self) -> &'static str {
        Permission::NAMES[self as usize].1
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
        TokenValue(super::random_alphanumeric(TOKEN_LEN))
    }

    /// The value itself, to be shown to the operator exactly once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Its last 4 characters, stored and shown to match a deployed value to
    /// its token (the value's format allows no prefix; 4 of 64 random
    /// characters tell nothing of the other 60).
    fn last4(&self) -> String {
        self.0[TOKEN_LEN - 4..].to_owned()
    }
}

/// The longest grace period of a reissue: the old value serves a rollout,
/// not as a second token.
pub const MAX_GRACE: TimeDelta = TimeDelta::days(7);

debug_as!(TokenValue, "TokenValue([redacted])");

/// Lower-case hex SHA-256 of a token value, as stored.
pub fn hash(value: &str) -> String {
    hex::encode(Sha256::digest(value.as_bytes()))
}

/// A token as listed: never its value.
#[derive(Debug, Clone)]
pub struct TokenInfo {
    pub token: app_token::Model,
    pub permissions: Vec<Permission>,
}

async fn permissions_of<C: ConnectionTrait>(
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

/// Replaces the permissions of the token `token_id` with `permissions`
/// (none removes them all); returns them as stored: sorted, each once.
async fn replace_permissions<C: ConnectionTrait>(
    db: &C,
    token_id: i64,
    permissions: &[Permission],
) -> Result<Vec<Permission>, DbErr> {
    token_permission::Entity::delete_many()
        .filter(token_permission::Column::TokenId.eq(token_id))
        .exec(db)
        .await?;
    let mut unique = permissions.to_vec();
    unique.sort();
    unique.dedup();
    for permission in &unique {
        token_permission::ActiveModel {
            token_id: Set(token_id),
            permission: Set(permission.as_str().to_owned()),
            ..Default::default()
        }
        .insert(db)
        .await?;
    }
    Ok(unique)
}

/// A token as the audit log shows it: never a value or a hash.
fn audited(token: &app_token::Model, permissions: &[Permission]) -> Value {
    json!({
        "project_id": token.project_id,
        "name": token.name,
        "permissions": permissions.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "active": token.active,
        "description": token.description,
        "last4": token.last4,
        "expires_at": token.expires_at,
        "previous_last4": token.previous_last4,
        "previous_until": token.previous_until,
    })
}

/// An expiry must lie ahead: one already past would make a token that never
/// works.
fn check_expiry(expires_at: Option<DateTime<Utc>>) -> Result<Option<DateTime<Utc>>, AdminError> {
    match expires_at {
        Some(at) if at <= now() => Err(AdminError::Invalid(
            "expires_at",
            "the expiry must be in the future".to_owned(),
        )),
        other => Ok(other),
    }
}

/// Issues a token for a project, created by `actor`, working until
/// `expires_at` when given. Returns its record and its value, which is not
/// stored anywhere and cannot be shown again. A blank `description` is none.
pub async fn create(
    db: &DatabaseConnection,
    actor: &Actor,
    project_id: i64,
    name: &str,
    description: Option<&str>,
    permissions: &[Permission],
    expires_at: Option<DateTime<Utc>>,
) -> Result<(TokenInfo, TokenValue), AdminError> {
    let name = validate::check_name("token", name).map_err(AdminError::invalid("name"))?;
    let description = validate::description(description)?.flatten();
    let expires_at = check_expiry(expires_at)?;
    projects::get(db, project_id).await?;
    let value = TokenValue::generate();
    let txn = AuditedChange::begin(db, actor).await?;
    let token = app_token::ActiveModel {
        project_id: Set(project_id),
        name: Set(name),
        token_hash: Set(hash(value.expose())),
        last4: Set(Some(value.last4())),
        active: Set(true),
        created_at: Set(now()),
        expires_at: Set(expires_at),
        description: Set(description),
        created_by: Set(Some(actor.name().to_owned())),
        ..Default::default()
    }
    .insert(&*txn)
    .await?;
    let permissions = replace_permissions(&*txn, token.id, permissions).await?;
    let change =
        Change::new("token.create", "token", token.id).after(audited(&token, &permissions));
    txn.commit(change).await?;
    Ok((TokenInfo { token, permissions }, value))
}

pub async fn list(db: &DatabaseConnection, project_id: i64) -> Result<Vec<TokenInfo>, AdminError> {
    projects::get(db, project_id).await?;
    let tokens = app_token::Entity::find()
        .filter(app_token::Column::ProjectId.eq(project_id))
        .order_by_asc(app_token::Column::Id)
        .all(db)
        .await?;
    Ok(with_permissions(db, tokens).await?)
}

/// The page `page` of the tokens of `project_id` whose name or description
/// contains `search` (every token when it is blank), newest first.
pub async fn page(
    db: &DatabaseConnection,
    project_id: i64,
    search: &str,
    page: Keyset,
) -> Result<Listed<TokenInfo>, AdminError> {
    use app_token::Column;
    projects::get(db, project_id).await?;
    let mut of_project = app_token::Entity::find().filter(Column::ProjectId.eq(project_id));
    if !search.is_empty() {
        of_project = of_project.filter(any_contains(&[Column::Name, Column::Description], search));
    }
    let rows = page
        .select(of_project, app_token::Column::Id)
        .all(db)
        .await?;
    let Listed { rows, older } = page.cut(rows, |token| token.id);
    Ok(Listed {
        rows: with_permissions(db, rows).await?,
        older,
    })
}

async fn with_permissions(
    db: &DatabaseConnection,
    tokens: Vec<app_token::Model>,
) -> Result<Vec<TokenInfo>, DbErr> {
    let mut out = Vec::with_capacity(tokens.len());
    for token in tokens {
        let permissions = permissions_of(db, token.id).await?;
        out.push(TokenInfo { token, permissions });
    }
    Ok(out)
}

/// The token `id` and its permissions; never its value.
pub async fn get_info(db: &DatabaseConnection, id: i64) -> Result<TokenInfo, AdminError> {
    find(db, id, false).await
}

/// The token `id` and its permissions; with `lock`, the token locked until
/// the end of the write transaction `db`.
async fn find<C: ConnectionTrait>(db: &C, id: i64, lock: bool) -> Result<TokenInfo, AdminError> {
    let token = super::find_row(db, app_token::Entity, "token", id, lock).await?;
    let permissions = permissions_of(db, id).await?;
    Ok(TokenInfo { token, permissions })
}

/// Changes the token `id` under its lock with `change`, and replaces its
/// permissions when `permissions` are given; logged as `action`, with the
/// token before and after.
async fn update(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
    action: &str,
    permissions: Option<&[Permission]>,
    change: impl FnOnce(&mut app_token::ActiveModel),
) -> Result<TokenInfo, AdminError> {
    let txn = AuditedChange::begin(db, actor).await?;
    let before = find(&*txn, id, true).await?;
    let mut model: app_token::ActiveModel = before.token.clone().into();
    change(&mut model);
    let token = model.update(&*txn).await?;
    let permissions = match permissions {
        Some(permissions) => replace_permissions(&*txn, id, permissions).await?,
        None => before.permissions.clone(),
    };
    let change = Change::new(action, "token", id)
        .before(audited(&before.token, &before.permissions))
        .after(audited(&token, &permissions));
    txn.commit(change).await?;
    Ok(TokenInfo { token, permissions })
}

/// What an edit changes; what is `None` stays as it is.
#[derive(Debug, Default, Clone, Copy)]
pub struct TokenEdit<'a> {
    pub name: Option<&'a str>,
    /// A blank description removes it.
    pub description: Option<&'a str>,
    pub permissions: Option<&'a [Permission]>,
    /// `Some(None)` removes the expiry.
    pub expires_at: Option<Option<DateTime<Utc>>>,
}

/// Renames a token, replaces its description, its permissions and/or its
/// expiry.
pub async fn edit(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
    edit: TokenEdit<'_>,
) -> Result<TokenInfo, AdminError> {
    let TokenEdit {
        name,
        description,
        permissions,
        expires_at,
    } = edit;
    let name = name
        .map(|n| validate::check_name("token", n))
        .transpose()
        .map_err(AdminError::invalid("name"))?;
    let description = validate::description(description)?;
    let expires_at = expires_at.map(check_expiry).transpose()?;
    update(db, actor, id, "token.edit", permissions, |model| {
        if let Some(name) = name {
            model.name = Set(name);
        }
        if let Some(description) = description {
            model.description = Set(description);
        }
        if let Some(expires_at) = expires_at {
            model.expires_at = Set(expires_at);
        }
    })
    .await
}

pub async fn set_active(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
    active: bool,
) -> Result<app_token::Model, AdminError> {
    let action = toggle_action("token", active);
    let info = update(db, actor, id, &action, None, |model| {
        model.active = Set(active);
    })
    .await?;
    Ok(info.token)
}

/// Deletes a token and its permissions; its value gets TOKEN_NOT_FOUND.
pub async fn delete(db: &DatabaseConnection, actor: &Actor, id: i64) -> Result<(), AdminError> {
    let txn = AuditedChange::begin(db, actor).await?;
    let before = find(&*txn, id, true).await?;
    replace_permissions(&*txn, id, &[]).await?;
    app_token::Entity::delete_by_id(id).exec(&*txn).await?;
    let change = Change::new("token.delete", "token", id)
        .before(audited(&before.token, &before.permissions));
    txn.commit(change).await?;
    Ok(())
}

/// Gives a token a new value, keeping its id, name, permissions and state.
/// The old value keeps working for `grace` (zero: it stops at once), with
/// its last use; a grace still running from an earlier reissue ends now, so
/// a token has at most two values. Neither value nor hash is logged, only
/// their last 4 characters.
pub async fn reissue(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
    grace: TimeDelta,
) -> Result<(app_token::Model, TokenValue), AdminError> {
    if grace < TimeDelta::zero() || grace > MAX_GRACE {
        return Err(AdminError::Invalid(
            "grace",
            "the grace period must be between 0 and 7 days".to_owned(),
        ));
    }
    let value = TokenValue::generate();
    let info = update(db, actor, id, "token.reissue", None, |model| {
        let old_value = grace > TimeDelta::zero();
        model.previous_hash = Set(old_value.then(|| model.token_hash.clone().unwrap()));
        model.previous_last4 = Set(model.last4.clone().unwrap().filter(|_| old_value));
        model.previous_last_used_at =
            Set(model.last_used_at.clone().unwrap().filter(|_| old_value));
        model.previous_until = Set(old_value.then(|| now() + grace));
        model.token_hash = Set(hash(value.expose()));
        model.last4 = Set(Some(value.last4()));
        // The new value has never been used.
        model.last_used_at = Set(None);
    })
    .await?;
    Ok((info.token, value))
}

/// Ends a reissue's grace period now: the old value stops working.
pub async fn end_grace(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
) -> Result<app_token::Model, AdminError> {
    let info = update(db, actor, id, "token.end_grace", None, |model| {
        model.previous_hash = Set(None);
        model.previous_last4 = Set(None);
        model.previous_last_used_at = Set(None);
        model.previous_until = Set(None);
    })
    .await?;
    Ok(info.token)
}

/// The end of the token's grace period while its old value still works.
pub fn grace_until(token: &app_token::Model) -> Option<DateTime<Utc>> {
    token.previous_until.filter(|until| *until > now())
}

/// The active tokens never used, or last used before `cutoff`, oldest
/// first, at most `limit` of them: keys that may be worth disabling.
pub async fn unused_since(
    db: &DatabaseConnection,
    cutoff: chrono::DateTime<chrono::Utc>,
    limit: u64,
) -> Result<Vec<app_token::Model>, DbErr> {
    use app_token::Column;
    app_token::Entity::find()
        .filter(Column::Active.eq(true))
        .filter(
            sea_orm::Condition::any()
                .add(Column::LastUsedAt.is_null())
                .add(Column::LastUsedAt.lt(cutoff)),
        )
        .order_by_asc(Column::Id)
        .limit(limit)
        .all(db)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
