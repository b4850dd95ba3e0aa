//! The hot path's storage seam.
//!
//! Each rule written in SQL here is written once per backend module
//! ([`sqlite`], [`postgres`], [`mysql`]), but for the statements the
//! backends run alike, written once here and in [`relay`]: a change to one
//! is made in all three, and tests/store.rs, the conformance suite of
//! [`Store`], must pass on all three. Every new store operation joins that
//! suite.
//!
//! The requests that come in volume need three things of the database: a
//! token read by its hash (every v2 request; for a balance request with the
//! asked account read in the same statement), an order inserted (its user
//! resolved with it) and an order completed exactly once (the webhooks).
//! [`Store`] is those operations; each backend implements them in a module
//! of its own, with its own SQL and whatever its speed needs:
//!
//! - [`sqlite`]: reads on connections used inline by the calling thread,
//!   one writer at a time through the pool;
//! - [`postgres`]: concurrent requests' reads, inserts and completions
//!   grouped into one statement (or transaction) each;
//! - [`mysql`]: one statement per read, two per insert, one transaction per
//!   completion.
//!
//! An order inserted or completed records its event (`crate::events`) in
//! the same transaction or statement, when an enabled endpoint of its
//! project receives the type ([`Subscriber`], [`deliveries`]): each backend
//! asks "has the project an enabled endpoint?" inside a statement it runs
//! anyway where it can (MariaDB's and PostgreSQL's), so that a project
//! without one (most) pays one indexed probe; only then are the endpoints
//! read and the event and its deliveries written. PostgreSQL's grouped
//! insert commits on its own, so it writes the events in the same
//! statement.
//!
//! The rules (which checks run in which order, what a missing row means)
//! stay in `service`, which sees only this trait and these row types. The
//! other operations (reading and cancelling an order, the history, the
//! command line's) are written once on sea-orm in `service`; [`database`]
//! connects, migrates and opens the store of a database.
//!
//! Each store also tells whether its database accepts writes
//! ([`Store::readiness`], for `/readyz`), checked its own way; [`readiness`]
//! holds what the checks share (the kept answer, the mark a refused write
//! leaves).

pub mod database;
pub mod mysql;
pub mod postgres;
pub mod readiness;
pub mod relay;
pub mod sqlite;

use std::{future::Future, pin::Pin};

use chrono::{DateTime, Utc};
use entity::payment_order::OrderStatus;
use sea_orm::{ActiveEnum, sqlx};

pub use self::readiness::Readiness;
use crate::{
    events::{self, NewEvent},
    money::Money,
};

/// What the store's operations return: a boxed future, so that the store
/// can be shared as `Arc<dyn Store>` whatever the backend.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The request path's database operations (see the module docs).
pub trait Store: Send + Sync {
    /// The same database's operations for the webhook relay.
    fn relay(&self) -> &dyn relay::RelayStore;

    /// The token one of whose values (the current one, or the one a
    /// reissue replaced) has the hash `token_hash` (`None`: no such token), and,
    /// when `account` is given, that account of the token's project read in
    /// the same statement.
    fn read_token<'a>(
        &'a self,
        token_hash: &'a str,
        account: Option<&'a AccountKey>,
    ) -> StoreFuture<'a, Result<Option<TokenRow>, StoreError>>;

    /// Completes a pending order exactly once: status, credit of the main
    /// balance, operation-log row (and the audit row of an operator's
    /// completion) in one transaction. The status update
    /// matches only a pending order, so a completed or cancelled one is
    /// never credited.
    fn complete<'a>(
        &'a self,
        completion: &'a Completion,
    ) -> StoreFuture<'a, Result<CompletedOrder, CompleteError>>;

    /// Inserts a pending order for the user `order` names in its project,
    /// resolving the user and checking the server with it (in the same
    /// statement where the backend can), and its audit row when it has one;
    /// a unique conflict (the idempotency key or the order id taken) inserts
    /// nothing and says so.
    fn insert_order<'a>(
        &'a self,
        order: &'a NewOrder,
    ) -> StoreFuture<'a, Result<OrderInsert, StoreError>>;

    /// Records that the value `token_hash` of the token `token_id` was used
    /// at `at` (nothing when the token no longer has that value).
    fn record_token_use<'a>(
        &'a self,
        token_id: i64,
        token_hash: &'a str,
        at: DateTime<Utc>,
    ) -> StoreFuture<'a, Result<(), StoreError>>;

    /// Whether the database answers and accepts writes (see [`readiness`]):
    /// a kept answer, or one check of the backend's own.
    fn readiness(&self) -> StoreFuture<'_, Readiness>;
}

