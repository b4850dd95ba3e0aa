//! Output for people or, with `--json`, exactly one JSON object for scripts.

use std::io::{self, Write};

use serde_json::{Value, json};

use super::CliResult;

/// The exit status when the reader of stdout went away (`masterpay ... | head
/// -1`): 128 + SIGPIPE, what a shell reports for any tool that a closed pipe
/// stopped, so `set -o pipefail` scripts see what they see with `cat` or
/// `grep`. Whatever the command changed stays committed; nothing is printed.
pub const CLOSED_STDOUT: u8 = 141;

#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `json` as one line when `--json` was given, else the text. A
    /// closed stdout ends the process quietly with [`CLOSED_STDOUT`].
    pub fn emit(&self, json: Value, text: impl FnOnce() -> String) {
        let line = if self.json { json.to_string() } else { text() };
        if let Err(err) = writeln!(io::stdout().lock(), "{line}") {
            if is_closed_stdout(&err) {
                crate::telemetry::flush();
                std::process::exit(CLOSED_STDOUT.into());
            }
            // Anything else (a full disk) is the one error line on stderr.
            eprintln!("error: cannot write to stdout: {err}");
            std::process::exit(1);
        }
    }

    /// Prints a record just made in a project: its id, its project and its
    /// `label` (key and value) as JSON, or one line for people.
    pub fn created(&self, kind: &str, id: i64, project_id: i64, label: (&str, &str)) -> CliResult {
        let (key, value) = label;
        self.emit(
            json!({"id": id, "project_id": project_id, key: value}),
            || format!("created {kind} {id} ({value}) in project {project_id}"),
        );
        Ok(())
    }

    /// Prints `items` under `key`, or one line each for people (`none`
    /// when there are none).
    pub fn list<T>(
        &self,
        key: &str,
        items: &[T],
        to_json: impl Fn(&T) -> Value,
        line: impl Fn(&T) -> String,
        none: &str,
    ) {
        self.emit(
            json!({key: items.iter().map(to_json).collect::<Vec<_>>()}),
            || match items {
                [] => none.to_owned(),
                _ => items.iter().map(line).collect::<Vec<_>>().join("\n"),
            },
        );
    }
}

/// How an `active` flag reads for people.
pub fn state(active: bool) -> &'static str {
    if active { "active" } else { "disabled" }
}

/// Whether writing to stdout failed because its reader closed the pipe.
pub fn is_closed_stdout(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::BrokenPipe
}
