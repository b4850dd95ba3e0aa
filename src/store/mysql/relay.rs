//! The relay's statements on MariaDB/MySQL (see `store::relay`): leases on
//! the database's clock, read `FOR UPDATE SKIP LOCKED` (MariaDB 10.6, MySQL
//! 8.0). MariaDB has neither arrays nor `UPDATE ... RETURNING`: lists of ids
//! are placeholders, and what an update changed is read back in its
//! transaction. The relay's transactions run at READ COMMITTED (see
//! [`SqlxRelay::begin`]).

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sea_orm::sqlx::{
    self, MySql, MySqlPool, Transaction, mysql::MySqlQueryResult, pool::PoolConnection,
};

use super::{MySqlStore, dialect};
use crate::store::relay::{Bound, Recording, SqlxRelay};

/// The recording's statements: those every backend runs alike (see
/// `store::relay`) in MariaDB's dialect, and its own.
static RECORDING: LazyLock<Recording> =
    LazyLock::new(|| Recording::new(dialect, FAILING, Some(LOCK_ENDPOINT)));

/// An endpoint's run of failures begins (parameters: when, the endpoint).
const FAILING: &str = "UPDATE webhook_endpoints SET failing_since = ? WHERE id = ?";

/// An endpoint's row locked, and when its run of failures began.
const LOCK_ENDPOINT: &str = "SELECT failing_since FROM webhook_endpoints WHERE id = ? FOR UPDATE";

/// `?, ?, ?`: one parameter for each of `ids`.
fn placeholders(ids: &[i64]) -> String {
    vec!["?"; ids.len()].join(", ")
}

/// Binds `ids`, one parameter each.
fn bind_ids(mut query: Bound<MySql>, ids: &[i64]) -> Bound<MySql> {
    for id in ids {
        query = query.bind(id);
    }
    query
}

impl SqlxRelay for MySqlStore {
    type DB = MySql;

    fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// A transaction at READ COMMITTED: at InnoDB's default (REPEATABLE
    /// READ) the claim's locking read keeps the rows and gaps of the due
    /// index it scanned locked until its commit, including those it did not
    /// lease, and two claims and the recordings that move rows out of
    /// `pending` deadlock on them. At READ COMMITTED a locking read keeps
    /// only the rows it matched.
    async fn begin(
        conn: &mut PoolConnection<MySql>,
    ) -> Result<Transaction<'_, MySql>, sqlx::Error> {
        sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .execute(&mut **conn)
            .await?;
        sqlx::Acquire::begin(conn).await
    }

    fn due(saturated: &[i64], limit: i64) -> Bound<MySql> {
        let left_out = if saturated.is_empty() {
            String::new()
        } else {
            format!("AND endpoint_id NOT IN ({})", placeholders(saturated))
        };
        let statement = format!(
            "SELECT id, endpoint_id, UTC_TIMESTAMP(6) AS now FROM webhook_deliveries
WHERE status = 'pending' AND next_attempt_at <= UTC_TIMESTAMP(6)
    AND (leased_until IS NULL OR leased_until < UTC_TIMESTAMP(6)) {left_out}
ORDER BY next_attempt_at LIMIT ?
FOR UPDATE SKIP LOCKED"
        );
        bind_ids(sqlx::query(sqlx::AssertSqlSafe(statement)), saturated).bind(limit)
    }

    fn lease(chosen: &[i64], until: DateTime<Utc>, owner: &str) -> Bound<MySql> {
        let statement = format!(
            "UPDATE webhook_deliveries SET leased_until = ?, lease_owner = ? WHERE id IN ({})",
            placeholders(chosen)
        );
        let query = sqlx::query(sqlx::AssertSqlSafe(statement));
        bind_ids(query.bind(until).bind(owner), chosen)
    }

    fn leased(chosen: &[i64], owner: &str) -> Bound<MySql> {
        let statement = format!(
            "SELECT d.id, d.endpoint_id, d.attempts, e.webhook_id, e.payload, p.url, p.secret,
    p.previous_secret, p.previous_secret_until, p.enabled, p.failing_since
FROM webhook_deliveries AS d
JOIN webhook_events AS e ON e.id = d.event_id
JOIN webhook_endpoints AS p ON p.id = d.endpoint_id
WHERE d.lease_owner = ? AND d.id IN ({})
ORDER BY d.next_attempt_at",
            placeholders(chosen)
        );
        bind_ids(
            sqlx::query(sqlx::AssertSqlSafe(statement)).bind(owner),
            chosen,
        )
    }

    const BACKLOG: &'static str = r#"SELECT COUNT(*) AS pending, MIN(next_attempt_at) AS oldest, UTC_TIMESTAMP(6) AS now
FROM webhook_deliveries WHERE status = 'pending'"#;

    fn recording() -> &'static Recording {
        &RECORDING
    }

    fn rows_affected(result: &MySqlQueryResult) -> u64 {
        result.rows_affected()
    }
}