/// Counts what the grouping backends put into one statement; the
/// application hands the store its metrics through this.
pub trait GroupSizes: Send + Sync {
    /// A statement read `size` requests' tokens.
    fn token_reads(&self, size: usize);
    /// A transaction completed (or tried) `size` orders.
    fn completions(&self, size: usize);
    /// A statement inserted (or tried) `size` orders.
    fn inserts(&self, size: usize);
}

/// A [`GroupSizes`] that records nothing.
pub struct Uncounted;

impl GroupSizes for Uncounted {
    fn token_reads(&self, _: usize) {}
    fn completions(&self, _: usize) {}
    fn inserts(&self, _: usize) {}
}

/// An account as a balance request names it: the user by id, by e-mail
/// (lower-cased) or both, and the server (0 = the general account).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountKey {
    pub user_id: Option<i64>,
    pub email: Option<String>,
    pub server_id: i64,
}

/// A token as stored, with its project's state and its permissions.
#[derive(Debug, Clone)]
pub struct TokenRow {
    pub token_id: i64,
    pub project_id: i64,
    pub active: bool,
    /// When the token stops working; `None`: never.
    pub expires_at: Option<DateTime<Utc>>,
    /// When the matched value stops working: `None` for the current value,
    /// the end of its grace period for the value a reissue replaced.
    pub grace_until: Option<DateTime<Utc>>,
    /// When the matched value was last used.
    pub last_used_at: Option<DateTime<Utc>>,
    /// `None` when the project row is gone.
    pub project_active: Option<bool>,
    /// The permission names granted to the token.
    pub permissions: Vec<String>,
    /// The asked account, when one was asked.
    pub account: Option<AccountRow>,
}

/// What a statement found of an [`AccountKey`] in the token's project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountRow {
    /// The project's user with the asked id, if any.
    pub user_by_id: Option<i64>,
    /// The project's user with the asked e-mail, if any.
    pub user_by_email: Option<i64>,
    /// The project's server with the asked id, if any.
    pub server_found: bool,
    /// The balance row of the user (by id, else by e-mail) on the server;
    /// `None` when there is none.
    pub main_cents: Option<i64>,
    pub bonus_cents: Option<i64>,
}

