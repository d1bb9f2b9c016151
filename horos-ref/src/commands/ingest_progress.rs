//! Following submitted documents until each is ingested or failed (horos-ops'
//! `Documents::follow`), shown: a progress bar on a terminal (files and pages done, pages per
//! second, ETA), a plain line every few seconds when the output is piped, nothing but the
//! outcome with `--json`. `convert` shows its progress with the same [`View`].

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use horos_ops::OpsError;
use horos_ops::documents::{Documents, FollowArgs, Followed, Progress, STALLED_AFTER};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::AppError;

/// How often a plain progress line is written when the output is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(2);

/// Follows documents `ids` until none is pending (or Ctrl-C), then prints the outcome (unless
/// `json_out`: the caller prints it).
pub async fn follow(
    documents: &Documents,
    ids: &[i64],
    json_out: bool,
) -> Result<Followed, AppError> {
    let mut view: Option<View> = None;
    let mut hinted = false;
    let followed = tokio::select! {
        followed = documents.follow(FollowArgs::new(ids.to_vec()), |p| {
            let view = view.get_or_insert_with(|| View::new(json_out, p, "ingest"));
            view.show(p);
            if !hinted && p.stalled() {
                hinted = true;
                view.note(&format!(
                    "no page ingested for {} s: `horos-ref run` does the work; is it running \
                     with this configuration?",
                    STALLED_AFTER.as_secs()
                ));
            }
        }) => Some(followed),
        _ = tokio::signal::ctrl_c() => None,
    };
    if let Some(view) = &view {
        view.finish();
    }
    let Some(followed) = followed else {
        return Err(AppError::Usage(
            "stopped following; the documents stay queued (`horos-ref docs` lists them)".into(),
        ));
    };
    let followed = followed.map_err(|e| match e {
        OpsError::NoDocument(_) => AppError::Usage(
            "a followed document was deleted meanwhile: `horos-ref docs` lists the rest".into(),
        ),
        e => AppError::Ops(e),
    })?;
    if !json_out {
        println!(
            "{} ingested, {} failed: {} pages in {:.1} s ({:.1} pages/s)",
            followed.done,
            followed.failed.len(),
            followed.pages,
            followed.seconds,
            followed.pages_per_s
        );
        for f in &followed.failed {
            println!("  failed: document {} {}: {}", f.document, f.path, f.error);
            println!(
                "          after fixing the cause: horos-ref ingest --retry {}",
                f.document
            );
        }
    }
    Ok(followed)
}

/// How progress is shown: bars on a terminal, lines when piped, nothing for `--json`.
pub(super) enum View {
    Bars {
        _multi: MultiProgress,
        files: ProgressBar,
        pages: ProgressBar,
    },
    Lines {
        last: Option<Instant>,
        /// The word each line starts with (`ingest`, `convert`).
        label: &'static str,
    },
    Quiet,
}

impl View {
    /// The view of progress `first`, its plain lines starting with `label`.
    pub(super) fn new(json_out: bool, first: &Progress, label: &'static str) -> Self {
        if json_out {
            return View::Quiet;
        }
        if !std::io::stderr().is_terminal() {
            return View::Lines { last: None, label };
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

    /// Shows where the documents stand now.
    pub(super) fn show(&mut self, p: &Progress) {
        match self {
            View::Bars { files, pages, .. } => {
                files.set_length(p.files);
                files.set_position(p.files_finished);
                files.set_message(if p.failed > 0 {
                    format!("({} failed)", p.failed)
                } else {
                    String::new()
                });
                pages.set_length(p.pages_total.max(p.pages_done));
                pages.set_position(p.pages_done);
                pages.set_message(if p.estimated {
                    "(some counts estimated)"
                } else {
                    ""
                });
            }
            View::Lines { last, label } => {
                if last.is_some_and(|l| l.elapsed() < PLAIN_EVERY) && !p.finished() {
                    return;
                }
                *last = Some(Instant::now());
                let eta = p
                    .eta_seconds()
                    .map_or_else(|| "?".to_owned(), |left| format!("{left:.0} s"));
                eprintln!(
                    "{label}: {}/{} files ({} failed), {}/{}{} pages, {:.1} pages/s, ETA {eta}",
                    p.files_finished,
                    p.files,
                    p.failed,
                    p.pages_done,
                    p.pages_total,
                    if p.estimated { "~" } else { "" },
                    p.pages_per_s,
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

    /// Ends the bars (they stay on the screen).
    pub(super) fn finish(&self) {
        if let View::Bars { files, pages, .. } = self {
            files.finish();
            pages.finish();
        }
    }
}
