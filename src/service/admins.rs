//! Administrators: the accounts that may sign in to the administration
//! panel, managed from the command line and the panel.
//!
//! A password is kept only as an argon2id hash, a PHC string that carries
//! its parameters and salt (the `argon2` crate's defaults: 19 MiB, 2
//! passes, 1 lane, OWASP's recommendation), and is never stored, printed or
//! logged in clear. Hashing is deliberately slow, so it runs on a blocking
//! thread. [`verify`] costs the same whether the name exists or not: an
//! unknown name is checked against a hash of its own, so that the time of
//! an answer does not tell which names exist.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};

use argon2::{
    Argon2, PasswordHash, PasswordHasher, PasswordVerifier,
    password_hash::{SaltString, rand_core::OsRng},
};
use entity::{admin_login_link, admin_session, administrator};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, DbErr, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, Select, sea_query::ExprTrait,
};
use serde_json::{Value, json};

use super::{
    AdminError,
    admin_audit::{Actor, AuditedChange, Change, toggle_action},
    admin_sessions::{self, Secret},
    now, validate,
};

/// Shortest password accepted.
pub const PASSWORD_MIN_LEN: usize = 12;
/// Longest password accepted (hashing time grows with it).
pub const PASSWORD_MAX_LEN: usize = 1024;

/// A password in clear, as typed. Its `Debug` output is redacted.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    /// A password of [`PASSWORD_MIN_LEN`] to [`PASSWORD_MAX_LEN`]
    /// characters, without control characters.
    pub fn new(text: String) -> Result<Password, AdminError> {
        let length = text.chars().count();
        let refusal = if length < PASSWORD_MIN_LEN {
            format!("the password must be at least {PASSWORD_MIN_LEN} characters")
        } else if length > PASSWORD_MAX_LEN {
            format!("the password must be at most {PASSWORD_MAX_LEN} characters")
        } else if text.chars().any(char::is_control) {
            "the password must not contain control characters".into()
        } else {
            return Ok(Password(text));
        };
        Err(AdminError::Invalid("password", refusal))
    }
}

debug_as!(Password, "Password(***)");

/// How many argon2 computations run at once: each takes 19 MiB and a core
/// for a while, and sign-in attempts come from anyone who reaches the
/// panel, so the rest wait their turn instead of piling up threads and
/// memory.
static HASHING: LazyLock<tokio::sync::Semaphore> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    tokio::sync::Semaphore::new(cores.max(2))
});

/// Runs `work` (an argon2 computation) on a blocking thread, when its turn
/// comes (see [`HASHING`]).
async fn argon2_work<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, AdminError> {
    let _turn = HASHING
        .acquire()
        .await
        .map_err(|err| AdminError::Invalid("password", format!("hashing failed: {err}")))?;
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| AdminError::Invalid("password", format!("hashing failed: {err}")))
}

/// An argon2 hash of `password`, with a fresh salt from the OS CSPRNG.
fn argon2_hash(password: &[u8]) -> argon2::password_hash::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    let hash = Argon2::default().hash_password(password, &salt)?;
    Ok(hash.to_string())
}

/// Hashes `password` (see [`argon2_hash`]) on a blocking thread.
async fn hash(password: Password) -> Result<String, AdminError> {
    argon2_work(move || {
        argon2_hash(password.0.as_bytes()).map_err(|err| {
            AdminError::Invalid("password", format!("the password cannot be hashed: {err}"))
        })
    })
    .await?
}

/// What an unknown name's password is checked against.
static UNKNOWN_NAME_HASH: LazyLock<String> =
    LazyLock::new(|| argon2_hash(b"no administrator has this name").unwrap_or_default());

/// Makes the hash an unknown name is checked against (an argon2 hash of
/// its own); the panel calls it as it starts, so that the first sign-in
/// with an unknown name does not take two hashes' time and tell so.
pub fn prepare_unknown_name_check() {
    LazyLock::force(&UNKNOWN_NAME_HASH);
}

/// An administrator as the audit log shows it: never the password's hash.
fn audited(admin: &administrator::Model) -> Value {
    json!({"name": admin.name, "active": admin.active})
}

