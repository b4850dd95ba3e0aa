//! Output for people or, with `--json`, exactly one JSON object for scripts.

use serde_json::{Value, json};

use super::CliResult;

#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `json` as one line when `--json` was given, else the text.
    pub fn emit(&self, json: Value, text: impl FnOnce() -> String) {
        if self.json {
            println!("{json}");
        } else {
            println!("{}", text());
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
