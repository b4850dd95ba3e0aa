//! The SQLite store.
//!
//! **Reads run inline.** sqlx gives every SQLite connection a worker thread
//! of its own: a statement is sent to it and its rows are sent back, a
//! thread hand-off each way, which cost a balance request more CPU than the
//! lookup inside SQLite. A read by primary or unique key on a WAL database
//! never waits for a writer, so the token's statement runs here on a
//! read-only rusqlite connection, in the calling thread, with its prepared
//! statement kept by rusqlite's statement cache. Each read is its own
//! autocommit transaction and sees everything committed before it began, by
//! any process: a change made with the command line holds from the next
//! request. The connections are kept in a list (at most one per thread that
//! reads at once).
//!
//! **One writer at a time.** SQLite allows one writer per file. A completion
//! is one `BEGIN IMMEDIATE` transaction on the store's one write connection,
//! run whole on a blocking thread (one hand-off per completion, instead of
//! one per statement on the sqlx pool; waiting for another process's write
//! lock, up to the busy timeout, blocks no thread of the runtime). This
//! process's writers queue on an async mutex in front of it instead of
//! polling the file lock in SQLite's busy handler, whose back-off sleeps
//! made the tail latency.
//!
//! **Readiness.** SQLite can tell a file it may not write (it opens such a
//! file read-only), but a full disk or a failing one only by writing. So
//! the check asks the write connection whether it opened the file read-only
//! and, after a request's write was refused, writes once itself (the
//! header's user version, which masterpay does not use, written back
//! unchanged). A write connection that refused a write is closed; the next
//! write opens another.
//!
//! See docs/performance.md for what each bought.

use std::{
    path::{Path, PathBuf},
    str::FromStr,
    sync::{Arc, LazyLock, Mutex, PoisonError},
    time::Duration,
};

use chrono::{DateTime, Utc};
use entity::{
    balance, operation_log::LogKind, payment_order::OrderStatus, webhook_delivery::DeliveryStatus,
};
use rusqlite::{MAIN_DB, OpenFlags, OptionalExtension, TransactionBehavior, named_params, params};
use sea_orm::{ActiveEnum, sqlx::sqlite::SqliteConnectOptions};

mod relay;

use super::{
    AccountKey, AccountRow, AuditRow, CompleteError, CompletedOrder, Completion, NewOrder,
    OrderInsert, Readiness, Store, StoreError, StoreFuture, Subscriber, TokenRow, deliveries,
    money, now, permission_list,
    readiness::{READ_ONLY, WriteError, WriteHealth},
    relay::RelayStore,
};
use crate::events::{NewEvent, new_webhook_id};

/// The token by its hash, with its project's state and permissions, and the
/// asked account of its project (all NULL when no account is asked): the
/// user by e-mail, the balance of the user (by id, else by e-mail) on the
/// server, the user by id, and the server. A balance row carries its user's
/// project, so when it is there it proves the user by id; the users table is
/// read for an id only when the account has no balance row (one B-tree fewer
/// per lookup).
const READ_TOKEN: &str = r#"SELECT t."id" AS "token_id", t."project_id", t."active" AS "token_active",
    t."expires_at", p."active" AS "project_active",
    CASE WHEN t."token_hash" = :token_hash THEN NULL ELSE t."previous_until" END AS "grace_until",
    CASE WHEN t."token_hash" = :token_hash THEN t."last_used_at" ELSE t."previous_last_used_at" END
        AS "last_used_at",
    (SELECT group_concat(g."permission", ',') FROM "token_permissions" AS g
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
WHERE t."token_hash" = :token_hash OR t."previous_hash" = :token_hash"#;

/// The status update of a completion, guarded so that it matches a pending
/// order only once.
const COMPLETE_ORDER: &str = r#"UPDATE "payment_orders"
SET "status" = ?1, "completed_at" = ?2, "payment_id" = ?3
WHERE "order_id" = ?4 AND "project_id" = ?5 AND "payment_system" = ?6 AND "status" = ?7
RETURNING "id", "user_id", "server_id", "amount_cents", "payment_id", "created_at""#;

/// The status of the order a completion names, if it exists.
const FIND_ORDER: &str = r#"SELECT "status" FROM "payment_orders"
WHERE "order_id" = ?1 AND "project_id" = ?2 AND "payment_system" = ?3"#;

/// The credit of the main balance, creating the balance row when missing.
const CREDIT_MAIN: &str = r#"INSERT INTO "balances" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at", "project_id")
VALUES (?1, ?2, ?3, 0, ?4, ?5)
ON CONFLICT ("user_id", "server_id") DO UPDATE
SET "main_cents" = "balances"."main_cents" + ?3, "updated_at" = ?4
RETURNING "main_cents""#;

/// The operation-log row of a credited order.
const LOG_CREDIT: &str = r#"INSERT INTO "operation_log" ("kind", "order_ref", "user_id", "server_id", "balance_type",
    "amount_cents", "balance_before_cents", "balance_after_cents", "created_at")
