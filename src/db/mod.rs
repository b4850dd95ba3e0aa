//! Connecting to the database and bringing its schema up to date.
//!
//! One URL selects the backend: `sqlite://PATH` (the embedded default; the
//! file is created when missing), `postgres://...` or `mysql://...`.
//! SQLite runs in WAL mode with a busy timeout so that several processes can
//! share one file, and with foreign keys switched on (they are off by default).
//!
//! SQLite's automatic checkpoint is off on these connections: by default the
//! connection whose commit takes the write-ahead log past 1 000 pages copies
//! it back into the database file and syncs it, inside that commit, while
//! every other writer waits. A completion writes about eight pages, so at a
//! thousand completions a second that was a sync every few dozen commits,
//! and each one held up all the completions queued behind it (p99 of 300 to
//! 490 ms at 64 connections on the benchmark machine). `serve` checkpoints
//! in the background instead ([`checkpoint_sqlite`], every
//! [`SQLITE_CHECKPOINT_INTERVAL`]), and SQLite checkpoints by itself when a
//! process closes its last connection to the file, so the command line
//! needs nothing.

mod direct_pg;
mod reader;

use std::{
    fs::File,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock, PoisonError},
    time::Duration,
};

use migration::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr, RuntimeErr,
    Statement, StatementBuilder, Value,
};

pub use reader::{ReadRow, Reader, is_busy_error, write_error};

/// Pool and timeout settings of a connection.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub max_connections: u32,
    /// How long a request waits for a pooled connection (or a new one) before
    /// it fails; keeps answers fast while the database is unreachable.
    pub acquire_timeout: Duration,
    /// Upper bound for one statement (PostgreSQL `statement_timeout`,
    /// MariaDB `max_statement_time`).
    pub statement_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_connections: 16,
            acquire_timeout: Duration::from_millis(1500),
            statement_timeout: Duration::from_secs(2),
        }
    }
}

impl PoolSettings {
    /// On PostgreSQL `max_connections` is shared: a quarter of it (at least
    /// one) for the sea-orm pool, which runs transactions, the command line
    /// and other statements off the request path, the rest (at least one)
    /// for the request path's direct connections (`db::direct_pg`). One
    /// instance opens at most `max_connections` (two when it is one).
    pub fn postgres_pool_connections(&self) -> u32 {
        (self.max_connections / 4).max(1)
    }

    /// See [`PoolSettings::postgres_pool_connections`].
    pub fn postgres_direct_connections(&self) -> u32 {
        self.max_connections
            .saturating_sub(self.postgres_pool_connections())
            .max(1)
    }
}

/// A pooled connection idle for this long is pinged before it is used.
const IDLE_BEFORE_PING: Duration = Duration::from_secs(1);

