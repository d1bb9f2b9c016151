//! The pipeline's documents on a status page: [`IngestStatus`], the seam's [`StatusSection`],
//! with each document's report at `/status/documents/ID`. It renders what was last read (the
//! documents are read every 2 s on a blocking thread), so the page never waits for a database.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use horos_server_control::{DetailError, DetailFuture, StatusSection};
use maud::{Markup, Render, html};
use serde_json::{Value, json};

use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::pipeline::{Pipeline, PipelineError};
use crate::store::{self, DocStatus, Document, Report, StoreError};
use crate::vision::VisionReader;

/// What the page shows of the documents, settled when they are read (not per render: the page
/// stays as cheap with a million documents as with ten).
#[derive(Clone, Default)]
struct DocSummary {
    total: usize,
    pending: usize,
    done: usize,
    failed: usize,
    /// In progress (newest first, at most [`SHOWN`]), then failed (as many), then the last 5 done.
    shown: Vec<Document>,
    /// The newest [`SHOWN`], for `/api/v1/status`.
    recent: Vec<Document>,
}

impl DocSummary {
    fn of(docs: &[Document]) -> Self {
        let count = |s: DocStatus| docs.iter().filter(|d| d.status == s).count();
        let newest = |s: DocStatus, n: usize| {
            docs.iter()
                .rev()
                .filter(move |d| d.status == s)
                .take(n)
                .cloned()
        };
        Self {
            total: docs.len(),
            pending: count(DocStatus::Pending),
            done: count(DocStatus::Done),
            failed: count(DocStatus::Failed),
            shown: newest(DocStatus::Pending, SHOWN)
                .chain(newest(DocStatus::Failed, SHOWN))
                .chain(newest(DocStatus::Done, 5))
                .collect(),
            recent: docs.iter().rev().take(SHOWN).cloned().collect(),
        }
    }
}

/// Builds a document's report (on a blocking thread).
type ReportFn = dyn Fn(i64) -> Result<Report, PipelineError> + Send + Sync;

/// The pipeline's documents, as last read, and its recent pace; each document's report at
/// `/status/documents/ID`. Empty ("not read yet") until [`watch`](Self::watch)ed.
#[derive(Default)]
pub struct IngestStatus {
    summary: Mutex<Option<Arc<DocSummary>>>,
    /// Pages done in all, as read over the last [`RATE_WINDOW`].
    done: Mutex<VecDeque<(Instant, u64)>>,
    /// The watched pipeline's reports.
    report: OnceLock<Arc<ReportFn>>,
}

/// The window over which pages per second are measured.
const RATE_WINDOW: Duration = Duration::from_secs(60);
/// How often the pipeline's documents are read for the page.
const REFRESH: Duration = Duration::from_secs(2);
/// Documents shown per kind (in progress, failed).
const SHOWN: usize = 20;

impl IngestStatus {
    fn summary(&self) -> Option<Arc<DocSummary>> {
        self.summary
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn done(&self) -> MutexGuard<'_, VecDeque<(Instant, u64)>> {
        self.done.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the documents read and the pages done in all at this moment.
    fn record(&self, docs: &[Document]) {
        let total = docs.iter().map(|d| u64::from(d.done_pages)).sum();
        let summary = Arc::new(DocSummary::of(docs));
        *self.summary.lock().unwrap_or_else(|e| e.into_inner()) = Some(summary);
        let now = Instant::now();
        let mut done = self.done();
        done.push_back((now, total));
        while done
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW)
        {
            done.pop_front();
        }
    }

    /// Pages ingested per second over the last minute (`None` until two readings).
    fn pages_per_s(&self) -> Option<f64> {
        let done = self.done();
        let ((t0, first), (t1, last)) = (done.front()?, done.back()?);
        let secs = t1.duration_since(*t0).as_secs_f64();
        // A document deleted meanwhile lowers the total: no negative pace.
        (secs > 0.0).then(|| last.saturating_sub(*first) as f64 / secs)
    }

