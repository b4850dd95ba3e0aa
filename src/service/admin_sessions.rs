//! Who may use the administration panel: sign-in by password (rate
//! limited), single-use sign-in links, and the sessions both start.
//!
//! Every secret here (a session's cookie value, a link's secret) is 43
//! characters from [A-Za-z0-9] drawn from the OS CSPRNG (about 256 bits),
//! handed out once and stored only as its SHA-256, so a copy of the
//! database signs no one in. Everything lives in the database, not in an
//! instance's memory: any instance answers any browser, and the failure
//! count of the rate limit is the same on all of them.
//!
//! A session lasts [`SESSION_LIFETIME`] from its sign-in, never longer
//! (signing in again starts a new one, with a new cookie); it ends at
//! sign-out (of one browser, or of every browser of its administrator at
//! once), and at once for every session of an administrator who is
//! disabled (their rows are deleted, and a session is only found with its
//! administrator active).

use chrono::{DateTime, Duration, Utc};
use entity::{admin_login_link, admin_session, admin_sign_in_failure, administrator};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait,
    PaginatorTrait, QueryFilter, QueryOrder,
    sea_query::{Expr, ExprTrait},
};

use super::{
    AdminError,
    admin_audit::{Actor, AuditedChange, Change},
    admins, now,
    tokens::hash,
};

/// How long a session lasts from its sign-in.
pub const SESSION_LIFETIME: Duration = Duration::hours(8);
/// How long a sign-in link can be used.
pub const LOGIN_LINK_LIFETIME: Duration = Duration::minutes(15);
/// Failed sign-ins allowed per name and per address within
/// [`FAILURE_WINDOW`]; the next attempt is refused without checking.
pub const MAX_FAILURES: u64 = 5;
pub const FAILURE_WINDOW: Duration = Duration::minutes(5);
/// How long a failed sign-in is kept (for the overview's count of refused
/// sign-ins), though it counts for the rate limit only within
/// [`FAILURE_WINDOW`].
pub const FAILURES_KEPT: Duration = Duration::hours(24);
/// A session's `last_seen_at` is written at most this often.
const LAST_SEEN_PRECISION: Duration = Duration::minutes(1);

const SECRET_LEN: usize = 43;

