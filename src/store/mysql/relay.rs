//! The relay's statements on MariaDB/MySQL (see `store::relay`): leases on
//! the database's clock, read `FOR UPDATE SKIP LOCKED` (MariaDB 10.6, MySQL
//! 8.0). MariaDB has neither arrays nor `UPDATE ... RETURNING`: lists of ids
//! are placeholders, and what an update changed is read back in its
//! transaction. The relay's transactions run at READ COMMITTED (see
//! [`read_committed`]).

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sea_orm::sqlx::{self, MySql, Row, Transaction, pool::PoolConnection};

use super::{MySqlStore, dialect};
use crate::store::{
    StoreError, StoreFuture, now,
    relay::{
        self, Attempt, Backlog, Claim, Claimed, DueDelivery, Recorded, RelayStore, RunOfFailures,
    },
};

/// `?, ?, ?` for `n` values.
fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// Due pending deliveries whose lease is free or expired, oldest due first,
/// but those of `saturated` endpoints, locked for this transaction and
/// skipped when another holds them; with the database's time. Parameters:
/// the saturated endpoints, how many.
fn due(saturated: usize) -> String {
    let left_out = if saturated == 0 {
        String::new()
    } else {
        format!("AND endpoint_id NOT IN ({})", placeholders(saturated))
    };
    format!(
        "SELECT id, endpoint_id, UTC_TIMESTAMP(6) AS now FROM webhook_deliveries
WHERE status = 'pending' AND next_attempt_at <= UTC_TIMESTAMP(6)
    AND (leased_until IS NULL OR leased_until < UTC_TIMESTAMP(6)) {left_out}
ORDER BY next_attempt_at LIMIT ?
FOR UPDATE SKIP LOCKED"
    )
}

/// The lease of `n` chosen deliveries. Parameters: until, owner, the ids.
fn lease(n: usize) -> String {
    format!(
        "UPDATE webhook_deliveries SET leased_until = ?, lease_owner = ? WHERE id IN ({})",
        placeholders(n)
    )
}

/// `n` leased deliveries with their event and endpoint. Parameters: the
/// owner, the ids.
fn leased(n: usize) -> String {
    format!(
        "SELECT d.id, d.endpoint_id, d.attempts, e.webhook_id, e.payload, p.url, p.secret,
    p.previous_secret, p.previous_secret_until, p.enabled, p.failing_since
FROM webhook_deliveries AS d
JOIN webhook_events AS e ON e.id = d.event_id
JOIN webhook_endpoints AS p ON p.id = d.endpoint_id
WHERE d.lease_owner = ? AND d.id IN ({})
ORDER BY d.next_attempt_at",
        placeholders(n)
    )
}

/// The statements of a recording that every backend runs alike (see
/// `store::relay`), in MariaDB's dialect.
static SETTLE: LazyLock<String> = LazyLock::new(|| dialect(relay::SETTLE));
static SUCCEEDING: LazyLock<String> = LazyLock::new(|| dialect(relay::SUCCEEDING));
static DISABLE: LazyLock<String> = LazyLock::new(|| dialect(relay::DISABLE));
static FAIL_PENDING: LazyLock<String> = LazyLock::new(|| dialect(relay::FAIL_PENDING));
static ATTEMPT: LazyLock<String> = LazyLock::new(|| dialect(relay::ATTEMPT));

/// An endpoint's run of failures begins (parameters: when, the endpoint).
const FAILING: &str = "UPDATE webhook_endpoints SET failing_since = ? WHERE id = ?";

/// An endpoint's row locked, and when its run of failures began.
const LOCK_ENDPOINT: &str = "SELECT failing_since FROM webhook_endpoints WHERE id = ? FOR UPDATE";

/// The pending deliveries, and the earliest due.
const BACKLOG: &str = r#"SELECT COUNT(*) AS pending, MIN(next_attempt_at) AS oldest, UTC_TIMESTAMP(6) AS now
FROM webhook_deliveries WHERE status = 'pending'"#;

impl RelayStore for MySqlStore {
    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, Result<Claimed, StoreError>> {
        Box::pin(async move {
            let saturated = claim.capacity.saturated();
            let mut conn = self.pool.acquire().await?;
            let mut txn = read_committed(&mut conn).await?;
            let statement = due(saturated.len());
            let mut query = sqlx::query(sqlx::AssertSqlSafe(statement));
            for endpoint in &saturated {
                query = query.bind(endpoint);
            }
            let due = query
                .bind(claim.capacity.candidates() as i64)
                .fetch_all(&mut *txn)
                .await?;
            let Some(first) = due.first() else {
                txn.commit().await?;
                return Ok(Claimed {
                    now: now(),
                    deliveries: Vec::new(),
                });
            };
            let db_now: DateTime<Utc> = first.try_get("now")?;
            let candidates = due
                .iter()
                .map(|row| Ok((row.try_get("id")?, row.try_get("endpoint_id")?)))
                .collect::<Result<Vec<(i64, i64)>, sqlx::Error>>()?;
            let chosen = claim.capacity.choose(&candidates);
            let statement = lease(chosen.len());
            let mut query = sqlx::query(sqlx::AssertSqlSafe(statement))
                .bind(db_now + claim.lease)
                .bind(&claim.owner);
            for id in &chosen {
                query = query.bind(id);
            }
            query.execute(&mut *txn).await?;
            txn.commit().await?;
            let statement = leased(chosen.len());
            let mut query = sqlx::query(sqlx::AssertSqlSafe(statement)).bind(&claim.owner);
            for id in &chosen {
                query = query.bind(id);
            }
            let rows = query.fetch_all(&self.pool).await?;
            let deliveries = rows
                .iter()
                .map(DueDelivery::from_row)
                .collect::<Result<_, sqlx::Error>>()?;
            Ok(Claimed {
                now: db_now,
                deliveries,
            })
        })
    }

