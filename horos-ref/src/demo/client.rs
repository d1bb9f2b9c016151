//! The demo's steps as a client of the running system, through its HTTP API only: documents
//! ingested (`/api/v1/documents`), three searches (`/v1/search`), an answer citing its pages
//! (`/v1/answers`), a lane job (`/api/v1/lanes/jobs`), the status page and metrics.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use horos_ops::answers::AskArgs;
use horos_ops::documents::{Hit, IngestArgs};
use horos_ops::lanes::SubmitArgs;
use horos_ops::remote::{Question, Remote, RemoteSearch, Wait};
use ingest_pipeline::render::{RenderConfig, encode_png, render_pages};
use ingest_pipeline::store::DocStatus;
use serde_json::json;

use super::out::Out;

/// How long ingestion may take on a slow CPU before the demo gives up.
const INGEST_DEADLINE: Duration = Duration::from_secs(1800);

/// How the demo names its page-image search: the offline fallback's question is a page image.
const MAXSIM_LABEL: &str = "maxsim (pixel-patch fallback, a page image as the query)";

/// What was ingested.
#[derive(Debug, Default)]
pub struct Summary {
    /// Documents ingested (now or before).
    pub documents: usize,
    /// Their pages.
    pub pages: u64,
    /// Ingested by this run.
    pub new: usize,
    /// Failed.
    pub failed: usize,
    /// Each document's file, by id (to render a page as a visual question).
    pub files: BTreeMap<i64, PathBuf>,
}

/// The best page of each search.
#[derive(Debug, Default)]
pub struct Found {
    /// Full text (FTS5, BM25).
    pub full_text: Option<Hit>,
    /// MiniLM vectors (cosine).
    pub vector: Option<Hit>,
    /// Page images (MaxSim, a page image as the question).
    pub maxsim: Option<Hit>,
}