    /// Reads `pipeline`'s documents every 2 s while the section is alive, and serves their
    /// reports. Needs a Tokio runtime.
    pub fn watch<R, T, V>(self: &Arc<Self>, pipeline: &Pipeline<R, T, V>)
    where
        R: VisionReader,
        T: TextEmbedder,
        V: VisualEmbedder,
    {
        let reports = pipeline.clone();
        let _ = self
            .report
            .set(Arc::new(move |id| reports.report(id)) as Arc<ReportFn>);
        let weak = Arc::downgrade(self);
        let reads = pipeline.reads();
        tokio::spawn(async move {
            loop {
                let mut reads = reads.clone();
                let read = tokio::task::spawn_blocking(move || store::documents(&mut reads)).await;
                let Some(me) = weak.upgrade() else { break };
                match read {
                    Ok(Ok(docs)) => me.record(&docs),
                    Ok(Err(e)) => tracing::debug!(error = %e, "ingest status not read"),
                    Err(e) => tracing::debug!(error = %e, "ingest status not read"),
                }
                drop(me);
                tokio::time::sleep(REFRESH).await;
            }
        });
    }
}

impl StatusSection for IngestStatus {
    fn to_json(&self) -> Option<(String, Value)> {
        let sum = self.summary()?;
        let recent: Vec<Value> = sum
            .recent
            .iter()
            .map(|d| {
                json!({"id": d.id, "title": d.title, "status": d.status,
                       "pages_done": d.done_pages, "pages": d.pages, "error": d.error,
                       "report": format!("/status/documents/{}", d.id)})
            })
            .collect();
        Some((
            "ingest".into(),
            json!({"documents": sum.total, "pending": sum.pending,
                   "done": sum.done, "failed": sum.failed,
                   "pages_per_s": self.pages_per_s(), "recent": recent}),
        ))
    }

    fn render_html(&self, o: &mut String) {
        let summary = self.summary();
        let pace = self
            .pages_per_s()
            .map_or_else(|| "?".to_owned(), |r| format!("{r:.2}"));
        html! {
            h2 { "Ingest" }
            @if let Some(sum) = summary {
                p {
                    (sum.total) " documents: " (sum.pending) " in progress, " (sum.done) " done, "
                    (sum.failed) " failed · " (pace) " pages/s over the last minute"
                }
                table {
                    tr {
                        th { "document" } th { "title" } th { "status" } th { "pages" }
                        th { "reason" }
                    }
                    @for d in &sum.shown { (document_row(d)) }
                }
            } @else {
                p { "not read yet" }
            }
        }
        .render_to(o);
    }

    fn detail(&self, path: &str) -> Option<DetailFuture> {
        let id = path.strip_prefix("documents/")?;
        let report = Arc::clone(self.report.get()?);
        let id = id.to_owned();
        Some(Box::pin(async move {
            let Ok(id) = id.parse::<i64>() else {
                return Err(DetailError::NotFound(format!("no document {id:?}")));
            };
            let built = tokio::task::spawn_blocking(move || report(id))
                .await
                .map_err(|e| DetailError::Failed(e.to_string()))?;
            match built {
                Ok(r) => Ok(report_html(&r)),
                Err(PipelineError::Store(StoreError::NotFound(_))) => {
                    Err(DetailError::NotFound(format!("no document {id}")))
                }
                Err(e) => Err(DetailError::Failed(e.to_string())),
            }
        }))
    }
}

/// A document's row on the page, linked to its report.
fn document_row(d: &Document) -> Markup {
    let pages = match d.pages {
        Some(total) => format!("{} / {total}", d.done_pages),
        None => format!("{} / ?", d.done_pages),
    };
    html! {
        tr {
            td { a href={ "/status/documents/" (d.id) } title="its report" { (d.id) } }
            td { (d.title) }
            td { (d.status.as_str()) }
            td { (pages) }
            td { (d.error.as_deref().unwrap_or("")) }
        }
    }
}

