//! The demo's output: human-readable progress lines, or one JSON object per line (`--json`).

use serde_json::{Value, json};

/// Where progress goes. Both forms go to stdout, one line per event, flushed at once so that a
/// reader (a person, a test) sees each step as it happens.
#[derive(Debug, Clone, Copy)]
pub struct Out {
    json: bool,
    quiet: bool,
}

impl Out {
    /// Human-readable lines, or JSON lines when `json`.
    pub fn new(json: bool) -> Self {
        Self { json, quiet: false }
    }

    /// No output at all (`--print-config` prints the configuration alone).
    pub fn quiet() -> Self {
        Self {
            json: false,
            quiet: true,
        }
    }

    /// One event: `fields` (a JSON object) plus `"event": event` in JSON, `text` otherwise.
    pub fn event(&self, event: &str, text: impl AsRef<str>, fields: Value) {
        use std::io::Write;
        if self.quiet {
            return;
        }
        let line = if self.json {
            let mut obj = json!({ "event": event });
            if let (Some(o), Value::Object(f)) = (obj.as_object_mut(), fields) {
                o.extend(f);
            }
            obj.to_string()
        } else {
            format!("[demo] {}", text.as_ref())
        };
        let mut stdout = std::io::stdout().lock();
        // A closed stdout (the reader left) must not stop the demo's clean shutdown.
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }
}
