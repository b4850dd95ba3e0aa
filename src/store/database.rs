//! Connecting to the database, bringing its schema up to date, and telling
//! an unreachable database from a failed statement.
//!
//! [`open_store`] gives the request path's store of a connected database.
//!
//! One URL selects the backend: `sqlite://PATH` (the embedded default; the
//! file is created when missing), `postgres://...` or `mysql://...`.
//! SQLite runs in WAL mode with a busy timeout so that several processes can
//! share one file, and with foreign keys switched on (they are off by
//! default). Every backend bounds a statement (see [`PoolSettings`]), so that
//! a request is answered within its timeout even when the database hangs.

use std::{sync::Arc, time::Duration};

use migration::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, Database, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr,
    RuntimeErr, SqliteTransactionMode, TransactionOptions, TransactionTrait, sqlx,
};

use super::{GroupSizes, Store, StoreError, mysql, postgres, sqlite};
use crate::config::PoolSettings;

/// The store of the database `db` was opened on (`url`, `settings`),
/// sharing its pool.
pub fn open_store(
    db: &DatabaseConnection,
    url: &str,
    settings: &PoolSettings,
    sizes: Arc<dyn GroupSizes>,
) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match db.get_database_backend() {
        DbBackend::Sqlite => Arc::new(sqlite::SqliteStore::new(
            url,
            sqlite_busy_timeout(settings.statement_timeout),
        )?),
        DbBackend::Postgres => Arc::new(postgres::PostgresStore::new(db, settings, sizes)),
        _ => Arc::new(mysql::MySqlStore::new(db)),
    })
}

/// The store the webhook relay of `request_store`'s instance records on.
/// SQLite has one writer per file, so the relay shares the request path's
/// store. PostgreSQL and MariaDB get a pool of their own, of
/// `connections`: sharing the request path's left the relay's claims and
/// recordings waiting behind the requests for a connection, and the backlog
/// grew under a steady load (docs/performance.md).
pub async fn relay_store(
    request_store: &Arc<dyn Store>,
    db: &DatabaseConnection,
    url: &str,
    settings: &PoolSettings,
    connections: u32,
    sizes: Arc<dyn GroupSizes>,
) -> Result<Arc<dyn Store>, StoreError> {
    if db.get_database_backend() == DbBackend::Sqlite {
        return Ok(Arc::clone(request_store));
    }
    let settings = PoolSettings {
        max_connections: connections,
        ..settings.clone()
    };
    let relay_db = open_pool(url, &settings, CommitWait::NoWait).await?;
    open_store(&relay_db, url, &settings, sizes)
}

/// Whether a PostgreSQL commit waits for its WAL to reach the disk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CommitWait {
    Flush,
    /// `synchronous_commit = off` for every transaction of the pool: for
    /// the relay's, whose leases and recorded attempts a crash may lose
    /// without breaking at-least-once (the delivery is claimed or sent
    /// again); waiting for two flushes per delivery set the relay's pace
    /// (docs/performance.md).
    NoWait,
}

/// Starts a transaction that writes. On SQLite it takes the write lock at
/// once (`BEGIN IMMEDIATE`): a deferred transaction that reads first and
/// writes later fails with SQLITE_BUSY instead of waiting when another
/// connection wrote in between.
pub async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    match db.get_database_backend() {
        sea_orm::DbBackend::Sqlite => {
            db.begin_with_options(TransactionOptions {
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                ..Default::default()
            })
            .await
        }
        _ => db.begin().await,
    }
}

/// `expr` (an aggregate) cast to a 64-bit integer in `db`'s dialect: SUM
/// yields DECIMAL on MariaDB/MySQL and NUMERIC on PostgreSQL.
pub fn as_bigint(db: &DatabaseConnection, expr: &str) -> String {
    let integer = match db.get_database_backend() {
        DbBackend::MySql => "SIGNED",
        _ => "BIGINT",
    };
    format!("CAST({expr} AS {integer})")
}

/// A pooled connection idle for this long is pinged before it is used.
const IDLE_BEFORE_PING: Duration = Duration::from_secs(1);

/// How often opening a SQLite file is retried while it is locked (about
/// 5 s in all with the linear back-off below).
const SQLITE_OPEN_RETRIES: u32 = 22;

