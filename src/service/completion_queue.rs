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

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, OnceLock, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use entity::{operation_log, payment_order};
use prometheus_client::metrics::histogram::Histogram;
use sea_orm::{DbBackend, DbErr, QueryResult, Statement, Value};
use tokio::sync::oneshot;

use super::orders::{self, CompleteError, CompletedOrder, Completion};
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
pub struct CompletionQueue {
    state: Mutex<QueueState>,
    /// Completions per statement run, exported as a metric.
    batch_sizes: Histogram,
    /// Statements run, and the completions they held.
    statements: AtomicU64,
    batched: AtomicU64,
    /// Statements that failed (each of their completions then ran step by
    /// step).
    failed: AtomicU64,
}

#[derive(Default)]
struct QueueState {
    waiting: VecDeque<Job>,
    /// Runner tasks alive, at most [`MAX_RUNNING`].
    running: usize,
}

/// One waiting completion and where its outcome goes.
struct Job {
    request: Completion,
    reply: oneshot::Sender<Outcome>,
}

/// What a batch did for one of its completions.
#[derive(Debug)]
enum Outcome {
    Completed(CompletedOrder),
    /// The update matched no pending order: missing, foreign, of another
    /// payment system, or completed already.
    NotUpdated,
    /// The database could not be reached; nothing was changed.
    Unavailable(DbErr),
    /// The statement failed; nothing was changed.
    Failed,
}

/// A completion of the batch being built, with the identical requests that
/// ride along with it.
struct Member {
    job: Job,
    duplicates: Vec<oneshot::Sender<Outcome>>,
}

/// The buckets of [`CompletionQueue`]'s batch sizes.
pub fn batch_size_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
}

impl Default for CompletionQueue {
    fn default() -> Self {
        CompletionQueue::new(batch_size_histogram())
    }
}

impl CompletionQueue {
    /// A queue that records each statement's number of completions in
    /// `batch_sizes`.
    pub fn new(batch_sizes: Histogram) -> CompletionQueue {
        CompletionQueue {
            state: Mutex::default(),
            batch_sizes,
            statements: AtomicU64::new(0),
            batched: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// Completes `request` exactly once: in a batch on PostgreSQL, as
    /// `orders::complete` elsewhere.
    pub async fn complete(
        self: &Arc<Self>,
        statements: &Reader,
        request: Completion,
    ) -> Result<CompletedOrder, CompleteError> {
        if statements.backend() != DbBackend::Postgres {
            return orders::complete(statements, request).await;
        }
        let mut outcomes = self.enqueue(statements, std::slice::from_ref(&request));
        let outcome = outcomes.pop().expect("one outcome per request");
        resolve(statements, request, outcome).await
    }

    /// Completes `requests` as [`CompletionQueue::complete`] completes each,
    /// queued together: on PostgreSQL, as many as the rules of the module
    /// docs allow go into one statement. Answers in their order.
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
            answers.push(resolve(statements, request, outcome).await);
        }
        answers
    }

