//! Whether the database accepts writes, as `/readyz` reports it.
//!
//! A database that answers may still refuse every write: a PostgreSQL
//! standby or a node made read-only, a MariaDB server in `read_only` mode, an
//! SQLite file on a full disk or a read-only one. An instance in front of such
//! a database must leave its load balancer, so each backend's store checks
//! for it in its own way ([`crate::store::Store::readiness`]), and this module
//! holds what they share:
//!
//! - the answer is kept for [`FRESH_FOR`], and concurrent checks wait for
//!   one, so that probes, however many, cost the database at most one check
//!   a second;
//! - the request path adds no statement for it: a write that the database
//!   refused marks the store ([`WriteHealth::note`]), and the next check
//!   runs at once (not from the kept answer) and knows that a write was
//!   refused (SQLite can tell a full disk only by writing); a write that
//!   succeeds clears the mark.
//!
//! A connection on which a write was refused is closed instead of going back
//! to its pool: it may have landed on a node that is read-only for good (a
//! demoted primary, a standby), and another may land on the writable one.
//! When the database accepts writes again, the idle connections opened while
//! it refused them are closed as well ([`close_idle`]).

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use sea_orm::sqlx::{self, pool::PoolConnection};

use super::{CompleteError, StoreError};

/// How long a check's answer is kept.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

/// What the readiness check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// The database answers and accepts writes.
    Ready,
    /// It does not; the reason, as `/readyz` says it.
    NotReady(&'static str),
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        matches!(self, Readiness::Ready)
    }

    /// Why `err`, the failure of a check, makes the store not ready.
    pub fn of_error(err: &StoreError) -> Readiness {
        Readiness::NotReady(match err {
            StoreError::Unavailable(_) | StoreError::Contended(_) => UNREACHABLE,
            StoreError::WritesRefused(_) => READ_ONLY,
            StoreError::Failed(_) | StoreError::CheckViolated(_) => {
                tracing::warn!(error = %err, "readiness check failed");
                "database check failed"
            }
        })
    }
}

/// The reason of a database that does not answer in time.
pub const UNREACHABLE: &str = "database unreachable";
/// The reason of a database that refuses writes.
pub const READ_ONLY: &str = "database is read-only";

/// An error that may say the database refused a write.
pub trait WriteError {
    fn refuses_writes(&self) -> bool;
}

impl WriteError for StoreError {
    fn refuses_writes(&self) -> bool {
        matches!(self, StoreError::WritesRefused(_))
    }
}

impl WriteError for CompleteError {
    fn refuses_writes(&self) -> bool {
        match self {
            CompleteError::UpdateFailed(err)
            | CompleteError::ProcessingFailed(err)
            | CompleteError::Unavailable(err) => err.refuses_writes(),
            _ => false,
        }
    }
}

/// A store's readiness: the mark its writes leave and the kept answer.
pub struct WriteHealth {
    /// A request's write was refused since the last check found the store
    /// ready.
    refused: AtomicBool,
    /// The last check's answer and when it was found.
    last: tokio::sync::Mutex<Option<(Instant, Readiness)>>,
    /// How long an answer is kept ([`FRESH_FOR`]).
    fresh_for: Duration,
}

impl Default for WriteHealth {
    fn default() -> Self {
        WriteHealth {
            refused: AtomicBool::new(false),
            last: tokio::sync::Mutex::new(None),
            fresh_for: FRESH_FOR,
        }
    }
}

impl WriteHealth {
    /// Notes how a request's write ended: marks a refusal, clears the mark
    /// on success (a load, and a store only when it changes).
    pub fn note<T, E: WriteError>(&self, outcome: &Result<T, E>) {
        let refused = match outcome {
            Ok(_) => false,
            Err(err) if err.refuses_writes() => true,
            Err(_) => return,
        };
        if self.refused.load(Ordering::Relaxed) != refused {
            self.refused.store(refused, Ordering::Relaxed);
        }
    }

    /// The kept answer while it is fresh (and no write was refused since a
    /// ready one), else what `check` finds.
    pub async fn check<F>(&self, check: impl FnOnce(Probe) -> F) -> Readiness
    where
        F: Future<Output = Readiness>,
    {
        let mut last = self.last.lock().await;
        let refused = self.refused.load(Ordering::Relaxed);
        if let Some((at, readiness)) = &*last
            && at.elapsed() < self.fresh_for
            && !(refused && readiness.is_ready())
        {
            return readiness.clone();
        }
        let probe = Probe {
            refused,
            was_ready: last.as_ref().is_none_or(|(_, last)| last.is_ready()),
        };
        let readiness = check(probe).await;
        if readiness.is_ready() {
            self.refused.store(false, Ordering::Relaxed);
        }
        *last = Some((Instant::now(), readiness.clone()));
        readiness
    }
}

impl WriteHealth {
    /// [`WriteHealth::check`] of a store on a sqlx pool: `writable` checks
    /// it, and when the database accepts writes again after refusing them,
    /// the pool's idle connections are closed ([`close_idle`]).
    pub async fn check_pool<'p, DB: sqlx::Database, F>(
        &self,
        pool: &'p sqlx::Pool<DB>,
        writable: impl FnOnce(&'p sqlx::Pool<DB>) -> F,
    ) -> Readiness
    where
        F: Future<Output = Readiness>,
    {
        self.check(move |probe| async move {
            let readiness = writable(pool).await;
            if readiness.is_ready() && !probe.was_ready {
                close_idle(pool);
            }
            readiness
        })
        .await
    }
}

