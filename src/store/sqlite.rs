//! The SQLite store.
//!
//! **Reads run inline.** sqlx gives every SQLite connection a worker thread
//! of its own: a statement is sent to it and its rows are sent back, a
//! thread hand-off each way, which cost a balance request more CPU than the
//! lookup inside SQLite. A read by primary or unique key on a WAL database
//! never waits for a writer, so the token's statement runs here on a
//! read-only rusqlite connection, in the calling thread, with its prepared
//! statement kept by rusqlite's statement cache. Each read is its own
//! autocommit transaction and sees everything committed before it began, by
//! any process: a change made with the command line holds from the next
//! request. The connections are kept in a list (at most one per thread that
//! reads at once).
//!
//! **One writer at a time, writes committed in groups.** SQLite allows one
//! writer per file. Each write (a completion, a creation, a relay's claim
//! or recording) is a closure run on the store's one write connection, on a
//! blocking thread (one hand-off per group, instead of one per statement on
//! the sqlx pool; waiting for another process's write lock, up to the busy
//! timeout, blocks no thread of the runtime). This process's writes queue
//! in front of it, and whoever takes the connection runs every write then
//! queued in one `BEGIN IMMEDIATE` transaction, each write in a savepoint of
//! its own (a write that fails is rolled back alone), and answers them all
//! after the one commit; a write answered by an earlier group while it
//! waited for the connection stops waiting then, and never takes it. A lone
//! write is a group of one, at once. A commit
//! writes each changed page to the WAL once per group instead of once per
//! write, which is most of a write's cost (docs/performance.md). The queue
//! replaces polling the file lock in SQLite's busy handler, whose back-off
//! sleeps made the tail latency.
//!
//! **Readiness.** SQLite can tell a file it may not write (it opens such a
//! file read-only), but a full disk or a failing one only by writing. So
//! the check asks the write connection whether it opened the file read-only
//! and, after a request's write was refused, writes once itself (the
//! header's user version, which masterpay does not use, written back
//! unchanged). A write connection that refused a write is closed; the next
//! write opens another.
//!
//! **Checkpoints off the request path.** In WAL mode every commit appends
//! to the `-wal` file, whose pages SQLite copies back into the database in a
//! checkpoint. By default the connection whose commit passes 1000 pages runs
//! that checkpoint inside its commit, which stalled the writes queued
//! behind it (docs/performance.md). The write connections (this one and the
//! pool's, see `database::connect`) therefore never checkpoint
//! (`wal_autocheckpoint = 0`):
//! a thread of the store's own runs a PASSIVE checkpoint every
//! [`WalCheckpoints::interval`], which copies what no reader still needs and
//! never waits for or blocks a writer. The WAL starts over from its
//! beginning only at a write that begins with every frame copied, which a
//! PASSIVE checkpoint alone never gives a writer that never pauses (it
//! copies the frames there were when it began); so when the WAL held frames,
//! the thread runs more PASSIVE passes, each copying what the writer added
//! during the one before, until one finds little added, and copies that
//! little in a last pass with this process's writes held back (two fsyncs of
//! a few hundred frames at most). The WAL then holds what is written between
//! two checkpoints. When a write still leaves the `-wal`
//! file past [`WalCheckpoints::bound`] (checkpoints falling behind, or a
//! reader of another process holding old frames), the write connection runs
//! a TRUNCATE checkpoint in its turn, before the next write (this process's
//! writers wait on their queue meanwhile, as for any write), which copies
//! everything and empties the file.
//!
//! See docs/performance.md for what each bought.

use std::{
    path::{Path, PathBuf},
    str::FromStr,
    sync::{Arc, LazyLock, Mutex, PoisonError, mpsc},
    thread::JoinHandle,
    time::Duration,
};

use chrono::{DateTime, Utc};
use entity::{
    balance, operation_log::LogKind, payment_order::OrderStatus, webhook_delivery::DeliveryStatus,
};
use rusqlite::{MAIN_DB, OpenFlags, OptionalExtension, TransactionBehavior, named_params, params};
use sea_orm::{ActiveEnum, sqlx::sqlite::SqliteConnectOptions};

mod relay;

use super::{
    AccountKey, AccountRow, AuditRow, CompleteError, CompletedOrder, Completion, LOG_AUDIT,
    NewOrder, ORDER_SERVER, ORDER_STATUS, ORDER_USER, OrderInsert, RECORD_TOKEN_USE, Readiness,
    Store, StoreError, StoreFuture, Subscriber, TokenRow, deliveries, money, now, permission_list,
    readiness::{READ_ONLY, WriteError, WriteHealth},
    relay::RelayStore,
};
pub use super::{LOG_CREDIT, SUBSCRIBERS};
use crate::events::{NewEvent, new_webhook_id};

