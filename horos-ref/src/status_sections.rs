//! The binary's sections of the coordinator's status page: the lanes with their servers and
//! gates, and the ingest pipeline's documents. Each renders what was last read (the lanes'
//! state is in memory; the pipeline's is read every 2 s on a blocking thread), so the page never
//! waits for a database.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use horos_coordinator::{DetailError, DetailFuture, StatusSection, html_escape};
use horos_feeder::LaneGate;
use ingest_pipeline::embed::{TextEmbedder, VisualEmbedder};
use ingest_pipeline::pipeline::{Pipeline, PipelineError};
use ingest_pipeline::store::{DocStatus, Document, Report, StoreError};
use ingest_pipeline::vision::VisionReader;
use serde_json::{Value, json};

use crate::servers::LaneServer;

/// One feeder lane: a lane's server on one GPU (or its only server), or someone else's server.
pub struct LaneRow {
    /// The queue.
    pub queue: String,
    /// The GPU of this instance, with `[allocator]`.
    pub gpu: Option<u32>,
    /// Where the feeder sends its batches.
    pub url: String,
    /// Its gate.
    pub gate: Arc<LaneGate>,
    /// Its server, when the binary runs it.
    pub server: Option<LaneServer>,
    /// Jobs a batch may hold.
    pub batch_size: usize,
}

/// The lanes, their gates and servers, and how full their batches run.
pub struct LanesSection {
    /// One row per lane instance.
    pub rows: Vec<LaneRow>,
    /// The feeder's published totals.
    pub feeder: Arc<crate::feeder_metrics::FeederCounters>,
}

impl LaneRow {
    /// What the page and the API show of it; `fill`: the lane's mean batch over its batch size.
    fn view(&self, feeder: &crate::feeder_metrics::FeederCounters) -> Value {
        let status = self.server.as_ref().map(LaneServer::status);
        let fill = feeder
            .lane(&self.queue)
            .filter(|t| t.batches > 0)
            .map(|t| t.claimed as f64 / (t.batches as f64 * self.batch_size.max(1) as f64));
        json!({
            "queue": self.queue,
            "gpu": self.gpu,
            "url": self.url,
            "gate": if self.gate.is_open() { "open" } else { "closed" },
            "batch": if self.gate.is_busy() { "running" } else { "idle" },
            "batch_fill": fill,
            "server": status
                .as_ref()
                .map_or("not ours".to_owned(), |s| format!("{:?}", s.state).to_lowercase()),
            "restarts": status.as_ref().map_or(0, |s| s.restarts),
            "failed_starts": status.as_ref().map_or(0, |s| s.failed_starts),
            "last_error": status.as_ref().and_then(|s| s.last_error.clone()),
        })
    }
}

impl StatusSection for LanesSection {
    fn to_json(&self) -> Option<(String, Value)> {
        Some((
            "lanes".into(),
            Value::Array(self.rows.iter().map(|r| r.view(&self.feeder)).collect()),
        ))
    }

    fn render_html(&self, o: &mut String) {
        if self.rows.is_empty() {
            return;
        }
        let e = html_escape;
        o.push_str(
            "<h2>Lanes</h2><table><tr><th>lane</th><th>gpu</th><th>url</th><th>gate</th>\
             <th>batch</th><th>batch fill</th><th>server</th><th>restarts</th><th>failed starts</th>\
             <th>last error</th></tr>",
        );
        for l in &self.rows {
            let v = l.view(&self.feeder);
            let text = |k: &str| e(&cell(&v[k]));
            let fill = v["batch_fill"]
                .as_f64()
                .map_or_else(String::new, |f| format!("{:.0} %", f * 100.0));
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{fill}</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                text("queue"),
                text("gpu"),
                text("url"),
                text("gate"),
                text("batch"),
                text("server"),
                text("restarts"),
                text("failed_starts"),
                text("last_error"),
            );
        }
        o.push_str("</table>");
    }
}

