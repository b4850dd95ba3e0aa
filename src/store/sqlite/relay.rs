//! The relay's statements on SQLite (see `store::relay`): each claim and
//! each recording is one of the store's writes (a savepoint in a group's
//! `BEGIN IMMEDIATE` transaction on its write connection, see
//! `store::sqlite`); the write lock keeps other processes out meanwhile. A
//! claim first asks a read-only connection whether anything is due, so that
//! a relay with nothing to send (most polls) never queues for the writer in
//! front of the request path. Lists of ids are bound as JSON arrays.

use rusqlite::{OptionalExtension, params};

use super::{SqliteStore, classify, stored_time, time_column};
use crate::store::{
    StoreError, StoreFuture, now,
    relay::{
        ATTEMPT, Attempt, Backlog, Claim, Claimed, DISABLE, DueDelivery, FAIL_PENDING, FAILING,
        Recorded, RelayStore, RunOfFailures, SETTLE, SUCCEEDING,
    },
};

/// Due pending deliveries whose lease is free or expired, oldest due first.
/// Parameters: now, the saturated endpoints (JSON), how many.
const DUE: &str = r#"SELECT "id", "endpoint_id" FROM "webhook_deliveries"
WHERE "status" = 'pending' AND "next_attempt_at" <= ?1
    AND ("leased_until" IS NULL OR "leased_until" < ?1)
    AND "endpoint_id" NOT IN (SELECT "value" FROM json_each(?2))
ORDER BY "next_attempt_at" LIMIT ?3"#;

/// Whether any pending delivery is due and free at `?1`.
const ANY_DUE: &str = r#"SELECT 1 FROM "webhook_deliveries"
WHERE "status" = 'pending' AND "next_attempt_at" <= ?1
    AND ("leased_until" IS NULL OR "leased_until" < ?1)
LIMIT 1"#;

/// The lease of the chosen deliveries (JSON) until `?2` by `?3`.
const LEASE: &str = r#"UPDATE "webhook_deliveries" SET "leased_until" = ?2, "lease_owner" = ?3
WHERE "id" IN (SELECT "value" FROM json_each(?1))"#;

/// The leased deliveries (JSON, owner `?2`) with their event and endpoint.
const LEASED: &str = r#"SELECT "d"."id", "d"."endpoint_id", "d"."attempts", "e"."webhook_id", "e"."payload",
    "p"."url", "p"."secret", "p"."previous_secret", "p"."previous_secret_until", "p"."enabled",
    "p"."failing_since"
FROM "webhook_deliveries" AS "d"
JOIN "webhook_events" AS "e" ON "e"."id" = "d"."event_id"
JOIN "webhook_endpoints" AS "p" ON "p"."id" = "d"."endpoint_id"
WHERE "d"."id" IN (SELECT "value" FROM json_each(?1)) AND "d"."lease_owner" = ?2
ORDER BY "d"."next_attempt_at""#;

/// The pending deliveries, and the earliest due.
const BACKLOG: &str = r#"SELECT COUNT(*), MIN("next_attempt_at") FROM "webhook_deliveries"
WHERE "status" = 'pending'"#;

/// Ids as a JSON array.
fn json_ids(ids: &[i64]) -> String {
    serde_json::to_string(ids).expect("integers serialize")
}

impl RelayStore for SqliteStore {
    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, Result<Claimed, StoreError>> {
        let at = now();
        let due = self.readers.with_connection(|conn| {
            conn.prepare_cached(ANY_DUE)?
                .query_row(params![stored_time(at)], |_| Ok(()))
                .optional()
        });
        if let Ok(None) = due {
            return Box::pin(std::future::ready(Ok(Claimed {
                now: at,
                deliveries: Vec::new(),
            })));
        }
        let claim = claim.clone();
        Box::pin(self.write(move |conn| claim_now(conn, &claim).map_err(|err| classify(&err))))
    }

