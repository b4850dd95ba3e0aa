//! Requests that wait to go to PostgreSQL together, one statement for many:
//! the queue and its runner tasks. What may share a statement, and how that
//! statement runs, is each kind's own ([`BatchKind`]): the completions of
//! `completion_queue` and the balance reads of `token_reads`.
//!
//! Why: what a statement costs PostgreSQL and the service (the round trip,
//! the wake-ups on both sides, the executor's start and, for a write, the
//! commit) is most of what a request costs, and one statement for many
//! requests pays it once (docs/benchmarks.md, steps 26 and 27).
//!
//! How: a request joins the queue, and if fewer than the kind's
//! `MAX_RUNNING` runner tasks are alive, it starts one. A runner takes up to
//! `MAX_BATCH` waiting requests that may share a statement, runs it, hands
//! each request its outcome, and goes on until the queue is empty. There is
//! no timer: a request that finds a runner free goes at once, alone, and
//! requests wait for one another only while statements are in flight.
//! A request whose caller went away before its statement started is left
//! out of it: nothing was done for it.
//!
//! Each kind pads its batches to a few sizes ([`padded_size`]): every size
//! is its own SQL text and prepared statement, and sqlx keeps 100 of them
//! per connection.

use std::{
    collections::VecDeque,
    future::Future,
    panic::AssertUnwindSafe,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use futures_util::FutureExt;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::oneshot;

use crate::db::Reader;

/// What one kind of batched request is, and how its statement runs.
pub trait BatchKind: Send + Sync + 'static {
    type Request: Clone + Send + Sync + 'static;
    type Outcome: Send + 'static;
    /// Most requests in one statement.
    const MAX_BATCH: usize;
    /// Most statements in flight at once, per instance.
    const MAX_RUNNING: usize;

    /// Where `request` goes, given the requests already in the batch being
    /// built (in their order).
    fn admit(batch: &[&Self::Request], request: &Self::Request) -> Admission;

    /// The outcome of a request that rode along with one that got `leader`.
    fn rider_outcome(leader: &Self::Outcome) -> Self::Outcome;

    /// Whether `outcome` says that its statement failed.
    fn failed(outcome: &Self::Outcome) -> bool;

    /// Runs `requests` (at least one) as one statement: one outcome each, in
    /// their order.
    fn run(
        statements: &Reader,
        requests: &[&Self::Request],
    ) -> impl Future<Output = Vec<Self::Outcome>> + Send;
}

/// Where a waiting request goes when a batch is built.
pub enum Admission {
    /// Into the batch.
    Join,
    /// Along with the batch's request at this index: it asks exactly the
    /// same, and gets [`BatchKind::rider_outcome`] of its outcome.
    RideAlong(usize),
    /// Into a later batch; it keeps its place in the queue.
    Later,
}

/// The queue of one kind of request; one per instance.
pub struct Batcher<K: BatchKind> {
    state: Mutex<QueueState<K>>,
    /// Requests per statement run, exported as a metric.
    batch_sizes: Histogram,
    /// Statements run, the requests they held, and the statements that
    /// failed.
    statements: AtomicU64,
    batched: AtomicU64,
    failed: AtomicU64,
}

struct QueueState<K: BatchKind> {
    waiting: VecDeque<Job<K>>,
    /// Runner tasks alive, at most `K::MAX_RUNNING`.
    running: usize,
}

/// One waiting request and where its outcome goes.
struct Job<K: BatchKind> {
    request: K::Request,
    reply: oneshot::Sender<K::Outcome>,
}

/// A request of the batch being built, with those that ride along with it.
struct Member<K: BatchKind> {
    job: Job<K>,
    riders: Vec<oneshot::Sender<K::Outcome>>,
}

/// The buckets of a [`Batcher`]'s batch sizes.
pub fn batch_size_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
}

impl<K: BatchKind> Default for Batcher<K> {
    fn default() -> Self {
        Batcher::new(batch_size_histogram())
    }
}