/// Opens a pool for `url`.
pub async fn connect(url: &str, settings: &PoolSettings) -> Result<DatabaseConnection, DbErr> {
    open_pool(url, settings, CommitWait::Flush).await
}

async fn open_pool(
    url: &str,
    settings: &PoolSettings,
    commit_wait: CommitWait,
) -> Result<DatabaseConnection, DbErr> {
    let mut options = ConnectOptions::new(url.to_owned());
    let statement_ms = settings.statement_timeout.as_millis();
    let sqlite_busy = sqlite_busy_timeout(settings.statement_timeout);
    options
        .max_connections(settings.max_connections)
        .min_connections(0)
        .connect_timeout(settings.acquire_timeout)
        .acquire_timeout(settings.acquire_timeout)
        // sqlx pings a pooled connection on every checkout by default: one
        // extra round trip per statement. Ping only connections that sat
        // idle; one that died in use fails its statement with an I/O error,
        // which counts as unavailable (503), and the pool drops it.
        .test_before_acquire_if_idle_for(IDLE_BEFORE_PING)
        .sqlx_logging(false)
        .map_sqlx_sqlite_opts(move |opts| {
            opts.create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
                .busy_timeout(sqlite_busy)
                .foreign_keys(true)
                // The SQLite store's own thread checkpoints the WAL, off the
                // commits of the request path (see store::sqlite).
                .pragma("wal_autocheckpoint", "0")
        })
        .map_sqlx_postgres_opts(move |opts| {
            let opts = opts.options([("statement_timeout", statement_ms.to_string())]);
            match commit_wait {
                CommitWait::Flush => opts,
                CommitWait::NoWait => opts.options([("synchronous_commit", "off")]),
            }
        })
        .map_sqlx_mysql_opts(|opts| opts.timezone(Some(String::from("+00:00"))))
        .map_sqlx_mysql_pool_opts(move |opts| {
            opts.after_connect(move |conn, _meta| {
                Box::pin(async move {
                    bound_mariadb_statements(conn, statement_ms).await;
                    Ok(())
                })
            })
        });
    if !url.starts_with("sqlite:") {
        return Database::connect(options).await;
    }
    // One writer at a time is all SQLite allows; a small pool avoids
    // queuing many connections on its file lock.
    options.max_connections(settings.max_connections.min(8));
    // Opening a connection switches the file to WAL mode. While several
    // processes create the same new file at once, SQLite may answer that
    // switch with SQLITE_BUSY at once, without waiting on its busy timeout
    // (it would deadlock otherwise). The file is usable a moment later, so
    // opening is retried for a bounded time.
    let mut attempt = 0;
    loop {
        match Database::connect(options.clone()).await {
            Err(err) if is_sqlite_busy(&err) && attempt < SQLITE_OPEN_RETRIES => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
            }
            result => return result,
        }
    }
}

/// How long a SQLite writer waits for the file's write lock: the statement
/// timeout, but at least 5 s, so that a short statement timeout meant for
/// PostgreSQL or MariaDB does not make SQLite writers give up while another
/// process (an admin command, a second instance) writes.
fn sqlite_busy_timeout(statement_timeout: Duration) -> Duration {
    statement_timeout.max(Duration::from_secs(5))
}

/// MariaDB's counterpart of PostgreSQL's `statement_timeout`: the session's
/// `max_statement_time` (seconds; it applies to reads and writes alike, so a
/// statement stuck on a row lock fails instead of holding its connection).
/// MySQL has no such variable (its `max_execution_time` bounds only
/// SELECTs); there the request timeout is the only bound, and a warning says
/// so once per connection.
async fn bound_mariadb_statements(conn: &mut sqlx::MySqlConnection, statement_ms: u128) {
    use sqlx::{AssertSqlSafe, Executor};
    let seconds = format!("{}.{:03}", statement_ms / 1000, statement_ms % 1000);
    let set = format!("SET SESSION max_statement_time = {seconds}");
    if let Err(err) = conn.execute(AssertSqlSafe(set)).await {
        tracing::warn!(error = %err, "statement timeout not set (not MariaDB?)");
    }
}

