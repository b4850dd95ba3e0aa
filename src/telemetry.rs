//! Logging with tracing: human text on stderr by default (coloured only when
//! stderr is a terminal), JSON lines with `MASTERPAY_LOG_FORMAT=json`, level
//! from `MASTERPAY_LOG` (an env-filter directive such as `debug` or
//! `masterpay=debug,sqlx=warn`). Logs go to stderr so that `--json` output on
//! stdout stays one clean object. Token values are never logged: they only
//! ever appear inside the `Authorization` header, which is not recorded.
//!
//! Lines are written by a thread of their own (tracing-appender's
//! non-blocking writer), not by the request's worker thread: written
//! synchronously, the access log blocked a tokio worker whenever the kernel
//! throttled writes to a busy disk, and every request on that worker waited
//! with it (the figures are in docs/performance.md). The thread gathers
//! what queued up into one write. Lossy mode is off, so nothing is dropped: a
//! line that finds the queue full waits for room. [`flush`] writes out what is
//! queued; the command line calls it before it exits, so only a process
//! killed outright (SIGKILL, a crash) loses its last lines.

use std::{
    io::{BufWriter, IsTerminal},
    sync::Mutex,
};

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::{EnvFilter, fmt};

/// The writer thread of the installed subscriber; dropping it writes out
/// what is queued and ends the thread.
static WRITER_THREAD: Mutex<Option<WorkerGuard>> = Mutex::new(None);

/// Bytes the writer thread gathers into one write (it also writes whenever
/// its queue runs empty, so a lone line is not held back).
const WRITE_BUFFER: usize = 64 * 1024;

/// Installs the global subscriber; `default_level` applies when
/// `MASTERPAY_LOG` is unset. Safe to call more than once.
pub fn init(default_level: &str) {
    let filter =
        EnvFilter::try_from_env("MASTERPAY_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    let json = std::env::var("MASTERPAY_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    // Colours only for a person at a terminal: escape codes in a log file or
    // a collector are noise (and cost a few percent of a request's CPU).
    let ansi = std::io::stderr().is_terminal();
    let (writer, writer_thread) = NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("masterpay-log")
        .finish(BufWriter::with_capacity(WRITE_BUFFER, std::io::stderr()));
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(writer)
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
    // When a subscriber was already installed, `writer_thread` is dropped
    // here and its unused thread ends.
    if installed.is_ok() {
        *WRITER_THREAD.lock().unwrap_or_else(|p| p.into_inner()) = Some(writer_thread);
    }
}

/// Writes out every queued log line (waiting about a second at most for a
/// stalled stderr) and ends the writer thread; lines logged afterwards are
/// lost. For the end of the process.
pub fn flush() {
    let writer_thread = WRITER_THREAD
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    drop(writer_thread);
}