/// The token by its hash with the asked account (see [`super::read_token`]).
static READ_TOKEN: LazyLock<String> =
    LazyLock::new(|| super::read_token(r#"group_concat(g."permission", ',')"#));

/// The status update of a completion, guarded so that it matches a pending
/// order only once.
pub const COMPLETE_ORDER: &str = r#"UPDATE "payment_orders"
SET "status" = ?1, "completed_at" = ?2, "payment_id" = ?3
WHERE "order_id" = ?4 AND "project_id" = ?5 AND "payment_system" = ?6 AND "status" = ?7
RETURNING "id", "user_id", "server_id", "amount_cents", "payment_id", "created_at""#;

/// The credit of the main balance, creating the balance row when missing.
pub const CREDIT_MAIN: &str = r#"INSERT INTO "balances" ("user_id", "server_id", "main_cents", "bonus_cents", "updated_at", "project_id")
VALUES (?1, ?2, ?3, 0, ?4, ?5)
ON CONFLICT ("user_id", "server_id") DO UPDATE
SET "main_cents" = "balances"."main_cents" + ?3, "updated_at" = ?4
RETURNING "main_cents""#;

/// An event, recorded with its change.
const INSERT_EVENT: &str = r#"INSERT INTO "webhook_events" ("webhook_id", "project_id", "event_type", "order_id",
    "payload", "created_at")
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
RETURNING "id""#;

/// An event's delivery to one endpoint, due at once.
const INSERT_DELIVERY: &str = r#"INSERT INTO "webhook_deliveries" ("event_id", "endpoint_id", "status", "attempts",
    "next_attempt_at", "created_at")
VALUES (?1, ?2, ?3, 0, ?4, ?4)"#;

/// How long an inline read waits for a locked file (WAL recovery after a
/// crashed writer, another process holding it exclusively) before it counts
/// as unavailable. It blocks its thread meanwhile, so it is short.
const READ_BUSY_TIMEOUT: Duration = Duration::from_millis(50);

/// When the store checkpoints the WAL (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalCheckpoints {
    /// How often a PASSIVE checkpoint runs.
    pub interval: Duration,
    /// The `-wal` file's size (bytes) past which a write is followed by a
    /// TRUNCATE checkpoint.
    pub bound: u64,
}

impl Default for WalCheckpoints {
    fn default() -> WalCheckpoints {
        WalCheckpoints {
            interval: Duration::from_millis(100),
            bound: 64 << 20,
        }
    }
}

pub struct SqliteStore {
    readers: InlineReaders,
    /// The write connection, opened at the first write; its mutex makes
    /// this process's groups of writes (and the checkpoints' second pass)
    /// take turns.
    writer: Arc<tokio::sync::Mutex<Option<rusqlite::Connection>>>,
    /// The writes waiting for the next group.
    queued: Arc<Mutex<Vec<QueuedWrite>>>,
    /// How long a writer waits for another process's write lock.
    busy: Duration,
    health: WriteHealth,
    /// The `-wal` file's size past which a write truncates it.
    wal_bound: u64,
    /// Held by each checkpoint of this store: SQLite refuses a checkpoint
    /// at once (it does not wait) while another runs, so the writer's
    /// TRUNCATE waits here for the thread's PASSIVE to end instead.
    checkpointing: Arc<Mutex<()>>,
    /// Runs the PASSIVE checkpoints until the store is dropped.
    _checkpointer: Checkpointer,
}

impl SqliteStore {
    /// The store of the SQLite file `url` names; its writers wait up to
    /// `busy` for another process's write lock. An in-memory database
    /// cannot be shared by several connections, so it is refused.
    pub fn new(url: &str, busy: Duration) -> Result<SqliteStore, StoreError> {
        SqliteStore::with_checkpoints(url, busy, WalCheckpoints::default())
    }

