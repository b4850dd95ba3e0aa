//! The relay's statements on PostgreSQL (see `store::relay`): leases on the
//! database's clock, read `FOR UPDATE SKIP LOCKED`.
//!
//! The relay's pool commits without waiting for the WAL flush
//! (`database::relay_store`). An attempt that changes nothing but its
//! delivery (the common case: a success of an endpoint that was not
//! failing) is recorded in one statement, `SETTLED_ATTEMPT`, outside a
//! transaction: one round trip instead of four.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sea_orm::sqlx::{
    self, PgPool, Postgres, Transaction, pool::PoolConnection, postgres::PgQueryResult,
};

use super::PostgresStore;
use crate::store::relay::{Bound, FAILING, Recording, SETTLE, SqlxRelay};

/// See [`SqlxRelay::due`] (`$1` endpoints left out, `$2` how many).
const DUE: &str = r#"SELECT "id", "endpoint_id", now() AS "now" FROM "webhook_deliveries"
WHERE "status" = 'pending' AND "next_attempt_at" <= now()
    AND ("leased_until" IS NULL OR "leased_until" < now())
    AND "endpoint_id" <> ALL($1::int8[])
ORDER BY "next_attempt_at" LIMIT $2
FOR UPDATE SKIP LOCKED"#;

/// See [`SqlxRelay::lease`] (`$1` the chosen, until `$2`, by `$3`).
const LEASE: &str = r#"UPDATE "webhook_deliveries" SET "leased_until" = $2, "lease_owner" = $3
WHERE "id" = ANY($1::int8[])"#;

/// See [`SqlxRelay::leased`] (`$1` the chosen, owner `$2`).
const LEASED: &str = r#"SELECT "d"."id", "d"."endpoint_id", "d"."attempts", "e"."webhook_id", "e"."payload",
    "p"."url", "p"."secret", "p"."previous_secret", "p"."previous_secret_until", "p"."enabled",
    "p"."failing_since"
FROM "webhook_deliveries" AS "d"
JOIN "webhook_events" AS "e" ON "e"."id" = "d"."event_id"
JOIN "webhook_endpoints" AS "p" ON "p"."id" = "d"."endpoint_id"
WHERE "d"."id" = ANY($1::int8[]) AND "d"."lease_owner" = $2
ORDER BY "d"."next_attempt_at""#;

/// `SETTLE` (`$1` to `$6`) and the attempt's row in one statement, which
/// inserts nothing when the lease was lost: the row's time is `SETTLE`'s
/// `$4` and its next attempt `$2`; then duration `$7`, status `$8`, outcome
/// `$9`, excerpt `$10`.
static SETTLED_ATTEMPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"WITH "settled" AS ({SETTLE}
RETURNING "id")
INSERT INTO "webhook_attempts" ("delivery_id", "attempted_at", "duration_ms",
    "response_status", "outcome", "response_excerpt", "next_attempt_at")
SELECT "id", $4, $7, $8, $9, $10, $2 FROM "settled""#
    )
});

/// The recording's statements, as every backend runs them.
static RECORDING: LazyLock<Recording> =
    LazyLock::new(|| Recording::new(str::to_owned, FAILING, None));

impl SqlxRelay for PostgresStore {
    type DB = Postgres;

    fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn begin(
        conn: &mut PoolConnection<Postgres>,
    ) -> Result<Transaction<'_, Postgres>, sqlx::Error> {
        sqlx::Connection::begin(&mut **conn).await
    }

    fn settled_attempt() -> Option<&'static str> {
        Some(SETTLED_ATTEMPT.as_str())
    }

    fn due(saturated: &[i64], limit: i64) -> Bound<Postgres> {
        sqlx::query(DUE).bind(saturated).bind(limit)
    }

    fn lease(chosen: &[i64], until: DateTime<Utc>, owner: &str) -> Bound<Postgres> {
        sqlx::query(LEASE).bind(chosen).bind(until).bind(owner)
    }

    fn leased(chosen: &[i64], owner: &str) -> Bound<Postgres> {
        sqlx::query(LEASED).bind(chosen).bind(owner)
    }

    const BACKLOG: &'static str = r#"SELECT COUNT(*) AS "pending", MIN("next_attempt_at") AS "oldest", now() AS "now"
FROM "webhook_deliveries" WHERE "status" = 'pending'"#;

    fn recording() -> &'static Recording {
        &RECORDING
    }

    fn rows_affected(result: &PgQueryResult) -> u64 {
        result.rows_affected()
    }
}