VALUES (?1, ?2, ?3, ?4, 'main', ?5, ?6, ?7, ?8)"#;

/// An operator's row of the admin audit log, written with the change.
const LOG_AUDIT: &str = r#"INSERT INTO "admin_audit_log" ("at", "administrator_id", "actor", "action", "object_kind",
    "object_id", "before", "after", "address")
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"#;

/// The enabled endpoints of a project: whether (and to whom) a change of
/// it records an event. One read of `ix_webhook_endpoints_project`, which
/// finds nothing for most projects.
const SUBSCRIBERS: &str = r#"SELECT "id", "event_types" FROM "webhook_endpoints"
WHERE "project_id" = ?1 AND "enabled""#;

/// An event, recorded with its change.
const INSERT_EVENT: &str = r#"INSERT INTO "webhook_events" ("webhook_id", "project_id", "event_type", "order_id",
    "payload", "created_at")
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
RETURNING "id""#;

/// An event's delivery to one endpoint, due at once.
const INSERT_DELIVERY: &str = r#"INSERT INTO "webhook_deliveries" ("event_id", "endpoint_id", "status", "attempts",
    "next_attempt_at", "created_at")
VALUES (?1, ?2, ?3, 0, ?4, ?4)"#;

/// The user an order names in its project: by id (and then the e-mail too,
/// when given, must be theirs), else by e-mail; NULL when there is none.
const ORDER_USER: &str = r#"CASE WHEN :user_id IS NOT NULL
        THEN (SELECT u."id" FROM "users" AS u WHERE u."id" = :user_id AND u."project_id" = :project_id
            AND (:email IS NULL OR u."email" = :email))
        ELSE (SELECT u."id" FROM "users" AS u WHERE u."email" = :email AND u."project_id" = :project_id)
    END"#;

/// Whether the order's server is the general account or one of the project's.
const ORDER_SERVER: &str = r#"(:server_id = 0 OR EXISTS (SELECT 1 FROM "servers" AS s
        WHERE s."id" = :server_id AND s."project_id" = :project_id))"#;

/// When a token's value (`?3`, its hash) was last used.
const RECORD_TOKEN_USE: &str = r#"UPDATE "app_tokens"
SET "last_used_at" = CASE WHEN "token_hash" = ?3 THEN ?1 ELSE "last_used_at" END,
    "previous_last_used_at" = CASE WHEN "previous_hash" = ?3 THEN ?1 ELSE "previous_last_used_at" END
WHERE "id" = ?2"#;

/// How long an inline read waits for a locked file (WAL recovery after a
/// crashed writer, another process holding it exclusively) before it counts
/// as unavailable. It blocks its thread meanwhile, so it is short.
const READ_BUSY_TIMEOUT: Duration = Duration::from_millis(50);

pub struct SqliteStore {
    readers: InlineReaders,
    /// The write connection, opened at the first write; its mutex makes
    /// this process's writers queue in order.
    writer: Arc<tokio::sync::Mutex<Option<rusqlite::Connection>>>,
    /// How long a writer waits for another process's write lock.
    busy: Duration,
    health: WriteHealth,
}