/// A session cookie's value or a link's secret. Its `Debug` is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn generate() -> Secret {
        Secret(super::random_alphanumeric(SECRET_LEN))
    }

    /// A secret as the browser sent it back.
    pub fn from_client(text: &str) -> Secret {
        Secret(text.to_owned())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

debug_as!(Secret, "Secret([redacted])");

/// What a session is stored by: the SHA-256 of its cookie value.
pub fn cookie_hash(cookie: &Secret) -> String {
    hash(cookie.expose())
}

/// A signed-in administrator.
#[derive(Debug, Clone)]
pub struct Session {
    pub administrator: administrator::Model,
    pub expires_at: DateTime<Utc>,
    /// When a sign-in link opened the session; none for a password.
    pub by_link_at: Option<DateTime<Utc>>,
}

impl Session {
    /// Whether a new password may be set without the current one: within
    /// [`LOGIN_LINK_LIFETIME`] of a sign-in by link, the way back in after
    /// a lost password.
    pub fn may_skip_current_password(&self) -> bool {
        self.by_link_at
            .is_some_and(|at| now() - at < LOGIN_LINK_LIFETIME)
    }

    /// The actor of the changes made in this session, from `address`.
    pub fn actor(&self, address: Option<String>) -> Actor {
        Actor::Administrator {
            id: self.administrator.id,
            name: self.administrator.name.clone(),
            address,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    /// Paused: the next attempt may be made after this many seconds, when
    /// the oldest failure that counted leaves [`FAILURE_WINDOW`].
    #[error("too many failed sign-ins; try again in a few minutes")]
    RateLimited { retry_after: u64 },
    #[error("wrong name or password")]
    Refused,
    #[error(transparent)]
    Db(#[from] DbErr),
}

/// Signs `name` in with `password`, from `address`: a new session and its
/// cookie value. After [`MAX_FAILURES`] failures within [`FAILURE_WINDOW`]
/// for the name or for the address, refuses without checking the password.
///
/// The attempt is written before it is counted and the password checked,
/// so that attempts made at once see each other: of any number of them,
/// at most as many as the limit has left get their password checked. A
/// refused attempt stays as a failure; a rate-limited one is taken back
/// (it checked nothing); a success clears the name's failures.
pub async fn sign_in(
    db: &DatabaseConnection,
    name: &str,
    password: &str,
    address: &str,
) -> Result<(Secret, Session), SignInError> {
    use admin_sign_in_failure::Column;
    let name: String = name.trim().chars().take(200).collect();
    let since = now() - FAILURE_WINDOW;
    admin_sign_in_failure::Entity::delete_many()
        .filter(Column::FailedAt.lte(now() - FAILURES_KEPT))
        .exec(db)
        .await?;
    let attempt = admin_sign_in_failure::ActiveModel {
        name: Set(name.clone()),
        address: Set(address.to_owned()),
        failed_at: Set(now()),
        ..Default::default()
    }
    .insert(db)
    .await?;
    let recent = |condition: Condition| {
        admin_sign_in_failure::Entity::find()
            .filter(condition)
            .filter(Column::FailedAt.gt(since))
            .count(db)
    };
    // The attempt itself is among those counted. Paused until the oldest
    // failure of each limit that is reached leaves the window.
    let mut paused_until = None;
    for condition in [Column::Name.eq(&name), Column::Address.eq(address)] {
        let condition = Condition::all().add(condition);
        if recent(condition.clone()).await? > MAX_FAILURES {
            let oldest = admin_sign_in_failure::Entity::find()
                .filter(condition)
                .filter(Column::FailedAt.gt(since))
                .order_by_asc(Column::FailedAt)
                .one(db)
                .await?;
            paused_until = Ord::max(paused_until, oldest.map(|f| f.failed_at + FAILURE_WINDOW));
        }
    }
    if let Some(until) = paused_until {
        admin_sign_in_failure::Entity::delete_by_id(attempt.id)
            .exec(db)
            .await?;
        let millis = Ord::max((until - now()).num_milliseconds(), 1);
        let retry_after = u64::try_from(millis).unwrap_or(1).div_ceil(1000);
        return Err(SignInError::RateLimited { retry_after });
    }
    let Some(admin) = admins::verify(db, &name, password).await? else {
        return Err(SignInError::Refused);
    };
    // Those of the window only: older ones no longer count for the limit,
    // and stay for the overview's count of refused sign-ins.
    admin_sign_in_failure::Entity::delete_many()
        .filter(Column::Name.eq(&name).or(Column::Id.eq(attempt.id)))
        .filter(Column::FailedAt.gt(since))
        .exec(db)
        .await?;
    Ok(start_session(db, admin, address, false).await?)
}

async fn start_session<C: ConnectionTrait>(
    db: &C,
    administrator: administrator::Model,
    address: &str,
    by_link: bool,
) -> Result<(Secret, Session), DbErr> {
    admin_session::Entity::delete_many()
        .filter(admin_session::Column::ExpiresAt.lte(now()))
        .exec(db)
        .await?;
    let secret = Secret::generate();
    let created_at = now();
    let expires_at = created_at + SESSION_LIFETIME;
    admin_session::ActiveModel {
        session_hash: Set(cookie_hash(&secret)),
        administrator_id: Set(administrator.id),
        created_at: Set(created_at),
        expires_at: Set(expires_at),
        address: Set(Some(address.to_owned())),
        by_link: Set(by_link),
        ..Default::default()
    }
    .insert(db)
    .await?;
    administrator::Entity::update_many()
        .col_expr(
            administrator::Column::LastSignedInAt,
            Expr::value(created_at),
        )
        .filter(administrator::Column::Id.eq(administrator.id))
        .exec(db)
        .await?;
    tracing::info!(administrator = %administrator.name, %address, "panel sign-in");
    Ok((
        secret,
        Session {
            administrator,
            expires_at,
            by_link_at: by_link.then_some(created_at),
        },
    ))
}

/// The session of a cookie value: unexpired, its administrator active.
/// Its `last_seen_at` becomes now, when it is older than
/// [`LAST_SEEN_PRECISION`] (so that most pages read without writing).
pub async fn session(db: &DatabaseConnection, cookie: &Secret) -> Result<Option<Session>, DbErr> {
    let found = admin_session::Entity::find()
        .filter(admin_session::Column::SessionHash.eq(cookie_hash(cookie)))
        .filter(admin_session::Column::ExpiresAt.gt(now()))
        .find_also_related(administrator::Entity)
        .one(db)
        .await?;
    let Some((session, Some(administrator))) =
        found.filter(|(_, a)| a.as_ref().is_some_and(|a| a.active))
    else {
        return Ok(None);
    };
    if session
        .last_seen_at
        .is_none_or(|at| now() - at >= LAST_SEEN_PRECISION)
    {
        admin_session::Entity::update_many()
            .col_expr(admin_session::Column::LastSeenAt, Expr::value(now()))
            .filter(admin_session::Column::Id.eq(session.id))
            .exec(db)
            .await?;
    }
    Ok(Some(Session {
        administrator,
        expires_at: session.expires_at,
        by_link_at: session.by_link.then_some(session.created_at),
    }))
}

/// The unexpired sessions of administrator `id`, newest first.
pub async fn sessions_of(
    db: &DatabaseConnection,
    id: i64,
) -> Result<Vec<admin_session::Model>, DbErr> {
    admin_session::Entity::find()
        .filter(admin_session::Column::AdministratorId.eq(id))
        .filter(admin_session::Column::ExpiresAt.gt(now()))
        .order_by_desc(admin_session::Column::Id)
        .all(db)
        .await
}

/// Ends every session of administrator `id` (the one asking included):
/// every browser they are signed in with is signed out. Returns how many
/// ended.
pub async fn sign_out_everywhere(
    db: &DatabaseConnection,
    actor: &Actor,
    id: i64,
) -> Result<u64, AdminError> {
    let txn = AuditedChange::begin(db, actor).await?;
    let admin = super::find_row(&*txn, administrator::Entity, "administrator", id, false).await?;
    let ended = admin_session::Entity::delete_many()
        .filter(admin_session::Column::AdministratorId.eq(id))
        .exec(&*txn)
        .await?
        .rows_affected;
    let change = Change::new("administrator.sign_out_everywhere", "administrator", id)
        .after(serde_json::json!({"name": admin.name, "sessions_ended": ended}));
    txn.commit(change).await?;
    Ok(ended)
}

/// Ends the session of a cookie value (nothing when there is none).
pub async fn sign_out(db: &DatabaseConnection, cookie: &Secret) -> Result<(), DbErr> {
    admin_session::Entity::delete_many()
        .filter(admin_session::Column::SessionHash.eq(cookie_hash(cookie)))
        .exec(db)
        .await?;
    Ok(())
}

/// A new single-use sign-in link's secret for the active administrator
/// `name`, valid [`LOGIN_LINK_LIFETIME`]; recorded in the admin audit log
/// (without the secret).
pub async fn create_login_link(
    db: &DatabaseConnection,
    actor: &Actor,
    name: &str,
) -> Result<(Secret, DateTime<Utc>), AdminError> {
    let administrator = admins::named(name)
        .one(db)
        .await?
        .ok_or_else(|| admins::unknown(name))?;
    if !administrator.active {
        return Err(AdminError::Invalid(
            "name",
            format!("administrator {name:?} is disabled; enable them first"),
        ));
    }
    let txn = AuditedChange::begin(db, actor).await?;
    let (secret, expires_at) = insert_login_link(&*txn, administrator.id).await?;
    txn.commit(
        Change::new(
            "administrator.login_link",
            "administrator",
            administrator.id,
        )
        .after(serde_json::json!({"name": administrator.name, "expires_at": expires_at})),
    )
    .await?;
    Ok((secret, expires_at))
}

/// The address of the sign-in link `secret` on the panel at `base`
/// (`https://panel.example`; empty for a path alone).
pub fn link_url(base: &str, secret: &Secret) -> String {
    format!(
        "{}/sign-in/link/{}",
        base.trim_end_matches('/'),
        secret.expose()
    )
}

/// Writes a new sign-in link of administrator `id`, valid
/// [`LOGIN_LINK_LIFETIME`]: its secret and end, for the caller's
/// transaction (which records it in the audit log).
pub(super) async fn insert_login_link<C: ConnectionTrait>(
    db: &C,
    id: i64,
) -> Result<(Secret, DateTime<Utc>), DbErr> {
    let secret = Secret::generate();
    let expires_at = now() + LOGIN_LINK_LIFETIME;
    admin_login_link::ActiveModel {
        link_hash: Set(hash(secret.expose())),
        administrator_id: Set(id),
        created_at: Set(now()),
        expires_at: Set(expires_at),
        used_at: Set(None),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok((secret, expires_at))
}

/// The sign-in link `link`, while it is unused and unexpired.
fn usable(link: &Secret) -> Condition {
    use admin_login_link::Column;
    Condition::all()
        .add(Column::LinkHash.eq(hash(link.expose())))
        .add(Column::UsedAt.is_null())
        .add(Column::ExpiresAt.gt(now()))
}

/// The administrator a sign-in link would sign in, while it is unused,
/// unexpired and its administrator active; nothing is changed.
pub async fn login_link_administrator(
    db: &DatabaseConnection,
    link: &Secret,
) -> Result<Option<administrator::Model>, DbErr> {
    let found = admin_login_link::Entity::find()
        .filter(usable(link))
        .find_also_related(administrator::Entity)
        .one(db)
        .await?;
    Ok(found.and_then(|(_, admin)| admin).filter(|a| a.active))
}

/// Uses a sign-in link: of any number of requests with one link, one
/// marks it used (a guarded update) and gets a session; the others, and
/// every request after it expired, get `None`.
pub async fn redeem_login_link(
    db: &DatabaseConnection,
    link: &Secret,
    address: &str,
) -> Result<Option<(Secret, Session)>, DbErr> {
    let Some(administrator) = login_link_administrator(db, link).await? else {
        return Ok(None);
    };
    // Used up and signed in together, or neither.
    let txn = super::begin_write(db).await?;
    let used = admin_login_link::Entity::update_many()
        .col_expr(admin_login_link::Column::UsedAt, Expr::value(now()))
        .filter(usable(link))
        .exec(&txn)
        .await?
        .rows_affected
        == 1;
    if !used {
        return Ok(None);
    }
    let signed_in = start_session(&txn, administrator, address, true).await?;
    txn.commit().await?;
    Ok(Some(signed_in))
}
