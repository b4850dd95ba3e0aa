//! Where the request path's read-only statements run.
//!
//! Every request reads the token (authentication) and the balance lookup
//! reads an account; nothing is kept that could outlive a change (on SQLite
//! the token row is reused only while the database is unchanged, see
//! [`Reader::one_cached`]), so that a change made with the command line
//! holds from the next request. On MariaDB these reads go
//! through the sea-orm pool like everything else. On PostgreSQL they run on
//! [`DirectPg`] connections, which skip the pool's ping after every
//! statement (see `db::direct_pg`); so does the one-statement completion
//! ([`Reader::autocommit_one`]).
//!
//! On SQLite they run on an [`InlineSqlite`] connection instead, in the
//! calling thread. sqlx gives every SQLite connection a worker thread: a
//! statement is a command sent to it and its rows are sent back, and the
//! connection is pinged when it returns to the pool, which costs about eight
//! thread wake-ups per lookup (a quarter of the CPU of a balance request on
//! the 2-core benchmark machine, see docs/benchmarks.md) against about 10 µs
//! inside SQLite itself. A point lookup by primary or unique key on a WAL
//! database never waits for writers, so running it directly on the async
//! worker is shorter than handing it over. Should the file be locked all the
//! same (WAL recovery after a crashed writer, another process holding it
//! exclusively), the read waits at most 10 ms and then goes to the pool,
//! which waits without blocking the worker. A file that cannot be opened
//! counts as unavailable (503), as on the pool.
//!
//! Completions write on one inline connection of their own in the same way
//! ([`Reader::write_inline`]): in the calling thread, one at a time per
//! process (`SQLITE_WRITER`, as before), handing over to the pool when
//! another process holds the write lock for 10 ms. Everything else (the
//! command line, migrations, token-use times) writes through the pool.
//!
//! The SQL is the same text the pool would run: the statements are built
//! with sea-query and rendered once per backend (`CachedSql`); only the
//! values are bound here. Each read is its own autocommit read transaction,
//! so it sees everything committed before it started, by any process;
//! except that the reads of one GET request share one read transaction
//! ([`Reader::with_snapshot`]), begun when the request is authenticated.

use std::{
    collections::HashMap,
    path::PathBuf,
    str::FromStr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use chrono::{DateTime, NaiveDateTime, Utc};
use rusqlite::{
    OpenFlags,
    types::{ToSqlOutput, Value as SqliteValue, ValueRef},
};
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

use super::{PoolSettings, direct_pg::DirectPg};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, QueryResult, RuntimeErr, Statement,
    TryGetable, Value,
};

/// Runs the statements of the request path; see the module docs.
#[derive(Clone)]
pub struct Reader {
    pool: DatabaseConnection,
    inline: Option<Arc<InlineSqlite>>,
    direct: Option<Arc<DirectPg>>,
    /// The read transaction this reader's inline statements share, if any
    /// (see [`Reader::with_snapshot`]).
    snapshot: Option<Arc<Snapshot>>,
}

impl Reader {
    /// Reads through `pool`, inline when `url` names a SQLite file, or on
    /// direct connections (their share of `max_connections`) on PostgreSQL.
    pub fn new(pool: DatabaseConnection, url: &str, settings: &PoolSettings) -> Reader {
        let backend = pool.get_database_backend();
        let inline = (backend == DbBackend::Sqlite)
            .then(|| InlineSqlite::for_url(url))
            .flatten()
            .map(Arc::new);
        let direct = (backend == DbBackend::Postgres)
            .then(|| DirectPg::for_url(url, settings))
            .flatten();
        Reader {
            pool,
            inline,
            direct,
            snapshot: None,
        }
    }

    /// A reader whose inline SQLite statements all run in one read
    /// transaction on one connection, held until the last clone of it is
    /// dropped: one request's reads (token, then balance) see one state of
    /// the database and pay for one transaction instead of one each (taking
    /// and releasing SQLite's file locks was a fifth of a balance request's
    /// SQLite time). Only for requests that do not write: while it is held,
    /// that connection is busy and a checkpoint cannot pass its snapshot.
    /// Waits for a free inline connection like any read. Elsewhere
    /// (PostgreSQL, MariaDB, or when no inline connection can be opened)
    /// the same reader as `self`.
    pub async fn with_snapshot(&self) -> Reader {
        let snapshot = match &self.inline {
            Some(inline) => inline.begin().await.map(Arc::new),
            None => None,
        };
        Reader {
            snapshot,
            ..self.clone()
        }
    }

    /// Stops keeping the last snapshot's read transaction open and ends
    /// the one held (see `Lingering`), until [`Reader::allow_lingering`].
    /// Returns how many writes this process had announced
    /// ([`Reader::before_write`]), for `allow_lingering`.
    pub fn stop_lingering(&self) -> u64 {
        match &self.inline {
            Some(inline) => inline.lingering.stop(),
            None => 0,
        }
    }

    /// Keeps the last snapshot's read transaction open from now on, unless
    /// this process announced a write since `stop_lingering` returned
    /// `writes`. Off at first. See `Lingering` for when `serve` allows it.
    pub fn allow_lingering(&self, writes: u64) {
        if let Some(inline) = &self.inline {
            inline.lingering.allow(writes);
        }
    }

    /// A write on the request path is about to begin: no read transaction
    /// is kept open from now until the checkpointer allows it again, so
    /// that the log can start over as soon as SQLite may (see `Lingering`).
    pub fn before_write(&self) {
        if let Some(inline) = &self.inline {
            inline.lingering.before_write();
        }
    }

    /// On a SQLite file: runs `write` on this process's inline write
    /// connection, in the calling thread, while this process's other
    /// writers wait (`db::SQLITE_WRITER`). `None` elsewhere (PostgreSQL,
    /// MariaDB, an in-memory database): the caller writes through the pool.
    ///
    /// The connection is set up as the pool's are (foreign keys on,
    /// `synchronous = NORMAL`, no automatic checkpoints), except that it
    /// waits at most 10 ms for another process's write lock: `write` then
    /// fails with SQLITE_BUSY ([`is_busy_error`]) and should change
    /// nothing, and the caller writes through the pool, which waits off the
    /// async worker. After any other error, or when `write` left a
    /// transaction open, the connection is closed.
    ///
    /// Nothing is awaited once `write` has begun, so a dropped request
    /// (client gone, request timeout) never stops a write half-way: it
    /// either has not started or runs to its end. What may block the worker
    /// thread: that 10 ms wait while another process writes, and the sync
    /// of the log's header when a write starts the log over after a
    /// complete checkpoint (at most once per `serve` checkpoint tick,
    /// `db::SQLITE_CHECKPOINT_INTERVAL`), which sqlx's connection thread
    /// used to do instead.
    pub async fn write_inline<T>(
        &self,
        write: impl FnOnce(&mut rusqlite::Connection) -> rusqlite::Result<T>,
    ) -> Option<rusqlite::Result<T>> {
        let inline = self.inline.as_ref()?;
        let _writers = super::SQLITE_WRITER.lock().await;
        Some(inline.write(write))
    }

