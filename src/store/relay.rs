//! The relay's storage seam: leasing due webhook deliveries and recording
//! what their attempts did.
//!
//! SQLite implements [`RelayStore`] in `sqlite::relay`; PostgreSQL and
//! MariaDB, both on sqlx, share one implementation here, over what differs
//! between them ([`SqlxRelay`], in `postgres::relay` and `mysql::relay`):
//!
//! - PostgreSQL and MariaDB lease on the database's clock: in one
//!   transaction, the due rows are read `FOR UPDATE SKIP LOCKED` (so that
//!   two instances never read the same row at once, and neither waits for
//!   the other), [`Capacity::choose`] picks among them, and the picked rows
//!   get `leased_until` and `lease_owner`; nothing stays locked after the
//!   commit, and above all not during a send.
//! - SQLite does the same in one `BEGIN IMMEDIATE` transaction on the
//!   store's one write connection: the write lock is what keeps another
//!   process from reading the same rows. Its clock is the host's, which every
//!   process sharing the file reads.
//!
//! A recording is one transaction guarded by `lease_owner`: an instance
//! whose lease was taken over (it was too slow, and another instance has
//! sent the delivery again) writes nothing.
//! What a recording decides (what the endpoint's row needs, whether the
//! endpoint is disabled, the attempt row's next time) is [`Attempt`]'s, so
//! that each backend's `record` is only its statements, in order.

use std::{collections::HashMap, time::Duration};

use chrono::{DateTime, Utc};
use sea_orm::sqlx::{
    self, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type,
    pool::PoolConnection, query::Query,
};

use super::{StoreError, StoreFuture, now};

/// The delivery statuses, as stored.
pub const PENDING: &str = "pending";
pub const SUCCEEDED: &str = "succeeded";
pub const FAILED: &str = "failed";

// The statements of a recording that every backend runs alike, written
// once in PostgreSQL's dialect. SQLite runs them as they are: `$1` is a
// named parameter to it, numbered at its first appearance, and they first
// appear in order. MariaDB's are made from them (`mysql::dialect`).

/// A delivery after its attempt, guarded by its lease: status `$1`, next
/// attempt `$2`, `$3` attempts more, last attempt at `$4`; the delivery
/// `$5`, its owner `$6`.
pub const SETTLE: &str = r#"UPDATE "webhook_deliveries"
SET "status" = $1, "next_attempt_at" = $2, "attempts" = "attempts" + $3,
    "last_attempt_at" = COALESCE($4, "last_attempt_at"), "leased_until" = NULL, "lease_owner" = NULL
WHERE "id" = $5 AND "lease_owner" = $6 AND "status" = 'pending'"#;

/// An endpoint's run of failures ends.
pub const SUCCEEDING: &str = r#"UPDATE "webhook_endpoints" SET "failing_since" = NULL
WHERE "id" = $1 AND "failing_since" IS NOT NULL"#;

/// An endpoint's run of failures begins at `$1` unless it has begun; when it
/// began (PostgreSQL and SQLite: MariaDB has no `RETURNING`).
pub const FAILING: &str = r#"UPDATE "webhook_endpoints" SET "failing_since" = COALESCE("failing_since", $1)
WHERE "id" = $2 RETURNING "failing_since""#;

/// An endpoint disabled (`$1` why, `$2` when, `$3` the endpoint), once.
pub const DISABLE: &str = r#"UPDATE "webhook_endpoints"
SET "enabled" = FALSE, "disabled_reason" = $1, "updated_at" = $2
WHERE "id" = $3 AND "enabled""#;

/// Every pending delivery of a disabled endpoint fails.
pub const FAIL_PENDING: &str = r#"UPDATE "webhook_deliveries"
SET "status" = 'failed', "next_attempt_at" = NULL, "leased_until" = NULL, "lease_owner" = NULL
WHERE "endpoint_id" = $1 AND "status" = 'pending'"#;

/// An attempt's row.
pub const ATTEMPT: &str = r#"INSERT INTO "webhook_attempts" ("delivery_id", "attempted_at", "duration_ms",
    "response_status", "outcome", "response_excerpt", "next_attempt_at")