    /// [`SqliteStore::new`] with the WAL checkpointed as `checkpoints` says.
    pub fn with_checkpoints(
        url: &str,
        busy: Duration,
        checkpoints: WalCheckpoints,
    ) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?;
        let path = options.get_filename().to_path_buf();
        if url.contains(":memory:") || url.contains("mode=memory") || path.as_os_str().is_empty() {
            return Err(StoreError::Failed(
                "an in-memory SQLite database cannot be served: use a file".into(),
            ));
        }
        let checkpointing = Arc::new(Mutex::new(()));
        let writer = Arc::new(tokio::sync::Mutex::new(None));
        Ok(SqliteStore {
            _checkpointer: Checkpointer::start(
                path.clone(),
                busy,
                checkpoints.interval,
                Arc::clone(&writer),
                Arc::clone(&checkpointing),
            )?,
            checkpointing,
            writer,
            queued: Arc::new(Mutex::new(Vec::new())),
            readers: InlineReaders {
                path,
                idle: Mutex::new(Vec::new()),
            },
            busy,
            health: WriteHealth::default(),
            wal_bound: checkpoints.bound,
        })
    }

    fn read_token_now(
        &self,
        token_hash: &str,
        account: Option<&AccountKey>,
    ) -> Result<Option<TokenRow>, StoreError> {
        self.readers.with_connection(|conn| {
            let mut statement = conn.prepare_cached(&READ_TOKEN)?;
            statement
                .query_row(
                    named_params! {
                        ":token_hash": token_hash,
                        ":user_id": account.and_then(|a| a.user_id),
                        ":email": account.and_then(|a| a.email.as_deref()),
                        ":server_id": account.map(|a| a.server_id),
                    },
                    |row| {
                        Ok(TokenRow {
                            token_id: row.get("token_id")?,
                            project_id: row.get("project_id")?,
                            active: row.get("token_active")?,
                            expires_at: time_column(row, "expires_at")?,
                            grace_until: time_column(row, "grace_until")?,
                            last_used_at: time_column(row, "last_used_at")?,
                            project_active: row.get("project_active")?,
                            permissions: permission_list(row.get("permissions")?),
                            account: match account {
                                None => None,
                                Some(_) => Some(AccountRow {
                                    user_by_id: row.get("user_by_id")?,
                                    user_by_email: row.get("user_by_email")?,
                                    server_found: row
                                        .get::<_, Option<i64>>("server_found")?
                                        .is_some(),
                                    main_cents: row.get("main_cents")?,
                                    bonus_cents: row.get("bonus_cents")?,
                                }),
                            },
                        })
                    },
                )
                .optional()
        })
    }

    /// Runs `write` on the write connection in the next group of writes
    /// (see the module docs): inside a savepoint of its own, which its
    /// error rolls back; answered once the group's commit is known. Notes
    /// how it ended.
    async fn write<T, E>(
        &self,
        write: impl FnOnce(&rusqlite::Connection) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + WriteError + Send + 'static,
    {
        let (queued, mut answered) = queue_write(write);
        self.queued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(queued);
        // A write that an earlier group ran stops waiting for the
        // connection as soon as it is answered: taking the connection only
        // to find the queue empty would cost a blocking thread's round trip
        // with every other write held back meanwhile (docs/performance.md).
        let outcome = loop {
            tokio::select! {
                biased;
                answer = &mut answered => break answer.unwrap_or_else(|_| {
                    Err(StoreError::Failed("the write was not answered".into()).into())
                }),
                writer = Arc::clone(&self.writer).lock_owned() => {
                    let (queue, bound) = (Arc::clone(&self.queued), self.wal_bound);
                    let checkpointing = Arc::clone(&self.checkpointing);
                    let group = self
                        .run_writer(writer, move |writer, path, busy| {
                            let group = std::mem::take(
                                &mut *queue.lock().unwrap_or_else(PoisonError::into_inner),
                            );
                            if group.is_empty() {
                                return;
                            }
                            commit_group(writer, path, busy, group);
                            if let Some(conn) = writer.as_mut()
                                && wal_size(path) > bound
                            {
                                let _alone =
                                    checkpointing.lock().unwrap_or_else(PoisonError::into_inner);
                                truncate_wal(conn);
                            }
                        })
                        .await;
                    // Unanswered only when the blocking thread failed (a
                    // panic, or the runtime shutting down); otherwise the
                    // answer is in.
                    if let Err(err) = group {
                        break answered.try_recv().unwrap_or_else(|_| {
                            Err(StoreError::Failed(err.to_string()).into())
                        });
                    }
                }
            }
        };
        self.health.note(&outcome);
        outcome
    }

    /// Runs `run` with the slot of the write connection (empty until a
    /// write opens it), on a blocking thread, after this process's writes
    /// before it.
    async fn with_writer<R: Send + 'static>(
        &self,
        run: impl FnOnce(&mut Option<rusqlite::Connection>, &Path, Duration) -> R + Send + 'static,
    ) -> Result<R, tokio::task::JoinError> {
        let writer = Arc::clone(&self.writer).lock_owned().await;
        self.run_writer(writer, run).await
    }

    /// Runs `run` with the slot of the write connection, taken, on a
    /// blocking thread.
    async fn run_writer<R: Send + 'static>(
        &self,
        mut writer: tokio::sync::OwnedMutexGuard<Option<rusqlite::Connection>>,
        run: impl FnOnce(&mut Option<rusqlite::Connection>, &Path, Duration) -> R + Send + 'static,
    ) -> Result<R, tokio::task::JoinError> {
        let (path, busy) = (self.readers.path.clone(), self.busy);
        tokio::task::spawn_blocking(move || run(&mut writer, &path, busy)).await
    }

    /// The readiness check on the write connection (see the module docs);
    /// `refused`: a request's write was refused since the last ready one.
    async fn check_writable(&self, refused: bool) -> Readiness {
        let checked = self.with_writer(move |writer, path, busy| {
            let conn = match writer.as_mut() {
                Some(conn) => conn,
                None => match open_writer(path, busy) {
                    Ok(conn) => writer.insert(conn),
                    Err(err) => return readiness_of(&err),
                },
            };
            let readiness = match conn.is_readonly(MAIN_DB) {
                Ok(true) => Readiness::NotReady(READ_ONLY),
                Ok(false) if refused => match write_unchanged_user_version(conn) {
                    Ok(()) => Readiness::Ready,
                    Err(err) => readiness_of(&err),
                },
                Ok(false) => Readiness::Ready,
                Err(err) => readiness_of(&err),
            };
            if !readiness.is_ready() {
                *writer = None;
            }
            readiness
        });
        checked
            .await
            .unwrap_or_else(|err| Readiness::of_error(&StoreError::Failed(err.to_string())))
    }
}

/// A write waiting for its group: given the write connection inside the
/// group's transaction, it runs and says how it went; given an error, it is
/// not run and fails with it.
type QueuedWrite = Box<dyn FnOnce(Result<&rusqlite::Connection, StoreError>) -> Written + Send>;

/// A write of a group, waiting for the group's commit.
struct Written {
    succeeded: bool,
    refuses_writes: bool,
    /// Answers the caller with the write's outcome, or with the commit's
    /// error when the write succeeded and the commit failed.
    answer: Box<dyn FnOnce(Result<(), StoreError>) + Send>,
}

