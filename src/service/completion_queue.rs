//! Completions on PostgreSQL, committed in groups (group commit).
//!
//! Why: on PostgreSQL a completion is already one statement and one commit
//! (`orders::PG_COMPLETE`), and what it costs the database is mostly that
//! statement and that commit, not its three rows. pgbench, 64 clients each
//! sending one completion per statement, made 4 300 to 5 400 completions a
//! second on the 2-vCPU benchmark machine; 8 clients each sending eight
//! completions per statement made 25 600 (docs/benchmarks.md, step 26). So
//! completions that arrive while others are being written wait in one
//! queue, and a free runner takes up to [`MAX_BATCH`] of them into one
//! statement: one round trip and one commit for all of them.
//!
//! What does not change:
//!
//! - **Exactly once.** Each order is updated under its own guard
//!   (`status <> 'completed'`, under the row's lock), as alone. An order
//!   named by two waiting requests never goes into one statement twice: a
//!   request identical to one already in the batch (same order, project and
//!   payment system) rides along and is answered as a duplicate would be
//!   (the order is read afterwards: 409, or 404 when the first did not match
//!   either); one that differs waits for the next batch.
//! - **All or nothing.** A batch is one statement: it commits whole or not at
//!   all. When it fails for any reason but an unreachable database, nothing
//!   was changed, and each of its completions runs again on its own (the
//!   step-by-step transaction, which names the failing step), so one bad
//!   order costs its neighbours time, never their completion.
//! - **No deadlocks.** Every batch locks its orders in the order of their
//!   ids, then its balances in the order of (user, server), all before any
//!   balance; two batches, of this instance or another on the same database,
//!   therefore never wait on each other in a cycle.
//! - **No wait for a lone request.** There is no timer: a completion that
//!   finds a runner free starts at once, as a batch of one, which is the
//!   one-statement completion itself. Batches form only while
//!   [`MAX_RUNNING`] statements are already in flight.
//! - **A caller that went away changes nothing.** A request dropped (client
//!   gone, request timed out with 503) before its batch started is left
//!   out of it.
//!
//! SQLite and MySQL complete one order per transaction as before
//! (`orders::complete`): SQLite has one writer at a time, and MySQL has no
//! `UPDATE ... RETURNING` to build the statement from.

use std::sync::{Arc, OnceLock};

use entity::{operation_log, payment_order};
use sea_orm::{DbBackend, DbErr, QueryResult, Statement, Value};

use super::{
    batching::{Admission, BatchKind, Batcher, padded_size},
    orders::{self, CompleteError, CompletedOrder, Completion},
};
use crate::{
    db::{Reader, is_unavailable},
    money::Money,
};

/// Most completions in one statement.
pub const MAX_BATCH: usize = 32;
/// Most batch statements in flight at once, per instance. One runner made
/// the largest batches and 10 to 15 % more completions a second in the
/// benchmark, but one batch waiting on a row lock (a long transaction
/// elsewhere) would hold up every completion of the instance; two keep
/// completions flowing past one stalled batch (docs/benchmarks.md, step 26).
pub const MAX_RUNNING: usize = 2;

/// The queue of completions waiting for a statement; one per instance
/// (see the module docs).
pub type CompletionQueue = Batcher<Completions>;

/// Completions, as a kind of batched request (see the module docs).
pub struct Completions;

/// What a batch did for one of its completions.
#[derive(Debug)]
pub enum Outcome {
    Completed(CompletedOrder),
    /// The update matched no pending order: missing, foreign, of another
    /// payment system, or completed already.
    NotUpdated,
    /// The database could not be reached; nothing was changed.
    Unavailable(DbErr),
    /// The statement failed; nothing was changed.
    Failed,
}

impl BatchKind for Completions {
    type Request = Completion;
    type Outcome = Outcome;
    const MAX_BATCH: usize = MAX_BATCH;
    const MAX_RUNNING: usize = MAX_RUNNING;

    /// Each order once: an identical request rides along, one for the same
    /// order under another project or payment system waits.
    fn admit(batch: &[&Completion], request: &Completion) -> Admission {
        match batch
            .iter()
            .position(|other| other.order_id == request.order_id)
        {
            None => Admission::Join,
            Some(at) if identical(batch[at], request) => Admission::RideAlong(at),
            Some(_) => Admission::Later,
        }
    }

    /// A duplicate is answered as a duplicate would be alone: the order is
    /// read afterwards (409, or 404 when the first did not match either).
    fn rider_outcome(leader: &Outcome) -> Outcome {
        match leader {
            Outcome::Completed(_) | Outcome::NotUpdated => Outcome::NotUpdated,
            Outcome::Unavailable(err) => Outcome::Unavailable(err.clone()),
            Outcome::Failed => Outcome::Failed,
        }
    }

