//! PostgreSQL connections for the request path's single statements, kept
//! outside the sqlx pool.
//!
//! sqlx's pool pings every connection when it is returned to the pool
//! (sqlx-core 0.9, `Floating::return_to_pool`, unconditionally): a second
//! round trip after every statement, which the server answers with a
//! context switch and a wake-up of its own. A balance request made four
//! round trips where the database ceiling (pgbench running the same two
//! statements) makes two; the pings were a sixth of the service's CPU and
//! kept every connection busy twice as long (docs/benchmarks.md).
//!
//! [`DirectPg`] runs one statement at a time on connections kept in a plain
//! list, and puts a connection back without a ping when its statement came
//! back complete: rows up to ReadyForQuery, or an error the server sent (sqlx
//! stops reading at the ErrorResponse; the next statement or ping on the
//! connection first drains what is left, `wait_until_ready`). A connection
//! whose session ended (FATAL, or SQLSTATE classes 08 and 57P0: terminated,
//! shutting down, a proxy that closed it) is dropped and the statement counts
//! as unavailable (503); one that failed any other way (I/O, protocol) is
//! dropped too.
//!
//! A statement whose request was dropped before it finished (the client went
//! away, the request timed out) keeps its connection and its slot: a
//! background task pings the connection, which waits for the rest of the
//! answer (at most the statement timeout), puts it back and only then frees
//! the slot. The server may still be running the statement, so opening a new
//! connection at once would exceed the budget; this is what sqlx's pool does
//! for a connection dropped in use.
//!
//! Otherwise it behaves like the pool: at most its share of
//! `max_connections` at once (see [`PoolSettings::postgres_direct_connections`]),
//! a caller waits up to the acquire timeout for one, opening one is retried
//! until then while the server refuses (restarting, too many clients), a
//! connection idle for a second is pinged before use, and one idle for ten
//! minutes or open for thirty is closed. The session's `statement_timeout`
//! is the pool's, and statements are not logged by sqlx (as on the pool).
//!
//! Only statements that are complete on their own run here: reads in
//! autocommit, and the one-statement completion (data-modifying CTEs, atomic
//! and committed on their own). Transactions stay on the pool.

use std::{
    str::FromStr,
    sync::{Arc, Mutex, PoisonError, Weak},
    time::Duration,
};

use sea_orm::{
    ConnAcquireErr, DbErr, QueryResult, RuntimeErr, Statement,
    sea_query::Values,
    sqlx::{
        self, ConnectOptions, Connection,
        postgres::{PgConnectOptions, PgConnection, PgDatabaseError, PgSeverity},
    },
};
use sea_query_sqlx::SqlxValues;
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::{Instant, timeout, timeout_at},
};

use super::{IDLE_BEFORE_PING, PoolSettings};

/// An idle connection is closed after this long unused, as sqlx's pool does.
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// A connection is closed when it goes back after this long open, as sqlx's
/// pool does (server-side memory of a session is given back now and then).
const MAX_LIFETIME: Duration = Duration::from_secs(1800);
/// How often idle connections are checked for the two limits above.
const REAP_EVERY: Duration = Duration::from_secs(30);
/// Time given to a dropped statement's answer beyond the statement timeout.
const DRAIN_MARGIN: Duration = Duration::from_secs(1);

/// What a failed statement left of its connection.
#[derive(Debug, PartialEq, Eq)]
enum Session {
    /// The server answered with an error and is ready for the next one.
    Usable,
    /// The session is over (see the module docs): nothing was done.
    Ended,
    /// Anything else: I/O, protocol, decoding. Not reused.
    Broken,
}

fn session_state(err: &sqlx::Error) -> Session {
    let Some(db_err) = err.as_database_error() else {
        return Session::Broken;
    };
    let Some(pg) = db_err.try_downcast_ref::<PgDatabaseError>() else {
        return Session::Broken;
    };
    let code = pg.code();
    if matches!(pg.severity(), PgSeverity::Fatal | PgSeverity::Panic)
        || code.starts_with("08")
        || code.starts_with("57P0")
    {
        Session::Ended
    } else {
        Session::Usable
    }
}