/// `write` as a write of a group, and where its answer comes.
fn queue_write<T, E>(
    write: impl FnOnce(&rusqlite::Connection) -> Result<T, E> + Send + 'static,
) -> (QueuedWrite, tokio::sync::oneshot::Receiver<Result<T, E>>)
where
    T: Send + 'static,
    E: From<StoreError> + WriteError + Send + 'static,
{
    let (answer, answered) = tokio::sync::oneshot::channel();
    let queued: QueuedWrite = Box::new(move |conn| {
        // Its caller has gone (the client hung up, the request timed out
        // and was answered 503): not run, so that nothing changes after an
        // answer that said a retry can succeed. A write already running
        // when its caller goes commits with its group.
        if answer.is_closed() {
            return Written {
                succeeded: false,
                refuses_writes: false,
                answer: Box::new(drop),
            };
        }
        let outcome = match conn {
            Ok(conn) => write(conn),
            Err(err) => Err(err.into()),
        };
        Written {
            succeeded: outcome.is_ok(),
            refuses_writes: outcome.as_ref().is_err_and(WriteError::refuses_writes),
            answer: Box::new(move |committed| {
                let outcome = match (outcome, committed) {
                    (Ok(_), Err(err)) => Err(err.into()),
                    (outcome, _) => outcome,
                };
                // The caller may have gone (its client hung up).
                let _ = answer.send(outcome);
            }),
        }
    });
    (queued, answered)
}

/// Runs `group` in one `BEGIN IMMEDIATE` transaction on the write
/// connection in `slot` (opened when empty), each write in a savepoint of
/// its own, then commits and answers every write. Closes the connection
/// when the database refused a write.
fn commit_group(
    slot: &mut Option<rusqlite::Connection>,
    path: &Path,
    busy: Duration,
    group: Vec<QueuedWrite>,
) {
    let began = match slot {
        Some(conn) => Ok(conn),
        None => open_writer(path, busy)
            .map(|conn| slot.insert(conn))
            .map_err(|err| unavailable(&err)),
    }
    .and_then(|conn| {
        // A group whose write panicked left its transaction open.
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        conn.execute_batch("BEGIN IMMEDIATE")
            .map(|()| conn)
            .map_err(|err| classify(&err))
    });
    let conn = match began {
        Ok(conn) => conn,
        Err(err) => {
            if err.refuses_writes() {
                *slot = None;
            }
            for write in group {
                (write(Err(err.clone())).answer)(Ok(()));
            }
            return;
        }
    };
    let mut written = Vec::with_capacity(group.len());
    // Set when the group can no longer commit: what follows is not run.
    let mut broken: Option<StoreError> = None;
    for write in group {
        // A full disk or an I/O error rolls the whole transaction back,
        // with the writes run so far.
        if broken.is_none() && conn.is_autocommit() {
            broken = Some(StoreError::Unavailable(
                "the database rolled the group's transaction back".into(),
            ));
        }
        if let Some(err) = &broken {
            written.push(write(Err(err.clone())));
            continue;
        }
        match conn.savepoint() {
            Ok(savepoint) => {
                let ran = write(Ok(&savepoint));
                if ran.succeeded {
                    if let Err(err) = savepoint.commit() {
                        broken = Some(classify(&err));
                    }
                } else {
                    drop(savepoint); // rolls this write back alone
                }
                written.push(ran);
            }
            Err(err) => {
                broken = Some(classify(&err));
                written.push(write(Err(classify(&err))));
            }
        }
    }
    if broken.is_none() && conn.is_autocommit() {
        broken = Some(StoreError::Unavailable(
            "the database rolled the group's transaction back".into(),
        ));
    }
    let committed = match broken {
        Some(err) => Err(err),
        None => conn.execute_batch("COMMIT").map_err(|err| classify(&err)),
    };
    if committed.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    let refused = committed.as_ref().is_err_and(WriteError::refuses_writes)
        || written.iter().any(|ran| ran.refuses_writes);
    for ran in written {
        (ran.answer)(committed.clone());
    }
    if refused {
        *slot = None;
    }
}

/// One committed write that changes nothing: the header's user version
/// written back as it is.
fn write_unchanged_user_version(conn: &mut rusqlite::Connection) -> rusqlite::Result<()> {
    let txn = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = txn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    txn.execute_batch(&format!("PRAGMA user_version = {version}"))?;
    txn.commit()
}

/// What a failure of the readiness check says.
fn readiness_of(err: &rusqlite::Error) -> Readiness {
    match err.sqlite_error_code() {
        Some(rusqlite::ErrorCode::ReadOnly) => Readiness::NotReady(READ_ONLY),
        Some(rusqlite::ErrorCode::DiskFull) => Readiness::NotReady("database disk is full"),
        Some(rusqlite::ErrorCode::SystemIoFailure) => {
            Readiness::NotReady("database cannot be written (I/O error)")
        }
        _ => Readiness::of_error(&classify(err)),
    }
}

/// How a write connection is set up: as the pool's connections, but
/// never checkpointing inside a commit (see the module docs).
pub const WRITER_PRAGMAS: &str =
    "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;";

/// Opens the write connection of `path`, set up as the pool's connections.
fn open_writer(path: &Path, busy: Duration) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(busy)?;
    conn.execute_batch(WRITER_PRAGMAS)?;
    Ok(conn)
}

