//! Logging with tracing: human text on stderr by default (coloured only when
//! stderr is a terminal), JSON lines with `MASTERPAY_LOG_FORMAT=json`, level
//! from `MASTERPAY_LOG` (an env-filter directive such as `debug` or
//! `masterpay=debug,sqlx=warn`). Logs go to
//! stderr so that `--json` output on stdout stays one clean object.
//! Token values are never logged: they only ever appear inside the
//! `Authorization` header, which is not recorded.
//!
//! Lines are written by a thread of their own ([`BatchedLog`]), not by the
//! request's worker thread. Written synchronously, one access-log line per
//! request blocked a tokio worker whenever the kernel throttled writes to a
//! busy disk, and every request on that worker waited with it: PostgreSQL
//! completions at 64 connections had a p99 of 189 ms with the access log on
//! and 41 ms with it off (bench/run, docs/benchmarks.md).
//!
//! Formatted lines are appended to one shared buffer, and the writer thread
//! writes the whole buffer at once when it holds [`BatchedLog::FLUSH_AT`]
//! bytes or, at the latest, [`BatchedLog::LINGER`] after its first line.
//! tracing-appender's non-blocking writer, used before, sends each line as a
//! `Vec` through a channel and wakes its thread for it: an allocation freed
//! on another thread and a futex wake-up per line or two under load. Now a
//! line costs one uncontended lock and a copy, and the thread wakes a few
//! hundred times a second at most (docs/benchmarks.md, session 6).
//!
//! Nothing is dropped: when [`BatchedLog::MAX_PENDING`] bytes wait, a line
//! waits for the writer to catch up. [`flush`] writes out what is pending;
//! the command line calls it before it exits, and lines logged after it go
//! to stderr directly. So only a process killed outright (SIGKILL, a crash)
//! can lose the lines of its last [`BatchedLog::LINGER`].

use std::{
    io::{IsTerminal, Write},
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread,
    time::{Duration, Instant},
};

use tracing_subscriber::{EnvFilter, fmt, fmt::MakeWriter};

/// The log of the installed subscriber, kept for [`flush`].
static INSTALLED: Mutex<Option<Arc<BatchedLog>>> = Mutex::new(None);