/// Opens a pool for `url`.
pub async fn connect(url: &str, settings: &PoolSettings) -> Result<DatabaseConnection, DbErr> {
    let mut options = ConnectOptions::new(url.to_owned());
    let statement_ms = settings.statement_timeout.as_millis();
    // SQLite's analogue of a statement timeout is how long a writer waits for
    // the file's write lock; at least 5 s, so that a short statement timeout
    // meant for PostgreSQL or MariaDB does not make SQLite writers give up
    // while another process (an admin command, a second instance) writes.
    let sqlite_busy = settings.statement_timeout.max(Duration::from_secs(5));
    options
        .max_connections(settings.max_connections)
        .min_connections(0)
        .connect_timeout(settings.acquire_timeout)
        .acquire_timeout(settings.acquire_timeout)
        // sqlx pings a pooled connection on every checkout by default: one
        // extra round trip per statement (and it pings again on release).
        // Ping only connections that sat idle; a connection that died while
        // in use fails its statement with an I/O error, which counts as
        // unavailable (503) and makes the pool drop it.
        .test_before_acquire_if_idle_for(IDLE_BEFORE_PING)
        .sqlx_logging(false)
        .map_sqlx_sqlite_opts(move |opts| {
            opts.create_if_missing(true)
                .journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Normal)
                .busy_timeout(sqlite_busy)
                .foreign_keys(true)
                // See the module docs: `serve` checkpoints in the background.
                .pragma("wal_autocheckpoint", "0")
        })
        .map_sqlx_postgres_opts(move |opts| {
            opts.options([("statement_timeout", statement_ms.to_string())])
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
    if url.starts_with("postgres") {
        options.max_connections(settings.postgres_pool_connections());
    }
    if url.starts_with("sqlite:") {
        // One writer at a time is all SQLite allows; a small pool avoids
        // queuing many connections on its file lock.
        options.max_connections(settings.max_connections.min(8));
        // Opening a connection switches the file to WAL mode. While several
        // processes create the same new file at once, SQLite may answer that
        // switch with SQLITE_BUSY at once, without waiting on its busy
        // timeout (it would deadlock otherwise). The file is usable a moment
        // later, so opening is retried for a bounded time.
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
    Database::connect(options).await
}

/// How often `serve` checkpoints a SQLite database (see the module docs).
/// A checkpoint that finds nothing to copy costs one pragma on a pooled
/// connection. Since completions write inline (about 6 000 a second, 120 MB
/// of log a second on the benchmark machine), a tick of a second let the
/// log reach 110 to 213 MB, and the writers' wait for the copy at the
/// bounded checkpoint made the tail; four ticks a second kept it at 38 to
/// 73 MB with p99 26 to 120 ms instead of 30 to 175 (docs/benchmarks.md,
/// step 18).
pub const SQLITE_CHECKPOINT_INTERVAL: Duration = Duration::from_millis(250);

/// Copies what the write-ahead log holds back into the SQLite database file
/// (`PRAGMA wal_checkpoint(PASSIVE)`: it waits for no reader and no writer,
/// and copies what it can; the next one copies the rest). Returns the frames
/// in the log and how many of them the database file now holds. Runs on a
/// pooled connection, so its file syncs happen on that connection's thread.
pub async fn checkpoint_sqlite(db: &DatabaseConnection) -> Result<(i64, i64), DbErr> {
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Sqlite,
            "PRAGMA wal_checkpoint(PASSIVE)",
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("wal_checkpoint returned no row".into()))?;
    // (busy, frames in the log, frames checkpointed); -1 when not in WAL mode.
    let frames: i64 = row.try_get_by_index(1)?;
    let checkpointed: i64 = row.try_get_by_index(2)?;
    Ok((frames, checkpointed))
}

/// Serializes this process's SQLite writes on the request path
/// (completions), which queue here in order instead of polling the file lock
/// in SQLite's busy handler (which this process's writers then only meet
/// when another process writes); the background checkpoint takes it too
/// when the write-ahead log must start over ([`checkpoint_sqlite_bounded`]).
pub static SQLITE_WRITER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Frames (pages) of write-ahead log above which the background checkpoint
/// makes the log start over: 4 096 pages, 16 MiB.
pub const SQLITE_WAL_RESTART_FRAMES: i64 = 4096;

/// A passive checkpoint, then, when the log holds more than `restart_frames`
/// frames, a last one while this process's writers wait ([`SQLITE_WRITER`]).
/// A log is written from its start again only when a writer begins after
/// everything in it was copied; under a steady stream of completions a
/// passive checkpoint never gets there (commits land while it copies), and
/// the log grew by tens of MB a second (137 MB in a 6 s run).
///
/// The writers wait only for the copy of what was committed since the pass
/// before the last, so that pass should have little left behind: passive
/// passes run first, each copying what arrived during the one before, until
/// one finds no more than [`SQLITE_CATCH_UP_FRAMES`] new frames (at most
/// [`SQLITE_CATCH_UP_PASSES`] of them). With one passive pass only, the
/// writers waited for a quarter of a second's commits (thousands of pages
/// written at random places, and a sync) four times a second.
///
/// SQLite syncs the database file only in a pass that copied the log to its
/// very end, which under a stream of commits only the last pass does: its
/// sync wrote everything the passes before it had copied, thousands of pages
/// at random places in the file (57 ms of a 100 ms wait, seen with `strace`
/// at 10^6 rows). So `file`, the database file, is synced here before the
/// writers wait (from a blocking thread, see [`sync_file`]; a failure only
/// leaves the work to the last pass), then passive passes catch up with
/// what was committed meanwhile, and the writers' wait holds only the last
/// pass's own pages.
pub async fn checkpoint_sqlite_bounded(
    db: &DatabaseConnection,
    restart_frames: i64,
    file: Option<&Path>,
) -> Result<(i64, i64), DbErr> {
    let (frames, checkpointed) = checkpoint_sqlite(db).await?;
    if frames <= restart_frames {
        return Ok((frames, checkpointed));
    }
    let mut frames = match passive_passes(db, frames).await? {
        Passes::Close(frames) => frames,
        Passes::Over(result) => return Ok(result),
    };
    if let Some(file) = file {
        sync_file(file.to_path_buf()).await;
        // What was committed during the sync.
        frames = match passive_passes(db, frames).await? {
            Passes::Close(frames) => frames,
            Passes::Over(result) => return Ok(result),
        };
    }
    tracing::trace!(frames, "SQLite checkpoint: writers wait for the last pass");
    let _writers_wait = SQLITE_WRITER.lock().await;
    checkpoint_sqlite(db).await
}

/// Where the passive passes of a bounded checkpoint left off.
enum Passes {
    /// They stopped (close to the log's end, or out of passes) with the log
    /// this many frames long.
    Close(i64),
    /// The log started over (or could not be checkpointed): this pass's
    /// (frames, copied).
    Over((i64, i64)),
}

/// Passive passes, each after the one before, until [`catch_up`] says to
/// stop (at most [`SQLITE_CATCH_UP_PASSES`]); `frames`: the log's length at
/// the pass before.
async fn passive_passes(db: &DatabaseConnection, mut frames: i64) -> Result<Passes, DbErr> {
    for _ in 0..SQLITE_CATCH_UP_PASSES {
        let (now, checkpointed) = checkpoint_sqlite(db).await?;
        match catch_up(frames, now) {
            CatchUp::Over => return Ok(Passes::Over((now, checkpointed))),
            CatchUp::Close => return Ok(Passes::Close(now)),
            CatchUp::Behind => frames = now,
        }
    }
    Ok(Passes::Close(frames))
}

/// Writes a file's dirty pages to the disk (`fdatasync`), as any descriptor
/// of it may, through [`sync_descriptor`]; failures are logged and otherwise
/// ignored.
async fn sync_file(file: PathBuf) {
    let synced = tokio::task::spawn_blocking(move || sync_descriptor(&file)?.sync_data()).await;
    match synced {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "SQLite file not synced before the checkpoint")
        }
        Err(err) => tracing::debug!(error = %err, "SQLite file sync did not run"),
    }
}