    fn failed(outcome: &Outcome) -> bool {
        matches!(outcome, Outcome::Failed)
    }

    async fn run(statements: &Reader, requests: &[&Completion]) -> Vec<Outcome> {
        complete_batch(statements, requests).await
    }
}

impl Batcher<Completions> {
    /// Completes `request` exactly once: in a batch on PostgreSQL, as
    /// `orders::complete` elsewhere.
    pub async fn complete(
        self: &Arc<Self>,
        statements: &Reader,
        request: Completion,
    ) -> Result<CompletedOrder, CompleteError> {
        let mut answers = self.complete_all(statements, vec![request]).await;
        answers.pop().expect("one answer per request")
    }

    /// Completes `requests` as [`Batcher::complete`] completes each, queued
    /// together: on PostgreSQL, as many as the rules of the module docs
    /// allow go into one statement. Answers in their order.
    pub async fn complete_all(
        self: &Arc<Self>,
        statements: &Reader,
        requests: Vec<Completion>,
    ) -> Vec<Result<CompletedOrder, CompleteError>> {
        let mut answers = Vec::with_capacity(requests.len());
        if statements.backend() != DbBackend::Postgres {
            for request in requests {
                answers.push(orders::complete(statements, request).await);
            }
            return answers;
        }
        let outcomes = self.enqueue(statements, &requests);
        for (request, outcome) in requests.into_iter().zip(outcomes) {
            answers.push(resolve(statements, request, outcome.await).await);
        }
        answers
    }
}

/// Turns a batch's outcome into the answer `orders::complete` would give.
/// No outcome at all: the completion was not run (shutdown, or its runner
/// panicked), so nothing was changed.
async fn resolve(
    statements: &Reader,
    request: Completion,
    outcome: Result<Outcome, tokio::sync::oneshot::error::RecvError>,
) -> Result<CompletedOrder, CompleteError> {
    let outcome = outcome.unwrap_or_else(|_| {
        Outcome::Unavailable(DbErr::Custom("the completion was not run".into()))
    });
    match outcome {
        Outcome::Completed(done) => Ok(done),
        Outcome::NotUpdated => Err(orders::not_completed(statements, &request).await?),
        Outcome::Unavailable(err) => Err(CompleteError::Unavailable(err)),
        Outcome::Failed => orders::complete_step_by_step(statements.pool(), request).await,
    }
}

/// Whether `b` asks exactly what `a` asks, but for the payment id (a
/// duplicate's payment id is not recorded: the order is completed once).
fn identical(a: &Completion, b: &Completion) -> bool {
    a.order_id == b.order_id && a.project_id == b.project_id && a.payment_system == b.payment_system
}

/// Runs `requests` (distinct orders) as one statement; one outcome each, in
/// their order. A batch of one is the one-statement completion itself.
async fn complete_batch(statements: &Reader, requests: &[&Completion]) -> Vec<Outcome> {
    let failed = |err: DbErr| {
        if is_unavailable(&err) {
            requests
                .iter()
                .map(|_| Outcome::Unavailable(err.clone()))
                .collect()
        } else {
            tracing::debug!(error = %err, completions = requests.len(),
                "batched completion failed; each runs step by step");
            requests.iter().map(|_| Outcome::Failed).collect()
        }
    };
    if let [request] = requests {
        return match orders::complete_in_one_statement(statements, request).await {
            Ok(Some(done)) => vec![Outcome::Completed(done)],
            Ok(None) => vec![Outcome::NotUpdated],
            Err(err) => failed(err),
        };
    }
    let completed_at = super::now();
    let rows = match statements
        .autocommit_all(batch_statement(requests, completed_at))
        .await
    {
        Ok(rows) => rows,
        Err(err) => return failed(err),
    };
    // A request without a row was not updated. So is one whose row cannot
    // be read back (never seen: every column is a plain integer or text):
    // its order is completed, so it is answered as a duplicate, 409, which
    // says "done", never a 5xx, which says "nothing was changed". A batch
    // of one answers the same way: its failed read sends it step by step,
    // whose update then matches nothing.
    let mut outcomes: Vec<Outcome> = requests.iter().map(|_| Outcome::NotUpdated).collect();
    for row in rows {
        match completed_row(&row, requests, completed_at) {
            Ok((index, done)) => outcomes[index] = Outcome::Completed(done),
            Err(err) => tracing::error!(error = %err, "batched completion: unreadable row"),
        }
    }
    outcomes
}