    fn record<'a>(&'a self, attempt: &'a Attempt) -> StoreFuture<'a, Result<Recorded, StoreError>> {
        Box::pin(async move {
            let mut conn = self.pool.acquire().await?;
            let mut txn = read_committed(&mut conn).await?;
            // The endpoint's row first, when it changes: updating a
            // delivery's status takes a shared lock on its endpoint's row
            // (the foreign key's index holds the status), and two
            // recordings that both held it and then both asked to write it
            // would deadlock.
            let since: Option<DateTime<Utc>> = if attempt.changes_endpoint() {
                sqlx::query_scalar(LOCK_ENDPOINT)
                    .bind(attempt.endpoint_id)
                    .fetch_optional(&mut *txn)
                    .await?
                    .flatten()
            } else {
                attempt.failing_since
            };
            let (status, next) = attempt.after.delivery();
            let settled = sqlx::query(SETTLE.as_str())
                .bind(status)
                .bind(next)
                .bind(i32::from(attempt.sent.is_some()))
                .bind(attempt.sent.as_ref().map(|sent| sent.attempted_at))
                .bind(attempt.delivery_id)
                .bind(&attempt.owner)
                .execute(&mut *txn)
                .await?
                .rows_affected();
            if settled == 0 {
                txn.rollback().await?;
                return Ok(Recorded::LeaseLost);
            }
            let since = match attempt.run_of_failures(since) {
                RunOfFailures::Ends => {
                    sqlx::query(SUCCEEDING.as_str())
                        .bind(attempt.endpoint_id)
                        .execute(&mut *txn)
                        .await?;
                    None
                }
                RunOfFailures::Begins(at) => {
                    sqlx::query(FAILING)
                        .bind(at)
                        .bind(attempt.endpoint_id)
                        .execute(&mut *txn)
                        .await?;
                    Some(at)
                }
                RunOfFailures::Unchanged => since,
            };
            let disable = attempt.disable_reason(since);
            let disabled = match disable {
                Some(reason) => disable_endpoint(&mut txn, attempt.endpoint_id, reason).await?,
                None => None,
            };
            if let Some(sent) = &attempt.sent {
                sqlx::query(ATTEMPT.as_str())
                    .bind(attempt.delivery_id)
                    .bind(sent.attempted_at)
                    .bind(sent.duration_ms)
                    .bind(sent.response_status)
                    .bind(sent.outcome)
                    .bind(&sent.excerpt)
                    .bind(attempt.next_attempt(disable.is_some()))
                    .execute(&mut *txn)
                    .await?;
            }
            txn.commit().await?;
            Ok(Recorded::Done { disabled })
        })
    }

    fn backlog(&self) -> StoreFuture<'_, Result<Backlog, StoreError>> {
        Box::pin(async move {
            let row = sqlx::query(BACKLOG).fetch_one(&self.pool).await?;
            Ok(Backlog {
                pending: row.try_get("pending")?,
                oldest_due: row.try_get("oldest")?,
                now: row.try_get("now")?,
            })
        })
    }
}

/// A transaction at READ COMMITTED: at InnoDB's default (REPEATABLE READ)
/// the claim's locking read keeps the rows and gaps of the due index it
/// scanned locked until its commit, including those it did not lease, and
/// two claims and the recordings that move rows out of `pending` deadlock on
/// them. At READ COMMITTED a locking read keeps only the rows it matched.
async fn read_committed(
    conn: &mut PoolConnection<MySql>,
) -> Result<Transaction<'_, MySql>, sqlx::Error> {
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut **conn)
        .await?;
    sqlx::Acquire::begin(conn).await
}

/// Disables the endpoint with `reason` and fails its pending deliveries;
/// the reason when this disabled it (it was enabled).
async fn disable_endpoint(
    txn: &mut Transaction<'_, MySql>,
    endpoint_id: i64,
    reason: &str,
) -> Result<Option<String>, StoreError> {
    let disabled = sqlx::query(DISABLE.as_str())
        .bind(reason)
        .bind(now())
        .bind(endpoint_id)
        .execute(&mut **txn)
        .await?
        .rows_affected();
    sqlx::query(FAIL_PENDING.as_str())
        .bind(endpoint_id)
        .execute(&mut **txn)
        .await?;
    Ok((disabled > 0).then(|| reason.to_owned()))
}