/// The size of `path`'s `-wal` file in bytes; 0 when there is none.
fn wal_size(path: &Path) -> u64 {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(0, |meta| meta.len())
}

/// Copies the whole WAL into the database and empties it, waiting up to the
/// busy timeout for readers of older snapshots (other processes'
/// included). Another process's checkpoint running at that moment makes it
/// fail at once. The write before it has committed either way, so a
/// checkpoint that could not finish is only logged, and the next write
/// past the bound tries again.
fn truncate_wal(conn: &rusqlite::Connection) {
    let done = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
        row.get::<_, i64>(0)
    });
    match done {
        Ok(0) => {}
        Ok(_) => tracing::warn!(
            "the SQLite WAL could not be truncated: a reader or another process's checkpoint held it"
        ),
        Err(err) => tracing::warn!(error = %err, "the SQLite WAL could not be truncated"),
    }
}

/// The thread that runs the store's PASSIVE checkpoints, on a connection of
/// its own; it ends when this is dropped.
struct Checkpointer {
    /// Dropping it wakes the thread, which then ends.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    fn start(
        path: PathBuf,
        busy: Duration,
        interval: Duration,
        writer: Arc<tokio::sync::Mutex<Option<rusqlite::Connection>>>,
        checkpointing: Arc<Mutex<()>>,
    ) -> Result<Checkpointer, StoreError> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || {
                let mut conn = None;
                let alone = || checkpointing.lock().unwrap_or_else(PoisonError::into_inner);
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    // Each pass alone, not the series: a write that finds
                    // the WAL past its bound waits for one pass before its
                    // TRUNCATE, with every write queued behind it.
                    let frames = checkpoint_converging(|| {
                        let _alone = alone();
                        checkpoint_passive(&mut conn, &path, busy)
                    });
                    // The WAL starts over only at a write that begins with
                    // every frame copied, which a writer that never pauses
                    // does not give: so the frames written during the last
                    // pass are copied with this process's writes held back.
                    // Locked in the writer's order: its mutex, then the
                    // checkpoint's.
                    let copied = match frames {
                        Ok(0) => Ok(0),
                        Ok(_) => {
                            let _writes = writer.blocking_lock();
                            let _alone = alone();
                            checkpoint_passive(&mut conn, &path, busy)
                        }
                        Err(err) => Err(err),
                    };
                    if let Err(err) = copied {
                        // Opened anew at the next tick (the file may be
                        // replaced or briefly locked).
                        conn = None;
                        tracing::warn!(error = %err, "SQLite checkpoint failed");
                    }
                }
            })
            .map_err(|err| StoreError::Failed(err.to_string()))?;
        Ok(Checkpointer {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// The most PASSIVE passes a checkpoint runs before its held one.
pub const CONVERGING_PASSES: usize = 8;

/// Frames left for the held pass: what a writer at saturation adds during
/// one short pass, whose two fsyncs then make most of the held pass's time.
pub const HELD_FRAMES: u64 = 256;

/// `pass` (a PASSIVE pass) until the last one found at most [`HELD_FRAMES`] frames
/// added since the one before (or [`CONVERGING_PASSES`] ran): each copies
/// what the writer added during the one before, less work each time, so that
/// the held pass that follows copies and syncs little. The WAL's frames
/// after the last pass.
fn checkpoint_converging(mut pass: impl FnMut() -> rusqlite::Result<u64>) -> rusqlite::Result<u64> {
    let mut frames = pass()?;
    for _ in 1..CONVERGING_PASSES {
        let before = frames;
        frames = pass()?;
        // Fewer frames than before: the WAL started over in between.
        if frames.saturating_sub(before) <= HELD_FRAMES {
            break;
        }
    }
    Ok(frames)
}

/// One PASSIVE checkpoint on `conn` (opened when missing): it copies the
/// frames no reader needs and waits for nobody. The frames the WAL holds
/// (copied by this pass or an earlier one), 0 when it is empty.
fn checkpoint_passive(
    conn: &mut Option<rusqlite::Connection>,
    path: &Path,
    busy: Duration,
) -> rusqlite::Result<u64> {
    let conn = match conn {
        Some(conn) => conn,
        None => conn.insert(open_writer(path, busy)?),
    };
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok(u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0))
    })
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The completion's writes on the write connection: status update, credit,
/// log row, event; an error rolls them back (see [`commit_group`]).
fn complete_order(
    conn: &rusqlite::Connection,
    request: &Completion,
) -> Result<CompletedOrder, CompleteError> {
    let at_update = |err: rusqlite::Error| CompleteError::at_update(classify(&err));
    let at_credit = |err: rusqlite::Error| CompleteError::at_credit(classify(&err));
    let completed_at = now();
    let at = stored_time(completed_at);
    let updated = conn
        .prepare_cached(COMPLETE_ORDER)
        .and_then(|mut update| {
            update
                .query_row(
                    params![
                        OrderStatus::Completed.to_value(),
                        at,
                        request.payment_id,
                        request.order_id,
                        request.project_id,
                        request.payment_system,
                        OrderStatus::Pending.to_value(),
                    ],
                    |row| {
                        Ok((
                            row.get::<_, i64>("id")?,
                            row.get::<_, i64>("user_id")?,
                            row.get::<_, Option<i64>>("server_id")?,
                            row.get::<_, i64>("amount_cents")?,
                            row.get::<_, Option<String>>("payment_id")?,
                            time_column(row, "created_at")?,
                        ))
                    },
                )
                .optional()
        })
        .map_err(at_update)?;
    let Some((order_ref, user_id, server_id, amount_cents, payment_id, created_at)) = updated
    else {
        let found = conn
            .prepare_cached(ORDER_STATUS)
            .and_then(|mut find| {
                find.query_row(
                    params![request.order_id, request.project_id, request.payment_system],
                    |row| row.get::<_, String>(0),
                )
                .optional()
            })
            .map_err(at_update)?;
        return Err(match found {
            Some(status) => CompleteError::not_pending(&status),
            None => CompleteError::OrderNotFound,
        });
    };
    let server_id = server_id.unwrap_or(balance::GENERAL_ACCOUNT);
    let after: i64 = conn
        .prepare_cached(CREDIT_MAIN)
        .and_then(|mut credit| {
            credit.query_row(
                params![user_id, server_id, amount_cents, at, request.project_id],
                |row| row.get(0),
            )
        })
        .map_err(at_credit)?;
    conn.prepare_cached(LOG_CREDIT)
        .and_then(|mut log| {
            log.execute(params![
                LogKind::OrderCredit.to_value(),
                order_ref,
                user_id,
                server_id,
                amount_cents,
                after - amount_cents,
                after,
                at,
            ])
        })
        .map_err(at_credit)?;
    log_audit(conn, request.audit.as_ref()).map_err(at_credit)?;
    let completed = CompletedOrder {
        order_id: request.order_id.clone(),
        payment_system: request.payment_system.clone(),
        payment_id,
        amount: money(amount_cents)?,
        completed_at,
        user_id,
        server_id,
        balance_after: money(after)?,
    };
    let subscribers = subscribers(conn, request.project_id).map_err(at_credit)?;
    if !subscribers.is_empty() {
        let created_at = created_at.ok_or_else(|| {
            CompleteError::ProcessingFailed(StoreError::Failed("order without created_at".into()))
        })?;
        let event = completed.event(request.project_id, created_at);
        record_events(conn, &subscribers, &[event]).map_err(at_credit)?;
    }
    Ok(completed)
}