/// Closes `conn` instead of pooling it again when `outcome` says the
/// database refused its write (see the module docs).
pub fn close_if_refused<DB: sqlx::Database, T, E: WriteError>(
    conn: &mut PoolConnection<DB>,
    outcome: &Result<T, E>,
) {
    if outcome.as_ref().is_err_and(WriteError::refuses_writes) {
        conn.close_on_drop();
    }
}

/// What a check is told.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    /// A request's write was refused since the store was last found ready.
    pub refused: bool,
    /// The last check found the store ready (or there was none).
    pub was_ready: bool,
}

/// Closes the idle connections of `pool`: when the database accepts writes
/// again, those opened while it refused them may be read-only sessions for
/// good (PostgreSQL's `default_transaction_read_only` is read when a session
/// starts) or sit on the node that still refuses them.
pub fn close_idle<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) {
    for _ in 0..pool.num_idle() {
        match pool.try_acquire() {
            Some(mut conn) => conn.close_on_drop(),
            None => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use super::*;

    /// A [`WriteHealth`] keeping its answers for `fresh_for`.
    fn kept_for(fresh_for: Duration) -> WriteHealth {
        WriteHealth {
            fresh_for,
            ..WriteHealth::default()
        }
    }

    /// Checks `health` with a check that counts its runs in `runs`, records
    /// what it was told in `told`, and answers `answer`.
    async fn check(
        health: &WriteHealth,
        runs: &AtomicUsize,
        told: &std::sync::Mutex<Vec<(bool, bool)>>,
        answer: Readiness,
    ) -> Readiness {
        health
            .check(|probe| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                told.lock().unwrap().push((probe.refused, probe.was_ready));
                answer
            })
            .await
    }

    fn refused() -> Result<(), StoreError> {
        Err(StoreError::WritesRefused("read-only".into()))
    }

    #[tokio::test]
    async fn an_answer_is_kept_until_a_refused_write_asks_for_a_new_one() {
        let health = kept_for(Duration::MAX);
        let (runs, told) = (AtomicUsize::new(0), std::sync::Mutex::default());
        assert!(
            check(&health, &runs, &told, Readiness::Ready)
                .await
                .is_ready()
        );
        assert!(
            check(&health, &runs, &told, Readiness::NotReady("x"))
                .await
                .is_ready()
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1, "kept");
        // Other failures and successes leave the kept answer.
        health.note(&Err::<(), _>(StoreError::Failed("syntax".into())));
        health.note(&Ok::<_, StoreError>(()));
        assert!(
            check(&health, &runs, &told, Readiness::NotReady("x"))
                .await
                .is_ready()
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);

        health.note(&refused());
        let not_ready = check(&health, &runs, &told, Readiness::NotReady(READ_ONLY)).await;
        assert_eq!(not_ready, Readiness::NotReady(READ_ONLY));
        // A not-ready answer is kept too, however many writes are refused.
        health.note(&refused());
        let kept = check(&health, &runs, &told, Readiness::Ready).await;
        assert_eq!(kept, Readiness::NotReady(READ_ONLY));
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(*told.lock().unwrap(), [(false, true), (true, true)]);

        let health = kept_for(Duration::ZERO);
        health.note(&refused());
        check(&health, &runs, &told, Readiness::NotReady(READ_ONLY)).await;
        check(&health, &runs, &told, Readiness::Ready).await;
        // Ready: the mark is cleared.
        check(&health, &runs, &told, Readiness::Ready).await;
        assert_eq!(
            told.lock().unwrap()[2..],
            [(true, true), (true, false), (false, true)]
        );
    }

    #[tokio::test]
    async fn a_completion_refused_for_want_of_writes_marks_the_store() {
        let health = kept_for(Duration::MAX);
        let (runs, told) = (AtomicUsize::new(0), std::sync::Mutex::default());
        check(&health, &runs, &told, Readiness::Ready).await;
        health.note(&Err::<(), _>(CompleteError::AlreadyCompleted));
        check(&health, &runs, &told, Readiness::Ready).await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let unavailable = CompleteError::Unavailable(StoreError::WritesRefused("1290".into()));
        health.note(&Err::<(), _>(unavailable));
        check(&health, &runs, &told, Readiness::Ready).await;
        assert_eq!(*told.lock().unwrap(), [(false, true), (true, true)]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_probes_share_one_check() {
        let health = Arc::new(kept_for(Duration::MAX));
        let runs = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        let probes: Vec<_> = (0..16)
            .map(|_| {
                let (health, runs, release) = (health.clone(), runs.clone(), release.clone());
                tokio::spawn(async move {
                    health
                        .check(|_| async move {
                            runs.fetch_add(1, Ordering::SeqCst);
                            release.notified().await;
                            Readiness::Ready
                        })
                        .await
                })
            })
            .collect();
        release.notify_one();
        for probe in probes {
            assert!(probe.await.unwrap().is_ready());
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}