impl SqliteStore {
    /// The store of the SQLite file `url` names; its writers wait up to
    /// `busy` for another process's write lock. An in-memory database
    /// cannot be shared by several connections, so it is refused.
    pub fn new(url: &str, busy: Duration) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?;
        let path = options.get_filename().to_path_buf();
        if url.contains(":memory:") || url.contains("mode=memory") || path.as_os_str().is_empty() {
            return Err(StoreError::Failed(
                "an in-memory SQLite database cannot be served: use a file".into(),
            ));
        }
        Ok(SqliteStore {
            readers: InlineReaders {
                path,
                idle: Mutex::new(Vec::new()),
            },
            writer: Arc::new(tokio::sync::Mutex::new(None)),
            busy,
            health: WriteHealth::default(),
        })
    }

    fn read_token_now(
        &self,
        token_hash: &str,
        account: Option<&AccountKey>,
    ) -> Result<Option<TokenRow>, StoreError> {
        self.readers.with_connection(|conn| {
            let mut statement = conn.prepare_cached(READ_TOKEN)?;
            statement
                .query_row(
                    named_params! {
                        ":token_hash": token_hash,
                        ":user_id": account.and_then(|a| a.user_id),
                        ":email": account.and_then(|a| a.email.as_deref()),
                        ":server_id": account.map(|a| a.server_id),
                    },
                    |row| {
                        Ok(TokenRow {
                            token_id: row.get("token_id")?,
                            project_id: row.get("project_id")?,
                            active: row.get("token_active")?,
                            expires_at: time_column(row, "expires_at")?,
                            grace_until: time_column(row, "grace_until")?,
                            last_used_at: time_column(row, "last_used_at")?,
                            project_active: row.get("project_active")?,
                            permissions: permission_list(row.get("permissions")?),
                            account: match account {
                                None => None,
                                Some(_) => Some(AccountRow {
                                    user_by_id: row.get("user_by_id")?,
                                    user_by_email: row.get("user_by_email")?,
                                    server_found: row
                                        .get::<_, Option<i64>>("server_found")?
                                        .is_some(),
                                    main_cents: row.get("main_cents")?,
                                    bonus_cents: row.get("bonus_cents")?,
                                }),
                            },
                        })
                    },
                )
                .optional()
        })
    }

    /// Runs `write` on the write connection, on a blocking thread, after
    /// this process's writes before it; notes how it ended, and closes the
    /// connection when the database refused the write.
    async fn write<T, E>(
        &self,
        write: impl FnOnce(&mut rusqlite::Connection) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + WriteError + Send + 'static,
    {
        let outcome = self
            .with_writer(move |writer, path, busy| {
                let conn = match writer.as_mut() {
                    Some(conn) => conn,
                    None => {
                        writer.insert(open_writer(path, busy).map_err(|err| unavailable(&err))?)
                    }
                };
                let outcome = write(conn);
                if outcome.as_ref().is_err_and(WriteError::refuses_writes) {
                    *writer = None;
                }
                outcome
            })
            .await
            .unwrap_or_else(|err| Err(StoreError::Failed(err.to_string()).into()));
        self.health.note(&outcome);
        outcome
    }

    /// Runs `run` with the slot of the write connection (empty until a
    /// write opens it), on a blocking thread, after this process's writes
    /// before it.
    async fn with_writer<R: Send + 'static>(
        &self,
        run: impl FnOnce(&mut Option<rusqlite::Connection>, &Path, Duration) -> R + Send + 'static,
    ) -> Result<R, tokio::task::JoinError> {
        let mut writer = Arc::clone(&self.writer).lock_owned().await;
        let (path, busy) = (self.readers.path.clone(), self.busy);
        tokio::task::spawn_blocking(move || run(&mut writer, &path, busy)).await
    }

    /// The readiness check on the write connection (see the module docs);
    /// `refused`: a request's write was refused since the last ready one.
    async fn check_writable(&self, refused: bool) -> Readiness {
        let checked = self.with_writer(move |writer, path, busy| {
            let conn = match writer.as_mut() {
                Some(conn) => conn,
                None => match open_writer(path, busy) {
                    Ok(conn) => writer.insert(conn),
                    Err(err) => return readiness_of(&err),
                },
            };
            let readiness = match conn.is_readonly(MAIN_DB) {
                Ok(true) => Readiness::NotReady(READ_ONLY),
                Ok(false) if refused => match write_unchanged_user_version(conn) {
                    Ok(()) => Readiness::Ready,
                    Err(err) => readiness_of(&err),
                },
                Ok(false) => Readiness::Ready,
                Err(err) => readiness_of(&err),
            };
            if !readiness.is_ready() {
                *writer = None;
            }
            readiness
        });
        checked
            .await
            .unwrap_or_else(|err| Readiness::of_error(&StoreError::Failed(err.to_string())))
    }
}