/// The enabled endpoints of `project_id` (see [`SUBSCRIBERS`]).
fn subscribers(conn: &rusqlite::Connection, project_id: i64) -> rusqlite::Result<Vec<Subscriber>> {
    let mut select = conn.prepare_cached(SUBSCRIBERS)?;
    let rows = select.query_map(params![project_id], |row| {
        Ok(Subscriber {
            endpoint_id: row.get(0)?,
            project_id,
            event_types: row.get(1)?,
        })
    })?;
    rows.collect()
}

/// Records `events` with their deliveries to `subscribers`, in the
/// transaction of their change; an event no endpoint receives is not
/// recorded. Due at once: SQLite's clock is this host's.
fn record_events(
    conn: &rusqlite::Connection,
    subscribers: &[Subscriber],
    events: &[NewEvent],
) -> rusqlite::Result<()> {
    let due = stored_time(now());
    for (event, endpoints) in deliveries(subscribers, events) {
        let event_id: i64 = conn.prepare_cached(INSERT_EVENT)?.query_row(
            params![
                new_webhook_id(),
                event.project_id,
                event.event_type.to_value(),
                event.order_id,
                event.payload,
                stored_time(event.at),
            ],
            |row| row.get(0),
        )?;
        let mut deliver = conn.prepare_cached(INSERT_DELIVERY)?;
        for endpoint_id in endpoints {
            deliver.execute(params![
                event_id,
                endpoint_id,
                DeliveryStatus::Pending.to_value(),
                due
            ])?;
        }
    }
    Ok(())
}

/// Writes `audit`, an operator's row of the admin audit log, when there is
/// one, in the transaction of its change.
fn log_audit(conn: &rusqlite::Connection, audit: Option<&AuditRow>) -> rusqlite::Result<()> {
    let Some(audit) = audit else { return Ok(()) };
    conn.prepare_cached(LOG_AUDIT)?.execute(params![
        stored_time(audit.at),
        audit.administrator_id,
        audit.actor,
        audit.action,
        audit.object_kind,
        audit.object_id,
        audit.before,
        audit.after,
        audit.address,
    ])?;
    Ok(())
}

/// The insert of an order: the user resolved and the server checked in the
/// statement; a unique conflict inserts nothing.
pub static INSERT_ORDER: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"INSERT INTO "payment_orders" ("order_id", "project_id", "user_id", "server_id", "payment_system",
    "amount_cents", "status", "created_at", "idempotency_key", "request_hash")
SELECT :order_id, :project_id, {ORDER_USER}, NULLIF(:server_id, 0), :payment_system,
    :amount_cents, :status, :created_at, :idempotency_key, :request_hash
WHERE {ORDER_USER} IS NOT NULL AND {ORDER_SERVER}
ON CONFLICT DO NOTHING
RETURNING "user_id""#
    )
});

