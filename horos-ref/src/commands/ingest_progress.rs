//! Following submitted documents until each is ingested or failed: a progress bar on a terminal
//! (files and pages done, pages per second, ETA), a plain line every few seconds when the output
//! is piped, nothing but the outcome with `--json`.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use ingest_pipeline::store::{DocStatus, Document};
use serde_json::{Value, json};

use crate::error::AppError;
use crate::ingest::RefPipeline;

/// How often the documents are read.
const POLL: Duration = Duration::from_millis(250);
/// How often a plain progress line is written when the output is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(2);
/// After this long without a page done, the user is told what may be missing (once).
const STALL_HINT_AFTER: Duration = Duration::from_secs(30);

/// How the followed documents ended.
#[derive(Debug)]
pub struct Outcome {
    /// Documents ingested.
    pub done: usize,
    /// Documents failed: id, path, reason.
    pub failed: Vec<(i64, String, String)>,
    /// Pages ingested while following.
    pub pages: u64,
    /// Seconds followed.
    pub seconds: f64,
}

impl Outcome {
    /// The outcome as `--json` prints it.
    pub fn to_json(&self) -> Value {
        json!({
            "done": self.done,
            "failed": self.failed.iter()
                .map(|(id, path, error)| json!({"document": id, "path": path, "error": error}))
                .collect::<Vec<_>>(),
            "pages": self.pages,
            "seconds": self.seconds,
            "pages_per_s": if self.seconds > 0.0 { self.pages as f64 / self.seconds } else { 0.0 },
        })
    }
}

/// Where the followed documents stand.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Tally {
    files: u64,
    files_finished: u64,
    failed: u64,
    /// Pages done, of the documents whose page count is known and the others.
    pages_done: u64,
    /// Pages in all, estimated for documents not yet opened (the mean of the known ones).
    pages_total: u64,
    /// Whether some page counts are still estimates.
    estimated: bool,
}

fn tally(docs: &[Document]) -> Tally {
    let known: Vec<u64> = docs.iter().filter_map(|d| d.pages.map(u64::from)).collect();
    let unknown = (docs.len() - known.len()) as u64;
    let mean = if known.is_empty() {
        1
    } else {
        known.iter().sum::<u64>().div_ceil(known.len() as u64)
    };
    Tally {
        files: docs.len() as u64,
        files_finished: docs
            .iter()
            .filter(|d| d.status != DocStatus::Pending)
            .count() as u64,
        failed: docs
            .iter()
            .filter(|d| d.status == DocStatus::Failed)
            .count() as u64,
        pages_done: docs.iter().map(|d| u64::from(d.done_pages)).sum(),
        pages_total: known.iter().sum::<u64>() + unknown * mean,
        estimated: unknown > 0,
    }
}

/// Reads documents `ids` (a deleted one is counted as failed by the caller's view: it is gone).
async fn read(pipeline: &RefPipeline, ids: &[i64]) -> Result<Vec<Document>, AppError> {
    let mut reads = pipeline.reads();
    let ids = ids.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut docs = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(d) = ingest_pipeline::store::document(&mut reads, id)
                .map_err(|e| AppError::Usage(format!("the ingest database: {e}")))?
            {
                docs.push(d);
            }
        }
        Ok(docs)
    })
    .await
    .map_err(|e| AppError::Usage(format!("reading the documents: {e}")))?
}

/// Follows documents `ids` until none is pending (or Ctrl-C).
pub async fn follow(
    pipeline: &RefPipeline,
    ids: &[i64],
    json_out: bool,
) -> Result<Outcome, AppError> {
    let started = Instant::now();
    let first = tally(&read(pipeline, ids).await?);
    let mut view = View::new(json_out, first);
    let mut last = first;
    let mut last_progress = Instant::now();
    let mut hinted = false;
    let docs = loop {
        let docs = read(pipeline, ids).await?;
        let now = tally(&docs);
        if now.pages_done != last.pages_done || now.files_finished != last.files_finished {
            last_progress = Instant::now();
        }
        last = now;
        let rate = (now.pages_done - first.pages_done.min(now.pages_done)) as f64
            / started.elapsed().as_secs_f64().max(1e-3);
        view.show(&now, rate);
        if now.files_finished == now.files && docs.len() == ids.len() {
            break docs;
        }
        if docs.len() < ids.len() {
            view.finish();
            return Err(AppError::Usage(
                "a followed document was deleted meanwhile: `horos-ref docs` lists the rest".into(),
            ));
        }
        if !hinted && last_progress.elapsed() >= STALL_HINT_AFTER {
            hinted = true;
            view.note(
                "no page ingested for 30 s: `horos-ref run` does the work; is it running with this configuration?",
            );
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = tokio::signal::ctrl_c() => {
                view.finish();
                return Err(AppError::Usage(
                    "stopped following; the documents stay queued (`horos-ref docs` lists them)".into(),
                ));
            }
        }
    };
    view.finish();
    let outcome = Outcome {
        done: docs.iter().filter(|d| d.status == DocStatus::Done).count(),
        failed: docs
            .iter()
            .filter(|d| d.status == DocStatus::Failed)
            .map(|d| (d.id, d.path.clone(), d.error.clone().unwrap_or_default()))
            .collect(),
        pages: last.pages_done - first.pages_done.min(last.pages_done),
        seconds: started.elapsed().as_secs_f64(),
    };
    if !json_out {
        println!(
            "{} ingested, {} failed: {} pages in {:.1} s ({:.1} pages/s)",
            outcome.done,
            outcome.failed.len(),
            outcome.pages,
            outcome.seconds,
            outcome.pages as f64 / outcome.seconds.max(1e-3)
        );
        for (id, path, error) in &outcome.failed {
            println!("  failed: document {id} {path}: {error}");
            println!("          after fixing the cause: horos-ref ingest --retry {id}");
        }
    }
    Ok(outcome)
}