/// A JSON value as a table cell: strings without quotes, null as empty.
pub fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A document as the page shows it: pages recorded against its page count.
#[derive(Clone)]
struct DocRow {
    doc: Document,
    pages_done: u32,
}

/// What the page shows of the documents, settled when they are read (not per render: the page
/// stays as cheap with a million documents as with ten).
#[derive(Clone, Default)]
struct DocSummary {
    total: usize,
    pending: usize,
    done: usize,
    failed: usize,
    /// In progress (newest first, at most [`SHOWN`]), then failed (as many), then the last 5 done.
    shown: Vec<DocRow>,
    /// The newest [`SHOWN`], for `/api/v1/status`.
    recent: Vec<DocRow>,
}

impl DocSummary {
    fn of(rows: &[DocRow]) -> Self {
        let count = |s: DocStatus| rows.iter().filter(|d| d.doc.status == s).count();
        let newest = |s: DocStatus, n: usize| {
            rows.iter()
                .rev()
                .filter(move |d| d.doc.status == s)
                .take(n)
                .cloned()
        };
        Self {
            total: rows.len(),
            pending: count(DocStatus::Pending),
            done: count(DocStatus::Done),
            failed: count(DocStatus::Failed),
            shown: newest(DocStatus::Pending, SHOWN)
                .chain(newest(DocStatus::Failed, SHOWN))
                .chain(newest(DocStatus::Done, 5))
                .collect(),
            recent: rows.iter().rev().take(SHOWN).cloned().collect(),
        }
    }
}

/// Builds a document's report (on a blocking thread).
type ReportFn = dyn Fn(i64) -> Result<Report, PipelineError> + Send + Sync;

/// The ingest pipeline's documents, as last read, and its recent pace; each document's report
/// at `/status/documents/ID`.
#[derive(Default)]
pub struct IngestSection {
    summary: Mutex<Option<Arc<DocSummary>>>,
    /// Pages done in all, as read over the last [`RATE_WINDOW`].
    done: Mutex<std::collections::VecDeque<(std::time::Instant, u64)>>,
    /// The watched pipeline's reports.
    report: std::sync::OnceLock<Arc<ReportFn>>,
}

/// The window over which pages per second are measured.
const RATE_WINDOW: Duration = Duration::from_secs(60);

/// How often the pipeline's documents are read for the page.
const INGEST_REFRESH: Duration = Duration::from_secs(2);
/// Documents shown per kind (in progress, failed).
const SHOWN: usize = 20;

impl IngestSection {
    fn summary(&self) -> Option<Arc<DocSummary>> {
        self.summary
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn done(&self) -> MutexGuard<'_, std::collections::VecDeque<(std::time::Instant, u64)>> {
        self.done.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the documents read and the pages done in all at this moment.
    fn record(&self, rows: &[DocRow]) {
        let total = rows.iter().map(|d| u64::from(d.pages_done)).sum();
        let summary = Arc::new(DocSummary::of(rows));
        *self.summary.lock().unwrap_or_else(|e| e.into_inner()) = Some(summary);
        let now = std::time::Instant::now();
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
    /// reports.
    pub fn watch<R, T, V>(self: &Arc<Self>, pipeline: &Pipeline<R, T, V>)
    where
        R: VisionReader + 'static,
        T: TextEmbedder + 'static,
        V: VisualEmbedder + 'static,
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
                let read = tokio::task::spawn_blocking(move || read_docs(&mut reads)).await;
                let Some(me) = weak.upgrade() else { break };
                match read {
                    Ok(Ok(rows)) => me.record(&rows),
                    Ok(Err(e)) => tracing::debug!(error = %e, "ingest status not read"),
                    Err(e) => tracing::debug!(error = %e, "ingest status not read"),
                }
                drop(me);
                tokio::time::sleep(INGEST_REFRESH).await;
            }
        });
    }
}