/// Why an order was not inserted: the user and the server, as the insert
/// judged them.
static ORDER_NAMES: LazyLock<String> = LazyLock::new(|| {
    format!(r#"SELECT {ORDER_USER} AS "user_id", {ORDER_SERVER} AS "server_found""#)
});

/// The order's insert on the write connection, and when it inserted
/// nothing, why; with its audit row (an operator's
/// order) and its event (a project with an endpoint).
fn insert_order_now(
    conn: &rusqlite::Connection,
    order: &NewOrder,
) -> Result<OrderInsert, StoreError> {
    let outcome = insert_on(conn, order)?;
    if let OrderInsert::Inserted {
        user_id,
        created_at,
    } = outcome
    {
        log_audit(conn, order.audit.as_ref()).map_err(|err| classify(&err))?;
        let subscribers = subscribers(conn, order.project_id).map_err(|err| classify(&err))?;
        if !subscribers.is_empty() {
            let event = order.created_event(user_id, created_at)?;
            record_events(conn, &subscribers, &[event]).map_err(|err| classify(&err))?;
        }
    }
    Ok(outcome)
}

/// [`insert_order_now`]'s statements on `conn`.
fn insert_on(conn: &rusqlite::Connection, order: &NewOrder) -> Result<OrderInsert, StoreError> {
    let created_at = now();
    let at = stored_time(created_at);
    let status = OrderStatus::Pending.to_value();
    let names = named_params! {
        ":user_id": order.user_id,
        ":email": order.email,
        ":project_id": order.project_id,
        ":server_id": order.server_id,
    };
    let inserted = conn
        .prepare_cached(&INSERT_ORDER)
        .and_then(|mut insert| {
            let mut all = names.to_vec();
            all.extend_from_slice(named_params! {
                ":order_id": order.order_id,
                ":payment_system": order.payment_system,
                ":amount_cents": order.amount_cents,
                ":status": status,
                ":created_at": at,
                ":idempotency_key": order.idempotency_key,
                ":request_hash": order.request_hash,
            });
            insert
                .query_row(all.as_slice(), |row| row.get::<_, i64>(0))
                .optional()
        })
        .map_err(|err| classify(&err))?;
    if let Some(user_id) = inserted {
        return Ok(OrderInsert::Inserted {
            user_id,
            created_at,
        });
    }
    let (user, server_found) = conn
        .prepare_cached(&ORDER_NAMES)
        .and_then(|mut names_of| {
            names_of.query_row(names, |row| {
                Ok((row.get::<_, Option<i64>>(0)?, row.get::<_, bool>(1)?))
            })
        })
        .map_err(|err| classify(&err))?;
    Ok(match (user, server_found) {
        (None, _) => OrderInsert::UserNotFound,
        (Some(_), false) => OrderInsert::ServerNotFound,
        (Some(_), true) => OrderInsert::Conflict,
    })
}

/// A time as sqlx stores it on SQLite (and so as sea-orm reads it back).
fn stored_time(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false)
}

impl Store for SqliteStore {
    fn relay(&self) -> &dyn RelayStore {
        self
    }

    fn read_token<'a>(
        &'a self,
        token_hash: &'a str,
        account: Option<&'a AccountKey>,
    ) -> StoreFuture<'a, Result<Option<TokenRow>, StoreError>> {
        // Runs before the future is returned: it never waits (see the module
        // docs), so there is nothing to poll.
        let read = self.read_token_now(token_hash, account);
        Box::pin(std::future::ready(read))
    }

    fn complete<'a>(
        &'a self,
        completion: &'a Completion,
    ) -> StoreFuture<'a, Result<CompletedOrder, CompleteError>> {
        let request = completion.clone();
        Box::pin(self.write(move |conn| complete_order(conn, &request)))
    }

    fn insert_order<'a>(
        &'a self,
        order: &'a NewOrder,
    ) -> StoreFuture<'a, Result<OrderInsert, StoreError>> {
        let order = order.clone();
        Box::pin(self.write(move |conn| insert_order_now(conn, &order)))
    }

    fn record_token_use<'a>(
        &'a self,
        token_id: i64,
        token_hash: &'a str,
        at: DateTime<Utc>,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        let token_hash = token_hash.to_owned();
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(RECORD_TOKEN_USE)
                .and_then(|mut record| {
                    let at = stored_time(at);
                    record.execute(params![token_hash, at, token_hash, at, token_id])
                })
                .map(drop)
                .map_err(|err| classify(&err))
        }))
    }

    fn readiness(&self) -> StoreFuture<'_, Readiness> {
        Box::pin(
            self.health
                .check(move |probe| self.check_writable(probe.refused)),
        )
    }
}

/// Read-only connections to one file, used by one thread at a time.
struct InlineReaders {
    path: PathBuf,
    idle: Mutex<Vec<rusqlite::Connection>>,
}

impl InlineReaders {
    /// Runs `read` on an idle connection (a new one when none is idle) and
    /// keeps the connection for the next read unless it failed.
    fn with_connection<T>(
        &self,
        read: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match idle {
            Some(conn) => conn,
            None => self.open().map_err(|err| unavailable(&err))?,
        };
        match read(&conn) {
            Ok(value) => {
                self.idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(conn);
                Ok(value)
            }
            Err(err) => Err(classify(&err)),
        }
    }

    fn open(&self) -> rusqlite::Result<rusqlite::Connection> {
        // NO_MUTEX: a connection is used by one thread at a time (it is
        // taken out of the list while in use), so SQLite's own mutex on it
        // would only cost.
        let conn = rusqlite::Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(READ_BUSY_TIMEOUT)?;
        Ok(conn)
    }
}