VALUES ($1, $2, $3, $4, $5, $6, $7)"#;

/// The relay's database operations (see the module docs).
pub trait RelayStore: Send + Sync {
    /// Leases, for `claim.owner` and `claim.lease`, due pending deliveries
    /// whose lease is free or expired, oldest due first, as many as
    /// `claim.capacity` takes; returns them with their event and endpoint.
    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, Result<Claimed, StoreError>>;

    /// Records an attempt of a delivery leased by `attempt.owner` and what
    /// follows it (see [`Attempt`]); nothing when the lease is no longer
    /// `attempt.owner`'s.
    fn record<'a>(&'a self, attempt: &'a Attempt) -> StoreFuture<'a, Result<Recorded, StoreError>>;

    /// The pending deliveries: how many, and the earliest `next_attempt_at`
    /// with the database's clock when it was read.
    fn backlog(&self) -> StoreFuture<'_, Result<Backlog, StoreError>>;
}

/// What a relay instance asks of [`RelayStore::claim`].
#[derive(Debug, Clone)]
pub struct Claim {
    /// The instance (its `lease_owner`).
    pub owner: String,
    /// How long the lease lasts.
    pub lease: Duration,
    /// What the instance can still send.
    pub capacity: Capacity,
}

/// How many sends a relay instance can start: in all, and per endpoint.
#[derive(Debug, Clone, Default)]
pub struct Capacity {
    /// Sends it can start.
    pub free: usize,
    /// Sends to one endpoint at once, at most.
    pub per_endpoint: usize,
    /// Its sends in flight, by endpoint.
    pub in_flight: HashMap<i64, usize>,
}

impl Capacity {
    /// The endpoints with no free place: their deliveries are not read.
    pub fn saturated(&self) -> Vec<i64> {
        self.in_flight
            .iter()
            .filter(|(_, n)| **n >= self.per_endpoint)
            .map(|(endpoint, _)| *endpoint)
            .collect()
    }

    /// How many due rows to read to fill the free places: more than them,
    /// since the places of one endpoint run out.
    pub fn candidates(&self) -> usize {
        self.free.saturating_mul(4)
    }

    /// Of `candidates` (delivery id, endpoint id), oldest due first, the
    /// ones to lease: in their order, no more than `free` in all and than
    /// the free places of their endpoint each.
    pub fn choose(&self, candidates: &[(i64, i64)]) -> Vec<i64> {
        let mut taken: HashMap<i64, usize> = HashMap::new();
        let mut chosen = Vec::new();
        for (delivery, endpoint) in candidates {
            if chosen.len() >= self.free {
                break;
            }
            let busy = self.in_flight.get(endpoint).copied().unwrap_or(0);
            let count = taken.entry(*endpoint).or_default();
            if busy + *count < self.per_endpoint {
                *count += 1;
                chosen.push(*delivery);
            }
        }
        chosen
    }
}

/// What [`RelayStore::claim`] leased.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The database's time when it leased them.
    pub now: DateTime<Utc>,
    pub deliveries: Vec<DueDelivery>,
}

/// A leased delivery, with what sending it needs.
#[derive(Clone)]
pub struct DueDelivery {
    pub id: i64,
    pub endpoint_id: i64,
    /// Attempts made before this one.
    pub attempts: i32,
    /// The `webhook-id` header.
    pub webhook_id: String,
    /// The exact body.
    pub payload: String,
    pub url: String,
    /// The endpoint's secrets, sealed as stored.
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_secret_until: Option<DateTime<Utc>>,
    pub enabled: bool,
    pub failing_since: Option<DateTime<Utc>>,
}

/// Never the secrets.
impl std::fmt::Debug for DueDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DueDelivery")
            .field("id", &self.id)
            .field("endpoint_id", &self.endpoint_id)
            .field("attempts", &self.attempts)
            .field("webhook_id", &self.webhook_id)
            .field("url", &self.url)
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