/// Descriptors of SQLite database files opened by [`sync_file`], one per
/// path, never closed while the process runs. Closing any descriptor of a
/// file drops every `fcntl` lock the process holds on it, whichever
/// descriptor took them (POSIX), SQLite's included: another process could
/// then take the file as if this one had no connection to it, checkpoint it
/// and delete its log under our connections
/// (<https://www.sqlite.org/howtocorrupt.html>, section 2.2). SQLite's own
/// files defer their closes for that reason; this one is simply kept.
static SYNC_DESCRIPTORS: Mutex<Vec<(PathBuf, Arc<File>)>> = Mutex::new(Vec::new());

/// The kept descriptor of `path` (see [`SYNC_DESCRIPTORS`]), opened
/// read-only the first time.
fn sync_descriptor(path: &Path) -> std::io::Result<Arc<File>> {
    let mut kept = SYNC_DESCRIPTORS
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some((_, file)) = kept.iter().find(|(kept_path, _)| kept_path == path) {
        return Ok(file.clone());
    }
    let file = Arc::new(File::open(path)?);
    kept.push((path.to_path_buf(), file.clone()));
    Ok(file)
}

/// Passive passes a bounded checkpoint makes, at most, before the writers
/// wait for its last one.
const SQLITE_CATCH_UP_PASSES: u32 = 8;