    /// Statements run so far, the completions they held, and how many of
    /// the statements failed (their completions then ran step by step).
    pub fn statements_run(&self) -> (u64, u64, u64) {
        (
            self.statements.load(Ordering::Relaxed),
            self.batched.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    /// Queues `requests` at once (under one lock, so that a runner started
    /// now finds them all) and starts a runner if one more may run.
    fn enqueue(
        self: &Arc<Self>,
        statements: &Reader,
        requests: &[Completion],
    ) -> Vec<oneshot::Receiver<Outcome>> {
        let mut outcomes = Vec::with_capacity(requests.len());
        let start_runner = {
            let mut state = self.lock();
            for request in requests {
                let (reply, outcome) = oneshot::channel();
                state.waiting.push_back(Job {
                    request: request.clone(),
                    reply,
                });
                outcomes.push(outcome);
            }
            state.start_runner()
        };
        if start_runner {
            tokio::spawn(run(Runner::new(self.clone(), statements.clone())));
        }
        outcomes
    }

    fn record(&self, batch: usize) {
        self.batch_sizes.observe(batch as f64);
        self.statements.fetch_add(1, Ordering::Relaxed);
        self.batched.fetch_add(batch as u64, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the next batch off the queue (see the module docs); empty when
    /// nothing waits.
    fn take_batch(&self) -> Vec<Member> {
        let mut state = self.lock();
        let mut batch: Vec<Member> = Vec::new();
        let mut index = 0;
        while index < state.waiting.len() && batch.len() < MAX_BATCH {
            let job = &state.waiting[index];
            if job.reply.is_closed() {
                // Its caller went away before anything was done.
                state.waiting.remove(index);
                continue;
            }
            let same_order = batch
                .iter()
                .position(|member| member.job.request.order_id == job.request.order_id);
            match same_order {
                None => {
                    let job = state.waiting.remove(index).expect("index is in range");
                    batch.push(Member {
                        job,
                        duplicates: Vec::new(),
                    });
                }
                Some(at) if identical(&batch[at].job.request, &job.request) => {
                    let job = state.waiting.remove(index).expect("index is in range");
                    batch[at].duplicates.push(job.reply);
                }
                // Same order, other project or payment system: next batch.
                Some(_) => index += 1,
            }
        }
        batch
    }

    /// Completions waiting, for tests.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }
}

/// Turns a batch's outcome into the answer `orders::complete` would give.
async fn resolve(
    statements: &Reader,
    request: Completion,
    outcome: oneshot::Receiver<Outcome>,
) -> Result<CompletedOrder, CompleteError> {
    // The runner never drops a job without an answer unless it panicked or
    // the runtime is shutting down.
    let outcome = outcome.await.unwrap_or_else(|_| {
        Outcome::Unavailable(DbErr::Custom("the completion was not run".into()))
    });
    match outcome {
        Outcome::Completed(done) => Ok(done),
        Outcome::NotUpdated => Err(orders::not_completed(statements, &request).await?),
        Outcome::Unavailable(err) => Err(CompleteError::Unavailable(err)),
        Outcome::Failed => orders::complete_step_by_step(statements.pool(), request).await,
    }
}

impl QueueState {
    /// Counts a new runner in when one more may run.
    fn start_runner(&mut self) -> bool {
        if self.running < MAX_RUNNING {
            self.running += 1;
            true
        } else {
            false
        }
    }
}

/// Whether `b` asks exactly what `a` asks, but for the payment id (a
/// duplicate's payment id is not recorded: the order is completed once).
fn identical(a: &Completion, b: &Completion) -> bool {
    a.order_id == b.order_id && a.project_id == b.project_id && a.payment_system == b.payment_system
}

/// A runner task's hold on the queue. Dropped when the task ends, however
/// it ends: it counts the runner out and, unless the task was cancelled,
/// starts another if completions still wait (one may have been queued
/// after the runner found the queue empty, or a panic ended it), so that
/// none is left behind. A cancelled task means the runtime is shutting
/// down: the completions still waiting are dropped unrun (their callers
/// are answered 503, and nothing was changed), and no runner is started,
/// since a task spawned now would be dropped at once, and with it its
/// runner, again and again.
struct Runner {
    queue: Arc<CompletionQueue>,
    statements: Reader,
    /// Set when `run` returned: the queue was empty.
    finished: bool,
}

impl Runner {
    fn new(queue: Arc<CompletionQueue>, statements: Reader) -> Runner {
        Runner {
            queue,
            statements,
            finished: false,
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let cancelled = !self.finished && !std::thread::panicking();
        let restart = {
            let mut state = self.queue.lock();
            state.running -= 1;
            if cancelled {
                state.waiting.clear();
            }
            !state.waiting.is_empty() && state.start_runner()
        };
        if !restart {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(run(Runner::new(
                    self.queue.clone(),
                    self.statements.clone(),
                )));
            }
            Err(_) => self.queue.lock().running -= 1,
        }
    }
}

/// Runs batches until the queue is empty.
async fn run(mut runner: Runner) {
    loop {
        let batch = runner.queue.take_batch();
        if batch.is_empty() {
            runner.finished = true;
            return;
        }
        let requests: Vec<&Completion> = batch.iter().map(|m| &m.job.request).collect();
        runner.queue.record(requests.len());
        let outcomes = complete_batch(&runner.statements, &requests).await;
        if outcomes
            .iter()
            .any(|outcome| matches!(outcome, Outcome::Failed))
        {
            runner.queue.failed.fetch_add(1, Ordering::Relaxed);
        }
        for (member, outcome) in batch.into_iter().zip(outcomes) {
            for duplicate in member.duplicates {
                let _ = duplicate.send(match &outcome {
                    Outcome::Completed(_) | Outcome::NotUpdated => Outcome::NotUpdated,
                    Outcome::Unavailable(err) => Outcome::Unavailable(err.clone()),
                    Outcome::Failed => Outcome::Failed,
                });
            }
            // The caller may have gone away meanwhile; the work is done.
            let _ = member.job.reply.send(outcome);
        }
    }
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

/// The statement for `requests`: [`batch_sql`] of their number, and its
/// values.
fn batch_statement(
    requests: &[&Completion],
    completed_at: chrono::DateTime<chrono::Utc>,
) -> Statement {
    let mut values = Vec::with_capacity(3 + 4 * requests.len());
    values.push(Value::from(payment_order::STATUS_COMPLETED));
    values.push(Value::from(completed_at));
    values.push(Value::from(operation_log::KIND_ORDER_CREDIT));
    for request in requests {
        values.push(Value::from(request.order_id.as_str()));
        values.push(Value::from(request.project_id));
        values.push(Value::from(request.payment_system.as_str()));
        values.push(Value::from(request.payment_id.clone()));
    }
    Statement::from_sql_and_values(DbBackend::Postgres, batch_sql(requests.len()), values)
}

/// The batch statement for `count` completions (2 ..= [`MAX_BATCH`]),
/// built once per count (each count is its own prepared statement).
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
                "({index}, ${}, ${}, ${}, ${})",
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
        "payment_orders"."amount_cents", "payment_orders"."payment_id"
), "s" AS (
    SELECT "user_id", "server_id", SUM("amount_cents")::int8 AS "total"
    FROM "o" GROUP BY "user_id", "server_id"
), "b" AS (
    INSERT INTO "balances" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at")
    SELECT "user_id", "server_id", "total", 0, $2 FROM "s" ORDER BY "user_id", "server_id"
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

    fn enqueue(queue: &CompletionQueue, request: Completion) -> oneshot::Receiver<Outcome> {
        let (reply, outcome) = oneshot::channel();
        queue.lock().waiting.push_back(Job { request, reply });
        outcome
    }

    #[test]
    fn a_batch_names_each_order_once_and_identical_requests_ride_along() {
        let queue = CompletionQueue::default();
        let _a = enqueue(&queue, request("Order:AAAAAAAA", 1, "cstm:paygate"));
        let _b = enqueue(&queue, request("Order:BBBBBBBB", 1, "cstm:paygate"));
        let _a_again = enqueue(&queue, request("Order:AAAAAAAA", 1, "cstm:paygate"));
        let _a_other_system = enqueue(&queue, request("Order:AAAAAAAA", 1, "cstm:other"));
        let _a_other_project = enqueue(&queue, request("Order:AAAAAAAA", 2, "cstm:paygate"));
        let batch = queue.take_batch();
        let orders: Vec<_> = batch
            .iter()
            .map(|m| m.job.request.order_id.as_str())
            .collect();
        assert_eq!(orders, ["Order:AAAAAAAA", "Order:BBBBBBBB"]);
        assert_eq!(batch[0].duplicates.len(), 1);
        assert_eq!(batch[1].duplicates.len(), 0);
        // The two that differ wait, one per batch, in their order.
        assert_eq!(queue.waiting(), 2);
        let next = queue.take_batch();
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].job.request.payment_system, "cstm:other");
        let last = queue.take_batch();
        assert_eq!(last[0].job.request.project_id, 2);
        assert!(queue.take_batch().is_empty());
    }

    #[test]
    fn a_request_whose_caller_went_away_is_left_out() {
        let queue = CompletionQueue::default();
        let gone = enqueue(&queue, request("Order:AAAAAAAA", 1, "cstm:paygate"));
        let _kept = enqueue(&queue, request("Order:BBBBBBBB", 1, "cstm:paygate"));
        drop(gone);
        let batch = queue.take_batch();
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].job.request.order_id, "Order:BBBBBBBB");
        assert_eq!(queue.waiting(), 0);
    }