/// An attempt to record, and what follows it.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub owner: String,
    pub delivery_id: i64,
    pub endpoint_id: i64,
    /// The endpoint's `failing_since` as the claim read it: the endpoint
    /// row is written only when its run of failures begins or ends, so that
    /// the attempts of a healthy (or steadily failing) endpoint never wait
    /// on each other for its row.
    pub failing_since: Option<DateTime<Utc>>,
    /// `None` when the delivery was not sent: its endpoint was disabled
    /// meanwhile (no attempt row then).
    pub sent: Option<Sent>,
    pub after: After,
}

/// What one send did.
#[derive(Debug, Clone)]
pub struct Sent {
    pub attempted_at: DateTime<Utc>,
    pub duration_ms: i32,
    pub response_status: Option<i32>,
    /// `succeeded`, `http_error`, `timeout`, `connect_error`, `redirect`,
    /// `refused_address` or `gone`.
    pub outcome: &'static str,
    /// At most 1 KiB of the answer.
    pub excerpt: String,
}

/// What follows an attempt.
#[derive(Debug, Clone)]
pub enum After {
    /// The endpoint took it: the delivery succeeded, the endpoint's run of
    /// failures (if any) ends.
    Succeeded,
    /// A failure: due again at `at`, unless the endpoint has been failing
    /// since `disable_if_failing_since` or earlier (then it is disabled
    /// with `reason`). The first failure of a run sets `failing_since` to
    /// the attempt's time.
    Retry {
        at: DateTime<Utc>,
        disable_if_failing_since: DateTime<Utc>,
        reason: String,
    },
    /// A failure that was the schedule's last: the delivery failed (the
    /// endpoint may still be disabled as for [`After::Retry`]).
    GiveUp {
        disable_if_failing_since: DateTime<Utc>,
        reason: String,
    },
    /// The endpoint is disabled with `reason` (it answered 410, or was
    /// found disabled): this delivery and every pending one of it failed.
    Disable { reason: String },
}

impl After {
    /// The delivery's status and `next_attempt_at` unless the endpoint is
    /// disabled.
    pub fn delivery(&self) -> (&'static str, Option<DateTime<Utc>>) {
        match self {
            After::Succeeded => (SUCCEEDED, None),
            After::Retry { at, .. } => (PENDING, Some(*at)),
            After::GiveUp { .. } | After::Disable { .. } => (FAILED, None),
        }
    }
}

/// What [`RelayStore::record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Recorded; the endpoint was disabled with this reason, if it was.
    Done { disabled: Option<String> },
    /// The lease was no longer the instance's: nothing written.
    LeaseLost,
}

/// The pending deliveries.
#[derive(Debug, Clone, Copy)]
pub struct Backlog {
    pub pending: i64,
    pub oldest_due: Option<DateTime<Utc>>,
    pub now: DateTime<Utc>,
}

/// What recording an attempt writes to its endpoint's `failing_since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOfFailures {
    /// Nothing.
    Unchanged,
    /// A success: the run of failures ends.
    Ends,
    /// A sent failure of an endpoint that was not failing: the run begins
    /// at the attempt's time (unless another recording began it meanwhile).
    Begins(DateTime<Utc>),
}

impl Attempt {
    /// What recording it writes to `failing_since`, given the endpoint's
    /// `failing_since` as the recording knows it (the claim's, or the
    /// endpoint row's when the backend locked it first).
    pub fn run_of_failures(&self, failing_since: Option<DateTime<Utc>>) -> RunOfFailures {
        match (&self.after, &self.sent, failing_since) {
            (After::Succeeded, _, Some(_)) => RunOfFailures::Ends,
            (After::Retry { .. } | After::GiveUp { .. }, Some(sent), None) => {
                RunOfFailures::Begins(sent.attempted_at)
            }
            _ => RunOfFailures::Unchanged,
        }
    }

    /// Whether recording it writes the endpoint's row: a success ending a
    /// run of failures, a failure beginning one, or a disabling.
    pub fn changes_endpoint(&self) -> bool {
        matches!(self.after, After::Disable { .. })
            || self.run_of_failures(self.failing_since) != RunOfFailures::Unchanged
    }