    /// Inline writes that returned `Ok`, and that met another process's
    /// write lock, so far.
    #[cfg(test)]
    pub fn inline_writes(&self) -> (usize, usize) {
        self.inline.as_ref().map_or((0, 0), |inline| {
            (
                inline.writes_done.load(Ordering::Relaxed),
                inline.writes_busy.load(Ordering::Relaxed),
            )
        })
    }

    /// The SQLite database file, when the database is one (not in memory).
    pub fn sqlite_file(&self) -> Option<&std::path::Path> {
        self.inline.as_ref().map(|inline| inline.path.as_path())
    }

    /// The pool, for writes and everything off the request path.
    pub fn pool(&self) -> &DatabaseConnection {
        &self.pool
    }

    pub fn backend(&self) -> DbBackend {
        self.pool.get_database_backend()
    }

    /// True when reads run inline on SQLite rather than through the pool.
    pub fn is_inline(&self) -> bool {
        self.inline.is_some()
    }

    /// (open, idle, maximum) of the direct PostgreSQL connections.
    pub fn direct_stats(&self) -> Option<(u32, u32, u32)> {
        self.direct.as_ref().map(|direct| direct.stats())
    }

    /// The first row of a read-only statement.
    pub async fn one(&self, stmt: Statement) -> Result<Option<ReadRow>, DbErr> {
        self.read(stmt, false).await
    }

    /// Like [`Reader::one`], but on SQLite a row read earlier for the same
    /// statement and values is reused while the database has not changed
    /// since, by any process (`PRAGMA data_version`, see
    /// `InlineConnection::read`); so a change still holds from the next
    /// read. For small rows read again and again (the token). Elsewhere the
    /// same as [`Reader::one`]: nothing cheaper than the read itself tells
    /// whether another instance changed the row.
    pub async fn one_cached(&self, stmt: Statement) -> Result<Option<ReadRow>, DbErr> {
        self.read(stmt, true).await
    }

    async fn read(&self, stmt: Statement, cached: bool) -> Result<Option<ReadRow>, DbErr> {
        let inline = match (&self.snapshot, &self.inline) {
            (Some(snapshot), _) => Some(snapshot.one(&stmt, cached)),
            (None, Some(inline)) => Some(inline.one(&stmt, cached).await),
            (None, None) => None,
        };
        if let Some(inline) = inline {
            match inline {
                Ok(row) => return Ok(row.map(ReadRow::Inline)),
                Err(InlineError::Failed(err)) => return Err(err),
                // Locked: the pool waits for it without blocking this thread.
                Err(InlineError::Busy) => {}
            }
        }
        if let Some(direct) = &self.direct {
            return Ok(direct.one(stmt).await?.map(ReadRow::Sqlx));
        }
        Ok(self.pool.query_one_raw(stmt).await?.map(ReadRow::Sqlx))
    }

    /// The first row of one statement that is complete on its own and may
    /// write (committed by itself, in autocommit): on a direct connection on
    /// PostgreSQL, through the pool elsewhere (never inline: those
    /// connections are read-only).
    pub async fn autocommit_one(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        match &self.direct {
            Some(direct) => direct.one(stmt).await,
            None => self.pool.query_one_raw(stmt).await,
        }
    }

    /// Every row of such a statement; see [`Reader::autocommit_one`].
    pub async fn autocommit_all(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        match &self.direct {
            Some(direct) => direct.all(stmt).await,
            None => self.pool.query_all_raw(stmt).await,
        }
    }
}

/// One row read by a [`Reader`], with the few typed accessors the request
/// path needs.
pub enum ReadRow {
    /// Read through sqlx: the pool, or a direct PostgreSQL connection.
    Sqlx(QueryResult),
    Inline(Vec<SqliteValue>),
}

impl ReadRow {
    pub fn i64(&self, index: usize) -> Result<i64, DbErr> {
        self.opt_i64(index)?
            .ok_or_else(|| column_error(index, "integer", "NULL"))
    }

    pub fn opt_i64(&self, index: usize) -> Result<Option<i64>, DbErr> {
        match self {
            ReadRow::Sqlx(row) => pooled(row, index),
            ReadRow::Inline(values) => match inline_value(values, index)? {
                SqliteValue::Null => Ok(None),
                SqliteValue::Integer(value) => Ok(Some(*value)),
                other => Err(column_error(index, "integer", other.data_type())),
            },
        }
    }

    pub fn bool(&self, index: usize) -> Result<bool, DbErr> {
        self.opt_bool(index)?
            .ok_or_else(|| column_error(index, "boolean", "NULL"))
    }

    /// SQLite stores booleans as integers 0 and 1.
    pub fn opt_bool(&self, index: usize) -> Result<Option<bool>, DbErr> {
        match self {
            ReadRow::Sqlx(row) => pooled(row, index),
            ReadRow::Inline(_) => Ok(self.opt_i64(index)?.map(|value| value != 0)),
        }
    }

    /// Decoded as sqlx decodes `DateTime<Utc>` on SQLite: RFC 3339 or one of
    /// SQLite's date-time texts (no offset means UTC), Unix seconds as an
    /// integer, a Julian day number as a real.
    pub fn opt_datetime(&self, index: usize) -> Result<Option<DateTime<Utc>>, DbErr> {
        match self {
            ReadRow::Sqlx(row) => pooled(row, index),
            ReadRow::Inline(values) => {
                let value = inline_value(values, index)?;
                let decoded = match value {
                    SqliteValue::Null => return Ok(None),
                    SqliteValue::Text(text) => datetime_from_text(text),
                    SqliteValue::Integer(seconds) => DateTime::from_timestamp(*seconds, 0),
                    SqliteValue::Real(julian_day) => datetime_from_julian_day(*julian_day),
                    SqliteValue::Blob(_) => None,
                };
                decoded
                    .map(Some)
                    .ok_or_else(|| column_error(index, "timestamp", value.data_type()))
            }
        }
    }
}

/// The text forms sqlx accepts for a timestamp on SQLite.
fn datetime_from_text(text: &str) -> Option<DateTime<Utc>> {
    const FORMATS: [&str; 12] = [
        "%F %T%.f",
        "%F %R",
        "%F %RZ",
        "%F %R%:z",
        "%F %T%.fZ",
        "%F %T%.f%:z",
        "%FT%R",
        "%FT%RZ",
        "%FT%R%:z",
        "%FT%T%.f",
        "%FT%T%.fZ",
        "%FT%T%.f%:z",
    ];
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.to_utc());
    }
    FORMATS.iter().find_map(|format| {
        DateTime::parse_from_str(text, format)
            .map(|t| t.to_utc())
            .or_else(|_| NaiveDateTime::parse_from_str(text, format).map(|t| t.and_utc()))
            .ok()
    })
}