impl<K: BatchKind> Batcher<K> {
    /// A queue that records each statement's number of requests in
    /// `batch_sizes`.
    pub fn new(batch_sizes: Histogram) -> Batcher<K> {
        Batcher {
            state: Mutex::new(QueueState {
                waiting: VecDeque::new(),
                running: 0,
            }),
            batch_sizes,
            statements: AtomicU64::new(0),
            batched: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// Statements run so far, the requests they held, and how many of the
    /// statements failed.
    pub fn statements_run(&self) -> (u64, u64, u64) {
        (
            self.statements.load(Ordering::Relaxed),
            self.batched.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    /// Queues `requests` at once (under one lock, so that a runner started
    /// now finds them all), starts a runner if one more may run, and
    /// returns where each outcome will arrive. An outcome that never arrives
    /// (the receiver's error) means the request was not run: the runtime is
    /// shutting down, or its runner panicked.
    pub fn enqueue(
        self: &Arc<Self>,
        statements: &Reader,
        requests: &[K::Request],
    ) -> Vec<oneshot::Receiver<K::Outcome>> {
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

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState<K>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the next batch off the queue; empty when nothing waits.
    fn take_batch(&self) -> Vec<Member<K>> {
        let mut state = self.lock();
        let mut batch: Vec<Member<K>> = Vec::new();
        let mut index = 0;
        while index < state.waiting.len() && batch.len() < K::MAX_BATCH {
            let job = &state.waiting[index];
            if job.reply.is_closed() {
                // Its caller went away before anything was done.
                state.waiting.remove(index);
                continue;
            }
            let requests: Vec<&K::Request> = batch.iter().map(|m| &m.job.request).collect();
            match K::admit(&requests, &job.request) {
                Admission::Join => {
                    let job = state.waiting.remove(index).expect("index is in range");
                    batch.push(Member {
                        job,
                        riders: Vec::new(),
                    });
                }
                Admission::RideAlong(at) if at < batch.len() => {
                    let job = state.waiting.remove(index).expect("index is in range");
                    batch[at].riders.push(job.reply);
                }
                Admission::RideAlong(_) | Admission::Later => index += 1,
            }
        }
        batch
    }

    /// Requests waiting, for tests.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }
}

impl<K: BatchKind> QueueState<K> {
    /// Counts a new runner in when one more may run.
    fn start_runner(&mut self) -> bool {
        if self.running < K::MAX_RUNNING {
            self.running += 1;
            true
        } else {
            false
        }
    }
}

/// The size a batch of `count` requests is run at: the next power of two
/// (at most `max`), so that a kind has a handful of statements, not one per
/// count. The padding rows match nothing.
pub fn padded_size(count: usize, max: usize) -> usize {
    count.next_power_of_two().min(max)
}

/// A runner task's hold on the queue. Dropped when the task ends: it counts
/// the runner out and, when `run` returned, starts another if requests
/// still wait (one may have been queued after the runner found the queue
/// empty). Otherwise the task was cancelled (a panic in a statement is
/// caught in `run`): the runtime is shutting down, the requests still
/// waiting are dropped unrun (their callers hear so), and no runner is
/// started, since a task spawned now would be dropped at once, and with it
/// its runner, again and again.
struct Runner<K: BatchKind> {
    queue: Arc<Batcher<K>>,
    statements: Reader,
    /// Set when `run` returned: the queue was empty.
    finished: bool,
}

impl<K: BatchKind> Runner<K> {
    fn new(queue: Arc<Batcher<K>>, statements: Reader) -> Runner<K> {
        Runner {
            queue,
            statements,
            finished: false,
        }
    }
}

impl<K: BatchKind> Drop for Runner<K> {
    fn drop(&mut self) {
        let cancelled = !self.finished;
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
async fn run<K: BatchKind>(mut runner: Runner<K>) {
    loop {
        let batch = runner.queue.take_batch();
        if batch.is_empty() {
            runner.finished = true;
            return;
        }
        let requests: Vec<&K::Request> = batch.iter().map(|m| &m.job.request).collect();
        runner.queue.record(requests.len());
        let outcomes = AssertUnwindSafe(K::run(&runner.statements, &requests))
            .catch_unwind()
            .await;
        let Ok(outcomes) = outcomes else {
            // Its requests are dropped unanswered: their callers hear that
            // they were not run.
            tracing::error!("a batch statement panicked");
            runner.queue.failed.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        if outcomes.iter().any(K::failed) {
            runner.queue.failed.fetch_add(1, Ordering::Relaxed);
        }
        for (member, outcome) in batch.into_iter().zip(outcomes) {
            for rider in member.riders {
                let _ = rider.send(K::rider_outcome(&outcome));
            }
            // The caller may have gone away meanwhile; the work is done.
            let _ = member.job.reply.send(outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests are numbers; equal ones ride along, odd ones after an even
    /// one wait.
    struct Numbers;

    impl BatchKind for Numbers {
        type Request = u32;
        type Outcome = u32;
        const MAX_BATCH: usize = 3;
        const MAX_RUNNING: usize = 1;

        fn admit(batch: &[&u32], request: &u32) -> Admission {
            if let Some(at) = batch.iter().position(|n| *n == request) {
                Admission::RideAlong(at)
            } else if request % 2 == 1 && batch.iter().any(|n| *n % 2 == 0) {
                Admission::Later
            } else {
                Admission::Join
            }
        }

        fn rider_outcome(leader: &u32) -> u32 {
            leader + 1000
        }

        fn failed(_: &u32) -> bool {
            false
        }

        /// Panics on 13.
        async fn run(_: &Reader, requests: &[&u32]) -> Vec<u32> {
            assert!(!requests.contains(&&13), "unlucky");
            requests.iter().map(|n| **n * 10).collect()
        }
    }

    fn enqueue(queue: &Batcher<Numbers>, request: u32) -> oneshot::Receiver<u32> {
        let (reply, outcome) = oneshot::channel();
        queue.lock().waiting.push_back(Job { request, reply });
        outcome
    }

    fn numbers(batch: &[Member<Numbers>]) -> Vec<u32> {
        batch.iter().map(|m| m.job.request).collect()
    }

    #[test]
    fn a_batch_takes_what_may_join_in_order_and_leaves_the_rest_in_place() {
        let queue = Batcher::<Numbers>::default();
        let _outcomes: Vec<_> = [2, 3, 2, 4, 5, 6, 8]
            .into_iter()
            .map(|n| enqueue(&queue, n))
            .collect();
        let batch = take(&queue);
        assert_eq!(numbers(&batch), [2, 4, 6]);
        assert_eq!(batch[0].riders.len(), 1, "the second 2 rides along");
        assert_eq!(numbers(&take(&queue)), [3, 5, 8]);
        assert!(take(&queue).is_empty());
    }

    fn take(queue: &Batcher<Numbers>) -> Vec<Member<Numbers>> {
        queue.take_batch()
    }

    /// A reader on a fresh SQLite file (the toy kind reads nothing), and
    /// the directory that holds it.
    async fn reader() -> (tempfile::TempDir, Reader) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let url = format!("sqlite://{}", dir.path().join("queue.db").display());
        let (db, _, _) = crate::service::testing::shop(&url, "buyer@example.com").await;
        (
            dir,
            Reader::new(db, &url, &crate::db::PoolSettings::default()),
        )
    }

    #[test]
    fn a_request_whose_caller_went_away_is_left_out() {
        let queue = Batcher::<Numbers>::default();
        let gone = enqueue(&queue, 2);
        let _kept = enqueue(&queue, 4);
        drop(gone);
        assert_eq!(numbers(&take(&queue)), [4]);
        assert_eq!(queue.waiting(), 0);
    }

    /// At shutdown the runtime drops the runner's task: what waits is
    /// dropped unrun (its caller hears so), and no runner is started on a
    /// runtime that would drop it at once (which recursed until the stack
    /// overflowed).
    #[tokio::test]
    async fn a_runner_cancelled_at_shutdown_drops_what_waits_and_starts_none() {
        let (_dir, reader) = reader().await;
        let queue = Arc::new(Batcher::<Numbers>::default());
        let outcome = enqueue(&queue, 2);
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

    #[tokio::test]
    async fn riders_get_their_leaders_outcome_and_everyone_is_answered() {
        let (_dir, reader) = reader().await;
        let queue = Arc::new(Batcher::<Numbers>::default());
        let outcomes = queue.enqueue(&reader, &[2, 2, 3, 4, 6, 8]);
        let mut got = Vec::new();
        for outcome in outcomes {
            got.push(outcome.await.expect("answered"));
        }
        assert_eq!(got, [20, 1020, 30, 40, 60, 80]);
        // [2 (+2), 4, 6], then [3, 8].
        assert_eq!(queue.statements_run(), (2, 5, 0));
    }

    /// A statement that panics leaves its requests unanswered (their
    /// callers hear they were not run), and the runner goes on.
    #[tokio::test]
    async fn a_panicking_statement_fails_its_requests_only() {
        let (_dir, reader) = reader().await;
        let queue = Arc::new(Batcher::<Numbers>::default());
        let outcomes = queue.enqueue(&reader, &[13, 15, 2, 4]);
        let mut got = Vec::new();
        for outcome in outcomes {
            got.push(outcome.await.ok());
        }
        // [13, 15, 2] panicked; [4] ran.
        assert_eq!(got, [None, None, None, Some(40)]);
        assert_eq!(queue.statements_run(), (2, 4, 1));
        assert_eq!(queue.lock().running, 0);
    }
}