pub async fn create(
    db: &DatabaseConnection,
    actor: &Actor,
    name: &str,
    password: Password,
) -> Result<administrator::Model, AdminError> {
    let (txn, admin) = insert(db, actor, name, password).await?;
    let change =
        Change::new("administrator.create", "administrator", admin.id).after(audited(&admin));
    txn.commit(change).await?;
    Ok(admin)
}

/// Creates the administrator `name` with a single-use sign-in link, in one
/// change: the link's secret and end. Their password is random and never
/// shown: signed in by the link, they set their own without it.
pub async fn invite(
    db: &DatabaseConnection,
    actor: &Actor,
    name: &str,
) -> Result<(administrator::Model, Secret, DateTime<Utc>), AdminError> {
    let unknown = Password(super::random_alphanumeric(43));
    let (txn, admin) = insert(db, actor, name, unknown).await?;
    let (secret, expires_at) = admin_sessions::insert_login_link(&*txn, admin.id).await?;
    let mut after = audited(&admin);
    after["link_expires_at"] = json!(expires_at);
    txn.commit(Change::new("administrator.invite", "administrator", admin.id).after(after))
        .await?;
    Ok((admin, secret, expires_at))
}

/// Inserts the administrator `name` in a change left for the caller to
/// commit with its audit row.
async fn insert<'a>(
    db: &DatabaseConnection,
    actor: &'a Actor,
    name: &str,
    password: Password,
) -> Result<(AuditedChange<'a>, administrator::Model), AdminError> {
    let name = validate::check_name("administrator", name).map_err(AdminError::invalid("name"))?;
    let taken = || format!("an administrator named {name:?} already exists");
    if named(&name).one(db).await?.is_some() {
        return Err(AdminError::Conflict("name", taken()));
    }
    // Hashed before the transaction: it takes a while, and on SQLite a
    // write transaction holds the database's write lock.
    let password_hash = hash(password).await?;
    let txn = AuditedChange::begin(db, actor).await?;
    let admin = administrator::ActiveModel {
        name: Set(name.clone()),
        password_hash: Set(password_hash),
        active: Set(true),
        created_at: Set(now()),
        ..Default::default()
    }
    .insert(&*txn)
    .await
    .map_err(|err| AdminError::conflict_on_unique(err, "name", taken))?;
    Ok((txn, admin))
}

pub async fn list(db: &DatabaseConnection) -> Result<Vec<administrator::Model>, AdminError> {
    Ok(administrator::Entity::find()
        .order_by_asc(administrator::Column::Name)
        .all(db)
        .await?)
}

pub async fn get(db: &DatabaseConnection, id: i64) -> Result<administrator::Model, AdminError> {
    super::find_row(db, administrator::Entity, "administrator", id, false).await
}

/// Enables or disables the administrator `name`. Disabling also deletes
/// their sessions of the panel, in the same transaction: every browser
/// they are signed in with is signed out at once.
pub async fn set_active(
    db: &DatabaseConnection,
    actor: &Actor,
    name: &str,
    active: bool,
) -> Result<administrator::Model, AdminError> {
    let id = named(name).one(db).await?.ok_or_else(|| unknown(name))?.id;
    let txn = AuditedChange::begin(db, actor).await?;
    // The one named and every active administrator, locked in one
    // statement in id order: two changes made at once wait for each other
    // (the same order cannot deadlock), and two administrators disabled at
    // once cannot both pass as "not the last".
    let locked = administrator::Entity::find()
        .filter(
            administrator::Column::Active
                .eq(true)
                .or(administrator::Column::Id.eq(id)),
        )
        .order_by_asc(administrator::Column::Id)
        .lock_exclusive()
        .all(&*txn)
        .await?;
    let before = locked
        .iter()
        .find(|a| a.id == id)
        .cloned()
        .ok_or_else(|| unknown(name))?;
    if before.active && !active {
        keeps_someone_in(actor, &before, &locked)?;
    }
    let mut row: administrator::ActiveModel = before.clone().into();
    row.active = Set(active);
    let admin = row.update(&*txn).await?;
    let mut after = audited(&admin);
    if !active {
        let ended = admin_session::Entity::delete_many()
            .filter(admin_session::Column::AdministratorId.eq(admin.id))
            .exec(&*txn)
            .await?
            .rows_affected;
        after["sessions_ended"] = ended.into();
        // An older link must not work again once they are enabled.
        admin_login_link::Entity::delete_many()
            .filter(admin_login_link::Column::AdministratorId.eq(admin.id))
            .filter(admin_login_link::Column::UsedAt.is_null())
            .exec(&*txn)
            .await?;
    }
    let action = toggle_action("administrator", active);
    let change = Change::new(&action, "administrator", admin.id)
        .before(audited(&before))
        .after(after);
    txn.commit(change).await?;
    Ok(admin)
}