/// The permission names of a token, as the statements aggregate them
/// (comma-separated; NULL when there are none).
fn permission_list(joined: Option<String>) -> Vec<String> {
    joined
        .map(|joined| joined.split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// A token's row as the sqlx backends' token statements name their
/// columns, with the account's columns when one was asked; `None` for an
/// unknown token (`token_id` NULL).
fn token_row_of<R>(row: &R, with_account: bool) -> Result<Option<TokenRow>, sqlx::Error>
where
    R: sqlx::Row,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> bool: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> DateTime<Utc>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let Some(token_id) = row.try_get("token_id")? else {
        return Ok(None);
    };
    Ok(Some(TokenRow {
        token_id,
        project_id: row.try_get("project_id")?,
        active: row.try_get("token_active")?,
        expires_at: row.try_get("expires_at")?,
        grace_until: row.try_get("grace_until")?,
        last_used_at: row.try_get("last_used_at")?,
        project_active: row.try_get("project_active")?,
        permissions: permission_list(row.try_get("permissions")?),
        account: if with_account {
            Some(AccountRow {
                user_by_id: row.try_get("user_by_id")?,
                user_by_email: row.try_get("user_by_email")?,
                server_found: row.try_get::<Option<i64>, _>("server_found")?.is_some(),
                main_cents: row.try_get("main_cents")?,
                bonus_cents: row.try_get("bonus_cents")?,
            })
        } else {
            None
        },
    }))
}

/// An order to insert, its fields validated.
#[derive(Debug, Clone)]
pub struct NewOrder {
    pub order_id: String,
    pub project_id: i64,
    /// The user, by id, by e-mail (lower-cased, as stored) or both (then
    /// both must name the same user).
    pub user_id: Option<i64>,
    pub email: Option<String>,
    /// 0 for the general account.
    pub server_id: i64,
    pub amount_cents: i64,
    pub payment_system: String,
    pub idempotency_key: Option<String>,
    pub request_hash: Option<String>,
    /// An operator's creation: its row of the admin audit log, written in
    /// the insert's transaction when the order is inserted. `None` for the
    /// API's.
    pub audit: Option<AuditRow>,
}

impl NewOrder {
    /// The order's `order.created`, for the user the insert resolved.
    fn created_event(
        &self,
        user_id: i64,
        created_at: DateTime<Utc>,
    ) -> Result<NewEvent, StoreError> {
        let amount = self.amount()?;
        let order = self.data(user_id, amount, created_at);
        Ok(events::order_created(
            self.project_id,
            &order,
            self.idempotency_key.as_deref(),
        ))
    }

    /// The body of the order's `order.created` around the id of the user
    /// the insert resolves (see `events::order_created_around_user`).
    fn created_event_around_user(
        &self,
        created_at: DateTime<Utc>,
    ) -> Result<(String, String), StoreError> {
        let amount = self.amount()?;
        let order = self.data(0, amount, created_at);
        Ok(events::order_created_around_user(
            &order,
            self.idempotency_key.as_deref(),
        ))
    }

    fn amount(&self) -> Result<Money, StoreError> {
        Money::from_cents(self.amount_cents)
            .map_err(|err| StoreError::Failed(format!("order amount out of range: {err}")))
    }

    fn data(
        &self,
        user_id: i64,
        amount: Money,
        created_at: DateTime<Utc>,
    ) -> events::OrderData<'_> {
        events::OrderData {
            order_id: &self.order_id,
            status: OrderStatus::Pending,
            user_id,
            server_id: self.server_id,
            amount,
            payment_system: &self.payment_system,
            payment_id: None,
            created_at,
            completed_at: None,
            cancelled_at: None,
        }
    }
}

/// What an order insert did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderInsert {
    /// Inserted for the user `user_id` at `created_at`.
    Inserted {
        user_id: i64,
        created_at: DateTime<Utc>,
    },
    /// No user of the project is named so; nothing inserted.
    UserNotFound,
    /// The server is not one of the project's; nothing inserted.
    ServerNotFound,
    /// The idempotency key (in the project) or the order id is taken;
    /// nothing inserted.
    Conflict,
}

/// A completion request whose formats were already validated.
#[derive(Debug, Clone)]
pub struct Completion {
    pub project_id: i64,
    pub order_id: String,
    pub payment_system: String,
    /// `None` when the caller gave none, `null` or `""`.
    pub payment_id: Option<String>,
    /// An operator's completion: its row of the admin audit log, written in
    /// the completion's transaction when the order is completed. `None` for
    /// the API's.
    pub audit: Option<AuditRow>,
}

/// A row of the admin audit log, as the store writes it with a change of
/// its own (see `service::admin_audit`, which builds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    pub at: DateTime<Utc>,
    pub administrator_id: Option<i64>,
    pub actor: String,
    pub action: String,
    pub object_kind: String,
    pub object_id: String,
    /// JSON text of the object before and after the change.
    pub before: Option<String>,
    pub after: Option<String>,
    pub address: Option<String>,
}

// Statements that several backends run alike, written once: in
// PostgreSQL's dialect (SQLite reads `$1` as a named parameter numbered at
// its first appearance, and each first appears in order), or in SQLite's
// where PostgreSQL runs its own; MariaDB's are made from them
// (`mysql::dialect`, each named parameter a `?` where it appears).