/// One committed write that changes nothing: the header's user version
/// written back as it is.
fn write_unchanged_user_version(conn: &mut rusqlite::Connection) -> rusqlite::Result<()> {
    let txn = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = txn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    txn.execute_batch(&format!("PRAGMA user_version = {version}"))?;
    txn.commit()
}

/// What a failure of the readiness check says.
fn readiness_of(err: &rusqlite::Error) -> Readiness {
    match err.sqlite_error_code() {
        Some(rusqlite::ErrorCode::ReadOnly) => Readiness::NotReady(READ_ONLY),
        Some(rusqlite::ErrorCode::DiskFull) => Readiness::NotReady("database disk is full"),
        Some(rusqlite::ErrorCode::SystemIoFailure) => {
            Readiness::NotReady("database cannot be written (I/O error)")
        }
        _ => Readiness::of_error(&classify(err)),
    }
}

/// Opens the write connection of `path`, set up as the pool's connections.
fn open_writer(path: &Path, busy: Duration) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(busy)?;
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;")?;
    Ok(conn)
}

/// The completion's transaction on the write connection: status update,
/// credit, log row, commit; returning early rolls it back.
fn complete_in_transaction(
    conn: &mut rusqlite::Connection,
    request: &Completion,
) -> Result<CompletedOrder, CompleteError> {
    let at_update = |err: rusqlite::Error| CompleteError::at_update(classify(&err));
    let at_credit = |err: rusqlite::Error| CompleteError::at_credit(classify(&err));
    let txn = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|err| CompleteError::Unavailable(classify(&err)))?;
    let completed_at = now();
    let at = stored_time(completed_at);
    let updated = txn
        .prepare_cached(COMPLETE_ORDER)
        .and_then(|mut update| {
            update
                .query_row(
                    params![
                        OrderStatus::Completed.to_value(),
                        at,
                        request.payment_id,
                        request.order_id,
                        request.project_id,
                        request.payment_system,
                        OrderStatus::Pending.to_value(),
                    ],
                    |row| {
                        Ok((
                            row.get::<_, i64>("id")?,
                            row.get::<_, i64>("user_id")?,
                            row.get::<_, Option<i64>>("server_id")?,
                            row.get::<_, i64>("amount_cents")?,
                            row.get::<_, Option<String>>("payment_id")?,
                            time_column(row, "created_at")?,
                        ))
                    },
                )
                .optional()
        })
        .map_err(at_update)?;
    let Some((order_ref, user_id, server_id, amount_cents, payment_id, created_at)) = updated
    else {
        let found = txn
            .prepare_cached(FIND_ORDER)
            .and_then(|mut find| {
                find.query_row(
                    params![request.order_id, request.project_id, request.payment_system],
                    |row| row.get::<_, String>(0),
                )
                .optional()
            })
            .map_err(at_update)?;
        return Err(match found {
            Some(status) => CompleteError::not_pending(&status),
            None => CompleteError::OrderNotFound,
        });
    };
    let server_id = server_id.unwrap_or(balance::GENERAL_ACCOUNT);
    let after: i64 = txn
        .prepare_cached(CREDIT_MAIN)
        .and_then(|mut credit| {
            credit.query_row(
                params![user_id, server_id, amount_cents, at, request.project_id],
                |row| row.get(0),
            )
        })
        .map_err(at_credit)?;
    txn.prepare_cached(LOG_CREDIT)
        .and_then(|mut log| {
            log.execute(params![
                LogKind::OrderCredit.to_value(),
                order_ref,
                user_id,
                server_id,
                amount_cents,
                after - amount_cents,
                after,
                at,
            ])
        })
        .map_err(at_credit)?;
    log_audit(&txn, request.audit.as_ref()).map_err(at_credit)?;
    let completed = CompletedOrder {
        order_id: request.order_id.clone(),
        payment_system: request.payment_system.clone(),
        payment_id,
        amount: money(amount_cents)?,
        completed_at,
        user_id,
        server_id,
        balance_after: money(after)?,
    };
    let subscribers = subscribers(&txn, request.project_id).map_err(at_credit)?;
    if !subscribers.is_empty() {
        let created_at = created_at.ok_or_else(|| {
            CompleteError::ProcessingFailed(StoreError::Failed("order without created_at".into()))
        })?;
        let event = completed.event(request.project_id, created_at);
        record_events(&txn, &subscribers, &[event]).map_err(at_credit)?;
    }
    txn.commit().map_err(at_credit)?;
    Ok(completed)
}