/// New frames (pages) a passive pass may find, at most, for the bounded
/// checkpoint to stop catching up and have the writers wait for the last
/// pass: about 1 MiB, what a few dozen completions write.
const SQLITE_CATCH_UP_FRAMES: i64 = 256;

/// Where a bounded checkpoint stands after a passive pass.
#[derive(Debug, PartialEq, Eq)]
enum CatchUp {
    /// The log is shorter than at the pass before: it started over (a
    /// writer found it all copied), or the pass could not run (-1: another
    /// connection checkpointing). Nothing to wait for.
    Over,
    /// Little was committed since the pass before: the writers may wait
    /// for the last one.
    Close,
    /// Another passive pass first.
    Behind,
}

/// `before`: the log's length (frames) at the pass before; `now`: at this one.
fn catch_up(before: i64, now: i64) -> CatchUp {
    if now < before {
        CatchUp::Over
    } else if now - before <= SQLITE_CATCH_UP_FRAMES {
        CatchUp::Close
    } else {
        CatchUp::Behind
    }
}

/// Checkpoints a SQLite database every [`SQLITE_CHECKPOINT_INTERVAL`], for
/// as long as the future is polled (the server runs it beside itself).
/// Elsewhere it never resolves and does nothing.
///
/// The read transaction `reader` keeps open between requests (see
/// `reader::Lingering`) is stopped at every tick and allowed again only
/// when this checkpoint and the one before found the log copied completely
/// and of the same length, and no completion announced a write meanwhile:
/// while writes go on, from this process or another, none is kept, so that
/// the log can start over.
pub async fn run_sqlite_checkpoints(reader: Reader) {
    let db = reader.pool().clone();
    if db.get_database_backend() != DbBackend::Sqlite {
        return std::future::pending().await;
    }
    let mut ticks = tokio::time::interval(SQLITE_CHECKPOINT_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut quiet = QuietLog::default();
    loop {
        ticks.tick().await;
        let writes = reader.stop_lingering();
        let checkpoint =
            checkpoint_sqlite_bounded(&db, SQLITE_WAL_RESTART_FRAMES, reader.sqlite_file()).await;
        if let Err(err) = &checkpoint {
            // Another process checkpointing, or the file briefly locked:
            // the next tick tries again.
            tracing::debug!(error = %err, "SQLite checkpoint skipped");
        }
        if quiet.after_checkpoint(checkpoint.ok()) {
            reader.allow_lingering(writes);
        }
    }
}

/// Whether the SQLite log looks unwritten: this checkpoint and the one
/// before found it fully copied and of the same length.
#[derive(Default)]
struct QuietLog {
    /// The log's length when the last checkpoint found it fully copied.
    copied_at: Option<i64>,
}

impl QuietLog {
    /// Takes a checkpoint's (frames in the log, frames copied), `None` when
    /// it failed; true when the log looks unwritten since the last one.
    fn after_checkpoint(&mut self, checkpoint: Option<(i64, i64)>) -> bool {
        let previous = self.copied_at.take();
        match checkpoint {
            // -1 frames: not in WAL mode, or another connection checkpointing.
            Some((frames, copied)) if frames >= 0 && frames == copied => {
                self.copied_at = Some(frames);
                previous == Some(frames)
            }
            _ => false,
        }
    }
}

/// MariaDB's counterpart of PostgreSQL's `statement_timeout`: the session's
/// `max_statement_time` (seconds; it applies to reads and writes alike, so a
/// statement stuck on a row lock fails instead of holding its connection).
/// MySQL has no such variable (its `max_execution_time` bounds only
/// SELECTs); there the request timeout is the only bound, and a warning says
/// so once per connection.
async fn bound_mariadb_statements(conn: &mut sea_orm::sqlx::MySqlConnection, statement_ms: u128) {
    use sea_orm::sqlx::{AssertSqlSafe, Executor};
    let seconds = format!("{}.{:03}", statement_ms / 1000, statement_ms % 1000);
    let set = format!("SET SESSION max_statement_time = {seconds}");
    if let Err(err) = conn.execute(AssertSqlSafe(set)).await {
        tracing::warn!(error = %err, "statement timeout not set (not MariaDB?)");
    }
}

/// How often opening a SQLite file is retried while it is locked (about
/// 5 s in all with the linear back-off above).
const SQLITE_OPEN_RETRIES: u32 = 22;

/// True for SQLite's "database is busy / locked" (primary codes 5 and 6,
/// extended codes included).
fn is_sqlite_busy(err: &DbErr) -> bool {
    let sqlx_err = match err {
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => e,
        _ => return false,
    };
    sqlx_err
        .as_database_error()
        .and_then(|db_err| db_err.code())
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
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

/// True when the error means the database could not be reached at all
/// (as opposed to a statement that failed), which the API reports as 503.
pub fn is_unavailable(err: &DbErr) -> bool {
    match err {
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => true,
        // The connection broke under a statement (server gone, network cut).
        DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e)) => matches!(
            **e,
            sea_orm::sqlx::Error::Io(_)
                | sea_orm::sqlx::Error::PoolTimedOut
                | sea_orm::sqlx::Error::PoolClosed
                | sea_orm::sqlx::Error::WorkerCrashed
        ),
        _ => false,
    }
}

