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
//! back complete: either rows or an error the server sent, after which the
//! protocol is at a known point (sqlx reads up to ReadyForQuery); a FATAL
//! error (the server ended the session) drops it and counts as unavailable. A
//! connection whose statement did not finish (the request was dropped: the
//! client went away, the request timed out) is dropped with it, so no
//! half-read answer is ever handed to the next request; one that failed any
//! other way (I/O, protocol) is dropped too. Otherwise it behaves like the
//! pool: at most its share of `max_connections` at once (see
//! [`PoolSettings::postgres_direct_connections`]), a caller waits up to the acquire
//! timeout for one, a connection idle for a second is pinged before use, one
//! idle for ten minutes is closed, and the session's `statement_timeout` is
//! the pool's.
//!
//! Only statements that are complete on their own run here: reads in
//! autocommit, and the one-statement completion (data-modifying CTEs, atomic
//! and committed on their own). Transactions stay on the pool.

use std::{
    str::FromStr,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use sea_orm::{
    ConnAcquireErr, DbErr, QueryResult, RuntimeErr, Statement,
    sea_query::Values,
    sqlx::{
        self, Connection,
        postgres::{PgConnectOptions, PgConnection},
    },
};
use sea_query_sqlx::SqlxValues;
use tokio::{
    sync::Semaphore,
    time::{Instant, timeout_at},
};

use super::{IDLE_BEFORE_PING, PoolSettings};

/// An idle connection closed after this long unused, as sqlx's pool does.
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// What a failed statement left of its connection.
enum Session {
    /// The server answered with an error and is ready for the next one.
    Usable,
    /// The server ended the session (a FATAL error: terminated by an
    /// administrator, server shutting down) before running the statement.
    Ended,
    /// Anything else: I/O, protocol, decoding. Not reused.
    Broken,
}

fn session_state(err: &sqlx::Error) -> Session {
    let Some(db_err) = err.as_database_error() else {
        return Session::Broken;
    };
    let severity = db_err
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .map(|pg| pg.severity());
    match severity {
        Some(sqlx::postgres::PgSeverity::Fatal | sqlx::postgres::PgSeverity::Panic) => {
            Session::Ended
        }
        Some(_) => Session::Usable,
        None => Session::Broken,
    }
}

/// Direct PostgreSQL connections; see the module docs.
pub struct DirectPg {
    options: PgConnectOptions,
    /// Idle connections, the most recently used last.
    idle: Mutex<Vec<IdleConnection>>,
    /// One permit per connection that may be open.
    slots: Semaphore,
    max: usize,
    acquire_timeout: Duration,
}

struct IdleConnection {
    connection: PgConnection,
    since: Instant,
}

impl DirectPg {
    /// `None` when `url` is not one sqlx parses (the pool reports that).
    pub fn for_url(url: &str, settings: &PoolSettings) -> Option<DirectPg> {
        let statement_ms = settings.statement_timeout.as_millis().to_string();
        let options = PgConnectOptions::from_str(url)
            .ok()?
            .options([("statement_timeout", statement_ms)]);
        Some(DirectPg {
            options,
            idle: Mutex::new(Vec::new()),
            slots: Semaphore::new(settings.postgres_direct_connections() as usize),
            max: settings.postgres_direct_connections() as usize,
            acquire_timeout: settings.acquire_timeout,
        })
    }

    /// The first row of `stmt`, a statement complete on its own.
    pub async fn one(&self, stmt: &Statement) -> Result<Option<QueryResult>, DbErr> {
        let deadline = Instant::now() + self.acquire_timeout;
        let _permit = timeout_at(deadline, self.slots.acquire())
            .await
            .map_err(|_| DbErr::ConnectionAcquire(ConnAcquireErr::Timeout))?
            .expect("the semaphore is never closed");
        let mut connection = self.checkout(deadline).await?;
        let values = stmt.values.clone().unwrap_or(Values(Vec::new()));
        let result = sqlx::query_with(sqlx::AssertSqlSafe(stmt.sql.as_str()), SqlxValues(values))
            .fetch_optional(&mut connection)
            .await;
        match result {
            Ok(row) => {
                self.checkin(connection);
                Ok(row.map(QueryResult::from))
            }
            Err(err) => match session_state(&err) {
                Session::Usable => {
                    self.checkin(connection);
                    Err(DbErr::Query(RuntimeErr::SqlxError(Arc::new(err))))
                }
                // Dropped here; reported like a pool that cannot reach the
                // server (503), since nothing was done.
                Session::Ended => Err(DbErr::Conn(RuntimeErr::SqlxError(Arc::new(err)))),
                Session::Broken => Err(DbErr::Query(RuntimeErr::SqlxError(Arc::new(err)))),
            },
        }
    }

    /// An idle connection (pinged first when it sat idle), or a new one.
    async fn checkout(&self, deadline: Instant) -> Result<PgConnection, DbErr> {
        loop {
            let Some(idle) = self.lock_idle().pop() else {
                break;
            };
            let mut connection = idle.connection;
            if idle.since.elapsed() < IDLE_BEFORE_PING {
                return Ok(connection);
            }
            match timeout_at(deadline, connection.ping()).await {
                Ok(Ok(())) => return Ok(connection),
                // Gone while idle (server restarted, network cut): next one.
                Ok(Err(_)) => {}
                Err(_) => return Err(DbErr::ConnectionAcquire(ConnAcquireErr::Timeout)),
            }
        }
        match timeout_at(deadline, PgConnection::connect_with(&self.options)).await {
            Ok(Ok(connection)) => Ok(connection),
            Ok(Err(err)) => Err(DbErr::Conn(RuntimeErr::SqlxError(Arc::new(err)))),
            Err(_) => Err(DbErr::ConnectionAcquire(ConnAcquireErr::Timeout)),
        }
    }

    /// Puts `connection` back, and closes the longest-idle one when it has
    /// been unused for [`IDLE_TIMEOUT`].
    fn checkin(&self, connection: PgConnection) {
        let now = Instant::now();
        let expired = {
            let mut idle = self.lock_idle();
            idle.push(IdleConnection {
                connection,
                since: now,
            });
            (now.duration_since(idle[0].since) > IDLE_TIMEOUT).then(|| idle.remove(0))
        };
        if let Some(expired) = expired {
            tokio::spawn(async move {
                let _ = expired.connection.close().await;
            });
        }
    }

    /// (open, idle, maximum): a connection counts as open from the moment
    /// a caller holds its slot.
    pub fn stats(&self) -> (u32, u32, u32) {
        let idle = self.lock_idle().len();
        let in_use = self.max.saturating_sub(self.slots.available_permits());
        let to_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        (to_u32(in_use + idle), to_u32(idle), to_u32(self.max))
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<IdleConnection>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connections open and idle right now.
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.lock_idle().len()
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

    fn server_url() -> Option<String> {
        let url = std::env::var("MASTERPAY_TEST_POSTGRES_URL").ok()?;
        (!url.is_empty()).then_some(url)
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

    async fn backend_pid(direct: &DirectPg) -> i32 {
        let row = direct
            .one(&sql("SELECT pg_backend_pid()", vec![]))
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

    /// A statement answered with an error leaves its connection reusable; a
    /// statement that was dropped unfinished takes its connection with it,
    /// so the next statement never reads the rest of an old answer.
    #[tokio::test]
    async fn only_connections_whose_statement_finished_are_reused() {
        let Some(url) = server_url() else {
            eprintln!("skipped: MASTERPAY_TEST_POSTGRES_URL is not set");
            return;
        };
        let admin = Database::connect(url.as_str()).await.unwrap();
        let direct = Arc::new(DirectPg::for_url(&url, &settings(4)).unwrap());

        let first = backend_pid(&direct).await;
        let err = direct
            .one(&sql("SELECT 1 / 0", vec![]))
            .await
            .expect_err("division by zero");
        assert!(!is_unavailable(&err), "{err:?}");
        assert_eq!(direct.idle_count(), 1);
        assert_eq!(backend_pid(&direct).await, first, "reused after an error");

        let key = lock_key();
        let held = hold(&admin, key).await;
        let waiting = tokio::spawn({
            let direct = direct.clone();
            async move { direct.one(&wait_on(key)).await }
        });
        until_waiting(&admin, 1).await;
        waiting.abort();
        assert!(waiting.await.unwrap_err().is_cancelled());
        assert_eq!(direct.idle_count(), 0, "the interrupted connection is gone");
        held.rollback().await.unwrap();

        let row = direct
            .one(&sql("SELECT 2::int4", vec![]))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.try_get_by_index::<i32>(0).unwrap(), 2);
        assert_ne!(backend_pid(&direct).await, first);
    }

    /// The pool's `statement_timeout` holds on direct connections.
    #[tokio::test]
    async fn the_statement_timeout_applies() {
        let Some(url) = server_url() else {
            eprintln!("skipped: MASTERPAY_TEST_POSTGRES_URL is not set");
            return;
        };
        let admin = Database::connect(url.as_str()).await.unwrap();
        let settings = PoolSettings {
            statement_timeout: Duration::from_millis(200),
            ..settings(2)
        };
        let direct = DirectPg::for_url(&url, &settings).unwrap();
        let key = lock_key();
        let held = hold(&admin, key).await;
        let err = direct.one(&wait_on(key)).await.expect_err("cancelled");
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
        let Some(url) = server_url() else {
            eprintln!("skipped: MASTERPAY_TEST_POSTGRES_URL is not set");
            return;
        };
        let admin = Database::connect(url.as_str()).await.unwrap();
        let direct = Arc::new(DirectPg::for_url(&url, &settings(2)).unwrap());
        let key = lock_key();
        let held = hold(&admin, key).await;
        let blocked: Vec<_> = (0..2)
            .map(|_| {
                let direct = direct.clone();
                tokio::spawn(async move { direct.one(&wait_on(key)).await })
            })
            .collect();
        until_waiting(&admin, 2).await;
        let err = direct
            .one(&sql("SELECT 1", vec![]))
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
        let Some(url) = server_url() else {
            eprintln!("skipped: MASTERPAY_TEST_POSTGRES_URL is not set");
            return;
        };
        let admin = Database::connect(url.as_str()).await.unwrap();
        let direct = DirectPg::for_url(&url, &settings(1)).unwrap();
        let first = backend_pid(&direct).await;
        admin
            .execute_raw(sql(
                "SELECT pg_terminate_backend($1)",
                vec![Value::from(first)],
            ))
            .await
            .unwrap();
        let select = sql("SELECT pg_backend_pid()", vec![]);
        let pid = match direct.one(&select).await {
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
