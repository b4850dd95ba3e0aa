//! Output for people or, with `--json`, exactly one JSON object for scripts.

use serde_json::Value;

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
}