/// The enabled endpoints of `project_id` (see [`SUBSCRIBERS`]).
fn subscribers(conn: &rusqlite::Connection, project_id: i64) -> rusqlite::Result<Vec<Subscriber>> {
    let mut select = conn.prepare_cached(SUBSCRIBERS)?;
    let rows = select.query_map(params![project_id], |row| {
        Ok(Subscriber {
            endpoint_id: row.get(0)?,
            project_id,
            event_types: row.get(1)?,
        })
    })?;
    rows.collect()
}

/// Records `events` with their deliveries to `subscribers`, in the
/// transaction of their change; an event no endpoint receives is not
/// recorded. Due at once: SQLite's clock is this host's.
fn record_events(
    conn: &rusqlite::Connection,
    subscribers: &[Subscriber],
    events: &[NewEvent],
) -> rusqlite::Result<()> {
    let due = stored_time(now());
    for (event, endpoints) in deliveries(subscribers, events) {
        let event_id: i64 = conn.prepare_cached(INSERT_EVENT)?.query_row(
            params![
                new_webhook_id(),
                event.project_id,
                event.event_type.to_value(),
                event.order_id,
                event.payload,
                stored_time(event.at),
            ],
            |row| row.get(0),
        )?;
        let mut deliver = conn.prepare_cached(INSERT_DELIVERY)?;
        for endpoint_id in endpoints {
            deliver.execute(params![
                event_id,
                endpoint_id,
                DeliveryStatus::Pending.to_value(),
                due
            ])?;
        }
    }
    Ok(())
}

/// Writes `audit`, an operator's row of the admin audit log, when there is
/// one, in the transaction of its change.
fn log_audit(txn: &rusqlite::Transaction<'_>, audit: Option<&AuditRow>) -> rusqlite::Result<()> {
    let Some(audit) = audit else { return Ok(()) };
    txn.prepare_cached(LOG_AUDIT)?.execute(params![
        stored_time(audit.at),
        audit.administrator_id,
        audit.actor,
        audit.action,
        audit.object_kind,
        audit.object_id,
        audit.before,
        audit.after,
        audit.address,
    ])?;
    Ok(())
}

/// The insert of an order: the user resolved and the server checked in the
/// statement; a unique conflict inserts nothing.
static INSERT_ORDER: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"INSERT INTO "payment_orders" ("order_id", "project_id", "user_id", "server_id", "payment_system",
    "amount_cents", "status", "created_at", "idempotency_key", "request_hash")
SELECT :order_id, :project_id, {ORDER_USER}, NULLIF(:server_id, 0), :payment_system,
    :amount_cents, :status, :created_at, :idempotency_key, :request_hash