fn datetime_from_julian_day(day: f64) -> Option<DateTime<Utc>> {
    const UNIX_EPOCH_JULIAN_DAY: f64 = 2_440_587.5;
    let seconds = (day - UNIX_EPOCH_JULIAN_DAY) * 86_400.0;
    if !seconds.is_finite() {
        return None;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    DateTime::from_timestamp(seconds.trunc() as i64, (seconds.fract() * 1e9).abs() as u32)
}

fn pooled<T: TryGetable>(row: &QueryResult, index: usize) -> Result<T, DbErr> {
    row.try_get_by_index(index)
        .map_err(|err| DbErr::Type(format!("column {index}: {err}")))
}

fn inline_value(values: &[SqliteValue], index: usize) -> Result<&SqliteValue, DbErr> {
    values
        .get(index)
        .ok_or_else(|| DbErr::Type(format!("column {index} missing from the row")))
}

fn column_error(index: usize, wanted: &str, found: impl std::fmt::Display) -> DbErr {
    DbErr::Type(format!("column {index}: expected {wanted}, found {found}"))
}

/// A few SQLite connections used from the calling thread; see the module docs.
///
/// Each one is held while a statement runs, or for a snapshot while its
/// request runs (a GET: authentication, then the endpoint's reads). A caller
/// takes a permit first, one per connection, so that it waits (in order,
/// asynchronously) until any connection is free, then takes the first free
/// one.
///
/// The read transaction of the snapshot that ended last is kept open
/// ([`Lingering`]) until the next snapshot ends; see there.
pub struct InlineSqlite {
    path: PathBuf,
    slots: Vec<Arc<Slot>>,
    free: Arc<Semaphore>,
    next_slot: AtomicUsize,
    lingering: Lingering,
    /// The connection of inline writes ([`Reader::write_inline`]), opened
    /// on first use; closed after a failed write, so the next one opens
    /// afresh.
    writer: Mutex<Option<rusqlite::Connection>>,
    /// Inline writes that returned `Ok`, and that met another process's
    /// lock (tests check which path ran).
    #[cfg(test)]
    writes_done: AtomicUsize,
    #[cfg(test)]
    writes_busy: AtomicUsize,
}

/// The last snapshot's read transaction, held open until the next snapshot
/// ends, so that this process always holds SQLite's read locks.
///
/// SQLite counts the read locks of one process's connections itself and
/// asks the kernel (`fcntl` on the `-shm` file, under a process-wide mutex)
/// only when the first is taken or the last released. Snapshots of one
/// request after another on two worker threads overlap only now and then,
/// so about 1.5 `fcntl` calls and 0.4 futex calls per balance request went
/// to taking and dropping locks (measured with `perf stat`), and the
/// workers waited on each other for that mutex. With the last transaction
/// held until the next one has ended, a new snapshot finds the locks held
/// and only counts.
///
/// The held transaction reads nothing and hides nothing: every snapshot
/// begins its own transaction, on another connection, and sees what was
/// committed before it began. What it holds back is the checkpoint: a
/// checkpoint copies the log into the database only up to the oldest open
/// reader's position (not at all while a reader that began with the log
/// fully copied is open), and the log starts over only when no reader uses
/// it. So a transaction is kept only while `serve`'s checkpointer allows
/// it: the checkpointer stops it at every tick ([`Reader::stop_lingering`])
/// and allows it again ([`Reader::allow_lingering`]) only when the log
/// (write-ahead, never a rollback journal, whose readers would block
/// writers) was copied completely, had the same length at the tick before,
/// and no completion of this process announced a write meanwhile
/// ([`Reader::before_write`], which also stops it at once): while reads
/// have the database to themselves. While writes go on, from this process
/// or another, nothing lingers, as before this existed. It is best effort:
/// a write that starts within a checkpoint tick of a quiet spell can find a
/// transaction held, and the log then starts over a tick later.
///
/// A request that finds every connection taken never waits for the held
/// one: `checkout` takes it over, and a snapshot does not linger while
/// someone may be waiting for a connection.
#[derive(Default)]
struct Lingering {
    held: Mutex<Option<CheckedOut>>,
    allowed: AtomicBool,
    /// Writes announced by [`Reader::before_write`]; switching on and off
    /// happens under this lock, so that an announced write always wins.
    writes: Mutex<u64>,
}

impl Lingering {
    /// Keeps `held` open in place of the previous one, which ends (after
    /// `held` has taken its locks, so they stay taken).
    fn replace(&self, held: CheckedOut) {
        if !self.allowed.load(Ordering::Relaxed) {
            return end(Some(held));
        }
        let previous = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(held);
        end(previous);
        // Switched off meanwhile: the switch's own release may have run
        // before the line above.
        if !self.allowed.load(Ordering::Relaxed) {
            self.release();
        }
    }

    fn release(&self) {
        let held = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        end(held);
    }

    fn stop(&self) -> u64 {
        let writes = *self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        self.allowed.store(false, Ordering::Relaxed);
        self.release();
        writes
    }

    fn allow(&self, writes_before: u64) {
        let writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        if *writes == writes_before {
            self.allowed.store(true, Ordering::Relaxed);
        }
    }

    fn before_write(&self) {
        {
            let mut writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
            *writes += 1;
            self.allowed.store(false, Ordering::Relaxed);
        }
        self.release();
    }
}

/// An inline connection taken for a statement or a snapshot, with the
/// permit that stands for it.
struct CheckedOut {
    slot: OwnedMutexGuard<Option<InlineConnection>>,
    _permit: OwnedSemaphorePermit,
}

/// One inline connection, opened on first use; `None` after a failure, so
/// that the next use opens a fresh one.
type Slot = tokio::sync::Mutex<Option<InlineConnection>>;

/// An inline connection and the rows it read with [`Reader::one_cached`],
/// each with the `PRAGMA data_version` it was read at.
struct InlineConnection {
    conn: PreparedConnection,
    /// Per statement text (the request path caches one or two), the rows
    /// by their parameters ([`params_key`]).
    cached: Vec<(String, CachedRows)>,
}

/// Rows of one statement by their parameters ([`params_key`]), each with the
/// `PRAGMA data_version` it was read at.
type CachedRows = HashMap<Vec<u8>, (i64, Vec<SqliteValue>)>;

/// Rows kept per connection by [`Reader::one_cached`]; the cache is emptied
/// when it is full (it holds one row per token in use).
const CACHED_ROWS: usize = 1024;

#[cfg(test)]
static CACHE_HITS: AtomicUsize = AtomicUsize::new(0);

impl InlineConnection {
    /// `sql` with `params`, or, when `cached`, the row read earlier for the
    /// same statement and values if the database has not changed since.
    ///
    /// `PRAGMA data_version` changes whenever another connection, of this
    /// process or any other, commits (this one never writes: it is
    /// `query_only`). It is read first: a row stored with version v was
    /// read after v was seen, so while the version is still v nothing has
    /// been committed since the row was read; the version only grows, so
    /// a commit between reading it and reading the row (outside a snapshot
    /// they are two transactions) only makes the next read a miss. Inside
    /// a snapshot the version starts the read transaction, so a cache hit
    /// costs no more than that.
    fn read(
        &mut self,
        sql: &str,
        params: &[ValueRef<'_>],
        cached: bool,
    ) -> rusqlite::Result<Option<Vec<SqliteValue>>> {
        if !cached {
            return run(&mut self.conn, sql, params);
        }
        let version: i64 = self
            .conn
            .with_statement("PRAGMA data_version", |statement| {
                statement.query_row([], |row| row.get(0))
            })?;
        let key = params_key(params);
        let rows = match self.cached.iter().position(|(text, _)| text == sql) {
            Some(index) => &mut self.cached[index].1,
            None => {
                self.cached.push((sql.to_owned(), HashMap::new()));
                &mut self.cached.last_mut().expect("just pushed").1
            }
        };
        if let Some((at, row)) = rows.get(&key)
            && *at == version
        {
            #[cfg(test)]
            CACHE_HITS.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(row.clone()));
        }
        let row = run(&mut self.conn, sql, params)?;
        match &row {
            Some(row) => {
                if rows.len() >= CACHED_ROWS {
                    rows.clear();
                }
                rows.insert(key, (version, row.clone()));
            }
            None => {
                rows.remove(&key);
            }
        }
        Ok(row)
    }
}

/// The parameters of a cached read as a map key: each one tagged with its
/// type, text and blobs prefixed with their length, so that different
/// parameter lists never give the same key.
fn params_key(params: &[ValueRef<'_>]) -> Vec<u8> {
    use std::io::Write;
    let mut key = Vec::with_capacity(128);
    for param in params {
        // Writing to a Vec cannot fail.
        let _ = match param {
            ValueRef::Null => write!(key, "n;"),
            ValueRef::Integer(v) => write!(key, "i{v};"),
            ValueRef::Real(v) => write!(key, "r{};", v.to_bits()),
            ValueRef::Text(v) => write!(key, "t{}:", v.len()),
            ValueRef::Blob(v) => write!(key, "b{}:", v.len()),
        };
        // Text and blobs are appended as they are: formatting them through
        // `write!` cost more than the rest of the key.
        if let ValueRef::Text(bytes) | ValueRef::Blob(bytes) = param {
            key.extend_from_slice(bytes);
            key.push(b';');
        }
    }
    key
}

/// A read transaction on one inline connection; see [`Reader::with_snapshot`].
/// Dropping it ends the transaction and frees the connection. After a
/// failed or locked statement it lets go of the connection at once, and
/// its remaining reads go to the pool.
pub struct Snapshot {
    held: Mutex<Option<CheckedOut>>,
    /// Where its transaction goes when it ends.
    inline: Arc<InlineSqlite>,
}

impl Snapshot {
    fn one(&self, stmt: &Statement, cached: bool) -> Result<Option<Vec<SqliteValue>>, InlineError> {
        let params = sqlite_params(stmt)?;
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(conn) = held.as_mut().and_then(|held| held.slot.as_mut()) else {
            return Err(InlineError::Busy);
        };
        let result = conn.read(&stmt.sql, &params, cached);
        match &result {
            Ok(_) => {}
            Err(rusqlite::Error::SqliteFailure(err, _)) if is_busy(err.code) => {
                end(held.take());
            }
            Err(_) => {
                // The next reads of any request start on a fresh connection.
                if let Some(mut held) = held.take() {
                    *held.slot = None;
                }
            }
        }
        result.map_err(|err| classify(err, false))
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let held = self
            .held
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match held {
            // A transaction that worked lingers (see `Lingering`), unless
            // a request may be waiting for a connection.
            Some(held) if held.slot.is_some() && self.inline.free.available_permits() > 0 => {
                self.inline.lingering.replace(held)
            }
            held => end(held),
        }
    }
}

/// Ends a snapshot's read transaction and frees its connection (closed
/// instead when COMMIT fails).
fn end(held: Option<CheckedOut>) {
    let Some(mut held) = held else {
        return;
    };
    if let Some(conn) = held.slot.as_mut()
        && let Err(err) = execute_prepared(&mut conn.conn, "COMMIT")
    {
        tracing::warn!(error = %err, "ending an inline SQLite read transaction failed; reopening");
        *held.slot = None;
    }
}

/// How long an inline read waits for a lock before it hands the statement to
/// the pool, which waits off the async worker thread. In WAL mode a reader
/// only meets a lock while a crashed writer's WAL is recovered or another
/// process holds the file exclusively.
const INLINE_BUSY_TIMEOUT: Duration = Duration::from_millis(10);

/// Prepared statements kept per connection (the request path has under ten).
const STATEMENT_CACHE: usize = 32;

/// Why an inline read did not produce a row.
enum InlineError {
    /// The file stayed locked for [`INLINE_BUSY_TIMEOUT`].
    Busy,
    Failed(DbErr),
}

impl InlineSqlite {
    /// `None` for an in-memory database (another connection would see another
    /// database) or a URL sqlx does not parse (the pool reports that).
    fn for_url(url: &str) -> Option<InlineSqlite> {
        if url.contains(":memory:") || url.contains("mode=memory") {
            return None;
        }
        let options = sea_orm::sqlx::sqlite::SqliteConnectOptions::from_str(url).ok()?;
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        Some(InlineSqlite {
            path: options.get_filename().to_path_buf(),
            slots: (0..threads.clamp(2, 16) * 2)
                .map(|_| Arc::new(Slot::new(None)))
                .collect(),
            free: Arc::new(Semaphore::new(threads.clamp(2, 16) * 2)),
            next_slot: AtomicUsize::new(0),
            lingering: Lingering::default(),
            writer: Mutex::new(None),
            #[cfg(test)]
            writes_done: AtomicUsize::new(0),
            #[cfg(test)]
            writes_busy: AtomicUsize::new(0),
        })
    }

    /// A free connection with its slot locked, opened if needed; waits for
    /// one when all are taken.
    async fn checkout(&self) -> Result<CheckedOut, InlineError> {
        let permit = match self.free.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // The lingering transaction gives its connection up rather
                // than keep anyone waiting.
                self.lingering.release();
                self.free
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the semaphore is never closed")
            }
        };
        let start = self.next_slot.fetch_add(1, Ordering::Relaxed);
        let count = self.slots.len();
        // With a permit at least one slot is unlocked; a slot is locked only
        // by a holder of a permit.
        let mut slot = (0..count)
            .find_map(|i| {
                self.slots[start.wrapping_add(i) % count]
                    .clone()
                    .try_lock_owned()
                    .ok()
            })
            .expect("a permit stands for a free slot");
        if slot.is_none() {
            *slot = Some(InlineConnection {
                conn: PreparedConnection::empty(self.open().map_err(|err| classify(err, true))?),
                cached: Vec::new(),
            });
        }
        Ok(CheckedOut {
            slot,
            _permit: permit,
        })
    }

    async fn one(
        &self,
        stmt: &Statement,
        cached: bool,
    ) -> Result<Option<Vec<SqliteValue>>, InlineError> {
        let params = sqlite_params(stmt)?;
        let mut checked_out = self.checkout().await?;
        let slot = &mut checked_out.slot;
        let conn = slot.as_mut().expect("opened by checkout");
        let result = conn.read(&stmt.sql, &params, cached);
        if let Err(rusqlite::Error::SqliteFailure(err, _)) = &result
            && !is_busy(err.code)
        {
            // Whatever went wrong, the next read starts on a fresh connection.
            **slot = None;
        }
        result.map_err(|err| classify(err, false))
    }

    /// A connection in a deferred read transaction (it starts with the
    /// first statement); `None` when none can be had, and the statements
    /// then run as they would without one.
    async fn begin(self: &Arc<Self>) -> Option<Snapshot> {
        let mut checked_out = self.checkout().await.ok()?;
        let conn = checked_out.slot.as_mut().expect("opened by checkout");
        if execute_prepared(&mut conn.conn, "BEGIN").is_err() {
            *checked_out.slot = None;
            return None;
        }
        Some(Snapshot {
            held: Mutex::new(Some(checked_out)),
            inline: self.clone(),
        })
    }

    fn write<T>(
        &self,
        write: impl FnOnce(&mut rusqlite::Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let mut slot = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let conn = match &mut *slot {
            Some(conn) => conn,
            empty => empty.insert(self.open_writer()?),
        };
        let result = write(conn);
        // A transaction still open (its rollback failed) would keep the
        // file's write lock: such a connection is closed too.
        if !conn.is_autocommit() || result.as_ref().is_err_and(|err| !is_busy_error(err)) {
            *slot = None;
        }
        #[cfg(test)]
        match &result {
            Ok(_) => self.writes_done.fetch_add(1, Ordering::Relaxed),
            Err(err) if is_busy_error(err) => self.writes_busy.fetch_add(1, Ordering::Relaxed),
            Err(_) => 0,
        };
        result
    }

    /// The write connection: set up as `db::connect` sets up the pool's.
    fn open_writer(&self) -> rusqlite::Result<rusqlite::Connection> {
        self.open_with(
            "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;",
        )
    }

    /// A read connection: `query_only` refuses any write on it.
    fn open(&self) -> rusqlite::Result<rusqlite::Connection> {
        self.open_with("PRAGMA query_only = ON;")
    }

    fn open_with(&self, pragmas: &str) -> rusqlite::Result<rusqlite::Connection> {
        // Read-write without CREATE: the pool created the file and switched
        // it to WAL.
        let conn = rusqlite::Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )?;
        conn.busy_timeout(INLINE_BUSY_TIMEOUT)?;
        conn.execute_batch(pragmas)?;
        // Used by the writer's statements (`Reader::write_inline`); reads
        // keep theirs in a `PreparedConnection` and leave it empty.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(conn)
    }
}