/// Installs the global subscriber; `default_level` applies when
/// `MASTERPAY_LOG` is unset. Safe to call more than once.
pub fn init(default_level: &str) {
    let filter =
        EnvFilter::try_from_env("MASTERPAY_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    let json = std::env::var("MASTERPAY_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    // Colours only for a person at a terminal: escape codes in a log file or
    // a collector are noise (and cost a few percent of a request's CPU).
    let ansi = std::io::stderr().is_terminal();
    let log = BatchedLog::start(Box::new(std::io::stderr()), BatchedLog::MAX_PENDING);
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(SharedBatchedLog(Arc::clone(&log)))
        .with_ansi(ansi);
    let installed = if json {
        builder
            .json()
            .flatten_event(true)
            .with_span_list(false)
            .try_init()
    } else {
        builder.try_init()
    };
    if installed.is_ok() {
        *lock(&INSTALLED) = Some(log);
    } else {
        log.close(BatchedLog::CLOSE_WAIT);
    }
}

/// Writes out every pending log line (waiting up to [`BatchedLog::CLOSE_WAIT`]
/// for a stalled stderr) and ends the writer thread; later lines are written
/// to stderr directly. For the end of the process.
pub fn flush() {
    let installed = lock(&INSTALLED).take();
    if let Some(log) = installed {
        log.close(BatchedLog::CLOSE_WAIT);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits on `condvar` (at most `timeout`, if given); the caller re-checks
/// its condition.
fn wait<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Option<Duration>,
) -> MutexGuard<'a, T> {
    match timeout {
        None => condvar.wait(guard).unwrap_or_else(|p| p.into_inner()),
        Some(timeout) => {
            condvar
                .wait_timeout(guard, timeout)
                .unwrap_or_else(|p| p.into_inner())
                .0
        }
    }
}

/// A log sink whose lines are written in batches by a thread of its own.
pub struct BatchedLog {
    state: Mutex<Pending>,
    /// Wakes the writer thread: a first line arrived, the buffer passed
    /// [`Self::FLUSH_AT`] (or `max_pending`, if smaller), or the log is
    /// closing.
    wake_writer: Condvar,
    /// Wakes lines waiting for room, and [`Self::close`] waiting for the end.
    written: Condvar,
    max_pending: usize,
    /// [`Self::FLUSH_AT`], or `max_pending` if smaller.
    flush_at: usize,
}

struct Pending {
    lines: Vec<u8>,
    /// When the first of `lines` arrived: they are written by
    /// [`BatchedLog::LINGER`] after it.
    first_line_at: Option<Instant>,
    /// Set by [`BatchedLog::close`]: the thread writes out what is pending
    /// and ends, and later lines are written directly.
    closing: bool,
    /// The writer thread has ended; nothing is pending.
    finished: bool,
    /// Where the thread writes; taken by the thread while it runs, and back
    /// here (for direct writes) when it ends.
    sink: Option<Box<dyn Write + Send>>,
}

impl BatchedLog {
    /// Bytes that make the writer thread write at once.
    pub const FLUSH_AT: usize = 64 * 1024;
    /// How long a line waits at most for more lines before it is written.
    pub const LINGER: Duration = Duration::from_millis(20);
    /// Bytes that may wait; a line that finds this many waits for the writer.
    /// At 60 000 lines a second of about 200 bytes this is a third of a
    /// second of a stalled disk.
    pub const MAX_PENDING: usize = 4 * 1024 * 1024;
    /// How long [`flush`] waits for a stalled stderr before it gives up.
    pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

    /// Starts the writer thread for `sink`.
    pub fn start(sink: Box<dyn Write + Send>, max_pending: usize) -> Arc<Self> {
        let log = Arc::new(Self {
            state: Mutex::new(Pending {
                lines: Vec::new(),
                first_line_at: None,
                closing: false,
                finished: false,
                sink: None,
            }),
            wake_writer: Condvar::new(),
            written: Condvar::new(),
            max_pending: max_pending.max(1),
            flush_at: Self::FLUSH_AT.min(max_pending.max(1)),
        });
        let thread_log = Arc::clone(&log);
        let spawned = thread::Builder::new()
            .name("masterpay-log".to_owned())
            .spawn(move || thread_log.run(sink));
        if let Err(err) = spawned {
            // No thread: every line is written directly (the sink went with
            // the closure, so stderr).
            eprintln!("cannot start the log writer thread ({err}); logging synchronously");
            log.finish(None);
        }
        log
    }

    /// Appends one formatted line (or several).
    fn append(&self, bytes: &[u8]) {
        let mut state = lock(&self.state);
        while state.lines.len() >= self.max_pending && !state.finished {
            state = wait(&self.written, state, None);
        }
        if state.finished {
            if let Some(sink) = state.sink.as_mut() {
                let _ = sink.write_all(bytes).and_then(|()| sink.flush());
            }
            return;
        }
        let before = state.lines.len();
        if before == 0 {
            state.first_line_at = Some(Instant::now());
        }
        state.lines.extend_from_slice(bytes);
        let after = state.lines.len();
        drop(state);
        // Only the transitions wake the thread: it sleeps without a deadline
        // while the buffer is empty, and lingers once it is not.
        if before == 0 || (before < self.flush_at && after >= self.flush_at) {
            self.wake_writer.notify_one();
        }
    }

    /// The writer thread: waits for a first line, lingers for more, swaps
    /// the buffer for an empty one and writes it, until closed.
    fn run(&self, mut sink: Box<dyn Write + Send>) {
        // Should the thread ever panic, lines go to stderr directly instead
        // of waiting for a thread that is gone.
        let _finish_on_panic = FinishOnExit(self);
        let mut batch = Vec::new();
        let mut state = lock(&self.state);
        loop {
            while state.lines.is_empty() && !state.closing {
                state = wait(&self.wake_writer, state, None);
            }
            let first_line = state.first_line_at.unwrap_or_else(Instant::now);
            while state.lines.len() < self.flush_at && !state.closing {
                let Some(left) = Self::LINGER.checked_sub(first_line.elapsed()) else {
                    break;
                };
                state = wait(&self.wake_writer, state, Some(left));
            }
            if state.lines.is_empty() && state.closing {
                break;
            }
            std::mem::swap(&mut state.lines, &mut batch);
            state.first_line_at = None;
            drop(state);
            self.written.notify_all();
            // A failed write (stderr closed) loses this batch, as a failed
            // eprintln! would; the service goes on.
            let _ = sink.write_all(&batch).and_then(|()| sink.flush());
            batch.clear();
            if batch.capacity() > Self::FLUSH_AT * 4 {
                // A burst (a stalled disk) grew it; give the memory back.
                batch.shrink_to(Self::FLUSH_AT * 4);
            }
            state = lock(&self.state);
        }
        drop(state);
        self.finish(Some(sink));
    }

    /// Marks the writer thread ended (once): from now on lines are written
    /// directly to `sink`, or to stderr if the thread's sink is lost.
    fn finish(&self, sink: Option<Box<dyn Write + Send>>) {
        let mut state = lock(&self.state);
        if state.finished {
            return;
        }
        state.finished = true;
        state.sink = Some(sink.unwrap_or_else(|| Box::new(std::io::stderr())));
        drop(state);
        self.written.notify_all();
    }

    /// Writes out what is pending and ends the writer thread, waiting at
    /// most `patience`; lines appended afterwards are written directly.
    pub fn close(&self, patience: Duration) {
        let deadline = Instant::now() + patience;
        let mut state = lock(&self.state);
        state.closing = true;
        self.wake_writer.notify_one();
        while !state.finished {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return;
            };
            state = wait(&self.written, state, Some(left));
        }
    }
}