/// A read that found the file locked or could not open it counts as the
/// database unavailable (503); a write that the file or the disk refused
/// (read-only, full, failing) as refused; a broken CHECK as such; any other
/// failure as a failed statement.
fn classify(err: &rusqlite::Error) -> StoreError {
    use rusqlite::ffi;
    if let rusqlite::Error::SqliteFailure(failure, _) = err {
        match failure.extended_code {
            ffi::SQLITE_CONSTRAINT_CHECK => return StoreError::CheckViolated(err.to_string()),
            ffi::SQLITE_IOERR_WRITE
            | ffi::SQLITE_IOERR_FSYNC
            | ffi::SQLITE_IOERR_DIR_FSYNC
            | ffi::SQLITE_IOERR_TRUNCATE => return StoreError::WritesRefused(err.to_string()),
            _ => {}
        }
    }
    match err.sqlite_error_code() {
        Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::DiskFull) => {
            StoreError::WritesRefused(err.to_string())
        }
        Some(
            rusqlite::ErrorCode::DatabaseBusy
            | rusqlite::ErrorCode::DatabaseLocked
            | rusqlite::ErrorCode::CannotOpen
            | rusqlite::ErrorCode::SystemIoFailure,
        ) => unavailable(err),
        _ => StoreError::Failed(err.to_string()),
    }
}

fn unavailable(err: &rusqlite::Error) -> StoreError {
    StoreError::Unavailable(err.to_string())
}

/// A time column as sqlx stores it on SQLite (RFC 3339 text). An unreadable
/// one fails the read: an expiry must never read as "never".
fn time_column(
    row: &rusqlite::Row<'_>,
    column: impl rusqlite::RowIndex,
) -> rusqlite::Result<Option<DateTime<Utc>>> {
    let Some(text) = row.get::<_, Option<String>>(column)? else {
        return Ok(None);
    };
    DateTime::parse_from_rfc3339(&text)
        .map(|time| Some(time.with_timezone(&Utc)))
        .map_err(|err| {
            rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(err))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WAL file in `dir` with one table `t` of non-negative numbers.
    fn table_t(dir: &tempfile::TempDir) -> PathBuf {
        let path = dir.path().join("t.db");
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(
                "PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER NOT NULL CHECK (v >= 0))",
            )
            .unwrap();
        path
    }

    /// A write whose caller has gone before its group began is not run;
    /// the others of the group are.
    #[test]
    fn a_write_whose_caller_has_gone_is_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = table_t(&dir);
        let mut slot = Some(open_writer(&path, Duration::from_secs(5)).unwrap());
        let (writes, mut answers): (Vec<_>, Vec<_>) = [1, 2, 3]
            .into_iter()
            .map(|v| {
                queue_write(move |conn| {
                    conn.execute("INSERT INTO t (v) VALUES (?1)", [v])
                        .map_err(|err| classify(&err))
                })
            })
            .unzip();
        drop(answers.remove(1));
        commit_group(&mut slot, &path, Duration::from_secs(5), writes);
        for mut answer in answers {
            assert_eq!(answer.try_recv().unwrap().unwrap(), 1);
        }
        let kept: Vec<i64> = slot
            .unwrap()
            .prepare("SELECT v FROM t ORDER BY v")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(kept, [1, 3]);
    }

    /// A group of writes: each answered with its own outcome, the one that
    /// fails rolled back alone, the others committed together (none is
    /// visible to a reader before the group's one commit).
    #[test]
    fn a_group_commits_once_and_a_failing_write_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = table_t(&dir);
        let mut slot = Some(open_writer(&path, Duration::from_secs(5)).unwrap());
        let reader = rusqlite::Connection::open(&path).unwrap();
        let (writes, answers): (Vec<_>, Vec<_>) = [1, -1, 2, 3]
            .into_iter()
            .map(|v| {
                let path = path.clone();
                queue_write(move |conn| {
                    conn.execute("INSERT INTO t (v) VALUES (?1)", [v])
                        .map_err(|err| classify(&err))?;
                    // What another connection sees meanwhile: nothing yet.
                    let seen: i64 = rusqlite::Connection::open(&path)
                        .and_then(|other| {
                            other.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                        })
                        .map_err(|err| classify(&err))?;
                    Ok::<i64, StoreError>(seen)
                })
            })
            .unzip();
        commit_group(&mut slot, &path, Duration::from_secs(5), writes);
        let answers: Vec<_> = answers
            .into_iter()
            .map(|mut answer| answer.try_recv().unwrap())
            .collect();
        assert!(matches!(answers[0], Ok(0)), "{:?}", answers[0]);
        assert!(
            matches!(answers[1], Err(StoreError::CheckViolated(_))),
            "{:?}",
            answers[1]
        );
        assert!(matches!(answers[2], Ok(0)), "{:?}", answers[2]);
        assert!(matches!(answers[3], Ok(0)), "{:?}", answers[3]);
        let mut committed = reader.prepare("SELECT v FROM t ORDER BY v").unwrap();
        let values: Vec<i64> = committed
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(values, [1, 2, 3]);
        assert!(
            slot.as_ref().unwrap().is_autocommit(),
            "the group's transaction ended"
        );
    }
}