    /// Why recording it disables the endpoint, if it does, given when the
    /// endpoint's run of failures began (`None`: it was not failing): the
    /// attempt disables it, or it is a sent failure and the endpoint has
    /// been failing since the window's threshold or earlier (for the run's
    /// first failure, since the attempt's time).
    pub fn disable_reason(&self, failing_since: Option<DateTime<Utc>>) -> Option<&str> {
        match (&self.after, &self.sent) {
            (After::Disable { reason }, _) => Some(reason),
            (
                After::Retry {
                    disable_if_failing_since: threshold,
                    reason,
                    ..
                }
                | After::GiveUp {
                    disable_if_failing_since: threshold,
                    reason,
                },
                Some(sent),
            ) => (failing_since.unwrap_or(sent.attempted_at) <= *threshold).then_some(reason),
            _ => None,
        }
    }

    /// The attempt row's `next_attempt_at`: none once the endpoint is disabled.
    pub fn next_attempt(&self, disabled: bool) -> Option<DateTime<Utc>> {
        self.after.delivery().1.filter(|_| !disabled)
    }
}

/// A statement with its parameters bound, on a sqlx backend.
pub(crate) type Bound<DB> = Query<'static, DB, <DB as Database>::Arguments>;

/// What the relays of PostgreSQL and MariaDB (both on sqlx) do differently;
/// [`RelayStore`] is written once for both, below.
pub(crate) trait SqlxRelay: Send + Sync {
    type DB: Database;

    fn pool(&self) -> &sqlx::Pool<Self::DB>;

    /// Begins a claim's or a recording's transaction on `conn`.
    fn begin(
        conn: &mut PoolConnection<Self::DB>,
    ) -> impl Future<Output = Result<sqlx::Transaction<'_, Self::DB>, sqlx::Error>> + Send;

    /// Due pending deliveries whose lease is free or expired, oldest due
    /// first, but those of the `saturated` endpoints, `limit` at most,
    /// locked for this transaction and skipped when another holds them:
    /// `id`, `endpoint_id`, and `now`, the database's time.
    fn due(saturated: &[i64], limit: i64) -> Bound<Self::DB>;

    /// The lease of the `chosen` deliveries, until `until`, by `owner`.
    fn lease(chosen: &[i64], until: DateTime<Utc>, owner: &str) -> Bound<Self::DB>;

    /// The `chosen` deliveries leased by `owner`, oldest due first, with
    /// their event and endpoint (columns named as [`DueDelivery`]'s fields).
    fn leased(chosen: &[i64], owner: &str) -> Bound<Self::DB>;

    /// The pending deliveries (`pending`), the earliest due (`oldest`) and
    /// the database's time (`now`).
    const BACKLOG: &'static str;

    /// A recording's statements, in the backend's dialect.
    fn recording() -> &'static Recording;

    /// `SETTLE` and the attempt's row as one statement, which inserts the
    /// row only when the delivery was settled, if the backend has one: an
    /// attempt that changes no endpoint is then recorded in one round trip,
    /// outside a transaction.
    fn settled_attempt() -> Option<&'static str> {
        None
    }

    /// How many rows the statement of `result` changed.
    fn rows_affected(result: &<Self::DB as Database>::QueryResult) -> u64;
}

/// A recording's statements in a sqlx backend's dialect.
pub(crate) struct Recording {
    settle: String,
    succeeding: String,
    disable: String,
    fail_pending: String,
    attempt: String,
    /// An endpoint's run of failures begins (parameters: when, the endpoint).
    failing: &'static str,
    /// MariaDB's, which has no `RETURNING`: the endpoint's row locked first
    /// when the recording changes it, with when its run of failures began
    /// (parameter: the endpoint); `failing` then returns nothing. `None`:
    /// `failing` returns when the run began ([`FAILING`]).
    lock_endpoint: Option<&'static str>,
}