/// A client of the demo's coordinator: horos-ops' operations over its HTTP API, rendered.
pub struct DemoClient {
    remote: Remote,
    out: Out,
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl DemoClient {
    /// A client of `url`; a call may wait long (a 2-core CPU shared by every model).
    pub fn new(url: &str, out: Out) -> Result<Self, String> {
        let remote = Remote::new(url, None, Duration::from_secs(600)).map_err(|e| e.to_string())?;
        Ok(Self { remote, out })
    }

    /// Submits each file of the inbox (`names`) and follows them until each is done or failed.
    pub async fn ingest(&self, inbox: &Path, names: &[String]) -> Result<Summary, String> {
        let mut summary = Summary::default();
        let mut ids = Vec::new();
        for name in names {
            let ingested = self
                .remote
                .ingest(&IngestArgs::new(name))
                .await
                .map_err(|e| format!("{name}: {e}"))?;
            for s in ingested.documents() {
                let new = s.status.as_str() == "queued";
                summary.files.insert(s.document, inbox.join(name));
                summary.new += usize::from(new);
                ids.push(s.document);
                self.out.event(
                    "document",
                    format!("document {} {} ({name})", s.document, s.status.as_str()),
                    json!({"doc_id": s.document, "file": name, "new": new, "title": s.title}),
                );
            }
        }
        let wait = Wait {
            every: Duration::from_millis(500),
            at_most: INGEST_DEADLINE,
        };
        let mut shown = BTreeMap::new();
        let reports = self
            .remote
            .wait_documents(&ids, wait, |r| {
                let (id, done) = (r.document.id, r.document.done_pages);
                if r.document.status == DocStatus::Pending
                    && let Some(pages) = r.document.pages
                    && shown.insert(id, done) != Some(done)
                {
                    self.out.event(
                        "progress",
                        format!("document {id}: {done}/{pages} pages read"),
                        json!({"doc_id": id, "done_pages": done, "pages": pages}),
                    );
                }
            })
            .await
            .map_err(|e| e.to_string())?;
        for r in reports {
            let id = r.document.id;
            if r.document.status == DocStatus::Done {
                summary.documents += 1;
                summary.pages += u64::from(r.pages);
                self.out.event(
                    "document_done",
                    format!(
                        "document {id}: {} pages, {} chunks, {} tables ({:.1} s)",
                        r.pages, r.chunks, r.tables, r.wall_seconds
                    ),
                    json!({"doc_id": id, "pages": r.pages, "chunks": r.chunks,
                           "tables": r.tables, "seconds": r.wall_seconds}),
                );
            } else {
                summary.failed += 1;
                self.out.event(
                    "document_failed",
                    format!("document {id} failed: {:?}", r.document.error),
                    json!({"doc_id": id, "error": r.document.error}),
                );
            }
        }
        Ok(summary)
    }

    async fn search_once(&self, question: Question, mode: &str) -> Result<Option<Hit>, String> {
        let search = RemoteSearch {
            question,
            mode: Some(mode.to_owned()),
            k: 3,
            document: None,
        };
        let hits = self.remote.search(&search).await;
        Ok(hits
            .map_err(|e| format!("{mode} search: {e}"))?
            .into_iter()
            .next())
    }

    fn report(&self, kind: &str, label: &str, query: &str, hit: Option<&Hit>) {
        match hit {
            Some(h) => self.out.event(
                "search",
                format!(
                    "{label}: best: document {} page {} (score {:.3}) “{}”",
                    h.document,
                    h.page,
                    h.score,
                    one_line(&h.snippet)
                ),
                json!({"kind": kind, "query": query, "found": true, "doc_id": h.document,
                       "page": h.page, "score": h.score, "snippet": one_line(&h.snippet)}),
            ),
            None => self.out.event(
                "search",
                format!("{label}: nothing found"),
                json!({"kind": kind, "query": query, "found": false}),
            ),
        }
    }

    /// The three searches for `query`: full text, vectors (the question embedded by MiniLM in
    /// the pool), and MaxSim over the page images with the full-text hit's page, rendered again
    /// at another resolution, as the question (the pixel-patch fallback has no text tower; a
    /// late-interaction model would take the question itself).
    pub async fn search(
        &self,
        query: &str,
        files: &BTreeMap<i64, PathBuf>,
    ) -> Result<Found, String> {
        let text = || Question::Text(query.to_owned());
        let mut found = Found {
            full_text: self.search_once(text(), "text").await?,
            ..Found::default()
        };
        self.report(
            "full_text",
            "full-text (FTS5)",
            query,
            found.full_text.as_ref(),
        );
        let t0 = Instant::now();
        found.vector = self.search_once(text(), "vector").await?;
        let label = format!("vector (MiniLM, {:.2} s)", t0.elapsed().as_secs_f64());
        self.report("vector", &label, query, found.vector.as_ref());

        let Some(hit) = found.full_text.clone().or_else(|| found.vector.clone()) else {
            self.out.event(
                "search",
                format!("{MAXSIM_LABEL}: skipped, no page to look for"),
                json!({"kind": "maxsim", "label": MAXSIM_LABEL, "found": false}),
            );
            return Ok(found);
        };
        let file = files
            .get(&hit.document)
            .ok_or_else(|| format!("document {} is not one the demo ingested", hit.document))?;
        let png = page_png(file.clone(), hit.page).await?;
        found.maxsim = self.search_once(Question::Image(png), "visual").await?;
        let best = found.maxsim.as_ref();
        self.out.event(
            "search",
            match best {
                Some(b) => format!(
                    "{MAXSIM_LABEL}: query = document {} page {} rendered at 110 dpi → best: \
                     document {} page {} (score {:.1})",
                    hit.document, hit.page, b.document, b.page, b.score
                ),
                None => format!("{MAXSIM_LABEL}: no page found"),
            },
            json!({"kind": "maxsim", "label": MAXSIM_LABEL, "embedder": "pixel-patch-fallback",
                   "query_kind": "page_image",
                   "query_page": {"doc_id": hit.document, "page": hit.page},
                   "found": best.is_some(), "doc_id": best.map(|b| b.document),
                   "page": best.map(|b| b.page), "score": best.map(|b| b.score)}),
        );
        Ok(found)
    }

    /// Asks the question of the ingested pages through `/v1/answers`: the pages that support
    /// it given to SmolLM2 (through the coordinator), each claim of its answer citing a page.
    pub async fn answer(&self, question: &str) -> Result<String, String> {
        let args = AskArgs {
            question: question.to_owned(),
            model: "smollm2".into(),
            k: Some(2),
            document: None,
            min_similarity: None,
            max_tokens: Some(80),
            temperature: Some(0.0),
            images: None,
        };
        let t0 = Instant::now();
        let answer = self
            .remote
            .ask(&args)
            .await
            .map_err(|e| format!("/v1/answers: {e}"))?;
        let seconds = t0.elapsed().as_secs_f64();
        let sources: Vec<String> = answer
            .citations
            .iter()
            .map(|c| format!("[{}] document {} page {}", c.n, c.document, c.page))
            .collect();
        self.out.event(
            "answer",
            format!(
                "answer (smollm2 through /v1/answers, {seconds:.1} s, from {}):\n    Q: \
                 {question}\n    A: {}",
                if sources.is_empty() {
                    "no supporting page".to_owned()
                } else {
                    sources.join(", ")
                },
                one_line(&answer.answer)
            ),
            json!({"model": "smollm2", "question": question, "answer": answer.answer,
                   "supported": answer.supported, "citations": answer.citations,
                   "claims": answer.claims, "seconds": seconds}),
        );
        Ok(answer.answer)
    }

    /// A job through the lane: queued in `chat`, fed to SmolLM2 in a batch by the feeder, its
    /// answer read back by id.
    pub async fn lane_job(&self, question: &str) -> Result<(), String> {
        let t0 = Instant::now();
        let args = SubmitArgs {
            queue: "chat".into(),
            prompt: Some(format!(
                "In five words or fewer, what is this question about? {question}"
            )),
            max_tokens: Some(24),
            ..SubmitArgs::default()
        };
        let fail = |e: horos_ops::OpsError| format!("lane job: {e}");
        let id = self.remote.submit(&args).await.map_err(fail)?.id;
        let wait = Wait {
            every: Duration::from_millis(300),
            at_most: Duration::from_secs(600),
        };
        let job = self.remote.wait_job(id, wait).await.map_err(fail)?;
        let Some(answer) = job.answer.filter(|_| job.state.as_str() == "done") else {
            return Err(format!("lane job {id} failed: {:?}", job.last_error));
        };
        let answer = answer.trim();
        let seconds = t0.elapsed().as_secs_f64();
        self.out.event(
            "lane_job",
            format!(
                "lane job {id} (queue chat, fed to smollm2 by the feeder, {seconds:.1} s): {}",
                one_line(answer)
            ),
            json!({"id": id, "queue": "chat", "state": "done", "answer": answer,
                   "seconds": seconds}),
        );
        Ok(())
    }

    /// `GET path`: its status code and the size of its body (0 with no answer).
    pub async fn page(&self, path: &str) -> (u16, usize) {
        match self.remote.page(path).await {
            Ok(text) => (200, text.len()),
            Err(horos_ops::OpsError::Coordinator { status, .. }) => (status, 0),
            Err(_) => (0, 0),
        }
    }
}

/// Page `page` of the PDF `file` rendered at 110 dpi (the pipeline stored it at 150), as PNG.
async fn page_png(file: PathBuf, page: u32) -> Result<Vec<u8>, String> {
    tokio::task::spawn_blocking(move || {
        let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let render = RenderConfig {
            dpi: 110.0,
            ..RenderConfig::default()
        };
        let mut png = None;
        render_pages(bytes, &render, page, |p| {
            png = Some(encode_png(&p.image));
            ControlFlow::Break(())
        })
        .map_err(|e| e.to_string())?;
        png.ok_or("page not rendered")?.map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())?
}
