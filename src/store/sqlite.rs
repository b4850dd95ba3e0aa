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
//! is one `BEGIN IMMEDIATE` transaction on the sqlx pool (so that waiting for
//! the file lock does not block a thread of the runtime), and this process's
//! writers queue on an async mutex in front of it instead of polling the
//! file lock in SQLite's busy handler, whose back-off sleeps made the tail
//! latency. Another process's writer is waited for up to the busy timeout.
//!
//! See docs/performance.md for what each bought.

use std::{
    path::PathBuf,
    str::FromStr,
    sync::{Mutex, PoisonError},
    time::Duration,
};

use chrono::{DateTime, Utc};
use entity::{balance, operation_log::LogKind, payment_order::OrderStatus};
use rusqlite::{OpenFlags, OptionalExtension, named_params};
use sea_orm::{
    ActiveEnum, DatabaseConnection,
    sqlx::{self, Row, SqlitePool, sqlite::SqliteConnectOptions},
};

use super::{
    AccountKey, AccountRow, CompleteError, CompletedOrder, Completion, Store, StoreError,
    StoreFuture, TokenRow, now, permission_list,
};

/// The token by its hash, with its project's state and permissions, and the
/// asked account of its project (all NULL when no account is asked): the
/// user by id and by e-mail, the balance of the one found (by id first), and
/// the server.
const READ_TOKEN: &str = r#"SELECT t."id" AS "token_id", t."project_id", t."active" AS "token_active",
    t."last_used_at", p."active" AS "project_active",
    (SELECT group_concat(g."permission", ',') FROM "token_permissions" AS g
        WHERE g."token_id" = t."id") AS "permissions",
    by_id."id" AS "user_by_id", by_email."id" AS "user_by_email",
    b."main_cents", b."bonus_cents", s."id" AS "server_found"
FROM "app_tokens" AS t
LEFT JOIN "projects" AS p ON p."id" = t."project_id"
LEFT JOIN "users" AS by_id ON by_id."id" = :user_id AND by_id."project_id" = t."project_id"
LEFT JOIN "users" AS by_email ON by_email."email" = :email AND by_email."project_id" = t."project_id"
LEFT JOIN "balances" AS b ON b."user_id" = COALESCE(by_id."id", by_email."id")
    AND b."server_id" = :server_id
LEFT JOIN "servers" AS s ON s."id" = :server_id AND s."project_id" = t."project_id"
WHERE t."token_hash" = :token_hash"#;

/// The status update of a completion, guarded so that it matches a pending
/// order only once.
const COMPLETE_ORDER: &str = r#"UPDATE "payment_orders"
SET "status" = ?1, "completed_at" = ?2, "payment_id" = ?3
WHERE "order_id" = ?4 AND "project_id" = ?5 AND "payment_system" = ?6 AND "status" <> ?1
RETURNING "id", "user_id", "server_id", "amount_cents", "payment_id""#;

/// Whether the order a completion names exists (in any status).
const FIND_ORDER: &str = r#"SELECT "id" FROM "payment_orders"
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

/// How long an inline read waits for a locked file (WAL recovery after a
/// crashed writer, another process holding it exclusively) before it counts
/// as unavailable. It blocks its thread meanwhile, so it is short.
const READ_BUSY_TIMEOUT: Duration = Duration::from_millis(50);

pub struct SqliteStore {
    readers: InlineReaders,
    pool: SqlitePool,
    writer: tokio::sync::Mutex<()>,
}

impl SqliteStore {
    /// The store of the SQLite file `url` names, writing through `db`'s pool.
    /// An in-memory database cannot be read inline (each connection would
    /// see a database of its own), so it is refused.
    pub fn new(db: &DatabaseConnection, url: &str) -> Result<SqliteStore, StoreError> {
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
            pool: db.get_sqlite_connection_pool().clone(),
            writer: tokio::sync::Mutex::new(()),
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
                            last_used_at: row
                                .get::<_, Option<String>>("last_used_at")?
                                .as_deref()
                                .and_then(parse_time),
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

    async fn complete_now(&self, request: &Completion) -> Result<CompletedOrder, CompleteError> {
        let _one_writer = self.writer.lock().await;
        let mut txn = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|err| CompleteError::Unavailable(err.into()))?;
        let completed_at = now();
        let updated = sqlx::query(COMPLETE_ORDER)
            .bind(OrderStatus::Completed.to_value())
            .bind(completed_at)
            .bind(&request.payment_id)
            .bind(&request.order_id)
            .bind(request.project_id)
            .bind(&request.payment_system)
            .fetch_optional(&mut *txn)
            .await
            .map_err(|err| CompleteError::at_update(err.into()))?;
        let Some(order) = updated else {
            let found = sqlx::query(FIND_ORDER)
                .bind(&request.order_id)
                .bind(request.project_id)
                .bind(&request.payment_system)
                .fetch_optional(&mut *txn)
                .await
                .map_err(|err| CompleteError::at_update(err.into()))?;
            return Err(match found {
                Some(_) => CompleteError::AlreadyCompleted,
                None => CompleteError::OrderNotFound,
            });
        };
        let read = |err: sqlx::Error| CompleteError::at_credit(err.into());
        let order_ref: i64 = order.try_get("id").map_err(read)?;
        let user_id: i64 = order.try_get("user_id").map_err(read)?;
        let server_id: Option<i64> = order.try_get("server_id").map_err(read)?;
        let server_id = server_id.unwrap_or(balance::GENERAL_ACCOUNT);
        let amount_cents: i64 = order.try_get("amount_cents").map_err(read)?;
        let payment_id: Option<String> = order.try_get("payment_id").map_err(read)?;
        let after: i64 = sqlx::query_scalar(CREDIT_MAIN)
            .bind(user_id)
            .bind(server_id)
            .bind(amount_cents)
            .bind(completed_at)
            .bind(request.project_id)
            .fetch_one(&mut *txn)
            .await
            .map_err(read)?;
        sqlx::query(LOG_CREDIT)
            .bind(LogKind::OrderCredit.to_value())
            .bind(order_ref)
            .bind(user_id)
            .bind(server_id)
            .bind(amount_cents)
            .bind(after - amount_cents)
            .bind(after)
            .bind(completed_at)
            .execute(&mut *txn)
            .await
            .map_err(read)?;
        txn.commit().await.map_err(read)?;
        Ok(CompletedOrder {
            order_id: request.order_id.clone(),
            payment_system: request.payment_system.clone(),
            payment_id,
            amount_cents,
            completed_at,
            user_id,
            server_id,
            balance_after_cents: after,
        })
    }
}

impl Store for SqliteStore {
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
        Box::pin(self.complete_now(completion))
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
/// database unavailable (503); any other failure as a failed statement.
fn classify(err: &rusqlite::Error) -> StoreError {
    match err.sqlite_error_code() {
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

/// A time as sqlx stores it on SQLite (RFC 3339 text). An unreadable one
/// reads as unknown, which only makes the token's use be recorded again.
fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|time| time.with_timezone(&Utc))
}