/// How progress is shown: bars on a terminal, lines when piped, nothing for `--json`.
enum View {
    Bars {
        _multi: MultiProgress,
        files: ProgressBar,
        pages: ProgressBar,
    },
    Lines {
        last: Option<Instant>,
    },
    Quiet,
}

impl View {
    fn new(json_out: bool, first: Tally) -> Self {
        if json_out {
            return View::Quiet;
        }
        if !std::io::stderr().is_terminal() {
            return View::Lines { last: None };
        }
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let style = |template: &str| {
            ProgressStyle::with_template(template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ")
        };
        let files = multi.add(ProgressBar::new(first.files));
        files.set_style(style("files [{bar:30}] {pos}/{len} {msg}"));
        let pages = multi.add(ProgressBar::new(first.pages_total));
        pages.set_style(style(
            "pages [{bar:30}] {pos}/{len} {per_sec:.1} ETA {eta} {msg}",
        ));
        pages.set_position(first.pages_done);
        pages.reset_eta();
        View::Bars {
            _multi: multi,
            files,
            pages,
        }
    }

    fn show(&mut self, t: &Tally, rate: f64) {
        match self {
            View::Bars { files, pages, .. } => {
                files.set_length(t.files);
                files.set_position(t.files_finished);
                files.set_message(if t.failed > 0 {
                    format!("({} failed)", t.failed)
                } else {
                    String::new()
                });
                pages.set_length(t.pages_total.max(t.pages_done));
                pages.set_position(t.pages_done);
                pages.set_message(if t.estimated {
                    "(some counts estimated)"
                } else {
                    ""
                });
            }
            View::Lines { last } => {
                if last.is_some_and(|l| l.elapsed() < PLAIN_EVERY) && t.files_finished < t.files {
                    return;
                }
                *last = Some(Instant::now());
                let eta = if rate > 0.0 {
                    let left = t.pages_total.saturating_sub(t.pages_done) as f64 / rate;
                    format!("{left:.0} s")
                } else {
                    "?".to_owned()
                };
                eprintln!(
                    "ingest: {}/{} files ({} failed), {}/{}{} pages, {rate:.1} pages/s, ETA {eta}",
                    t.files_finished,
                    t.files,
                    t.failed,
                    t.pages_done,
                    t.pages_total,
                    if t.estimated { "~" } else { "" },
                );
            }
            View::Quiet => {}
        }
    }

    fn note(&self, line: &str) {
        match self {
            View::Bars { _multi: multi, .. } => {
                let _ = multi.println(line);
            }
            View::Lines { .. } => eprintln!("{line}"),
            View::Quiet => {}
        }
    }

    fn finish(&self) {
        if let View::Bars { files, pages, .. } = self {
            files.finish();
            pages.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: i64, pages: Option<u32>, done: u32, status: DocStatus) -> Document {
        Document {
            id,
            sha256: String::new(),
            title: String::new(),
            path: format!("/in/{id}.pdf"),
            path_bytes: None,
            pages,
            done_pages: done,
            status,
            error: None,
        }
    }

    #[test]
    fn unknown_page_counts_are_estimated_from_the_known_ones() {
        let t = tally(&[
            doc(1, Some(4), 4, DocStatus::Done),
            doc(2, Some(2), 1, DocStatus::Pending),
            doc(3, None, 0, DocStatus::Pending),
            doc(4, None, 0, DocStatus::Failed),
        ]);
        assert_eq!(t.files, 4);
        assert_eq!(t.files_finished, 2);
        assert_eq!(t.failed, 1);
        assert_eq!(t.pages_done, 5);
        assert_eq!(t.pages_total, 6 + 2 * 3);
        assert!(t.estimated);
    }

    #[test]
    fn with_no_page_count_known_each_file_counts_one_page() {
        let t = tally(&[doc(1, None, 0, DocStatus::Pending)]);
        assert_eq!((t.pages_total, t.estimated), (1, true));
    }
}