/// Marks the log finished when the writer thread ends, however it ends
/// (a no-op after the normal end, which finished it with its sink).
struct FinishOnExit<'a>(&'a BatchedLog);

impl Drop for FinishOnExit<'_> {
    fn drop(&mut self) {
        self.0.finish(None);
    }
}

/// What the fmt layer writes one event into (it formats the whole line
/// first, then writes it with one `write_all`).
pub struct BatchedLogLine<'a>(&'a BatchedLog);

impl Write for BatchedLogLine<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.append(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The fmt layer's handle on a [`BatchedLog`].
struct SharedBatchedLog(Arc<BatchedLog>);

impl<'a> MakeWriter<'a> for SharedBatchedLog {
    type Writer = BatchedLogLine<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        BatchedLogLine(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink the test can read back, that can be made to stall.
    #[derive(Clone, Default)]
    struct SharedSink {
        bytes: Arc<Mutex<Vec<u8>>>,
        writes: Arc<Mutex<usize>>,
        largest_write: Arc<Mutex<usize>>,
        stalled: Arc<Mutex<()>>,
    }

    impl Write for SharedSink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            drop(lock(&self.stalled));
            *lock(&self.writes) += 1;
            let mut largest = lock(&self.largest_write);
            *largest = (*largest).max(bytes.len());
            lock(&self.bytes).extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn write_line(log: &BatchedLog, line: &str) {
        BatchedLogLine(log)
            .write_all(line.as_bytes())
            .expect("append");
    }

    /// Lines of several threads, far more than may wait at once while the
    /// sink is stalled, all arrive, whole and in each thread's order, once
    /// the log is closed; in batches, not a write per line; and never more
    /// waiting than the limit.
    #[test]
    fn every_line_arrives_in_order_even_when_the_sink_stalls() {
        let sink = SharedSink::default();
        let stall = lock(&sink.stalled);
        // Room for about 20 lines: the writers must wait for the sink.
        let log = BatchedLog::start(Box::new(sink.clone()), 600);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let log = Arc::clone(&log);
                thread::spawn(move || {
                    for i in 0..2_000 {
                        write_line(&log, &format!("thread {t} line {i:05}\n"));
                    }
                })
            })
            .collect();
        // Hold the sink until the lines fill the buffer: the writers then
        // wait for room (they have 190 000 bytes to write).
        while lock(&log.state).lines.len() < 600 {
            thread::yield_now();
        }
        drop(stall);
        for thread in threads {
            thread.join().expect("writer thread");
        }
        log.close(Duration::from_secs(60));
        write_line(&log, "after close\n");

        let text = String::from_utf8(lock(&sink.bytes).clone()).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 8_001);
        assert_eq!(lines.last(), Some(&"after close"));
        for t in 0..4 {
            let own: Vec<&str> = lines
                .iter()
                .copied()
                .filter(|line| line.starts_with(&format!("thread {t} ")))
                .collect();
            let expected: Vec<String> = (0..2_000)
                .map(|i| format!("thread {t} line {i:05}"))
                .collect();
            assert_eq!(own, expected);
        }
        // Never more pending than the limit plus the line that reached it.
        let largest = *lock(&sink.largest_write);
        assert!(largest <= 600 + "thread 0 line 00000\n".len(), "{largest}");
        assert!(
            *lock(&sink.writes) < 8_001,
            "one write per line: {}",
            lock(&sink.writes)
        );
    }

    /// A line is written without waiting for more lines or a close.
    #[test]
    fn a_single_line_is_written_without_a_close() {
        let sink = SharedSink::default();
        let log = BatchedLog::start(Box::new(sink.clone()), BatchedLog::MAX_PENDING);
        write_line(&log, "alone\n");
        // A guard against hanging, not a timing assumption: the line is due
        // after BatchedLog::LINGER.
        let deadline = Instant::now() + Duration::from_secs(60);
        while lock(&sink.bytes).is_empty() {
            assert!(Instant::now() < deadline, "the line was never written");
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(&*lock(&sink.bytes), b"alone\n");
        log.close(Duration::from_secs(60));
    }

    struct PanickingSink;

    impl Write for PanickingSink {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            panic!("sink failed (expected by the test)");
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A writer thread that died does not leave lines waiting for room
    /// forever: the log finishes and later lines go to stderr directly.
    #[test]
    fn lines_do_not_wait_for_a_writer_thread_that_panicked() {
        let log = BatchedLog::start(Box::new(PanickingSink), 100);
        // Five lines fill the 100 bytes; with the thread gone, the sixth
        // would wait for room forever.
        for i in 0..8 {
            write_line(&log, &format!("after the panic {i:04}\n"));
        }
        log.close(Duration::from_secs(60));
        assert!(lock(&log.state).finished);
    }
}