/// An operator's row of the admin audit log, written with the change.
pub const LOG_AUDIT: &str = r#"INSERT INTO "admin_audit_log" ("at", "administrator_id", "actor", "action", "object_kind",
    "object_id", "before", "after", "address")
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"#;

/// When a token's value was last used: `$1` the current value's hash and
/// `$2` the time, `$3` and `$4` the same for the value a reissue replaced,
/// `$5` the token.
pub const RECORD_TOKEN_USE: &str = r#"UPDATE "app_tokens"
SET "last_used_at" = CASE WHEN "token_hash" = $1 THEN $2 ELSE "last_used_at" END,
    "previous_last_used_at" = CASE WHEN "previous_hash" = $3 THEN $4 ELSE "previous_last_used_at" END
WHERE "id" = $5"#;

/// The status of the order a completion names, if it exists (PostgreSQL,
/// SQLite).
pub const ORDER_STATUS: &str = r#"SELECT "status" FROM "payment_orders"
WHERE "order_id" = $1 AND "project_id" = $2 AND "payment_system" = $3"#;

/// The enabled endpoints of a project: whether (and to whom) a change of
/// it records an event. One read of `ix_webhook_endpoints_project`, which
/// finds nothing for most projects (SQLite, MariaDB).
pub const SUBSCRIBERS: &str = r#"SELECT "id", "event_types" FROM "webhook_endpoints"
WHERE "project_id" = ?1 AND "enabled""#;

/// The operation-log row of a credited order (SQLite, MariaDB).
pub const LOG_CREDIT: &str = r#"INSERT INTO "operation_log" ("kind", "order_ref", "user_id", "server_id", "balance_type",
    "amount_cents", "balance_before_cents", "balance_after_cents", "created_at")
VALUES (?1, ?2, ?3, ?4, 'main', ?5, ?6, ?7, ?8)"#;

/// The token by its hash, with its project's state and permissions, and the
/// asked account of its project (all NULL when no account is asked): the
/// user by e-mail, the balance of the user (by id, else by e-mail) on the
/// server, the user by id, and the server. A balance row carries its user's
/// project, so when it is there it proves the user by id; the users table is
/// read for an id only when the account has no balance row (one B-tree fewer
/// per lookup). `permissions` is the backend's aggregate of the token's
/// permissions, comma-separated (SQLite, MariaDB; PostgreSQL reads a group
/// of tokens at once).
fn read_token(permissions: &str) -> String {
    format!(
        r#"SELECT t."id" AS "token_id", t."project_id", t."active" AS "token_active",
    t."expires_at", p."active" AS "project_active",
    CASE WHEN t."token_hash" = :token_hash THEN NULL ELSE t."previous_until" END AS "grace_until",
    CASE WHEN t."token_hash" = :token_hash THEN t."last_used_at" ELSE t."previous_last_used_at" END
        AS "last_used_at",
    (SELECT {permissions} FROM "token_permissions" AS g
        WHERE g."token_id" = t."id") AS "permissions",
    CASE WHEN b."user_id" = :user_id THEN b."user_id"
        ELSE (SELECT u."id" FROM "users" AS u WHERE u."id" = :user_id AND u."project_id" = t."project_id")
    END AS "user_by_id",
    by_email."id" AS "user_by_email", b."main_cents", b."bonus_cents", s."id" AS "server_found"
FROM "app_tokens" AS t
LEFT JOIN "projects" AS p ON p."id" = t."project_id"
LEFT JOIN "users" AS by_email ON by_email."email" = :email AND by_email."project_id" = t."project_id"
LEFT JOIN "balances" AS b ON b."user_id" = COALESCE(:user_id, by_email."id")
    AND b."server_id" = :server_id AND b."project_id" = t."project_id"
LEFT JOIN "servers" AS s ON s."id" = :server_id AND s."project_id" = t."project_id"
WHERE t."token_hash" = :token_hash OR t."previous_hash" = :token_hash"#
    )
}

