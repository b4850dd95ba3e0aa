//! The MariaDB/MySQL store: every statement through the sqlx pool, one
//! statement per token read, one transaction per completion.
//!
//! MariaDB has no `UPDATE ... RETURNING`, so a completion reads back what
//! its update and its upsert changed, inside the transaction (the rows stay
//! locked by the update until the commit).
//!
//! Readiness tries a write that changes nothing (`WRITE_PROBE`): whether
//! `read_only` binds the service's user depends on its privileges, which
//! the server itself judges that way. A connection on which a write or that
//! probe was refused is closed rather than pooled again (see
//! [`super::readiness`]).

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use entity::{
    balance, operation_log::LogKind, payment_order::OrderStatus, webhook_delivery::DeliveryStatus,
};
use sea_orm::{
    ActiveEnum, DatabaseConnection,
    sqlx::{self, MySql, MySqlPool, Row, pool::PoolConnection},
};

mod relay;

use super::{
    AccountKey, CompleteError, CompletedOrder, Completion, NewOrder, ORDER_SERVER, ORDER_USER,
    OrderInsert, Readiness, Store, StoreError, StoreFuture, Subscriber, TokenRow, deliveries,
    log_audits, money, now,
    readiness::{WriteError, WriteHealth, close_if_refused},
    relay::RelayStore,
    token_row_of,
};
use crate::events::{NewEvent, new_webhook_id};

/// The token by its hash with the asked account (see
/// [`super::read_token`]). Parameters: token hash, token hash, user id, user
/// id, e-mail, user id, server id, server id, token hash, token hash.
static READ_TOKEN: LazyLock<String> = LazyLock::new(|| {
    dialect(&super::read_token(
        r#"GROUP_CONCAT(g."permission" SEPARATOR ',')"#,
    ))
});

/// The status update of a completion, guarded so that it matches a pending
/// order only once. Parameters: completed status, time, payment id, order
/// id, project id, payment system, pending status.
const COMPLETE_ORDER: &str = r#"UPDATE payment_orders SET status = ?, completed_at = ?, payment_id = ?
WHERE order_id = ? AND project_id = ? AND payment_system = ? AND status = ?"#;

/// The order a completion names, in any status, and whether its project has
/// an enabled endpoint (then the completion records its event; most
/// projects have none). Parameters: order id, project id, payment system.
const FIND_ORDER: &str = r#"SELECT o.id, o.user_id, o.server_id, o.amount_cents, o.payment_id, o.status,
    o.created_at,
    EXISTS (SELECT 1 FROM webhook_endpoints AS e WHERE e.project_id = o.project_id AND e.enabled)
        AS notify
FROM payment_orders AS o
WHERE o.order_id = ? AND o.project_id = ? AND o.payment_system = ?"#;

/// An event, recorded with its change. Parameters: webhook id, project id,
/// type, order id, payload, time.
const INSERT_EVENT: &str = r#"INSERT INTO webhook_events (webhook_id, project_id, event_type, order_id, payload, created_at)
VALUES (?, ?, ?, ?, ?, ?)"#;

/// An event's delivery to one endpoint, due at once by the database's
/// clock. Parameters: event id, endpoint id, status.
const INSERT_DELIVERY: &str = r#"INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempts, next_attempt_at, created_at)
VALUES (?, ?, ?, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"#;

/// The credit of the main balance, creating the balance row when missing.
/// Parameters: user id, server id, amount, time, project id.
const CREDIT_MAIN: &str = r#"INSERT INTO balances (user_id, server_id, main_cents, bonus_cents, updated_at, project_id)
VALUES (?, ?, ?, 0, ?, ?)
ON DUPLICATE KEY UPDATE main_cents = main_cents + VALUES(main_cents), updated_at = VALUES(updated_at)"#;

/// The main balance after the credit, read under the row lock the upsert
/// holds (a plain read would see the transaction's snapshot, which holds
/// the new value only because the upsert changed the row). Parameters: user
/// id, server id.
const MAIN_BALANCE: &str =
    r#"SELECT main_cents FROM balances WHERE user_id = ? AND server_id = ? FOR UPDATE"#;

/// The user an order names in its project and whether its server is the
/// general account or one of the project's (as SQLite's insert judges them),
/// and whether the project has an enabled endpoint. Parameters: user id,
/// user id, project id, e-mail, e-mail, e-mail, project id, server id,
/// server id, project id, project id.
static ORDER_NAMES: LazyLock<String> = LazyLock::new(|| {
    dialect(&format!(
        r#"SELECT {ORDER_USER} AS "user_id", {ORDER_SERVER} AS "server_found",
    EXISTS (SELECT 1 FROM "webhook_endpoints" AS e WHERE e."project_id" = :project_id AND e."enabled")
        AS "notify""#
    ))
});

/// The insert of a pending order. Parameters: order id, project id, user
/// id, server id (NULL for the general account), payment system, amount,
/// status, time, idempotency key, request hash.
const INSERT_ORDER: &str = r#"INSERT INTO payment_orders (order_id, project_id, user_id, server_id, payment_system,
    amount_cents, status, created_at, idempotency_key, request_hash)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"#;