/// One row of [`batch_statement`]'s answer: the request's index and its
/// completed order.
fn completed_row(
    row: &QueryResult,
    requests: &[&Completion],
    completed_at: chrono::DateTime<chrono::Utc>,
) -> Result<(usize, CompletedOrder), DbErr> {
    let index: i32 = row.try_get_by_index(0)?;
    let request = usize::try_from(index)
        .ok()
        .and_then(|index| requests.get(index).map(|request| (index, request)));
    let Some((index, request)) = request else {
        return Err(DbErr::Custom(format!("no request {index} in the batch")));
    };
    let amount_cents: i64 = row.try_get_by_index(3)?;
    let after: i64 = row.try_get_by_index(5)?;
    Ok((
        index,
        CompletedOrder {
            order_id: request.order_id.clone(),
            payment_system: request.payment_system.clone(),
            payment_id: row.try_get_by_index(4)?,
            amount: Money::from_cents(amount_cents)
                .map_err(|err| DbErr::Custom(err.to_string()))?,
            completed_at,
            user_id: row.try_get_by_index(1)?,
            server_id: row.try_get_by_index(2)?,
            balance_after: Money::from_cents(after).unwrap_or(Money::MAX),
        },
    ))
}

/// The statement for `requests`: [`batch_sql`] of their number padded
/// (`batching::padded_size`) with rows of NULLs, which name no order, and
/// its values.
fn batch_statement(
    requests: &[&Completion],
    completed_at: chrono::DateTime<chrono::Utc>,
) -> Statement {
    let size = padded_size(requests.len(), MAX_BATCH);
    let mut values = Vec::with_capacity(3 + 4 * size);
    values.push(Value::from(payment_order::STATUS_COMPLETED));
    values.push(Value::from(completed_at));
    values.push(Value::from(operation_log::KIND_ORDER_CREDIT));
    for request in requests {
        values.push(Value::from(request.order_id.as_str()));
        values.push(Value::from(request.project_id));
        values.push(Value::from(request.payment_system.as_str()));
        values.push(Value::from(request.payment_id.clone()));
    }
    for _ in requests.len()..size {
        values.push(Value::String(None));
        values.push(Value::BigInt(None));
        values.push(Value::String(None));
        values.push(Value::String(None));
    }
    Statement::from_sql_and_values(DbBackend::Postgres, batch_sql(size), values)
}

/// The batch statement for `count` completions (2 ..= [`MAX_BATCH`]),
/// built once per count (each count is its own prepared statement; only
/// the padded sizes are used). Each value is cast to its column's type, so
/// that the statement means the same however its parameters are sent.
///
/// `r` lists the requests with their index; `k` locks the pending orders
/// they name in the order of their ids (the lock an update takes); `o` completes them (the same guard
/// as alone); `s` sums the credits per account; `b` credits each account
/// once, in (user, server) order; `w` gives each order its balance after its
/// own credit, crediting the batch's orders of one account in request
/// order; `l` logs each. Parameters: $1 completed status, $2 completion
/// time, $3 log kind, then per request its order id, project id, payment
/// system and payment id.
fn batch_sql(count: usize) -> &'static str {
    debug_assert!((2..=MAX_BATCH).contains(&count), "batch of {count}");
    static SQL: OnceLock<Vec<String>> = OnceLock::new();
    let all = SQL.get_or_init(|| (0..=MAX_BATCH).map(build_batch_sql).collect());
    all[count.min(MAX_BATCH)].as_str()
}