/// Refuses to disable `admin` when the one disabling is `admin` (their own
/// session would end mid-change) or when no other administrator of
/// `active` (the active ones, locked) is active: nobody could sign in to
/// the panel.
fn keeps_someone_in(
    actor: &Actor,
    admin: &administrator::Model,
    active: &[administrator::Model],
) -> Result<(), AdminError> {
    if matches!(actor, Actor::Administrator { id, .. } if *id == admin.id) {
        return Err(AdminError::Conflict(
            "name",
            "you cannot disable yourself: another administrator must do it".to_owned(),
        ));
    }
    if !active.iter().any(|a| a.active && a.id != admin.id) {
        return Err(AdminError::Conflict(
            "name",
            format!(
                "{} is the last active administrator: create or enable another before disabling them",
                admin.name
            ),
        ));
    }
    Ok(())
}

/// Replaces the password of administrator `id` (hashed before the write
/// transaction opens, as in [`create`]) and ends their other sessions:
/// every session but `keep`, the SHA-256 of the cookie of the one that
/// changed it, so that whoever knew the old password is signed out.
pub async fn set_password(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
    password: Password,
    keep: Option<&str>,
) -> Result<(), AdminError> {
    let password_hash = hash(password).await?;
    let txn = AuditedChange::begin(db, actor).await?;
    let admin = super::find_row(&*txn, administrator::Entity, "administrator", id, true).await?;
    let mut row: administrator::ActiveModel = admin.clone().into();
    row.password_hash = Set(password_hash);
    row.update(&*txn).await?;
    let mut others =
        admin_session::Entity::delete_many().filter(admin_session::Column::AdministratorId.eq(id));
    if let Some(keep) = keep {
        others = others.filter(admin_session::Column::SessionHash.ne(keep));
    }
    let ended = others.exec(&*txn).await?.rows_affected;
    let change = Change::new("administrator.password", "administrator", id)
        .after(json!({"name": admin.name, "other_sessions_ended": ended}));
    txn.commit(change).await?;
    Ok(())
}

/// The active administrator `name` whose password is `password`; `None`
/// for a wrong password, an unknown name or a disabled administrator, in
/// the same time (see the module docs).
pub async fn verify(
    db: &DatabaseConnection,
    name: &str,
    password: &str,
) -> Result<Option<administrator::Model>, DbErr> {
    let admin = named(name).one(db).await?;
    let stored = admin.as_ref().map(|a| a.password_hash.clone());
    let password = password.to_owned();
    let matches = argon2_work(move || {
        let stored = stored.unwrap_or_else(|| UNKNOWN_NAME_HASH.clone());
        PasswordHash::new(&stored).is_ok_and(|hash| {
            Argon2::default()
                .verify_password(password.as_bytes(), &hash)
                .is_ok()
        })
    })
    .await
    .unwrap_or(false);
    Ok(admin.filter(|a| matches && a.active))
}

/// The administrator `name`, as a query.
pub(super) fn named(name: &str) -> Select<administrator::Entity> {
    administrator::Entity::find().filter(administrator::Column::Name.eq(name.trim()))
}

/// Why `name` names no administrator.
pub(super) fn unknown(name: &str) -> AdminError {
    AdminError::Invalid("name", format!("no administrator is named {name:?}"))
}