/// A document's report as HTML: what it is, where it stands, what each stage took and cost.
fn report_html(r: &Report) -> String {
    let d = &r.document;
    html! {
        h1 { "Document " (d.id) " · " (d.title) }
        table {
            tr { th { "status" } td { (d.status.as_str()) } }
            tr { th { "reason" } td { (d.error.as_deref().unwrap_or("")) } }
            tr { th { "file" } td { (d.path) } }
            tr { th { "sha256" } td { (d.sha256) } }
            tr {
                th { "pages" }
                td {
                    (r.pages) " recorded of "
                    @if let Some(p) = d.pages { (p) } @else { "?" }
                }
            }
            tr { th { "tiles" } td { (r.tiles) } }
            tr { th { "text chunks" } td { (r.chunks) } }
            tr { th { "tables" } td { (r.tables) } }
            tr { th { "wall time" } td { (format!("{:.1}", r.wall_seconds)) " s" } }
            tr { th { "inference time" } td { (format!("{:.1}", r.inference_seconds)) " s" } }
            tr { th { "estimated cost" } td { (format!("{:.4}", r.estimated_cost)) } }
        }
        h2 { "Stages" }
        table {
            tr { th { "stage" } th { "jobs" } th { "seconds" } th { "inference seconds" } }
            @for s in &r.stages {
                tr {
                    td { (s.stage) }
                    td { (s.jobs) }
                    td { (format!("{:.2}", s.seconds)) }
                    td { (format!("{:.2}", s.inference_seconds)) }
                }
            }
        }
    }
    .into_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::embed::{HashingEmbedder, PixelPatchFallback};
    use crate::pipeline::PipelineConfig;
    use crate::vision::TesseractReader;

    fn doc(id: i64, status: DocStatus, done_pages: u32) -> Document {
        Document {
            id,
            sha256: format!("{id:064}"),
            title: format!("<doc {id}>"),
            path: format!("/inbox/{id}.pdf"),
            path_bytes: None,
            pages: Some(4),
            done_pages,
            status,
            error: (status == DocStatus::Failed).then(|| "unreadable".to_owned()),
            collection: horos_server_control::Collection::default(),
        }
    }

    #[test]
    fn the_documents_read_are_counted_shown_escaped_and_paced() {
        let s = IngestStatus::default();
        let mut html = String::new();
        s.render_html(&mut html);
        assert!(html.contains("not read yet"), "{html}");
        assert!(s.to_json().is_none());

        let mut docs = vec![
            doc(1, DocStatus::Done, 4),
            doc(2, DocStatus::Failed, 1),
            doc(3, DocStatus::Pending, 2),
        ];
        s.record(&docs);
        docs[2].done_pages = 4;
        std::thread::sleep(Duration::from_millis(20));
        s.record(&docs);
        let (name, v) = s.to_json().unwrap();
        assert_eq!(name, "ingest");
        assert_eq!(
            (&v["documents"], &v["pending"], &v["done"], &v["failed"]),
            (&json!(3), &json!(1), &json!(1), &json!(1))
        );
        assert_eq!(v["recent"][0]["id"], 3, "newest first");
        assert_eq!(v["recent"][0]["report"], "/status/documents/3");
        assert!(v["pages_per_s"].as_f64().unwrap() > 0.0);

        let mut html = String::new();
        s.render_html(&mut html);
        assert!(
            html.contains("&lt;doc 2&gt;") && !html.contains("<doc 2>"),
            "{html}"
        );
        assert!(
            html.contains("unreadable") && html.contains("4 / 4"),
            "{html}"
        );
        // In progress first, then failed, then done.
        let at = |t: &str| html.find(t).unwrap();
        assert!(
            at("&lt;doc 3&gt;") < at("&lt;doc 2&gt;") && at("&lt;doc 2&gt;") < at("&lt;doc 1&gt;")
        );
    }

    #[test]
    fn a_hostile_title_and_reason_appear_escaped_on_the_page() {
        let s = IngestStatus::default();
        let mut failed = doc(7, DocStatus::Failed, 0);
        failed.title = "<script>\"'&".to_owned();
        failed.error = Some("<script>\"'&".to_owned());
        s.record(&[failed]);
        let mut html = String::new();
        s.render_html(&mut html);
        assert_eq!(
            html.matches("<td>&lt;script&gt;&quot;'&amp;</td>").count(),
            2,
            "{html}"
        );
        assert!(!html.contains("<script>"), "{html}");
    }

    #[tokio::test]
    async fn a_documents_report_page_is_served_and_an_unknown_one_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let pipeline = Pipeline::open(
            PipelineConfig::new(dir.path()),
            TesseractReader::default(),
            HashingEmbedder::default(),
            PixelPatchFallback::default(),
        )
        .unwrap();
        let s = Arc::new(IngestStatus::default());
        assert!(s.detail("documents/1").is_none(), "no pipeline watched yet");
        s.watch(&pipeline);
        let pdf = dir.path().join("a.pdf");
        std::fs::write(&pdf, b"%PDF-1.4 not really").unwrap();
        let id = pipeline.submit(&pdf).await.unwrap().document().id;
        let html = s.detail(&format!("documents/{id}")).unwrap().await.unwrap();
        assert!(
            html.starts_with(&format!("<h1>Document {id} · a</h1>")),
            "{html}"
        );
        for path in ["documents/999", "documents/x"] {
            let e = s.detail(path).unwrap().await.unwrap_err();
            assert!(matches!(e, DetailError::NotFound(_)), "{path}: {e:?}");
        }
        assert!(s.detail("lanes/1").is_none());
    }
}