/// True for SQLite's "database is busy / locked".
fn is_sqlite_busy(err: &DbErr) -> bool {
    sqlx_error(err).is_some_and(sqlx_is_contended)
}

/// Applies pending migrations. Several processes may start at once on one
/// database: when one of them loses the race its attempt fails, so it waits
/// and checks again until nothing is pending.
pub async fn migrate(db: &DatabaseConnection) -> Result<(), DbErr> {
    let mut attempt = 0;
    loop {
        match Migrator::up(db, None).await {
            Ok(()) => return Ok(()),
            Err(err) => {
                attempt += 1;
                if Migrator::get_pending_migrations(db)
                    .await
                    .map(|p| p.is_empty())
                    .unwrap_or(false)
                {
                    return Ok(());
                }
                if attempt >= 10 {
                    return Err(err);
                }
                tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
            }
        }
    }
}

fn sqlx_error(err: &DbErr) -> Option<&sqlx::Error> {
    match err {
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => Some(e),
        _ => None,
    }
}

/// Whether a statement waited too long for a lock: PostgreSQL's statement
/// timeout, lock timeout, deadlock or serialization failure; MariaDB's
/// `max_statement_time`, lock wait timeout or deadlock; SQLite's busy or
/// locked file.
fn sqlx_is_contended(err: &sqlx::Error) -> bool {
    let Some(db_err) = err.as_database_error() else {
        return false;
    };
    if let Some(mysql) = db_err.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(mysql.number(), 1969 | 1205 | 1213);
    }
    let code = db_err.code();
    if db_err
        .try_downcast_ref::<sqlx::sqlite::SqliteError>()
        .is_some()
    {
        return code
            .and_then(|code| code.parse::<i32>().ok())
            .is_some_and(|code| matches!(code & 0xff, 5 | 6));
    }
    code.is_some_and(|code| matches!(&*code, "57014" | "55P03" | "40P01" | "40001"))
}

/// Whether the database could not be reached at all (as opposed to a
/// statement that failed), which the API answers with 503: the connection
/// broke under a statement (server gone, network cut) or none could be had.
fn sqlx_is_unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_) => true,
        // The server ended the session: shutting down, terminated by an
        // administrator, or a proxy that closed it (SQLSTATE classes 08 and
        // 57P0).
        sqlx::Error::Database(db_err) => db_err
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P0")),
        _ => false,
    }
}

/// Whether the database refused a write because it accepts none: a
/// read-only transaction or a standby (SQLSTATE 25006 on PostgreSQL, error
/// 1792 on MariaDB), a server in `read_only` mode (MariaDB 1290, MySQL
/// 1836).
fn sqlx_refuses_writes(err: &sqlx::Error) -> bool {
    let Some(db_err) = err.as_database_error() else {
        return false;
    };
    if let Some(mysql) = db_err.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(mysql.number(), 1290 | 1792 | 1836);
    }
    db_err.code().is_some_and(|code| code == "25006")
}

/// What `err` is when the database could not do the statement (see the
/// functions above) rather than the statement failing; `None` otherwise.
fn sqlx_kind(err: &sqlx::Error) -> Option<fn(String) -> StoreError> {
    if sqlx_is_unavailable(err) {
        Some(StoreError::Unavailable)
    } else if sqlx_is_contended(err) {
        Some(StoreError::Contended)
    } else if sqlx_refuses_writes(err) {
        Some(StoreError::WritesRefused)
    } else {
        None
    }
}

impl From<DbErr> for StoreError {
    fn from(err: DbErr) -> StoreError {
        let kind = match sqlx_error(&err) {
            Some(sqlx) => sqlx_kind(sqlx),
            None => matches!(err, DbErr::ConnectionAcquire(_))
                .then_some(StoreError::Unavailable as fn(String) -> StoreError),
        };
        kind.unwrap_or(StoreError::Failed)(err.to_string())
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> StoreError {
        let check = err
            .as_database_error()
            .is_some_and(|db| db.kind() == sqlx::error::ErrorKind::CheckViolation);
        let kind = sqlx_kind(&err).or(check.then_some(StoreError::CheckViolated as _));
        kind.unwrap_or(StoreError::Failed)(err.to_string())
    }
}