/// SQL text rendered by sea-query once per backend and then reused.
///
/// Rendering a statement (building the query tree, quoting, formatting)
/// costs more CPU than the database spends on a primary-key lookup, so the
/// statements on the request path are rendered once and only their values
/// are bound anew. The first rendering uses marker values to learn which
/// parameter each placeholder takes, so the builder stays the single source
/// of the SQL and of the order of its values.
pub struct CachedSql {
    rendered: [OnceLock<Rendered>; 3],
}

struct Rendered {
    sql: String,
    /// For each placeholder of `sql`, in order: the index of its parameter.
    order: Vec<usize>,
}

impl CachedSql {
    pub const fn new() -> Self {
        CachedSql {
            rendered: [const { OnceLock::new() }; 3],
        }
    }

    /// The statement for `backend` with `params` bound. `build` renders the
    /// statement from parameter values (called once per backend, with
    /// markers); it must use each value as a bound parameter, not inline it.
    pub fn statement<S, F>(&self, backend: DbBackend, params: Vec<Value>, build: F) -> Statement
    where
        S: StatementBuilder,
        F: FnOnce(Vec<Value>) -> S,
    {
        let slot = match backend {
            DbBackend::Sqlite => 0,
            DbBackend::Postgres => 1,
            _ => 2,
        };
        let rendered = self.rendered[slot].get_or_init(|| {
            let marker = |i: usize| format!("\u{1}masterpay-parameter-{i}\u{1}");
            let markers = (0..params.len())
                .map(|i| Value::String(Some(marker(i))))
                .collect();
            let stmt = backend.build(&build(markers));
            let order = stmt
                .values
                .iter()
                .flat_map(|values| values.0.iter())
                .map(|value| {
                    (0..params.len())
                        .find(|&i| *value == Value::String(Some(marker(i))))
                        .expect("CachedSql: the builder bound a value that is not a parameter")
                })
                .collect();
            Rendered {
                sql: stmt.sql,
                order,
            }
        });
        // Each value is moved to its (last) placeholder and cloned only for
        // the placeholders before it: a text value cloned is an allocation.
        let mut params: Vec<Option<Value>> = params.into_iter().map(Some).collect();
        let values = rendered.order.iter().enumerate().map(|(at, &i)| {
            if rendered.order[at + 1..].contains(&i) {
                params[i].clone()
            } else {
                params[i].take()
            }
            .expect("CachedSql: a parameter is bound after its last placeholder")
        });
        Statement::from_sql_and_values(backend, rendered.sql.as_str(), values.collect::<Vec<_>>())
    }
}