/// Errors on opening a connection that sqlx's pool retries until its
/// deadline: the server refuses for now (restarting, too many clients).
fn retry_connect(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
        sqlx::Error::Database(db_err) => {
            matches!(db_err.code().as_deref(), Some("53300" | "57P03"))
        }
        _ => false,
    }
}

/// Direct PostgreSQL connections; see the module docs.
pub struct DirectPg {
    options: PgConnectOptions,
    /// Idle connections, the most recently used last.
    idle: Mutex<Vec<Live>>,
    /// One permit per connection that may be open.
    slots: Arc<Semaphore>,
    max: usize,
    acquire_timeout: Duration,
    statement_timeout: Duration,
}

/// An open connection and when it was opened and last used.
struct Live {
    connection: PgConnection,
    opened: Instant,
    idle_since: Instant,
}

/// A connection checked out for one statement, with its slot. Dropped
/// without [`Checkout::finish`] (the statement was interrupted), it drains
/// the connection in the background before the slot is freed.
struct Checkout {
    owner: Arc<DirectPg>,
    live: Option<Live>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Checkout {
    fn drop(&mut self) {
        let (Some(mut live), Some(permit)) = (self.live.take(), self.permit.take()) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let owner = self.owner.clone();
        runtime.spawn(async move {
            let limit = owner.statement_timeout + DRAIN_MARGIN;
            if let Ok(Ok(())) = timeout(limit, live.connection.ping()).await {
                owner.checkin(live);
            }
            drop(permit);
        });
    }
}

impl Checkout {
    fn connection(&mut self) -> &mut PgConnection {
        &mut self.live.as_mut().expect("checked out").connection
    }

    /// Puts the connection back after its statement's `result` (see the
    /// module docs) and turns an error into the pool's kind of error.
    fn settle<T>(self, result: Result<T, sqlx::Error>) -> Result<T, DbErr> {
        match result {
            Ok(value) => {
                self.finish(true);
                Ok(value)
            }
            Err(err) => {
                let session = session_state(&err);
                self.finish(session == Session::Usable);
                let err = RuntimeErr::SqlxError(Arc::new(err));
                Err(match session {
                    // Reported like a pool that cannot reach the server.
                    Session::Ended => DbErr::Conn(err),
                    Session::Usable | Session::Broken => DbErr::Query(err),
                })
            }
        }
    }

    /// The statement came back: the connection goes back when `reuse`, and
    /// is closed otherwise; the slot is free either way.
    fn finish(mut self, reuse: bool) {
        let live = self.live.take().expect("checked out");
        if reuse {
            self.owner.checkin(live);
        }
    }
}

impl DirectPg {
    /// `None` when `url` is not one sqlx parses (the pool reports that).
    /// Inside a tokio runtime, a task closes connections idle or open for
    /// too long; it ends when the returned value is dropped.
    pub fn for_url(url: &str, settings: &PoolSettings) -> Option<Arc<DirectPg>> {
        let statement_ms = settings.statement_timeout.as_millis().to_string();
        let options = PgConnectOptions::from_str(url)
            .ok()?
            .options([("statement_timeout", statement_ms)])
            .disable_statement_logging();
        let max = settings.postgres_direct_connections() as usize;
        let direct = Arc::new(DirectPg {
            options,
            idle: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(max)),
            max,
            acquire_timeout: settings.acquire_timeout,
            statement_timeout: settings.statement_timeout,
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(reap_idle(Arc::downgrade(&direct)));
        }
        Some(direct)
    }

    /// The first row of `stmt`, a statement complete on its own. Taken by
    /// value: its values move into the query instead of being copied.
    pub async fn one(self: &Arc<Self>, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        let mut checkout = self.checkout().await?;
        let values = stmt.values.unwrap_or(Values(Vec::new()));
        let result = sqlx::query_with(sqlx::AssertSqlSafe(stmt.sql.as_str()), SqlxValues(values))
            .fetch_optional(checkout.connection())
            .await;
        checkout.settle(result.map(|row| row.map(QueryResult::from)))
    }