WHERE {ORDER_USER} IS NOT NULL AND {ORDER_SERVER}
ON CONFLICT DO NOTHING
RETURNING "user_id""#
    )
});

/// Why an order was not inserted: the user and the server, as the insert
/// judged them.
static ORDER_NAMES: LazyLock<String> = LazyLock::new(|| {
    format!(r#"SELECT {ORDER_USER} AS "user_id", {ORDER_SERVER} AS "server_found""#)
});

/// The order's insert on the write connection, and when it inserted
/// nothing, why; in one transaction with its audit row (an operator's
/// order) and its event (a project with an endpoint).
fn insert_order_now(
    conn: &mut rusqlite::Connection,
    order: &NewOrder,
) -> Result<OrderInsert, StoreError> {
    let txn = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|err| classify(&err))?;
    let outcome = insert_on(&txn, order)?;
    if let OrderInsert::Inserted {
        user_id,
        created_at,
    } = outcome
    {
        log_audit(&txn, order.audit.as_ref()).map_err(|err| classify(&err))?;
        let subscribers = subscribers(&txn, order.project_id).map_err(|err| classify(&err))?;
        if !subscribers.is_empty() {
            let event = order.created_event(user_id, created_at)?;
            record_events(&txn, &subscribers, &[event]).map_err(|err| classify(&err))?;
        }
        txn.commit().map_err(|err| classify(&err))?;
    }
    Ok(outcome)
}

/// [`insert_order_now`]'s statements on `conn`.
fn insert_on(conn: &rusqlite::Connection, order: &NewOrder) -> Result<OrderInsert, StoreError> {
    let created_at = now();
    let at = stored_time(created_at);
    let status = OrderStatus::Pending.to_value();
    let names = named_params! {
        ":user_id": order.user_id,
        ":email": order.email,
        ":project_id": order.project_id,
        ":server_id": order.server_id,
    };
    let inserted = conn
        .prepare_cached(&INSERT_ORDER)
        .and_then(|mut insert| {
            let mut all = names.to_vec();
            all.extend_from_slice(named_params! {
                ":order_id": order.order_id,
                ":payment_system": order.payment_system,
                ":amount_cents": order.amount_cents,
                ":status": status,
                ":created_at": at,
                ":idempotency_key": order.idempotency_key,
                ":request_hash": order.request_hash,
            });
            insert
                .query_row(all.as_slice(), |row| row.get::<_, i64>(0))
                .optional()
        })
        .map_err(|err| classify(&err))?;
    if let Some(user_id) = inserted {
        return Ok(OrderInsert::Inserted {
            user_id,
            created_at,
        });
    }
    let (user, server_found) = conn
        .prepare_cached(&ORDER_NAMES)
        .and_then(|mut names_of| {
            names_of.query_row(names, |row| {
                Ok((row.get::<_, Option<i64>>(0)?, row.get::<_, bool>(1)?))
            })
        })
        .map_err(|err| classify(&err))?;
    Ok(match (user, server_found) {
        (None, _) => OrderInsert::UserNotFound,
        (Some(_), false) => OrderInsert::ServerNotFound,
        (Some(_), true) => OrderInsert::Conflict,
    })
}

/// A time as sqlx stores it on SQLite (and so as sea-orm reads it back).
fn stored_time(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false)
}

impl Store for SqliteStore {
    fn relay(&self) -> &dyn RelayStore {
        self
    }