/// The statements MariaDB runs alike with another backend (see
/// `store`), in its dialect.
static SUBSCRIBERS: LazyLock<String> = LazyLock::new(|| dialect(super::SUBSCRIBERS));
static LOG_CREDIT: LazyLock<String> = LazyLock::new(|| dialect(super::LOG_CREDIT));
static LOG_AUDIT: LazyLock<String> = LazyLock::new(|| dialect(super::LOG_AUDIT));
static RECORD_TOKEN_USE: LazyLock<String> = LazyLock::new(|| dialect(super::RECORD_TOKEN_USE));

/// A write that changes nothing, refused as any write is when the server is
/// in `read_only` mode for the service's user or the session is read-only;
/// on the migrations' table, which no request locks.
const WRITE_PROBE: &str = "UPDATE seaql_migrations SET version = version WHERE 1 = 0";

/// `sql`, written in PostgreSQL's or SQLite's dialect with each numbered
/// parameter once and in order, in MariaDB's: identifiers quoted with
/// backticks, parameters (numbered or named) `?`, bound where they appear.
pub(super) fn dialect(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push('`'),
            '$' | '?' | ':' => {
                out.push('?');
                while chars
                    .next_if(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .is_some()
                {}
            }
            c => out.push(c),
        }
    }
    out
}

/// MariaDB's "duplicate entry for a unique key".
const DUPLICATE_KEY: u16 = 1062;

pub struct MySqlStore {
    pool: MySqlPool,
    health: WriteHealth,
}

impl MySqlStore {
    pub fn new(db: &DatabaseConnection) -> MySqlStore {
        MySqlStore {
            pool: db.get_mysql_connection_pool().clone(),
            health: WriteHealth::default(),
        }
    }