/// The user an order names in its project: by id (and then the e-mail too,
/// when given, must be theirs), else by e-mail; NULL when there is none.
pub(super) const ORDER_USER: &str = r#"CASE WHEN :user_id IS NOT NULL
        THEN (SELECT u."id" FROM "users" AS u WHERE u."id" = :user_id AND u."project_id" = :project_id
            AND (:email IS NULL OR u."email" = :email))
        ELSE (SELECT u."id" FROM "users" AS u WHERE u."email" = :email AND u."project_id" = :project_id)
    END"#;

/// Whether the order's server is the general account or one of the project's.
pub(super) const ORDER_SERVER: &str = r#"(:server_id = 0 OR EXISTS (SELECT 1 FROM "servers" AS s
        WHERE s."id" = :server_id AND s."project_id" = :project_id))"#;

/// Writes `audits`, operators' rows of the admin audit log, with `statement`
/// (a sqlx backend's insert, its parameters the fields in their order) in
/// the transaction of their changes.
async fn log_audits<'a, DB: sqlx::Database>(
    txn: &mut sqlx::Transaction<'_, DB>,
    statement: &'static str,
    audits: impl Iterator<Item = &'a AuditRow>,
) -> Result<(), sqlx::Error>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> DateTime<Utc>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<i64>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for audit in audits {
        sqlx::query(statement)
            .bind(audit.at)
            .bind(audit.administrator_id)
            .bind(audit.actor.as_str())
            .bind(audit.action.as_str())
            .bind(audit.object_kind.as_str())
            .bind(audit.object_id.as_str())
            .bind(audit.before.as_deref())
            .bind(audit.after.as_deref())
            .bind(audit.address.as_deref())
            .execute(&mut **txn)
            .await?;
    }
    Ok(())
}

/// An enabled endpoint of a project, as the recording of events reads it:
/// its id and the types it is subscribed to (`None`: every type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscriber {
    pub endpoint_id: i64,
    pub project_id: i64,
    pub event_types: Option<String>,
}

/// The events of `events` that some of `subscribers` receive, each with
/// the endpoints that receive it. An event no endpoint receives is not
/// recorded.
pub fn deliveries<'a>(
    subscribers: &[Subscriber],
    events: &'a [NewEvent],
) -> Vec<(&'a NewEvent, Vec<i64>)> {
    events
        .iter()
        .filter_map(|event| {
            let endpoints: Vec<i64> = subscribers
                .iter()
                .filter(|s| s.project_id == event.project_id)
                .filter(|s| events::subscribed(s.event_types.as_deref(), event.event_type))
                .map(|s| s.endpoint_id)
                .collect();
            (!endpoints.is_empty()).then_some((event, endpoints))
        })
        .collect()
}

/// An order as a successful completion left it.
#[derive(Debug, Clone)]
pub struct CompletedOrder {
    pub order_id: String,
    pub payment_system: String,
    pub payment_id: Option<String>,
    pub amount: Money,
    pub completed_at: DateTime<Utc>,
    pub user_id: i64,
    /// 0 for the general account.
    pub server_id: i64,
    /// The credited main balance after the credit.
    pub balance_after: Money,
}

impl CompletedOrder {
    /// The order's `order.completed`; `created_at` is the order's.
    fn event(&self, project_id: i64, created_at: DateTime<Utc>) -> NewEvent {
        let order = events::OrderData {
            order_id: &self.order_id,
            status: OrderStatus::Completed,
            user_id: self.user_id,
            server_id: self.server_id,
            amount: self.amount,
            payment_system: &self.payment_system,
            payment_id: self.payment_id.as_deref(),
            created_at,
            completed_at: Some(self.completed_at),
            cancelled_at: None,
        };
        events::order_completed(project_id, &order, self.balance_after)
    }
}

/// Cents a completion read back as money; out of range only if the
/// database holds what its CHECK constraints forbid.
fn money(cents: i64) -> Result<Money, CompleteError> {
    Money::from_cents(cents).map_err(|err| {
        CompleteError::ProcessingFailed(StoreError::Failed(format!(
            "amount out of range in database: {err}"
        )))
    })
}