fn build_batch_sql(count: usize) -> String {
    let rows: Vec<String> = (0..count)
        .map(|index| {
            let first = 4 + 4 * index;
            format!(
                "({index}, ${}::text, ${}::int8, ${}::text, ${}::text)",
                first,
                first + 1,
                first + 2,
                first + 3
            )
        })
        .collect();
    format!(
        r#"WITH "r" ("idx", "order_id", "project_id", "payment_system", "payment_id") AS (
    VALUES {rows}
), "k" AS (
    SELECT "p"."id", "r"."idx", "r"."payment_id" FROM "payment_orders" AS "p"
    JOIN "r" ON "p"."order_id" = "r"."order_id" AND "p"."project_id" = "r"."project_id"
        AND "p"."payment_system" = "r"."payment_system"
    WHERE "p"."status" <> $1
    ORDER BY "p"."id" FOR NO KEY UPDATE OF "p"
), "o" AS (
    UPDATE "payment_orders" SET "status" = $1, "completed_at" = $2, "payment_id" = "k"."payment_id"
    FROM "k" WHERE "payment_orders"."id" = "k"."id" AND "payment_orders"."status" <> $1
    RETURNING "k"."idx", "payment_orders"."id", "payment_orders"."user_id",
        COALESCE("payment_orders"."server_id", 0) AS "server_id",
        "payment_orders"."amount_cents", "payment_orders"."payment_id", "payment_orders"."project_id"
), "s" AS (
    SELECT "user_id", "server_id", "project_id", SUM("amount_cents")::int8 AS "total"
    FROM "o" GROUP BY "user_id", "server_id", "project_id"
), "b" AS (
    INSERT INTO "balances" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at", "project_id")
    SELECT "user_id", "server_id", "total", 0, $2, "project_id" FROM "s" ORDER BY "user_id", "server_id"
    ON CONFLICT ("user_id", "server_id") DO UPDATE
    SET "main_cents" = "balances"."main_cents" + EXCLUDED."main_cents", "updated_at" = EXCLUDED."updated_at"
    RETURNING "user_id", "server_id", "main_cents"
), "w" AS (
    SELECT "o"."idx", "o"."id", "o"."user_id", "o"."server_id", "o"."amount_cents", "o"."payment_id",
        ("b"."main_cents" - "s"."total" + SUM("o"."amount_cents") OVER (
            PARTITION BY "o"."user_id", "o"."server_id" ORDER BY "o"."idx"))::int8 AS "after"
    FROM "o" JOIN "s" USING ("user_id", "server_id") JOIN "b" USING ("user_id", "server_id")
), "l" AS (
    INSERT INTO "operation_log" ("kind", "order_ref", "user_id", "server_id", "balance_type",
        "amount_cents", "balance_before_cents", "balance_after_cents", "created_at")
    SELECT $3, "id", "user_id", "server_id", 'main', "amount_cents", "after" - "amount_cents", "after", $2
    FROM "w" ORDER BY "idx"
)
SELECT "idx", "user_id", "server_id", "amount_cents", "payment_id", "after" FROM "w""#,
        rows = rows.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(order_id: &str, project_id: i64, payment_system: &str) -> Completion {
        Completion {
            project_id,
            order_id: order_id.into(),
            payment_system: payment_system.into(),
            payment_id: None,
        }
    }

    #[test]
    fn a_batch_names_each_order_once_and_identical_requests_ride_along() {
        let a = request("Order:AAAAAAAA", 1, "cstm:paygate");
        let b = request("Order:BBBBBBBB", 1, "cstm:paygate");
        let batch = [&a, &b];
        let mut again = request("Order:AAAAAAAA", 1, "cstm:paygate");
        again.payment_id = Some("other".into());
        assert!(matches!(
            Completions::admit(&batch, &again),
            Admission::RideAlong(0)
        ));
        for other in [
            request("Order:AAAAAAAA", 1, "cstm:other"),
            request("Order:AAAAAAAA", 2, "cstm:paygate"),
        ] {
            assert!(matches!(
                Completions::admit(&batch, &other),
                Admission::Later
            ));
        }
        let c = request("Order:CCCCCCCC", 2, "cstm:other");
        assert!(matches!(Completions::admit(&batch, &c), Admission::Join));
    }

    #[test]
    fn a_duplicate_is_answered_as_a_duplicate() {
        let done = Outcome::Completed(CompletedOrder {
            order_id: "Order:AAAAAAAA".into(),
            payment_system: "cstm:paygate".into(),
            payment_id: None,
            amount: Money::from_cents(100).unwrap(),
            completed_at: chrono::Utc::now(),
            user_id: 1,
            server_id: 0,
            balance_after: Money::from_cents(100).unwrap(),
        });
        assert!(matches!(
            Completions::rider_outcome(&done),
            Outcome::NotUpdated
        ));
        assert!(matches!(
            Completions::rider_outcome(&Outcome::Failed),
            Outcome::Failed
        ));
    }

    #[test]
    fn the_statement_numbers_its_parameters_per_request() {
        let sql = batch_sql(3);
        assert!(sql.contains(
            "VALUES (0, $4::text, $5::int8, $6::text, $7::text), (1, $8::text, $9::int8, $10::text, $11::text), (2, $12::text"
        ));
        assert!(!sql.contains("$16"));
        let requests = [
            request("Order:AAAAAAAA", 1, "cstm:paygate"),
            request("Order:BBBBBBBB", 1, "cstm:paygate"),
            request("Order:CCCCCCCC", 1, "cstm:paygate"),
        ];
        let refs: Vec<&Completion> = requests.iter().collect();
        // Three run as four, the fourth of NULLs.
        let stmt = batch_statement(&refs, chrono::Utc::now());
        assert_eq!(stmt.sql, batch_sql(4));
        let values = stmt.values.expect("values").0;
        assert_eq!(values.len(), 3 + 4 * 4);
        assert_eq!(values[15], Value::String(None));
    }
}
