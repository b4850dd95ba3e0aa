//! The relay's statements on PostgreSQL (see `store::relay`): leases on the
//! database's clock, read `FOR UPDATE SKIP LOCKED`.
//!
//! The relay's transactions commit without waiting for the WAL flush
//! ([`relay_transaction`]): what a crash can lose of them is a lease (the
//! delivery is claimed again) or a recorded attempt (the delivery is sent
//! again after its lease), both within at-least-once; while the wait for
//! two flushes per delivery bounded the relay at about 150 deliveries a
//! second (docs/performance.md).

use chrono::{DateTime, Utc};
use sea_orm::sqlx::{self, Postgres, Row, Transaction};

use super::PostgresStore;
use crate::store::{
    StoreError, StoreFuture, now,
    relay::{
        ATTEMPT, Attempt, Backlog, Claim, Claimed, DISABLE, DueDelivery, FAIL_PENDING, FAILING,
        Recorded, RelayStore, RunOfFailures, SETTLE, SUCCEEDING,
    },
};

/// Due pending deliveries whose lease is free or expired, oldest due first
/// (`$1` endpoints left out, `$2` how many), locked for this transaction
/// and skipped when another holds them; with the database's time.
const DUE: &str = r#"SELECT "id", "endpoint_id", now() AS "now" FROM "webhook_deliveries"
WHERE "status" = 'pending' AND "next_attempt_at" <= now()
    AND ("leased_until" IS NULL OR "leased_until" < now())
    AND "endpoint_id" <> ALL($1::int8[])
ORDER BY "next_attempt_at" LIMIT $2
FOR UPDATE SKIP LOCKED"#;

/// The lease of the chosen deliveries (`$1`): until `$2`, by `$3`.
const LEASE: &str = r#"UPDATE "webhook_deliveries" SET "leased_until" = $2, "lease_owner" = $3
WHERE "id" = ANY($1::int8[])"#;

/// The leased deliveries (`$1`, owner `$2`) with their event and endpoint.
const LEASED: &str = r#"SELECT "d"."id", "d"."endpoint_id", "d"."attempts", "e"."webhook_id", "e"."payload",
    "p"."url", "p"."secret", "p"."previous_secret", "p"."previous_secret_until", "p"."enabled",
    "p"."failing_since"
FROM "webhook_deliveries" AS "d"
JOIN "webhook_events" AS "e" ON "e"."id" = "d"."event_id"
JOIN "webhook_endpoints" AS "p" ON "p"."id" = "d"."endpoint_id"
WHERE "d"."id" = ANY($1::int8[]) AND "d"."lease_owner" = $2
ORDER BY "d"."next_attempt_at""#;

/// The pending deliveries, and the earliest due.
const BACKLOG: &str = r#"SELECT COUNT(*) AS "pending", MIN("next_attempt_at") AS "oldest", now() AS "now"
FROM "webhook_deliveries" WHERE "status" = 'pending'"#;

impl RelayStore for PostgresStore {
    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, Result<Claimed, StoreError>> {
        Box::pin(async move {
            let mut txn = relay_transaction(&self.pool).await?;
            let due = sqlx::query(DUE)
                .bind(claim.capacity.saturated())
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
            sqlx::query(LEASE)
                .bind(&chosen)
                .bind(db_now + claim.lease)
                .bind(&claim.owner)
                .execute(&mut *txn)
                .await?;
            txn.commit().await?;
            let rows = sqlx::query(LEASED)
                .bind(&chosen)
                .bind(&claim.owner)
                .fetch_all(&self.pool)
                .await?;
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
            let mut txn = relay_transaction(&self.pool).await?;
            let (status, next) = attempt.after.delivery();
            let settled = sqlx::query(SETTLE)
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
            let since = match attempt.run_of_failures(attempt.failing_since) {
                RunOfFailures::Ends => {
                    sqlx::query(SUCCEEDING)
                        .bind(attempt.endpoint_id)
                        .execute(&mut *txn)
                        .await?;
                    None
                }
                RunOfFailures::Begins(at) => sqlx::query_scalar(FAILING)
                    .bind(at)
                    .bind(attempt.endpoint_id)
                    .fetch_optional(&mut *txn)
                    .await?
                    .flatten(),
                RunOfFailures::Unchanged => attempt.failing_since,
            };
            let disable = attempt.disable_reason(since);
            let disabled = match disable {
                Some(reason) => disable_endpoint(&mut txn, attempt.endpoint_id, reason).await?,
                None => None,
            };
            if let Some(sent) = &attempt.sent {
                sqlx::query(ATTEMPT)
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

/// A transaction whose commit does not wait for the WAL flush (see the
/// module docs).
async fn relay_transaction(
    pool: &sqlx::PgPool,
) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    let mut txn = pool.begin().await?;
    sqlx::query("SET LOCAL synchronous_commit = off")
        .execute(&mut *txn)
        .await?;
    Ok(txn)
}

/// Disables the endpoint with `reason` and fails its pending deliveries;
/// the reason when this disabled it (it was enabled).
async fn disable_endpoint(
    txn: &mut Transaction<'_, Postgres>,
    endpoint_id: i64,
    reason: &str,
) -> Result<Option<String>, StoreError> {
    let disabled = sqlx::query(DISABLE)
        .bind(reason)
        .bind(now())
        .bind(endpoint_id)
        .execute(&mut **txn)
        .await?
        .rows_affected();
    sqlx::query(FAIL_PENDING)
        .bind(endpoint_id)
        .execute(&mut **txn)
        .await?;
    Ok((disabled > 0).then(|| reason.to_owned()))
}
