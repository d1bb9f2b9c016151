//! `horos-ref top`: the status page in the terminal, refreshed (like `top`): what `ps` shows
//! (lanes, pooled models, GPUs), then the queues, ingest, dead letters and the latest decisions,
//! every line cut to the terminal's width and the screen to its height.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde_json::{Value, json};

use crate::cli::TopArgs;
use crate::config::Config;
use crate::error::AppError;
use horos_ops::status::cell as text;

/// Decisions shown at most.
const DECISIONS: usize = 8;

pub async fn top(config: &Config, args: TopArgs, json_out: bool) -> Result<(), AppError> {
    let admin = crate::admin::client(config, Duration::from_secs(10))?;
    let term = console::Term::stdout();
    let live = !args.once && !json_out && std::io::stdout().is_terminal();
    loop {
        let status = admin.get_json("/api/v1/status").await?;
        let models = admin.get_json("/api/v1/models").await?;
        if json_out {
            println!("{}", json!({"status": status, "models": models["data"]}));
            return Ok(());
        }
        let mut lines = vec![format!(
            "horos-ref top — {} — every {} s, Ctrl-C quits",
            admin.base(),
            args.interval
        )];
        lines.push(String::new());
        lines.extend(super::ps::lines(&status, &models));
        lines.extend(more_lines(&status));
        if !live {
            for l in lines {
                println!("{l}");
            }
            return Ok(());
        }
        let (rows, cols) = term.size();
        let shown: Vec<String> = lines
            .iter()
            .take(usize::from(rows).saturating_sub(1).max(1))
            .map(|l| console::truncate_str(l, usize::from(cols), "…").into_owned())
            .collect();
        // Home, clear, draw: one write so the screen does not flicker line by line.
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "\x1b[H\x1b[2J{}", shown.join("\n"));
        let _ = out.flush();
        drop(out);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs_f64(args.interval)) => {}
            _ = tokio::signal::ctrl_c() => {
                println!();
                return Ok(());
            }
        }
    }
}

/// Queues, ingest, dead letters and decisions from `GET /api/v1/status`.
fn more_lines(status: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let rows = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let queues = rows(&status["queues"]);
    if !queues.is_empty() {
        out.push(String::new());
        out.push(format!(
            "{:<24} {:>8} {:>9} {:>8} {:>6}",
            "QUEUE", "READY", "IN FLIGHT", "DELAYED", "DEAD"
        ));
        for q in &queues {
            out.push(format!(
                "{:<24} {:>8} {:>9} {:>8} {:>6}",
                text(&q["queue"]),
                text(&q["ready"]),
                text(&q["in_flight"]),
                text(&q["delayed"]),
                text(&q["dead"]),
            ));
        }
    }
    let ingest = &status["sections"]["ingest"];
    if ingest.is_object() {
        out.push(String::new());
        out.push(format!(
            "INGEST  {} documents: {} in progress, {} done, {} failed, {} pages/s",
            text(&ingest["documents"]),
            text(&ingest["pending"]),
            text(&ingest["done"]),
            text(&ingest["failed"]),
            ingest["pages_per_s"]
                .as_f64()
                .map_or_else(|| "?".to_owned(), |r| format!("{r:.2}")),
        ));
        for d in rows(&ingest["recent"]) {
            let pages = match d["pages"].as_u64() {
                Some(n) => format!("{}/{n}", text(&d["pages_done"])),
                None => format!("{}/?", text(&d["pages_done"])),
            };
            out.push(format!(
                "  {:>6} {:<8} {:>9}  {} {}",
                text(&d["id"]),
                text(&d["status"]),
                pages,
                text(&d["title"]),
                d["error"].as_str().unwrap_or_default(),
            ));
        }
    }
    let dead = rows(&status["dead"]);
    if !dead.is_empty() {
        out.push(String::new());
        out.push(format!(
            "DEAD LETTERS (requeue: POST /api/v1/dead/ID/requeue)  {:<8} {:<16} error",
            "ID", "QUEUE"
        ));
        for d in &dead {
            out.push(format!(
                "  {:<8} {:<16} {}",
                text(&d["id"]),
                text(&d["queue"]),
                d["last_error"].as_str().unwrap_or_default()
            ));
        }
    }
    let decisions = rows(&status["decisions"]);
    if !decisions.is_empty() {
        out.push(String::new());
        out.push("RECENT DECISIONS".to_owned());
        for d in decisions.iter().take(DECISIONS) {
            out.push(format!(
                "  {:<10} {:<20} {}",
                text(&d["action"]),
                text(&d["model"]),
                text(&d["reason"])
            ));
        }
    }
    out
}