    /// Every row of `stmt`, a statement complete on its own.
    pub async fn all(self: &Arc<Self>, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        let mut checkout = self.checkout().await?;
        let values = stmt.values.unwrap_or(Values(Vec::new()));
        let result = sqlx::query_with(sqlx::AssertSqlSafe(stmt.sql.as_str()), SqlxValues(values))
            .fetch_all(checkout.connection())
            .await;
        checkout.settle(result.map(|rows| rows.into_iter().map(QueryResult::from).collect()))
    }

    /// A slot and an idle connection (pinged first when it sat idle), or a
    /// new one, within the acquire timeout.
    async fn checkout(self: &Arc<Self>) -> Result<Checkout, DbErr> {
        let deadline = Instant::now() + self.acquire_timeout;
        let timed_out = || DbErr::ConnectionAcquire(ConnAcquireErr::Timeout);
        let permit = timeout_at(deadline, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| timed_out())?
            .expect("the semaphore is never closed");
        let mut checkout = Checkout {
            owner: self.clone(),
            live: None,
            permit: Some(permit),
        };
        loop {
            let Some(live) = self.lock_idle().pop() else {
                break;
            };
            let pinged = live.idle_since.elapsed() >= IDLE_BEFORE_PING;
            checkout.live = Some(live);
            if !pinged {
                return Ok(checkout);
            }
            match timeout_at(deadline, Box::pin(checkout.connection().ping())).await {
                Ok(Ok(())) => return Ok(checkout),
                // Gone while idle (server restarted, network cut): next one.
                Ok(Err(_)) => checkout.live = None,
                Err(_) => return Err(timed_out()),
            }
        }
        let mut backoff = Duration::from_millis(10);
        loop {
            // Boxed: the connect future is several kilobytes and rarely
            // needed; inline, it would be copied with every statement's future.
            match timeout_at(
                deadline,
                Box::pin(PgConnection::connect_with(&self.options)),
            )
            .await
            {
                Ok(Ok(connection)) => {
                    let now = Instant::now();
                    checkout.live = Some(Live {
                        connection,
                        opened: now,
                        idle_since: now,
                    });
                    return Ok(checkout);
                }
                Ok(Err(err)) if retry_connect(&err) && Instant::now() + backoff < deadline => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Ok(Err(err)) => return Err(DbErr::Conn(RuntimeErr::SqlxError(Arc::new(err)))),
                Err(_) => return Err(timed_out()),
            }
        }
    }

    /// Puts `live` back, unless it has been open for [`MAX_LIFETIME`].
    fn checkin(&self, mut live: Live) {
        let now = Instant::now();
        if now.duration_since(live.opened) > MAX_LIFETIME {
            close(vec![live]);
            return;
        }
        live.idle_since = now;
        self.lock_idle().push(live);
    }

    /// Removes the connections idle for [`IDLE_TIMEOUT`] or open for
    /// [`MAX_LIFETIME`] (the least recently used come first in the list).
    fn expired(&self) -> Vec<Live> {
        let now = Instant::now();
        let mut idle = self.lock_idle();
        let (expired, kept) = idle.drain(..).partition(|live: &Live| {
            now.duration_since(live.idle_since) > IDLE_TIMEOUT
                || now.duration_since(live.opened) > MAX_LIFETIME
        });
        *idle = kept;
        expired
    }

    /// (open, idle, maximum): a connection counts as open from the moment
    /// a caller holds its slot.
    pub fn stats(&self) -> (u32, u32, u32) {
        let idle = self.lock_idle().len();
        let in_use = self.max.saturating_sub(self.slots.available_permits());
        let to_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        (to_u32(in_use + idle), to_u32(idle), to_u32(self.max))
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Live>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connections open and idle right now.
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.lock_idle().len()
    }
}

/// Closes `connections` politely (Terminate), in the background.
fn close(connections: Vec<Live>) {
    if connections.is_empty() {
        return;
    }
    tokio::spawn(async move {
        for live in connections {
            let _ = live.connection.close().await;
        }
    });
}

/// Every [`REAP_EVERY`], closes the idle connections past their limits,
/// until `direct` is dropped.
async fn reap_idle(direct: Weak<DirectPg>) {
    let mut tick = tokio::time::interval(REAP_EVERY);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(direct) = direct.upgrade() else {
            return;
        };
        close(direct.expired());
    }
}