    /// Runs `write` on a pooled connection, closed instead of pooled again
    /// when the database refused the write, and notes how it ended.
    async fn on_connection<T, E>(
        &self,
        write: impl AsyncFnOnce(&mut PoolConnection<MySql>) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: WriteError + From<StoreError>,
    {
        let outcome = match self.pool.acquire().await {
            Ok(mut conn) => {
                let outcome = write(&mut conn).await;
                close_if_refused(&mut conn, &outcome);
                outcome
            }
            Err(err) => Err(StoreError::Unavailable(err.to_string()).into()),
        };
        self.health.note(&outcome);
        outcome
    }

    async fn read_token_now(
        &self,
        token_hash: &str,
        account: Option<&AccountKey>,
    ) -> Result<Option<TokenRow>, StoreError> {
        let user_id = account.and_then(|a| a.user_id);
        let server_id = account.map(|a| a.server_id);
        let row = sqlx::query(READ_TOKEN.as_str())
            .bind(token_hash)
            .bind(token_hash)
            .bind(user_id)
            .bind(user_id)
            .bind(account.and_then(|a| a.email.as_deref()))
            .bind(user_id)
            .bind(server_id)
            .bind(server_id)
            .bind(token_hash)
            .bind(token_hash)
            .fetch_optional(&self.pool)
            .await?;
        let token = row.map(|row| token_row_of(&row, account.is_some()));
        Ok(token.transpose()?.flatten())
    }

    async fn complete_now(
        conn: &mut PoolConnection<MySql>,
        request: &Completion,
    ) -> Result<CompletedOrder, CompleteError> {
        let mut txn = sqlx::Connection::begin(&mut **conn)
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
            .bind(OrderStatus::Pending.to_value())
            .execute(&mut *txn)
            .await
            .map_err(|err| CompleteError::at_update(err.into()))?
            .rows_affected();
        let order = sqlx::query(FIND_ORDER)
            .bind(&request.order_id)
            .bind(request.project_id)
            .bind(&request.payment_system)
            .fetch_optional(&mut *txn)
            .await
            .map_err(|err| CompleteError::at_update(err.into()))?;
        let read = |err: sqlx::Error| CompleteError::at_credit(err.into());
        let order = match (updated, order) {
            (0, Some(order)) => {
                let status: String = order.try_get("status").map_err(read)?;
                return Err(CompleteError::not_pending(&status));
            }
            (_, None) => return Err(CompleteError::OrderNotFound),
            (_, Some(order)) => order,
        };
        let order_ref: i64 = order.try_get("id").map_err(read)?;
        let user_id: i64 = order.try_get("user_id").map_err(read)?;
        let server_id: Option<i64> = order.try_get("server_id").map_err(read)?;
        let server_id = server_id.unwrap_or(balance::GENERAL_ACCOUNT);
        let amount_cents: i64 = order.try_get("amount_cents").map_err(read)?;
        let payment_id: Option<String> = order.try_get("payment_id").map_err(read)?;
        let created_at: DateTime<Utc> = order.try_get("created_at").map_err(read)?;
        let notify = order.try_get::<i64, _>("notify").map_err(read)? != 0;
        sqlx::query(CREDIT_MAIN)
            .bind(user_id)
            .bind(server_id)
            .bind(amount_cents)
            .bind(completed_at)
            .bind(request.project_id)
            .execute(&mut *txn)
            .await
            .map_err(read)?;
        let after: i64 = sqlx::query_scalar(MAIN_BALANCE)
            .bind(user_id)
            .bind(server_id)
            .fetch_one(&mut *txn)
            .await
            .map_err(read)?;
        sqlx::query(LOG_CREDIT.as_str())
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
        log_audits(&mut txn, &LOG_AUDIT, request.audit.iter())
            .await
            .map_err(read)?;
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
        if notify {
            let event = completed.event(request.project_id, created_at);
            record_events(&mut txn, request.project_id, &[event])
                .await
                .map_err(read)?;
        }
        txn.commit().await.map_err(read)?;
        Ok(completed)
    }

    /// The user and server resolved first, then the insert (a duplicate
    /// key is the conflict) and its audit row, in one transaction.
    async fn insert_order_now(
        conn: &mut PoolConnection<MySql>,
        order: &NewOrder,
    ) -> Result<OrderInsert, StoreError> {
        let mut txn = sqlx::Connection::begin(&mut **conn).await?;
        let names = sqlx::query(ORDER_NAMES.as_str())
            .bind(order.user_id)
            .bind(order.user_id)
            .bind(order.project_id)
            .bind(&order.email)
            .bind(&order.email)
            .bind(&order.email)
            .bind(order.project_id)
            .bind(order.server_id)
            .bind(order.server_id)
            .bind(order.project_id)
            .bind(order.project_id)
            .fetch_one(&mut *txn)
            .await?;
        let Some(user_id) = names.try_get::<Option<i64>, _>("user_id")? else {
            return Ok(OrderInsert::UserNotFound);
        };
        // A boolean expression is a BIGINT to MariaDB.
        if names.try_get::<i64, _>("server_found")? == 0 {
            return Ok(OrderInsert::ServerNotFound);
        }
        let created_at = now();
        let inserted = sqlx::query(INSERT_ORDER)
            .bind(&order.order_id)
            .bind(order.project_id)
            .bind(user_id)
            .bind(Some(order.server_id).filter(|&id| id != balance::GENERAL_ACCOUNT))
            .bind(&order.payment_system)
            .bind(order.amount_cents)
            .bind(OrderStatus::Pending.to_value())
            .bind(created_at)
            .bind(&order.idempotency_key)
            .bind(&order.request_hash)
            .execute(&mut *txn)
            .await;
        match inserted {
            Ok(_) => {
                log_audits(&mut txn, &LOG_AUDIT, order.audit.iter()).await?;
                if names.try_get::<i64, _>("notify")? != 0 {
                    let event = order.created_event(user_id, created_at)?;
                    record_events(&mut txn, order.project_id, &[event]).await?;
                }
                txn.commit().await?;
                Ok(OrderInsert::Inserted {
                    user_id,
                    created_at,
                })
            }
            Err(sqlx::Error::Database(err))
                if err
                    .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                    .is_some_and(|err| err.number() == DUPLICATE_KEY) =>
            {
                Ok(OrderInsert::Conflict)
            }
            Err(err) => Err(err.into()),
        }
    }
}

/// Records `events` of `project_id` with their deliveries to its enabled
/// endpoints that receive them, in `txn`, the transaction of their change.
async fn record_events(
    txn: &mut sqlx::Transaction<'_, sqlx::MySql>,
    project_id: i64,
    events: &[NewEvent],
) -> Result<(), sqlx::Error> {
    let subscribers: Vec<Subscriber> = sqlx::query(SUBSCRIBERS.as_str())
        .bind(project_id)
        .fetch_all(&mut **txn)
        .await?
        .iter()
        .map(|row| {
            Ok(Subscriber {
                endpoint_id: row.try_get("id")?,
                project_id,
                event_types: row.try_get("event_types")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
    for (event, endpoints) in deliveries(&subscribers, events) {
        let event_id = sqlx::query(INSERT_EVENT)
            .bind(new_webhook_id())
            .bind(event.project_id)
            .bind(event.event_type.to_value())
            .bind(&event.order_id)
            .bind(&event.payload)
            .bind(event.at)
            .execute(&mut **txn)
            .await?
            .last_insert_id();
        for endpoint_id in endpoints {
            sqlx::query(INSERT_DELIVERY)
                .bind(event_id)
                .bind(endpoint_id)
                .bind(DeliveryStatus::Pending.to_value())
                .execute(&mut **txn)
                .await?;
        }
    }
    Ok(())
}

impl Store for MySqlStore {
    fn relay(&self) -> &dyn RelayStore {
        self
    }

    fn read_token<'a>(
        &'a self,
        token_hash: &'a str,
        account: Option<&'a AccountKey>,
    ) -> StoreFuture<'a, Result<Option<TokenRow>, StoreError>> {
        Box::pin(self.read_token_now(token_hash, account))
    }

    fn complete<'a>(
        &'a self,
        completion: &'a Completion,
    ) -> StoreFuture<'a, Result<CompletedOrder, CompleteError>> {
        Box::pin(self.on_connection(async |conn| Self::complete_now(conn, completion).await))
    }

    fn insert_order<'a>(
        &'a self,
        order: &'a NewOrder,
    ) -> StoreFuture<'a, Result<OrderInsert, StoreError>> {
        Box::pin(self.on_connection(async |conn| Self::insert_order_now(conn, order).await))
    }

    fn record_token_use<'a>(
        &'a self,
        token_id: i64,
        token_hash: &'a str,
        at: DateTime<Utc>,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(self.on_connection(async move |conn| {
            sqlx::query(RECORD_TOKEN_USE.as_str())
                .bind(token_hash)
                .bind(at)
                .bind(token_hash)
                .bind(at)
                .bind(token_id)
                .execute(&mut **conn)
                .await?;
            Ok(())
        }))
    }

    fn readiness(&self) -> StoreFuture<'_, Readiness> {
        Box::pin(self.health.check_pool(&self.pool, check_writable))
    }
}

/// [`WRITE_PROBE`] on a pooled connection, closed when it cannot write.
async fn check_writable(pool: &MySqlPool) -> Readiness {
    let mut conn = match pool.acquire().await {
        Ok(conn) => conn,
        Err(err) => return Readiness::of_error(&err.into()),
    };
    let probed = sqlx::query(WRITE_PROBE)
        .execute(&mut *conn)
        .await
        .map_err(StoreError::from);
    close_if_refused(&mut conn, &probed);
    match probed {
        Ok(_) => Readiness::Ready,
        Err(err) => Readiness::of_error(&err),
    }
}