impl Default for CachedSql {
    fn default() -> Self {
        CachedSql::new()
    }
}

#[cfg(test)]
mod tests {
    use sea_orm::sea_query::{Alias, Expr, ExprTrait, Query};

    use super::*;

    fn build(params: Vec<Value>) -> sea_orm::sea_query::SelectStatement {
        let mut params = params.into_iter();
        let (a, b) = (params.next().unwrap(), params.next().unwrap());
        Query::select()
            .column(Alias::new("x"))
            .from(Alias::new("t"))
            .and_where(Expr::col(Alias::new("b")).eq(b.clone()))
            .and_where(Expr::col(Alias::new("a")).eq(a))
            .and_where(Expr::col(Alias::new("c")).ne(b))
            .to_owned()
    }

    /// Commits never checkpoint on the service's SQLite connections; the
    /// background checkpoint copies the whole log back into the file.
    #[test]
    fn the_log_looks_unwritten_after_two_equal_full_copies() {
        let mut quiet = QuietLog::default();
        assert!(!quiet.after_checkpoint(Some((10, 10))), "one is not enough");
        assert!(quiet.after_checkpoint(Some((10, 10))));
        assert!(quiet.after_checkpoint(Some((10, 10))));
        assert!(!quiet.after_checkpoint(Some((12, 12))), "written meanwhile");
        assert!(quiet.after_checkpoint(Some((12, 12))));
        assert!(!quiet.after_checkpoint(Some((14, 13))), "not fully copied");
        assert!(!quiet.after_checkpoint(Some((14, 14))));
        assert!(!quiet.after_checkpoint(None), "a failed checkpoint");
        assert!(!quiet.after_checkpoint(Some((14, 14))));
        assert!(quiet.after_checkpoint(Some((14, 14))));
        assert!(!quiet.after_checkpoint(Some((-1, -1))), "not in WAL mode");
        assert!(!quiet.after_checkpoint(Some((-1, -1))));
    }

    #[test]
    fn a_bounded_checkpoint_catches_up_before_writers_wait() {
        assert_eq!(catch_up(10_000, 18_000), CatchUp::Behind);
        assert_eq!(
            catch_up(10_000, 10_000 + SQLITE_CATCH_UP_FRAMES + 1),
            CatchUp::Behind
        );
        assert_eq!(
            catch_up(10_000, 10_000 + SQLITE_CATCH_UP_FRAMES),
            CatchUp::Close
        );
        assert_eq!(catch_up(10_000, 10_000), CatchUp::Close);
        assert_eq!(catch_up(10_000, 40), CatchUp::Over, "the log started over");
        assert_eq!(
            catch_up(10_000, -1),
            CatchUp::Over,
            "another checkpoint running"
        );
    }

    /// A SQLite file at `path`, set up as the service's, whose log holds
    /// `rows` commits of a 16 kB blob each (four pages or more).
    async fn sqlite_with_blobs(path: &Path, rows: usize) -> DatabaseConnection {
        let url = format!("sqlite://{}", path.display());
        let db = connect(&url, &PoolSettings::default()).await.unwrap();
        let one = |sql: &str| Statement::from_string(DbBackend::Sqlite, sql);
        db.execute_raw(one("CREATE TABLE t (x BLOB)"))
            .await
            .unwrap();
        for _ in 0..rows {
            db.execute_raw(one("INSERT INTO t VALUES (randomblob(16000))"))
                .await
                .unwrap();
        }
        db
    }