    #[test]
    fn a_batch_holds_at_most_max_batch() {
        let queue = CompletionQueue::default();
        let _outcomes: Vec<_> = (0..MAX_BATCH + 3)
            .map(|i| enqueue(&queue, request(&format!("Order:{i:08}"), 1, "cstm:paygate")))
            .collect();
        assert_eq!(queue.take_batch().len(), MAX_BATCH);
        assert_eq!(queue.take_batch().len(), 3);
    }

    /// At shutdown the runtime drops the runner's task: what waits is
    /// dropped unrun (its caller hears so), and no runner is started on a
    /// runtime that would drop it at once (which recursed until the stack
    /// overflowed).
    #[tokio::test]
    async fn a_runner_cancelled_at_shutdown_drops_what_waits_and_starts_none() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let url = format!("sqlite://{}", dir.path().join("queue.db").display());
        let (db, _, _) = crate::service::testing::shop(&url, "buyer@example.com").await;
        let reader = Reader::new(db, &url, &crate::db::PoolSettings::default());
        let queue = Arc::new(CompletionQueue::default());
        let outcome = enqueue(&queue, request("Order:AAAAAAAA", 1, "cstm:paygate"));
        assert!(queue.lock().start_runner());
        let runner = Runner::new(queue.clone(), reader);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            runtime.spawn(async move {
                let _runner = runner;
                std::future::pending::<()>().await
            });
            drop(runtime);
        })
        .join()
        .expect("the runtime shuts down");
        assert_eq!(queue.waiting(), 0);
        assert_eq!(queue.lock().running, 0);
        assert!(outcome.await.is_err(), "the caller hears it was not run");
    }

    #[test]
    fn the_statement_numbers_its_parameters_per_request() {
        let sql = batch_sql(3);
        assert!(sql.contains(
            "VALUES (0, $4, $5, $6, $7), (1, $8, $9, $10, $11), (2, $12, $13, $14, $15)"
        ));
        assert!(!sql.contains("$16"));
    }
}