    fn read_token<'a>(
        &'a self,
        token_hash: &'a str,
        account: Option<&'a AccountKey>,
    ) -> StoreFuture<'a, Result<Option<TokenRow>, StoreError>> {
        // Runs before the future is returned: it never waits (see the module
        // docs), so there is nothing to poll.
        let read = self.read_token_now(token_hash, account);
        Box::pin(std::future::ready(read))
    }

    fn complete<'a>(
        &'a self,
        completion: &'a Completion,
    ) -> StoreFuture<'a, Result<CompletedOrder, CompleteError>> {
        let request = completion.clone();
        Box::pin(self.write(move |conn| complete_in_transaction(conn, &request)))
    }

    fn insert_order<'a>(
        &'a self,
        order: &'a NewOrder,
    ) -> StoreFuture<'a, Result<OrderInsert, StoreError>> {
        let order = order.clone();
        Box::pin(self.write(move |conn| insert_order_now(conn, &order)))
    }

    fn record_token_use<'a>(
        &'a self,
        token_id: i64,
        token_hash: &'a str,
        at: DateTime<Utc>,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        let token_hash = token_hash.to_owned();
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(RECORD_TOKEN_USE)
                .and_then(|mut record| {
                    record.execute(params![stored_time(at), token_id, token_hash])
                })
                .map(drop)
                .map_err(|err| classify(&err))
        }))
    }

    fn readiness(&self) -> StoreFuture<'_, Readiness> {
        Box::pin(
            self.health
                .check(move |probe| self.check_writable(probe.refused)),
        )
    }
}

/// Read-only connections to one file, used by one thread at a time.
struct InlineReaders {
    path: PathBuf,
    idle: Mutex<Vec<rusqlite::Connection>>,
}

impl InlineReaders {
    /// Runs `read` on an idle connection (a new one when none is idle) and
    /// keeps the connection for the next read unless it failed.
    fn with_connection<T>(
        &self,
        read: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match idle {
            Some(conn) => conn,
            None => self.open().map_err(|err| unavailable(&err))?,
        };
        match read(&conn) {
            Ok(value) => {
                self.idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(conn);
                Ok(value)
            }
            Err(err) => Err(classify(&err)),
        }
    }

    fn open(&self) -> rusqlite::Result<rusqlite::Connection> {
        // NO_MUTEX: a connection is used by one thread at a time (it is
        // taken out of the list while in use), so SQLite's own mutex on it
        // would only cost.
        let conn = rusqlite::Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(READ_BUSY_TIMEOUT)?;
        Ok(conn)
    }
}

/// A read that found the file locked or could not open it counts as the
/// database unavailable (503); a write that the file or the disk refused
/// (read-only, full, failing) as refused; a broken CHECK as such; any other
/// failure as a failed statement.
fn classify(err: &rusqlite::Error) -> StoreError {
    use rusqlite::ffi;
    if let rusqlite::Error::SqliteFailure(failure, _) = err {
        match failure.extended_code {
            ffi::SQLITE_CONSTRAINT_CHECK => return StoreError::CheckViolated(err.to_string()),
            ffi::SQLITE_IOERR_WRITE
            | ffi::SQLITE_IOERR_FSYNC
            | ffi::SQLITE_IOERR_DIR_FSYNC
            | ffi::SQLITE_IOERR_TRUNCATE => return StoreError::WritesRefused(err.to_string()),
            _ => {}
        }
    }
    match err.sqlite_error_code() {
        Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::DiskFull) => {
            StoreError::WritesRefused(err.to_string())
        }
        Some(
            rusqlite::ErrorCode::DatabaseBusy
            | rusqlite::ErrorCode::DatabaseLocked
            | rusqlite::ErrorCode::CannotOpen
            | rusqlite::ErrorCode::SystemIoFailure,
        ) => unavailable(err),
        _ => StoreError::Failed(err.to_string()),
    }
}

fn unavailable(err: &rusqlite::Error) -> StoreError {
    StoreError::Unavailable(err.to_string())
}

/// A time column as sqlx stores it on SQLite (RFC 3339 text). An unreadable
/// one fails the read: an expiry must never read as "never".
fn time_column(
    row: &rusqlite::Row<'_>,
    column: impl rusqlite::RowIndex,
) -> rusqlite::Result<Option<DateTime<Utc>>> {
    let Some(text) = row.get::<_, Option<String>>(column)? else {
        return Ok(None);
    };
    DateTime::parse_from_rfc3339(&text)
        .map(|time| Some(time.with_timezone(&Utc)))
        .map_err(|err| {
            rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(err))
        })
}