    #[tokio::test]
    async fn sqlite_checkpoints_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        // Over 1 000 pages of log, where SQLite's default would have
        // checkpointed inside a commit.
        let db = sqlite_with_blobs(&dir.path().join("c.db"), 300).await;
        let one = |sql: &str| Statement::from_string(DbBackend::Sqlite, sql);
        let auto = db
            .query_one_raw(one("PRAGMA wal_autocheckpoint"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(auto.try_get_by_index::<i64>(0).unwrap(), 0);
        let (frames, checkpointed) = checkpoint_sqlite(&db).await.unwrap();
        assert!(frames > 1000, "{frames} frames in the log");
        assert_eq!(checkpointed, frames);
        // Nothing new: the next checkpoint finds the log copied already.
        assert_eq!(checkpoint_sqlite(&db).await.unwrap().1, frames);
        // A log above the restart size is written from its start again by
        // the next commit once the bounded checkpoint has run.
        checkpoint_sqlite_bounded(&db, 100, Some(&dir.path().join("c.db")))
            .await
            .unwrap();
        db.execute_raw(one("INSERT INTO t VALUES (1)"))
            .await
            .unwrap();
        let (frames, _) = checkpoint_sqlite(&db).await.unwrap();
        assert!(frames < 100, "{frames} frames after a restart");
    }

    /// The file sync before the writers wait is an optimization: when it
    /// fails, the checkpoint still copies everything.
    #[tokio::test]
    async fn a_bounded_checkpoint_does_not_need_the_file_sync() {
        let dir = tempfile::tempdir().unwrap();
        let db = sqlite_with_blobs(&dir.path().join("s.db"), 50).await;
        let missing = dir.path().join("no-such-file");
        let (frames, copied) = checkpoint_sqlite_bounded(&db, 10, Some(&missing))
            .await
            .unwrap();
        assert!(frames > 10, "{frames} frames in the log");
        assert_eq!(copied, frames);
    }

    /// The descriptor that syncs a database file is opened once and kept:
    /// closing it would drop this process's SQLite locks on the file.
    #[tokio::test]
    async fn the_sync_descriptor_of_a_file_is_kept_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.db");
        std::fs::write(&path, b"").unwrap();
        let kept = || {
            SYNC_DESCRIPTORS
                .lock()
                .unwrap()
                .iter()
                .filter(|(kept_path, _)| *kept_path == path)
                .map(|(_, file)| Arc::strong_count(file))
                .collect::<Vec<_>>()
        };
        assert!(kept().is_empty());
        sync_file(path.clone()).await;
        sync_file(path.clone()).await;
        // One descriptor for the path, still open, held by the list only.
        assert_eq!(kept(), vec![1]);
    }

    /// One PostgreSQL instance stays within `max_connections` (two when it
    /// is one: the pool and the direct connections need one each).
    #[test]
    fn postgres_connections_are_split_between_pool_and_direct() {
        for (max, pool, direct) in [(1, 1, 1), (2, 1, 1), (4, 1, 3), (8, 2, 6), (16, 4, 12)] {
            let settings = PoolSettings {
                max_connections: max,
                ..PoolSettings::default()
            };
            assert_eq!(settings.postgres_pool_connections(), pool, "{max}");
            assert_eq!(settings.postgres_direct_connections(), direct, "{max}");
        }
    }

    #[test]
    fn cached_sql_binds_each_call_s_values_in_the_rendered_order() {
        let cache = CachedSql::new();
        for backend in [DbBackend::Sqlite, DbBackend::Postgres, DbBackend::MySql] {
            for (a, b) in [(1_i64, "one"), (2, "two")] {
                let params = vec![Value::from(a), Value::from(b)];
                let cached = cache.statement(backend, params.clone(), build);
                let fresh = backend.build(&build(params));
                assert_eq!(cached.sql, fresh.sql);
                assert_eq!(cached.values, fresh.values);
            }
        }
    }
}