/// A database operation that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached (or not in time); nothing was done.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A statement waited too long for a lock (statement timeout, lock
    /// timeout, deadlock); its transaction was rolled back.
    #[error("database contended: {0}")]
    Contended(String),
    /// A statement failed; its transaction was rolled back.
    #[error("database error: {0}")]
    Failed(String),
    /// A statement broke a CHECK constraint (a balance past its ceiling);
    /// its transaction was rolled back, and the same statement would break
    /// it again.
    #[error("check constraint violated: {0}")]
    CheckViolated(String),
    /// The database refuses writes (a read-only or recovering server, a
    /// full disk, a read-only file); nothing was done, and a retry succeeds
    /// once it accepts them again.
    #[error("database refuses writes: {0}")]
    WritesRefused(String),
}

impl From<StoreError> for CompleteError {
    /// A failure before the transaction began: nothing was done.
    fn from(err: StoreError) -> CompleteError {
        CompleteError::Unavailable(err)
    }
}

impl StoreError {
    /// Whether the database could not do it, and a retry may succeed (503):
    /// unreachable, or refusing writes.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_) | StoreError::WritesRefused(_)
        )
    }
}

/// Why an order was not completed. Nothing was changed in any case.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CompleteError {
    /// Missing, of another project, or stored with another payment system.
    #[error("order not found")]
    OrderNotFound,
    #[error("order already completed")]
    AlreadyCompleted,
    /// The order was cancelled: it is never credited.
    #[error("order cancelled")]
    Cancelled,
    /// The status update itself failed.
    #[error("status update failed: {0}")]
    UpdateFailed(StoreError),
    /// Crediting or logging failed after the status update.
    #[error("payment processing failed: {0}")]
    ProcessingFailed(StoreError),
    /// Crediting the amount would take the main balance past the largest
    /// balance stored (999 999 999 999 999.99): the order cannot be
    /// completed while the balance stays as it is, however often it is
    /// retried.
    #[error("the credit would take the main balance past its ceiling")]
    BalanceCeiling,
    /// The database could not be reached.
    #[error("database unavailable: {0}")]
    Unavailable(StoreError),
}

impl CompleteError {
    /// A failure of the status update (or of what comes before it).
    fn at_update(err: StoreError) -> CompleteError {
        match err {
            StoreError::Unavailable(_) | StoreError::WritesRefused(_) => {
                CompleteError::Unavailable(err)
            }
            StoreError::Contended(_) | StoreError::Failed(_) | StoreError::CheckViolated(_) => {
                CompleteError::UpdateFailed(err)
            }
        }
    }

    /// Why a guarded status update matched no row of an order found in
    /// `status`: it is final, or it changed under the update (retry).
    fn not_pending(status: &str) -> CompleteError {
        match OrderStatus::try_from_value(&status.to_owned()) {
            Ok(OrderStatus::Completed) => CompleteError::AlreadyCompleted,
            Ok(OrderStatus::Cancelled) => CompleteError::Cancelled,
            _ => CompleteError::UpdateFailed(StoreError::Failed(format!(
                "order in status {status:?} was not updated"
            ))),
        }
    }

    /// A failure of the credit, the log row or the commit; a broken CHECK
    /// there is the balance's ceiling (the only CHECK a credit can break).
    fn at_credit(err: StoreError) -> CompleteError {
        match err {
            StoreError::Unavailable(_) | StoreError::WritesRefused(_) => {
                CompleteError::Unavailable(err)
            }
            StoreError::CheckViolated(_) => CompleteError::BalanceCeiling,
            StoreError::Contended(_) | StoreError::Failed(_) => {
                CompleteError::ProcessingFailed(err)
            }
        }
    }
}

/// The completion time every backend stores: now, to the microsecond, so
/// that each stores and returns exactly the same value.
pub fn now() -> DateTime<Utc> {
    use chrono::SubsecRound;
    Utc::now().trunc_subsecs(6)
}
