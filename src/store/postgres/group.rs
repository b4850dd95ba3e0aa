//! Requests that arrive while statements are in flight wait here and go to
//! the database together, as one statement.
//!
//! What a PostgreSQL request costs the database is mostly its statement and
//! its commit, not its rows: a statement of 32 reads or 32 completions costs
//! little more than a statement of one. So at most [`Groups::max_running`]
//! statements of a kind run at once; a request that finds one free starts
//! at once (a group of one, no timer, no wait), and the requests that arrive
//! meanwhile are taken, up to [`Groups::max_size`] at a time, by the next
//! statement, in the order they arrived. A request with the same key as one
//! already taken (the same order, for completions) waits until that one's
//! group has finished, so the first to arrive is the first to run. A request
//! whose caller went away before its group started is left out. A panic
//! inside a statement fails only its own group's requests (their callers
//! hear no answer), and the runner goes on.

use std::{
    collections::VecDeque,
    panic::AssertUnwindSafe,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use futures_util::{FutureExt, future::BoxFuture};
use tokio::sync::oneshot;

/// Runs one group's statement: one outcome per request, in their order.
pub type RunGroup<R, O> = Box<dyn Fn(Vec<R>) -> BoxFuture<'static, Vec<O>> + Send + Sync>;

pub struct Groups<R, O> {
    waiting: Mutex<Waiting<R, O>>,
    run: RunGroup<R, O>,
    /// Statements in flight at most.
    max_running: usize,
    /// Requests in one statement at most.
    max_size: usize,
    /// The key of a request that must not run beside another with the same
    /// key; `None` for a request that may run beside any.
    key: fn(&R) -> Option<&str>,
}

struct Waiting<R, O> {
    requests: VecDeque<(R, oneshot::Sender<O>)>,
    running: usize,
    /// The keys of the requests in the groups being run.
    in_flight: Vec<String>,
}

impl<R: Send + 'static, O: Send + 'static> Groups<R, O> {
    pub fn new(
        max_running: usize,
        max_size: usize,
        key: fn(&R) -> Option<&str>,
        run: RunGroup<R, O>,
    ) -> Arc<Groups<R, O>> {
        Arc::new(Groups {
            waiting: Mutex::new(Waiting {
                requests: VecDeque::new(),
                running: 0,
                in_flight: Vec::new(),
            }),
            run,
            max_running,
            max_size,
            key,
        })
    }

    /// The outcome of `request`, run in the next group; `None` when its
    /// group's statement panicked.
    pub async fn submit(self: &Arc<Self>, request: R) -> Option<O> {
        let (answer, outcome) = oneshot::channel();
        let start_runner = {
            let mut waiting = self.lock();
            waiting.requests.push_back((request, answer));
            let free = waiting.running < self.max_running;
            if free {
                waiting.running += 1;
            }
            free
        };
        if start_runner {
            tokio::spawn(Arc::clone(self).run_groups());
        }
        outcome.await.ok()
    }

    /// Runs groups until none waits.
    async fn run_groups(self: Arc<Self>) {
        let mut place = RunnerPlace {
            groups: &self,
            held: true,
        };
        let mut finished = Vec::new();
        loop {
            let group = self.next_group(&mut place, &finished);
            if group.is_empty() {
                return;
            }
            finished = group
                .iter()
                .filter_map(|(request, _)| (self.key)(request).map(str::to_owned))
                .collect();
            let (requests, answers): (Vec<R>, Vec<_>) = group.into_iter().unzip();
            let run = AssertUnwindSafe(async { (self.run)(requests).await }).catch_unwind();
            if let Ok(outcomes) = run.await {
                for (answer, outcome) in answers.into_iter().zip(outcomes) {
                    let _ = answer.send(outcome);
                }
            }
        }
    }

    /// The next group, after the runner's last one (whose keys are
    /// `finished`) is done: waiting requests in arrival order, skipping those
    /// whose callers went away and those whose key is taken already. Empty
    /// when none can run; the runner then gives up its place, under the same
    /// lock as `submit` looks for a free one, so that no request is ever left
    /// without a runner (one whose key is taken is taken up by the runner of
    /// that key's group when it finishes).
    fn next_group(
        &self,
        place: &mut RunnerPlace<'_, R, O>,
        finished: &[String],
    ) -> Vec<(R, oneshot::Sender<O>)> {
        let mut waiting = self.lock();
        waiting.in_flight.retain(|key| !finished.contains(key));
        let mut group: Vec<(R, oneshot::Sender<O>)> = Vec::new();
        let mut later = Vec::new();
        while group.len() < self.max_size {
            let Some((request, answer)) = waiting.requests.pop_front() else {
                break;
            };
            if answer.is_closed() {
                continue;
            }
            match (self.key)(&request) {
                Some(key) if waiting.in_flight.iter().any(|taken| taken == key) => {
                    later.push((request, answer));
                }
                Some(key) => {
                    waiting.in_flight.push(key.to_owned());
                    group.push((request, answer));
                }
                None => group.push((request, answer)),
            }
        }
        while let Some(waiter) = later.pop() {
            waiting.requests.push_front(waiter);
        }
        if group.is_empty() {
            waiting.running -= 1;
            place.held = false;
        }
        group
    }
}

impl<R, O> Groups<R, O> {
    fn lock(&self) -> MutexGuard<'_, Waiting<R, O>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A runner's place among the `max_running`, given back when the runner
/// ends without having given it up (the runtime dropping it at shutdown).
struct RunnerPlace<'a, R, O> {
    groups: &'a Groups<R, O>,
    held: bool,
}

impl<R, O> Drop for RunnerPlace<'_, R, O> {
    fn drop(&mut self) {
        if self.held {
            self.groups.lock().running -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doubling(max_running: usize, max_size: usize) -> Arc<Groups<u32, (u32, usize)>> {
        Groups::new(
            max_running,
            max_size,
            |_| None,
            Box::new(|group: Vec<u32>| {
                let size = group.len();
                async move { group.into_iter().map(|n| (n * 2, size)).collect() }.boxed()
            }),
        )
    }

    /// Requests submitted together while no runner is free are answered
    /// each with its own outcome, in groups of at most `max_size`.
    #[tokio::test(flavor = "current_thread")]
    async fn waiting_requests_are_grouped_and_answered_each() {
        let groups = doubling(1, 3);
        let requests = [1, 2, 2, 3, 4, 5, 6];
        let answers =
            futures_util::future::join_all(requests.iter().map(|&n| groups.submit(n))).await;
        let mut sizes = Vec::new();
        for (request, answer) in requests.iter().zip(answers) {
            let (doubled, size) = answer.expect("answered");
            assert_eq!(doubled, request * 2);
            sizes.push(size);
        }
        assert!(sizes.iter().all(|&size| size <= 3), "{sizes:?}");
        assert!(sizes.iter().any(|&size| size > 1), "{sizes:?}");
        assert_eq!(groups.lock().running, 0, "the runner gave its place back");
    }

    /// A panic inside a group's statement leaves its callers without an
    /// answer, and the groups after it still run.
    #[tokio::test(flavor = "current_thread")]
    async fn a_panicking_group_fails_alone() {
        let groups: Arc<Groups<u32, u32>> = Groups::new(
            1,
            1,
            |_| None,
            Box::new(|group: Vec<u32>| {
                async move {
                    assert_ne!(group[0], 0, "zero panics");
                    group
                }
                .boxed()
            }),
        );
        let (zero, one) = tokio::join!(groups.submit(0), groups.submit(1));
        assert_eq!((zero, one), (None, Some(1)));
        assert_eq!(groups.submit(2).await, Some(2));
    }

    /// Requests of one key run one after the other, in arrival order, even
    /// with runners free; the others are not held up.
    #[tokio::test(flavor = "current_thread")]
    async fn requests_of_one_key_run_in_turn() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&order);
        let groups: Arc<Groups<(&'static str, u32), usize>> = Groups::new(
            2,
            8,
            |request| Some(request.0),
            Box::new(move |group: Vec<(&'static str, u32)>| {
                let seen = Arc::clone(&seen);
                async move {
                    tokio::task::yield_now().await;
                    let mut seen = seen.lock().unwrap();
                    seen.push(group.clone());
                    group.iter().map(|_| seen.len()).collect()
                }
                .boxed()
            }),
        );
        let answers = futures_util::future::join_all(
            [("a", 1), ("a", 2), ("b", 3), ("a", 4)].map(|r| groups.submit(r)),
        )
        .await;
        let groups_run = order.lock().unwrap().clone();
        // Every group holds a key once; "a" ran as 1, then 2, then 4.
        for group in &groups_run {
            let mut keys: Vec<_> = group.iter().map(|r| r.0).collect();
            keys.dedup();
            assert_eq!(keys.len(), group.len(), "{groups_run:?}");
        }
        let a_turns: Vec<u32> = groups_run
            .iter()
            .flatten()
            .filter(|r| r.0 == "a")
            .map(|r| r.1)
            .collect();
        assert_eq!(a_turns, [1, 2, 4]);
        assert!(answers.iter().all(Option::is_some));
        assert_eq!(groups.lock().running, 0);
        assert!(groups.lock().in_flight.is_empty());
    }
}
