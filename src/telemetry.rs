//! Logging with tracing: human text on stderr by default (coloured only when
//! stderr is a terminal), JSON lines with `MASTERPAY_LOG_FORMAT=json`, level
//! from `MASTERPAY_LOG` (an env-filter directive such as `debug` or
//! `masterpay=debug,sqlx=warn`). Logs go to
//! stderr so that `--json` output on stdout stays one clean object.
//! Token values are never logged: they only ever appear inside the
//! `Authorization` header, which is not recorded.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt};

/// Installs the global subscriber; `default_level` applies when
/// `MASTERPAY_LOG` is unset. Safe to call more than once.
pub fn init(default_level: &str) {
    let filter =
        EnvFilter::try_from_env("MASTERPAY_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    let json = std::env::var("MASTERPAY_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    // Colours only for a person at a terminal: escape codes in a log file or
    // a collector are noise (and cost a few percent of a request's CPU).
    let ansi = std::io::stderr().is_terminal();
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = if json {
        builder
            .json()
            .flatten_event(true)
            .with_span_list(false)
            .try_init()
    } else {
        builder.try_init()
    };
}