impl Recording {
    /// The statements every backend runs alike, in a dialect, with the
    /// backend's own `failing` and `lock_endpoint`.
    pub(crate) fn new(
        dialect: impl Fn(&str) -> String,
        failing: &'static str,
        lock_endpoint: Option<&'static str>,
    ) -> Recording {
        Recording {
            settle: dialect(SETTLE),
            succeeding: dialect(SUCCEEDING),
            disable: dialect(DISABLE),
            fail_pending: dialect(FAIL_PENDING),
            attempt: dialect(ATTEMPT),
            failing,
            lock_endpoint,
        }
    }
}

impl<B: SqlxRelay> RelayStore for B
where
    for<'c> &'c mut <B::DB as Database>::Connection: Executor<'c, Database = B::DB>,
    <B::DB as Database>::Arguments: IntoArguments<B::DB>,
    &'static str: ColumnIndex<<B::DB as Database>::Row>,
    usize: ColumnIndex<<B::DB as Database>::Row>,
    for<'q> &'q str: Encode<'q, B::DB> + Type<B::DB>,
    for<'q> i32: Encode<'q, B::DB> + Decode<'q, B::DB> + Type<B::DB>,
    for<'q> i64: Encode<'q, B::DB> + Decode<'q, B::DB> + Type<B::DB>,
    for<'q> bool: Decode<'q, B::DB> + Type<B::DB>,
    for<'q> String: Decode<'q, B::DB> + Type<B::DB>,
    for<'q> DateTime<Utc>: Encode<'q, B::DB> + Decode<'q, B::DB> + Type<B::DB>,
    for<'q> Option<i32>: Encode<'q, B::DB> + Type<B::DB>,
    for<'q> Option<DateTime<Utc>>: Encode<'q, B::DB> + Type<B::DB>,
{
    fn claim<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, Result<Claimed, StoreError>> {
        Box::pin(async move {
            let mut conn = self.pool().acquire().await?;
            let mut txn = B::begin(&mut conn).await?;
            let due = B::due(
                &claim.capacity.saturated(),
                claim.capacity.candidates() as i64,
            )
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
            B::lease(&chosen, db_now + claim.lease, &claim.owner)
                .execute(&mut *txn)
                .await?;
            txn.commit().await?;
            let rows = B::leased(&chosen, &claim.owner)
                .fetch_all(self.pool())
                .await?;
            let deliveries = rows
                .iter()
                .map(|row| {
                    Ok(DueDelivery {
                        id: row.try_get("id")?,
                        endpoint_id: row.try_get("endpoint_id")?,
                        attempts: row.try_get("attempts")?,
                        webhook_id: row.try_get("webhook_id")?,
                        payload: row.try_get("payload")?,
                        url: row.try_get("url")?,
                        secret: row.try_get("secret")?,
                        previous_secret: row.try_get("previous_secret")?,
                        previous_secret_until: row.try_get("previous_secret_until")?,
                        enabled: row.try_get("enabled")?,
                        failing_since: row.try_get("failing_since")?,
                    })
                })
                .collect::<Result<_, sqlx::Error>>()?;
            Ok(Claimed {
                now: db_now,
                deliveries,
            })
        })
    }

    fn record<'a>(&'a self, attempt: &'a Attempt) -> StoreFuture<'a, Result<Recorded, StoreError>> {
        Box::pin(async move {
            if let (Some(settled_attempt), Some(sent)) = (B::settled_attempt(), &attempt.sent)
                && !attempt.changes_endpoint()
                && attempt.disable_reason(attempt.failing_since).is_none()
            {
                let (status, next) = attempt.after.delivery();
                let recorded = sqlx::query(settled_attempt)
                    .bind(status)
                    .bind(next)
                    .bind(1)
                    .bind(sent.attempted_at)
                    .bind(attempt.delivery_id)
                    .bind(attempt.owner.as_str())
                    .bind(sent.duration_ms)
                    .bind(sent.response_status)
                    .bind(sent.outcome)
                    .bind(sent.excerpt.as_str())
                    .execute(self.pool())
                    .await?;
                return Ok(if B::rows_affected(&recorded) == 0 {
                    Recorded::LeaseLost
                } else {
                    Recorded::Done { disabled: None }
                });
            }
            let statements = B::recording();
            let mut conn = self.pool().acquire().await?;
            let mut txn = B::begin(&mut conn).await?;
            // MariaDB: the endpoint's row first, when it changes: updating a
            // delivery's status takes a shared lock on its endpoint's row
            // (the foreign key's index holds the status), and two
            // recordings that both held it and then both asked to write it
            // would deadlock.
            let since = match statements.lock_endpoint {
                Some(lock) if attempt.changes_endpoint() => sqlx::query_scalar(lock)
                    .bind(attempt.endpoint_id)
                    .fetch_optional(&mut *txn)
                    .await?
                    .flatten(),
                _ => attempt.failing_since,
            };
            let (status, next) = attempt.after.delivery();
            let settled = sqlx::query(statements.settle.as_str())
                .bind(status)
                .bind(next)
                .bind(i32::from(attempt.sent.is_some()))
                .bind(attempt.sent.as_ref().map(|sent| sent.attempted_at))
                .bind(attempt.delivery_id)
                .bind(attempt.owner.as_str())
                .execute(&mut *txn)
                .await?;
            if B::rows_affected(&settled) == 0 {
                txn.rollback().await?;
                return Ok(Recorded::LeaseLost);
            }
            let since = match attempt.run_of_failures(since) {
                RunOfFailures::Ends => {
                    sqlx::query(statements.succeeding.as_str())
                        .bind(attempt.endpoint_id)
                        .execute(&mut *txn)
                        .await?;
                    None
                }
                RunOfFailures::Begins(at) if statements.lock_endpoint.is_some() => {
                    sqlx::query(statements.failing)
                        .bind(at)
                        .bind(attempt.endpoint_id)
                        .execute(&mut *txn)
                        .await?;
                    Some(at)
                }
                RunOfFailures::Begins(at) => sqlx::query_scalar(statements.failing)
                    .bind(at)
                    .bind(attempt.endpoint_id)
                    .fetch_optional(&mut *txn)
                    .await?
                    .flatten(),
                RunOfFailures::Unchanged => since,
            };
            let disable = attempt.disable_reason(since);
            let mut disabled = None;
            if let Some(reason) = disable {
                let changed = sqlx::query(statements.disable.as_str())
                    .bind(reason)
                    .bind(now())
                    .bind(attempt.endpoint_id)
                    .execute(&mut *txn)
                    .await?;
                sqlx::query(statements.fail_pending.as_str())
                    .bind(attempt.endpoint_id)
                    .execute(&mut *txn)
                    .await?;
                disabled = (B::rows_affected(&changed) > 0).then(|| reason.to_owned());
            }
            if let Some(sent) = &attempt.sent {
                sqlx::query(statements.attempt.as_str())
                    .bind(attempt.delivery_id)
                    .bind(sent.attempted_at)
                    .bind(sent.duration_ms)
                    .bind(sent.response_status)
                    .bind(sent.outcome)
                    .bind(sent.excerpt.as_str())
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
            let row = sqlx::query(B::BACKLOG).fetch_one(self.pool()).await?;
            Ok(Backlog {
                pending: row.try_get("pending")?,
                oldest_due: row.try_get("oldest")?,
                now: row.try_get("now")?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choose_keeps_order_and_both_bounds() {
        let capacity = Capacity {
            free: 4,
            per_endpoint: 2,
            in_flight: HashMap::from([(7, 1)]),
        };
        // Endpoint 7 has one place left, 8 two; four places in all.
        let candidates = [(1, 7), (2, 7), (3, 8), (4, 8), (5, 8), (6, 9), (7, 9)];
        assert_eq!(capacity.choose(&candidates), [1, 3, 4, 6]);
        assert_eq!(capacity.saturated(), Vec::<i64>::new());
        let full = Capacity {
            in_flight: HashMap::from([(7, 2)]),
            ..capacity
        };
        assert_eq!(full.saturated(), [7]);
        assert_eq!(full.choose(&candidates), [3, 4, 6, 7]);
    }
}