fn read_docs(reads: &mut ingest_pipeline::store::Reads) -> Result<Vec<DocRow>, String> {
    let docs = ingest_pipeline::store::documents(reads).map_err(|e| e.to_string())?;
    let mut rows = Vec::with_capacity(docs.len());
    for doc in docs {
        let pages_done = doc.done_pages;
        rows.push(DocRow { doc, pages_done });
    }
    Ok(rows)
}

impl StatusSection for IngestSection {
    fn to_json(&self) -> Option<(String, Value)> {
        let sum = self.summary()?;
        let recent: Vec<Value> = sum
            .recent
            .iter()
            .map(|d| {
                json!({"id": d.doc.id, "title": d.doc.title, "status": d.doc.status,
                       "pages_done": d.pages_done, "pages": d.doc.pages, "error": d.doc.error,
                       "report": format!("/status/documents/{}", d.doc.id)})
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
        let e = html_escape;
        o.push_str("<h2>Ingest</h2>");
        let Some(sum) = self.summary() else {
            o.push_str("<p>not read yet</p>");
            return;
        };
        let _ = write!(
            o,
            "<p>{} documents: {} in progress, {} done, {} failed · {} pages/s over the last \
             minute</p>",
            sum.total,
            sum.pending,
            sum.done,
            sum.failed,
            self.pages_per_s()
                .map_or_else(|| "?".to_owned(), |r| format!("{r:.2}"))
        );
        o.push_str(
            "<table><tr><th>document</th><th>title</th><th>status</th><th>pages</th>\
             <th>reason</th></tr>",
        );
        for d in &sum.shown {
            let pages = match d.doc.pages {
                Some(total) => format!("{} / {total}", d.pages_done),
                None => format!("{} / ?", d.pages_done),
            };
            let _ = write!(
                o,
                "<tr><td><a href=\"/status/documents/{id}\" title=\"its report\">{id}</a></td>\
                 <td>{}</td><td>{}</td><td>{pages}</td><td>{}</td></tr>",
                e(&d.doc.title),
                e(d.doc.status.as_str()),
                e(d.doc.error.as_deref().unwrap_or("")),
                id = d.doc.id,
            );
        }
        o.push_str("</table>");
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

/// A document's report as HTML: what it is, where it stands, what each stage took and cost.
fn report_html(r: &Report) -> String {
    let e = html_escape;
    let d = &r.document;
    let mut o = String::with_capacity(2048);
    let _ = write!(
        o,
        "<h1>Document {} · {}</h1><table>\
         <tr><th>status</th><td>{}</td></tr>\
         <tr><th>reason</th><td>{}</td></tr>\
         <tr><th>file</th><td>{}</td></tr>\
         <tr><th>sha256</th><td>{}</td></tr>\
         <tr><th>pages</th><td>{} recorded of {}</td></tr>\
         <tr><th>tiles</th><td>{}</td></tr>\
         <tr><th>text chunks</th><td>{}</td></tr>\
         <tr><th>tables</th><td>{}</td></tr>\
         <tr><th>wall time</th><td>{:.1} s</td></tr>\
         <tr><th>inference time</th><td>{:.1} s</td></tr>\
         <tr><th>estimated cost</th><td>{:.4}</td></tr></table>",
        d.id,
        e(&d.title),
        e(d.status.as_str()),
        e(d.error.as_deref().unwrap_or("")),
        e(&d.path),
        e(&d.sha256),
        r.pages,
        d.pages.map_or_else(|| "?".to_owned(), |p| p.to_string()),
        r.tiles,
        r.chunks,
        r.tables,
        r.wall_seconds,
        r.inference_seconds,
        r.estimated_cost,
    );
    o.push_str(
        "<h2>Stages</h2><table><tr><th>stage</th><th>jobs</th><th>seconds</th>\
         <th>inference seconds</th></tr>",
    );
    for s in &r.stages {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td></tr>",
            e(&s.stage),
            s.jobs,
            s.seconds,
            s.inference_seconds
        );
    }
    o.push_str("</table>");
    o
}