#[cfg(test)]
mod tests {
    //! On the server named by `MASTERPAY_TEST_POSTGRES_URL` (skipped when it
    //! is unset, like the integration tests). Statements that must stay
    //! running wait on an advisory lock the test holds, never on a clock.

    use sea_orm::{
        ConnectionTrait, Database, DatabaseConnection, DbBackend, TransactionTrait, Value,
    };

    use super::*;
    use crate::db::is_unavailable;

    /// The server's URL and an admin connection to it, or `None` (with a
    /// note) when no server is configured.
    async fn server() -> Option<(String, DatabaseConnection)> {
        let url = std::env::var("MASTERPAY_TEST_POSTGRES_URL").unwrap_or_default();
        if url.is_empty() {
            eprintln!("skipped: MASTERPAY_TEST_POSTGRES_URL is not set");
            return None;
        }
        let admin = Database::connect(url.as_str()).await.unwrap();
        Some((url, admin))
    }

    /// Settings whose PostgreSQL share gives `direct` direct connections.
    fn settings(direct: u32) -> PoolSettings {
        let settings = PoolSettings {
            max_connections: direct + 1,
            acquire_timeout: Duration::from_millis(500),
            statement_timeout: Duration::from_secs(30),
        };
        assert_eq!(settings.postgres_direct_connections(), direct);
        settings
    }

    fn sql(text: &str, values: Vec<Value>) -> Statement {
        Statement::from_sql_and_values(DbBackend::Postgres, text, values)
    }

    async fn backend_pid(direct: &Arc<DirectPg>) -> i32 {
        let row = direct
            .one(sql("SELECT pg_backend_pid()", vec![]))
            .await
            .unwrap()
            .unwrap();
        row.try_get_by_index(0).unwrap()
    }

    /// A random advisory-lock key, so that tests running side by side on
    /// one server never wait on each other.
    fn lock_key() -> i64 {
        rand::random::<i64>()
    }

    fn wait_on(key: i64) -> Statement {
        sql(
            "SELECT pg_advisory_xact_lock($1), 1::int4",
            vec![Value::from(key)],
        )
    }

    /// Holds `key` in a transaction of another session until it is dropped.
    async fn hold(admin: &DatabaseConnection, key: i64) -> sea_orm::DatabaseTransaction {
        let txn = admin.begin().await.unwrap();
        txn.execute_raw(sql(
            "SELECT pg_advisory_xact_lock($1)",
            vec![Value::from(key)],
        ))
        .await
        .unwrap();
        txn
    }