    fn record<'a>(&'a self, attempt: &'a Attempt) -> StoreFuture<'a, Result<Recorded, StoreError>> {
        let attempt = attempt.clone();
        Box::pin(self.write(move |conn| record_now(conn, &attempt).map_err(|err| classify(&err))))
    }

    fn backlog(&self) -> StoreFuture<'_, Result<Backlog, StoreError>> {
        let read = self.readers.with_connection(|conn| {
            conn.prepare_cached(BACKLOG)?.query_row([], |row| {
                Ok(Backlog {
                    pending: row.get(0)?,
                    oldest_due: time_column(row, 1)?,
                    now: now(),
                })
            })
        });
        Box::pin(std::future::ready(read))
    }
}

fn claim_now(conn: &rusqlite::Connection, claim: &Claim) -> rusqlite::Result<Claimed> {
    let at = now();
    let candidates = conn
        .prepare_cached(DUE)?
        .query_map(
            params![
                stored_time(at),
                json_ids(&claim.capacity.saturated()),
                claim.capacity.candidates() as i64
            ],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?
        .collect::<rusqlite::Result<Vec<(i64, i64)>>>()?;
    let chosen = json_ids(&claim.capacity.choose(&candidates));
    conn.prepare_cached(LEASE)?.execute(params![
        chosen,
        stored_time(at + claim.lease),
        claim.owner
    ])?;
    let deliveries = conn
        .prepare_cached(LEASED)?
        .query_map(params![chosen, claim.owner], |row| {
            Ok(DueDelivery {
                id: row.get("id")?,
                endpoint_id: row.get("endpoint_id")?,
                attempts: row.get("attempts")?,
                webhook_id: row.get("webhook_id")?,
                payload: row.get("payload")?,
                url: row.get("url")?,
                secret: row.get("secret")?,
                previous_secret: row.get("previous_secret")?,
                previous_secret_until: time_column(row, "previous_secret_until")?,
                enabled: row.get("enabled")?,
                failing_since: time_column(row, "failing_since")?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Claimed {
        now: at,
        deliveries,
    })
}

fn record_now(conn: &rusqlite::Connection, attempt: &Attempt) -> rusqlite::Result<Recorded> {
    let (status, next) = attempt.after.delivery();
    let settled = conn.prepare_cached(SETTLE)?.execute(params![
        status,
        next.map(stored_time),
        i32::from(attempt.sent.is_some()),
        attempt
            .sent
            .as_ref()
            .map(|sent| stored_time(sent.attempted_at)),
        attempt.delivery_id,
        attempt.owner,
    ])?;
    if settled == 0 {
        return Ok(Recorded::LeaseLost);
    }
    let since = match attempt.run_of_failures(attempt.failing_since) {
        RunOfFailures::Ends => {
            conn.prepare_cached(SUCCEEDING)?
                .execute(params![attempt.endpoint_id])?;
            None
        }
        RunOfFailures::Begins(at) => conn
            .prepare_cached(FAILING)?
            .query_row(params![stored_time(at), attempt.endpoint_id], |row| {
                time_column(row, 0)
            })
            .optional()?
            .flatten(),
        RunOfFailures::Unchanged => attempt.failing_since,
    };
    let disable = attempt.disable_reason(since);
    let mut disabled = None;
    if let Some(reason) = disable {
        let changed = conn.prepare_cached(DISABLE)?.execute(params![
            reason,
            stored_time(now()),
            attempt.endpoint_id
        ])?;
        conn.prepare_cached(FAIL_PENDING)?
            .execute(params![attempt.endpoint_id])?;
        disabled = (changed > 0).then(|| reason.to_owned());
    }
    if let Some(sent) = &attempt.sent {
        conn.prepare_cached(ATTEMPT)?.execute(params![
            attempt.delivery_id,
            stored_time(sent.attempted_at),
            sent.duration_ms,
            sent.response_status,
            sent.outcome,
            sent.excerpt,
            attempt.next_attempt(disable.is_some()).map(stored_time),
        ])?;
    }
    Ok(Recorded::Done { disabled })
}