/// The values of `stmt` as SQLite values, borrowed: binding them copies
/// nothing.
fn sqlite_params(stmt: &Statement) -> Result<Vec<ValueRef<'_>>, InlineError> {
    stmt.values
        .iter()
        .flat_map(|values| values.0.iter())
        .map(to_sqlite)
        .collect::<Result<Vec<_>, _>>()
        .map_err(InlineError::Failed)
}

fn run(
    conn: &mut PreparedConnection,
    sql: &str,
    params: &[ValueRef<'_>],
) -> rusqlite::Result<Option<Vec<SqliteValue>>> {
    conn.with_statement(sql, |statement| {
        let columns = statement.column_count();
        let mut rows = statement.query(rusqlite::params_from_iter(
            params.iter().map(|&param| ToSqlOutput::Borrowed(param)),
        ))?;
        let Some(row) = rows.next()? else {
            return Ok(None);
        };
        (0..columns)
            .map(|i| row.get::<_, SqliteValue>(i))
            .collect::<rusqlite::Result<Vec<SqliteValue>>>()
            .map(Some)
    })
}

/// A statement without rows (BEGIN, COMMIT), prepared once per connection:
/// parsing them on every request cost more than running them.
fn execute_prepared(conn: &mut PreparedConnection, sql: &str) -> rusqlite::Result<()> {
    conn.with_statement(sql, |statement| statement.execute([]).map(|_| ()))
}

/// A read connection with the statements prepared on it, found again by
/// their text and kept until the connection closes (or, should more than
/// `STATEMENT_CACHE` texts ever be run on it, until the list starts over).
///
/// rusqlite's own statement cache (`prepare_cached`) hashes the whole SQL
/// text twice per use (to take the statement out of its LRU map and to put
/// it back) and copies the text into a new key each time: about 4 500
/// instructions of a SQLite balance request's 94 000, which runs four
/// statements (BEGIN, `PRAGMA data_version`, the lookup, the COMMIT of the
/// previous snapshot), some of them a few hundred bytes long. Here a
/// statement is found by comparing texts (lengths first) in a list of the
/// few the request path runs.
///
/// A `rusqlite::Statement` borrows its connection, so the two live in one
/// self-referential value (`ouroboros`, already in the tree through
/// sea-orm): the connection stays where it is (boxed) while the statements
/// point to it, and they are finalized before it closes.
#[ouroboros::self_referencing]
struct PreparedConnection {
    conn: rusqlite::Connection,
    #[borrows(conn)]
    #[covariant]
    statements: Vec<(Box<str>, rusqlite::Statement<'this>)>,
}

// SAFETY: a `Statement` is not `Send` only because it holds a reference to
// its `Connection`, which is `Send` but not `Sync`: two threads must not use
// one connection at once. Every statement here references this value's own
// connection, and the value is used only through `&mut self` (it is not
// `Sync`), so moving it to another thread moves the connection and every
// reference to it together, and one thread at a time uses them; rusqlite's
// own statement cache, which holds raw statements of its connection, is
// `Send` on the same grounds.
unsafe impl Send for PreparedConnection {}

impl PreparedConnection {
    /// `conn` with no statement prepared yet.
    fn empty(conn: rusqlite::Connection) -> PreparedConnection {
        PreparedConnection::new(conn, |_| Vec::new())
    }

    /// Runs `use_statement` on the statement of `sql`, prepared on first
    /// use. rusqlite resets it when its rows are dropped, whatever the way
    /// out (and `execute` at once), and every use binds all its parameters,
    /// so nothing of one use, not its read transaction either, is left for
    /// the next.
    fn with_statement<T>(
        &mut self,
        sql: &str,
        use_statement: impl FnOnce(&mut rusqlite::Statement<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.with_mut(|fields| {
            let found = fields
                .statements
                .iter()
                .position(|(text, _)| text.as_ref() == sql);
            let index = match found {
                Some(index) => index,
                None => {
                    let statement = fields
                        .conn
                        .prepare_with_flags(sql, rusqlite::PrepFlags::SQLITE_PREPARE_PERSISTENT)?;
                    if fields.statements.len() >= STATEMENT_CACHE {
                        fields.statements.clear();
                    }
                    fields.statements.push((sql.into(), statement));
                    fields.statements.len() - 1
                }
            };
            use_statement(&mut fields.statements[index].1)
        })
    }
}

/// True when `err` is SQLite's "locked by another connection" (after the
/// busy timeout).
pub fn is_busy_error(err: &rusqlite::Error) -> bool {
    matches!(err, rusqlite::Error::SqliteFailure(failure, _) if is_busy(failure.code))
}

/// `err` of a write as the pool would report it: a file that cannot be
/// opened or read is unavailable ([`super::is_unavailable`]), and so is a
/// lock held too long by another process; anything else is a failed query.
pub fn write_error(err: rusqlite::Error) -> DbErr {
    if is_busy_error(&err) {
        return DbErr::Conn(RuntimeErr::Internal(format!(
            "SQLite file locked by another process: {err}"
        )));
    }
    failure(err, false, "write")
}

fn is_busy(code: rusqlite::ErrorCode) -> bool {
    matches!(
        code,
        rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
    )
}

/// A locked file goes to the pool (see [`INLINE_BUSY_TIMEOUT`]). A file that
/// cannot be opened or read counts as unavailable (503), as a pool that
/// cannot connect does; anything else is an internal error.
fn classify(err: rusqlite::Error, opening: bool) -> InlineError {
    if is_busy_error(&err) {
        InlineError::Busy
    } else {
        InlineError::Failed(failure(err, opening, "read"))
    }
}

fn failure(err: rusqlite::Error, opening: bool, doing: &str) -> DbErr {
    let code = match &err {
        rusqlite::Error::SqliteFailure(failure, _) => Some(failure.code),
        _ => None,
    };
    match code {
        Some(
            rusqlite::ErrorCode::CannotOpen
            | rusqlite::ErrorCode::SystemIoFailure
            | rusqlite::ErrorCode::NotADatabase
            | rusqlite::ErrorCode::DiskFull,
        ) => unavailable(&err),
        _ if opening => unavailable(&err),
        _ => DbErr::Custom(format!("SQLite {doing} failed: {err}")),
    }
}

fn unavailable(err: &rusqlite::Error) -> DbErr {
    DbErr::Conn(RuntimeErr::Internal(format!(
        "SQLite file unavailable: {err}"
    )))
}

/// The request path binds integers and text only; anything else is refused
/// rather than guessed.
fn to_sqlite(value: &Value) -> Result<ValueRef<'_>, DbErr> {
    let integer = |v: Option<i64>| v.map_or(ValueRef::Null, ValueRef::Integer);
    Ok(match value {
        Value::Bool(v) => integer(v.map(i64::from)),
        Value::TinyInt(v) => integer(v.map(i64::from)),
        Value::SmallInt(v) => integer(v.map(i64::from)),
        Value::Int(v) => integer(v.map(i64::from)),
        Value::BigInt(v) => integer(*v),
        Value::TinyUnsigned(v) => integer(v.map(i64::from)),
        Value::SmallUnsigned(v) => integer(v.map(i64::from)),
        Value::Unsigned(v) => integer(v.map(i64::from)),
        Value::String(v) => v
            .as_ref()
            .map_or(ValueRef::Null, |s| ValueRef::Text(s.as_bytes())),
        other => {
            return Err(DbErr::Custom(format!(
                "inline SQLite reader: unsupported parameter {other:?}"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use sea_orm::{ConnectionTrait, Statement};

    use super::*;

    async fn sqlite_file() -> (tempfile::TempDir, String, DatabaseConnection) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("reader.db").display());
        let pool = crate::db::connect(&url, &PoolSettings::default())
            .await
            .unwrap();
        pool.execute_unprepared("CREATE TABLE t (id INTEGER PRIMARY KEY, at TEXT, flag BOOLEAN)")
            .await
            .unwrap();
        (dir, url, pool)
    }

    /// A SQLite statement with one parameter.
    fn sqlite(sql: &str, value: Value) -> Statement {
        Statement::from_sql_and_values(DbBackend::Sqlite, sql, [value])
    }

    fn select(id: i64) -> Statement {
        sqlite("SELECT id, at, flag FROM t WHERE id = ?", Value::from(id))
    }

    /// Values written through the sea-orm pool (sqlx's encodings) read back
    /// the same inline, and a row committed by the pool is seen by the very
    /// next inline read.
    #[tokio::test]
    async fn inline_reads_see_what_the_pool_wrote() {
        let (_dir, url, pool) = sqlite_file().await;
        let reader = Reader::new(pool.clone(), &url, &PoolSettings::default());
        assert!(reader.is_inline());
        assert!(reader.one(select(1)).await.unwrap().is_none());
        let at = Utc.with_ymd_and_hms(2026, 11, 22, 3, 4, 5).unwrap()
            + chrono::Duration::microseconds(123_456);
        pool.execute_raw(Statement::from_sql_and_values(
            DbBackend::Sqlite,
            "INSERT INTO t (id, at, flag) VALUES (?, ?, ?), (?, NULL, ?)",
            [
                Value::from(1_i64),
                Value::from(at),
                Value::from(true),
                Value::from(2_i64),
                Value::from(false),
            ],
        ))
        .await
        .unwrap();
        let row = reader.one(select(1)).await.unwrap().unwrap();
        assert!(matches!(row, ReadRow::Inline(_)));
        assert_eq!(row.i64(0).unwrap(), 1);
        assert_eq!(row.opt_datetime(1).unwrap(), Some(at));
        assert!(row.bool(2).unwrap());
        let row = reader.one(select(2)).await.unwrap().unwrap();
        assert_eq!(row.opt_datetime(1).unwrap(), None);
        assert_eq!(row.opt_bool(2).unwrap(), Some(false));
        assert!(row.i64(1).is_err(), "NULL is not an integer");
        assert!(row.opt_i64(7).is_err(), "no such column");
    }

    /// A reader with a snapshot reads one state of the database until it is
    /// dropped, whatever is committed meanwhile; then its connection is free
    /// again and the next reads see everything committed.
    #[tokio::test]
    async fn a_snapshot_reads_one_state_until_dropped() {
        let (_dir, url, pool) = sqlite_file().await;
        let reader = Reader::new(pool.clone(), &url, &PoolSettings::default());
        let insert = |id: i64| sqlite("INSERT INTO t (id) VALUES (?)", Value::from(id));
        pool.execute_raw(insert(1)).await.unwrap();
        let request = reader.with_snapshot().await;
        assert!(request.snapshot.is_some());
        assert!(request.one(select(1)).await.unwrap().is_some());
        pool.execute_raw(insert(2)).await.unwrap();
        assert!(
            request.one(select(2)).await.unwrap().is_none(),
            "committed after the snapshot began"
        );
        assert!(reader.one(select(2)).await.unwrap().is_some());
        drop(request);
        // Every connection is free again: as many snapshots as slots.
        let slots = reader.inline.as_ref().unwrap().slots.len();
        let mut all = Vec::new();
        for _ in 0..slots {
            let free = tokio::time::timeout(Duration::from_secs(10), reader.with_snapshot());
            all.push(free.await.expect("a dropped snapshot frees its connection"));
        }
        for request in &all {
            assert!(request.one(select(2)).await.unwrap().is_some());
        }
    }

    /// The last snapshot's read transaction stays open after the snapshot
    /// ends (`Lingering`): it hides nothing from the next snapshot, is ended
    /// by the next one that ends (and then holds nothing back), holds a
    /// checkpoint back until it is stopped, and is not kept before it is
    /// allowed, after a write is announced, or when the write count given
    /// to `allow_lingering` is stale.
    #[tokio::test]
    async fn the_last_snapshot_lingers_until_stopped() {
        let (_dir, url, pool) = sqlite_file().await;
        let reader = Reader::new(pool.clone(), &url, &PoolSettings::default());
        let insert = |id: i64| sqlite("INSERT INTO t (id) VALUES (?)", Value::from(id));
        let all_copied = || async {
            let (frames, copied) = crate::db::checkpoint_sqlite(&pool).await.unwrap();
            frames == copied
        };
        let read_in_snapshot = |reader: &Reader, id: i64| {
            let reader = reader.clone();
            async move {
                let request = reader.with_snapshot().await;
                assert!(request.snapshot.is_some());
                request.one(select(id)).await.unwrap().is_some()
            }
        };
        pool.execute_raw(insert(1)).await.unwrap();
        assert!(all_copied().await);

        assert!(read_in_snapshot(&reader, 1).await);
        pool.execute_raw(insert(2)).await.unwrap();
        assert!(all_copied().await, "off until allowed");

        reader.allow_lingering(reader.stop_lingering());
        assert!(read_in_snapshot(&reader, 1).await);
        pool.execute_raw(insert(3)).await.unwrap();
        assert!(
            !all_copied().await,
            "the ended snapshot still holds its place"
        );
        assert!(
            read_in_snapshot(&reader, 3).await,
            "a new snapshot sees the commit"
        );
        assert!(
            all_copied().await,
            "the new one ended the old one, and is current"
        );
        pool.execute_raw(insert(4)).await.unwrap();
        assert!(!all_copied().await, "the newer snapshot lingers in turn");
        let writes = reader.stop_lingering();
        assert!(all_copied().await);

        assert!(read_in_snapshot(&reader, 4).await);
        pool.execute_raw(insert(5)).await.unwrap();
        assert!(all_copied().await, "nothing lingers while stopped");

        reader.allow_lingering(writes);
        assert!(read_in_snapshot(&reader, 5).await);
        pool.execute_raw(insert(6)).await.unwrap();
        assert!(!all_copied().await, "lingering again");
        reader.before_write();
        assert!(all_copied().await, "an announced write ends it");
        assert!(read_in_snapshot(&reader, 6).await);
        pool.execute_raw(insert(7)).await.unwrap();
        assert!(all_copied().await, "and keeps it off");

        let writes = reader.stop_lingering();
        reader.before_write();
        reader.allow_lingering(writes);
        assert!(read_in_snapshot(&reader, 7).await);
        pool.execute_raw(insert(8)).await.unwrap();
        assert!(all_copied().await, "a write announced after the stop wins");
    }

    /// The lingering transaction never keeps a request waiting for a
    /// connection: a request that finds them all taken takes it over, and a
    /// snapshot that ends while a request waits frees its connection.
    #[tokio::test]
    async fn lingering_gives_way_to_waiting_requests() {
        let (_dir, url, pool) = sqlite_file().await;
        let reader = Reader::new(pool.clone(), &url, &PoolSettings::default());
        reader.allow_lingering(reader.stop_lingering());
        let slots = reader.inline.as_ref().unwrap().slots.len();
        fn within<F: std::future::Future>(future: F) -> tokio::time::Timeout<F> {
            tokio::time::timeout(Duration::from_secs(10), future)
        }
        let request = reader.with_snapshot().await;
        assert!(request.one(select(1)).await.unwrap().is_none());
        drop(request);
        let mut all = Vec::new();
        for _ in 0..slots {
            let request = within(reader.with_snapshot())
                .await
                .expect("the held one gives way");
            assert!(request.one(select(1)).await.unwrap().is_none());
            all.push(request);
        }
        let waiting = tokio::spawn({
            let reader = reader.clone();
            async move { reader.with_snapshot().await.snapshot.is_some() }
        });
        tokio::task::yield_now().await;
        drop(all.pop());
        assert!(
            within(waiting)
                .await
                .expect("an ending snapshot frees its connection")
                .unwrap()
        );
    }

    /// A cached read is reused only while nothing has been committed since
    /// it was read: a commit by the pool (another connection, as the
    /// command line's would be) is seen by the very next cached read, inside
    /// a snapshot begun after it too; with the last snapshot's transaction
    /// kept open (`Lingering`) as without.
    #[tokio::test]
    async fn cached_reads_hold_only_while_the_database_is_unchanged() {
        cached_reads_hold_only_while_unchanged(false).await;
        cached_reads_hold_only_while_unchanged(true).await;
    }

    async fn cached_reads_hold_only_while_unchanged(lingering: bool) {
        let (_dir, url, pool) = sqlite_file().await;
        let reader = Reader::new(pool.clone(), &url, &PoolSettings::default());
        if lingering {
            // Each snapshot below then stays open until the next one ends.
            reader.allow_lingering(reader.stop_lingering());
        }
        let set = |flag: bool| {
            sqlite(
                "INSERT OR REPLACE INTO t (id, flag) VALUES (1, ?)",
                Value::from(flag),
            )
        };
        let flag = |row: Option<ReadRow>| row.expect("row 1").bool(2).unwrap();
        pool.execute_raw(set(true)).await.unwrap();
        // Every slot reads once, so that each connection has the row cached.
        let slots = reader.inline.as_ref().unwrap().slots.len();
        for _ in 0..slots {
            assert!(flag(reader.one_cached(select(1)).await.unwrap()));
        }
        let hits = CACHE_HITS.load(Ordering::Relaxed);
        assert!(flag(reader.one_cached(select(1)).await.unwrap()));
        assert!(
            CACHE_HITS.load(Ordering::Relaxed) > hits,
            "unchanged: answered from the cache"
        );
        pool.execute_raw(set(false)).await.unwrap();
        for _ in 0..slots {
            assert!(!flag(reader.one_cached(select(1)).await.unwrap()));
            let request = reader.with_snapshot().await;
            assert!(!flag(request.one_cached(select(1)).await.unwrap()));
        }
        pool.execute_raw(Statement::from_string(DbBackend::Sqlite, "DELETE FROM t"))
            .await
            .unwrap();
        assert!(reader.one_cached(select(1)).await.unwrap().is_none());
    }

    /// The inline connections refuse writes.
    #[tokio::test]
    async fn inline_connections_are_read_only() {
        let (_dir, url, pool) = sqlite_file().await;
        let reader = Reader::new(pool.clone(), &url, &PoolSettings::default());
        let insert = Statement::from_string(DbBackend::Sqlite, "INSERT INTO t (id) VALUES (9)");
        let err = reader.one(insert).await.err().expect("write refused");
        assert!(err.to_string().contains("readonly"), "{err}");
        let count = pool
            .query_one_raw(Statement::from_string(
                DbBackend::Sqlite,
                "SELECT COUNT(*) FROM t",
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(count.try_get_by_index::<i64>(0).unwrap(), 0);
    }

    /// An in-memory database is private to its connection: reads stay on the
    /// pool there.
    #[tokio::test]
    async fn in_memory_databases_read_through_the_pool() {
        let url = "sqlite::memory:";
        let pool = crate::db::connect(url, &PoolSettings::default())
            .await
            .unwrap();
        assert!(!Reader::new(pool, url, &PoolSettings::default()).is_inline());
    }

    /// A file that cannot be opened is "unavailable" (503), not an internal
    /// error.
    #[tokio::test]
    async fn a_missing_file_is_unavailable() {
        let (dir, url, pool) = sqlite_file().await;
        let reader = Reader::new(pool, &url, &PoolSettings::default());
        std::fs::remove_file(dir.path().join("reader.db")).unwrap();
        let err = reader.one(select(1)).await.err().expect("no file, no read");
        assert!(crate::db::is_unavailable(&err), "{err:?}");
    }

    /// Timestamps in every form sqlx reads on SQLite.
    #[test]
    fn timestamps_decode_like_sqlx() {
        let at = Utc.with_ymd_and_hms(2026, 11, 22, 3, 4, 5).unwrap();
        let row = ReadRow::Inline(vec![
            SqliteValue::Text("2026-11-22T03:04:05+00:00".into()),
            SqliteValue::Text("2026-11-22 03:04:05".into()),
            SqliteValue::Text("2026-11-22 05:04:05.000+02:00".into()),
            SqliteValue::Text("2026-11-22T03:04Z".into()),
            SqliteValue::Integer(at.timestamp()),
            SqliteValue::Real(2_440_587.5 + at.timestamp() as f64 / 86_400.0),
            SqliteValue::Text("yesterday".into()),
        ]);
        for i in 0..4 {
            let minute = Utc.with_ymd_and_hms(2026, 11, 22, 3, 4, 0).unwrap();
            let expected = if i == 3 { minute } else { at };
            assert_eq!(row.opt_datetime(i).unwrap(), Some(expected), "column {i}");
        }
        assert_eq!(row.opt_datetime(4).unwrap(), Some(at));
        let julian = row.opt_datetime(5).unwrap().unwrap();
        assert!((julian - at).num_milliseconds().abs() < 1, "{julian}");
        assert!(row.opt_datetime(6).is_err());
    }

    /// A statement is prepared once per text and found again; a statement
    /// whose rows were left unread is reset all the same, so its next use
    /// sees what was committed meanwhile (no read transaction is left
    /// open); past `STATEMENT_CACHE` texts the list starts over.
    #[test]
    fn prepared_statements_are_kept_and_found_by_their_text() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("prepared.db");
        let writer = rusqlite::Connection::open(&path).expect("open");
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL; CREATE TABLE t (v integer); INSERT INTO t VALUES (1), (2);",
            )
            .expect("create");
        let mut prepared =
            PreparedConnection::empty(rusqlite::Connection::open(&path).expect("open"));
        let count = |prepared: &mut PreparedConnection| {
            run(prepared, "SELECT COUNT(*) FROM t", &[])
                .expect("count")
                .map(|row| row[0].clone())
        };
        for _ in 0..3 {
            // The first of two rows; the second is never read.
            let first = run(&mut prepared, "SELECT v FROM t ORDER BY v", &[]).expect("first");
            assert_eq!(first, Some(vec![SqliteValue::Integer(1)]));
            assert_eq!(count(&mut prepared), Some(SqliteValue::Integer(2)));
        }
        assert_eq!(prepared.borrow_statements().len(), 2, "one per text");
        writer
            .execute("INSERT INTO t VALUES (3)", [])
            .expect("insert");
        assert_eq!(
            count(&mut prepared),
            Some(SqliteValue::Integer(3)),
            "a kept statement sees the latest commit"
        );
        let by_value = run(
            &mut prepared,
            "SELECT COUNT(*) FROM t WHERE v >= ?1",
            &[ValueRef::Integer(2)],
        )
        .expect("bound");
        assert_eq!(by_value, Some(vec![SqliteValue::Integer(2)]));
        for i in 0..STATEMENT_CACHE {
            run(&mut prepared, &format!("SELECT {i}"), &[]).expect("select");
        }
        // Full at `STATEMENT_CACHE` texts, the list started over: it holds
        // the last three.
        assert_eq!(prepared.borrow_statements().len(), 3);
        assert_eq!(count(&mut prepared), Some(SqliteValue::Integer(3)));
    }

    /// Different parameter lists never share a cache key.
    #[test]
    fn cache_keys_tell_parameter_lists_apart() {
        use ValueRef::{Blob, Integer, Null, Text};
        let lists = [
            vec![Integer(1)],
            vec![Text(b"1")],
            vec![Blob(b"1")],
            vec![Text(b"a;"), Text(b"b")],
            vec![Text(b"a"), Text(b";b")],
            vec![Text(b"a;t1:b")],
            vec![Null],
            vec![Text(b"")],
            vec![],
        ];
        let keys: std::collections::HashSet<Vec<u8>> =
            lists.iter().map(|list| params_key(list)).collect();
        assert_eq!(keys.len(), lists.len());
        assert_eq!(params_key(&lists[2]), params_key(&lists[2].clone()));
    }

    /// The bundled SQLite is built with the options of `.cargo/config.toml`:
    /// a page cache per connection (no process-wide cache behind one mutex)
    /// and no global mutex for memory statistics.
    #[test]
    fn sqlite_is_built_without_process_wide_mutexes_on_the_read_path() {
        let conn = rusqlite::Connection::open_in_memory().expect("in-memory database");
        let mut statement = conn.prepare("PRAGMA compile_options").expect("pragma");
        let options: Vec<String> = statement
            .query_map([], |row| row.get(0))
            .expect("compile options")
            .collect::<Result<_, _>>()
            .expect("compile options");
        assert!(
            !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
            "{options:?}"
        );
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "{options:?}"
        );
        // sqlx's in-memory databases need the shared cache, still built in.
        assert!(!options.iter().any(|o| o == "OMIT_SHARED_CACHE"));
    }

    /// A locked file goes to the pool; an unreadable one is unavailable (503);
    /// anything else is an internal error.
    #[test]
    fn read_errors_are_classified() {
        let failure = |code| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        assert!(matches!(
            classify(failure(rusqlite::ffi::SQLITE_BUSY), false),
            InlineError::Busy
        ));
        assert!(matches!(
            classify(failure(rusqlite::ffi::SQLITE_LOCKED), false),
            InlineError::Busy
        ));
        for code in [rusqlite::ffi::SQLITE_CANTOPEN, rusqlite::ffi::SQLITE_IOERR] {
            match classify(failure(code), false) {
                InlineError::Failed(err) => assert!(crate::db::is_unavailable(&err), "{err:?}"),
                InlineError::Busy => panic!("{code} is not busy"),
            }
        }
        match classify(failure(rusqlite::ffi::SQLITE_MISUSE), false) {
            InlineError::Failed(err) => assert!(!crate::db::is_unavailable(&err), "{err:?}"),
            InlineError::Busy => panic!("misuse is not busy"),
        }
    }
}