    /// Waits until `count` sessions wait on a lock (polling the server's own
    /// view; no sleep decides anything).
    async fn until_waiting(admin: &DatabaseConnection, count: i64) {
        loop {
            let row = admin
                .query_one_raw(sql(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                     AND query LIKE 'SELECT pg_advisory_xact_lock($1), 1::int4%'",
                    vec![],
                ))
                .await
                .unwrap()
                .unwrap();
            if row.try_get_by_index::<i64>(0).unwrap() >= count {
                return;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A statement answered with an error leaves its connection reusable.
    #[tokio::test]
    async fn a_connection_is_reused_after_an_error_answer() {
        let Some((url, _admin)) = server().await else {
            return;
        };
        let direct = DirectPg::for_url(&url, &settings(4)).unwrap();
        let first = backend_pid(&direct).await;
        let err = direct
            .one(sql("SELECT 1 / 0", vec![]))
            .await
            .expect_err("division by zero");
        assert!(!is_unavailable(&err), "{err:?}");
        assert_eq!(direct.idle_count(), 1);
        assert_eq!(backend_pid(&direct).await, first, "reused after an error");
    }

    /// A statement dropped before it finished keeps its slot (the server
    /// may still be running it) until its answer has been drained; then its
    /// connection is reused, and the next statement never reads the rest of
    /// the old answer.
    #[tokio::test]
    async fn an_interrupted_statement_keeps_its_slot_until_drained() {
        let Some((url, admin)) = server().await else {
            return;
        };
        let direct = DirectPg::for_url(&url, &settings(1)).unwrap();
        let first = backend_pid(&direct).await;

        let key = lock_key();
        let held = hold(&admin, key).await;
        let waiting = tokio::spawn({
            let direct = direct.clone();
            async move { direct.one(wait_on(key)).await }
        });
        until_waiting(&admin, 1).await;
        waiting.abort();
        assert!(waiting.await.unwrap_err().is_cancelled());
        assert_eq!(direct.stats(), (1, 0, 1), "the slot stays taken");
        let err = direct
            .one(sql("SELECT 1", vec![]))
            .await
            .expect_err("no second connection while the first is busy");
        assert!(is_unavailable(&err), "{err:?}");

        held.rollback().await.unwrap();
        while direct.idle_count() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let row = direct
            .one(sql("SELECT 2::int4", vec![]))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.try_get_by_index::<i32>(0).unwrap(), 2);
        assert_eq!(backend_pid(&direct).await, first, "drained and reused");
    }

    /// Only a server that refuses for now is retried on connect.
    #[test]
    fn refused_connections_are_retried() {
        let refused = sqlx::Error::Io(std::io::ErrorKind::ConnectionRefused.into());
        assert!(retry_connect(&refused));
        let reset = sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into());
        assert!(!retry_connect(&reset));
        assert!(!retry_connect(&sqlx::Error::PoolTimedOut));
    }

    /// The pool's `statement_timeout` holds on direct connections.
    #[tokio::test]
    async fn the_statement_timeout_applies() {
        let Some((url, admin)) = server().await else {
            return;
        };
        let settings = PoolSettings {
            statement_timeout: Duration::from_millis(200),
            ..settings(2)
        };
        let direct = DirectPg::for_url(&url, &settings).unwrap();
        let key = lock_key();
        let held = hold(&admin, key).await;
        let err = direct.one(wait_on(key)).await.expect_err("cancelled");
        held.rollback().await.unwrap();
        match &err {
            DbErr::Query(RuntimeErr::SqlxError(e)) => {
                let code = e.as_database_error().and_then(|d| d.code());
                assert_eq!(code.as_deref(), Some("57014"), "{err:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(direct.idle_count(), 1, "a cancelled statement finished");
    }

    /// No more than `max_connections` statements run at once; the next
    /// caller waits up to the acquire timeout and then counts as
    /// unavailable (503).
    #[tokio::test]
    async fn at_most_max_connections_run_at_once() {
        let Some((url, admin)) = server().await else {
            return;
        };
        let direct = DirectPg::for_url(&url, &settings(2)).unwrap();
        let key = lock_key();
        let held = hold(&admin, key).await;
        let blocked: Vec<_> = (0..2)
            .map(|_| {
                let direct = direct.clone();
                tokio::spawn(async move { direct.one(wait_on(key)).await })
            })
            .collect();
        until_waiting(&admin, 2).await;
        let err = direct
            .one(sql("SELECT 1", vec![]))
            .await
            .expect_err("no free connection");
        assert!(is_unavailable(&err), "{err:?}");
        held.rollback().await.unwrap();
        for statement in blocked {
            assert!(statement.await.unwrap().unwrap().is_some());
        }
        assert_eq!(direct.idle_count(), 2);
    }

    /// A connection the server closed while it sat idle is replaced: at most
    /// the first statement after it fails (as unavailable), the next runs
    /// on a new connection.
    #[tokio::test]
    async fn a_connection_closed_by_the_server_is_replaced() {
        let Some((url, admin)) = server().await else {
            return;
        };
        let direct = DirectPg::for_url(&url, &settings(1)).unwrap();
        let first = backend_pid(&direct).await;
        admin
            .execute_raw(sql(
                "SELECT pg_terminate_backend($1)",
                vec![Value::from(first)],
            ))
            .await
            .unwrap();
        let pid = match direct.one(sql("SELECT pg_backend_pid()", vec![])).await {
            Ok(row) => row.unwrap().try_get_by_index::<i32>(0).unwrap(),
            Err(err) => {
                assert!(is_unavailable(&err), "{err:?}");
                assert_eq!(direct.idle_count(), 0, "the broken connection is gone");
                backend_pid(&direct).await
            }
        };
        assert_ne!(pid, first);
    }
}
