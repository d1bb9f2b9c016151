//! The demo's steps as a client of the running system, through its HTTP API only: documents
//! ingested (`/api/v1/documents`), three searches (`/v1/search`), a chat
//! (`/v1/chat/completions`), a lane job (`/api/v1/lanes/jobs`), the status page and metrics.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use horos_vllm_client::{ChatMessage, ChatRequest, Client, ClientConfig};
use ingest_pipeline::render::{RenderConfig, encode_png, render_pages};
use serde_json::{Value, json};

use super::out::Out;

/// How long ingestion may take on a slow CPU before the demo gives up.
const INGEST_DEADLINE: Duration = Duration::from_secs(1800);

/// The page text given to the chat model: SmolLM2's slot holds 1,024 tokens, so about 1,500
/// characters of passage leave room for the question and the answer.
const PASSAGE_CHARS: usize = 1500;

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

/// One search hit as `/v1/search` answers it.
#[derive(Debug, Clone)]
pub struct Hit {
    /// The document.
    pub doc_id: i64,
    /// The page, from 1.
    pub page: u64,
    /// The score.
    pub score: f64,
    /// A snippet of its text.
    pub snippet: String,
}

impl Hit {
    fn from_json(v: &Value) -> Option<Hit> {
        Some(Hit {
            doc_id: v["document"].as_i64()?,
            page: v["page"].as_u64()?,
            score: v["score"].as_f64().unwrap_or(0.0),
            snippet: v["snippet"].as_str().unwrap_or("").to_owned(),
        })
    }
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

/// A client of the demo's coordinator.
pub struct DemoClient {
    client: Client,
    out: Out,
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl DemoClient {
    /// A client of `url`; a call may wait long (a 2-core CPU shared by every model).
    pub fn new(url: &str, out: Out) -> Result<Self, String> {
        let config = ClientConfig::new(url).total_timeout(Duration::from_secs(600));
        let client = Client::with_config(config).map_err(|e| e.to_string())?;
        Ok(Self { client, out })
    }

    async fn get(&self, path: &str) -> Result<Value, String> {
        self.client
            .get(path)
            .await
            .map_err(|e| format!("GET {path}: {e}"))
    }

    async fn post(&self, path: &str, body: &Value) -> Result<Value, String> {
        self.client
            .post(path, body)
            .await
            .map_err(|e| format!("POST {path}: {e}"))
    }

    /// Submits each file of the inbox (`names`) and follows them until each is done or failed.
    pub async fn ingest(&self, inbox: &Path, names: &[String]) -> Result<Summary, String> {
        let t0 = Instant::now();
        let mut summary = Summary::default();
        let mut pending = Vec::new();
        for name in names {
            let s = self
                .post("/api/v1/documents", &json!({"path": name}))
                .await?;
            let id = s["document"]
                .as_i64()
                .ok_or_else(|| format!("{name}: {s}"))?;
            let new = s["status"] == "queued";
            summary.files.insert(id, inbox.join(name));
            self.out.event(
                "document",
                format!(
                    "document {id} {} ({name})",
                    if new { "queued" } else { "known" }
                ),
                json!({"doc_id": id, "file": name, "new": new, "title": s["title"]}),
            );
            summary.new += usize::from(new);
            pending.push(id);
        }
        let mut shown = BTreeMap::new();
        while !pending.is_empty() {
            if t0.elapsed() > INGEST_DEADLINE {
                return Err(format!(
                    "documents {pending:?} not ingested after {} s",
                    INGEST_DEADLINE.as_secs()
                ));
            }
            let mut still = Vec::new();
            for id in pending {
                let r = self.get(&format!("/api/v1/documents/{id}")).await?;
                let doc = &r["document"];
                let (done, pages) = (
                    doc["done_pages"].as_u64().unwrap_or(0),
                    doc["pages"].as_u64(),
                );
                match doc["status"].as_str() {
                    Some("done") => {
                        summary.documents += 1;
                        summary.pages += pages.unwrap_or(done);
                        self.out.event(
                            "document_done",
                            format!(
                                "document {id}: {} pages, {} chunks, {} tables ({:.1} s)",
                                r["pages"],
                                r["chunks"],
                                r["tables"],
                                r["wall_seconds"].as_f64().unwrap_or(0.0)
                            ),
                            json!({"doc_id": id, "pages": r["pages"], "chunks": r["chunks"],
                                   "tables": r["tables"], "seconds": r["wall_seconds"]}),
                        );
                    }
                    Some("failed") => {
                        summary.failed += 1;
                        self.out.event(
                            "document_failed",
                            format!("document {id} failed: {}", doc["error"]),
                            json!({"doc_id": id, "error": doc["error"]}),
                        );
                    }
                    _ => {
                        if shown.insert(id, done) != Some(done) && pages.is_some() {
                            self.out.event(
                                "progress",
                                format!("document {id}: {done}/{} pages read", pages.unwrap_or(0)),
                                json!({"doc_id": id, "done_pages": done, "pages": pages}),
                            );
                        }
                        still.push(id);
                    }
                }
            }
            pending = still;
            if !pending.is_empty() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        Ok(summary)
    }

    async fn search_once(&self, body: Value) -> Result<Option<Hit>, String> {
        let answer = self.post("/v1/search", &body).await?;
        Ok(answer["data"].get(0).and_then(Hit::from_json))
    }

    fn report(&self, kind: &str, label: &str, query: &str, hit: Option<&Hit>) {
        match hit {
            Some(h) => self.out.event(
                "search",
                format!(
                    "{label}: best: document {} page {} (score {:.3}) “{}”",
                    h.doc_id,
                    h.page,
                    h.score,
                    one_line(&h.snippet)
                ),
                json!({"kind": kind, "query": query, "found": true, "doc_id": h.doc_id,
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
        let mut found = Found {
            full_text: self
                .search_once(json!({"query": query, "k": 3, "mode": "text"}))
                .await?,
            ..Found::default()
        };
        self.report(
            "full_text",
            "full-text (FTS5)",
            query,
            found.full_text.as_ref(),
        );
        let t0 = Instant::now();
        found.vector = self
            .search_once(json!({"query": query, "k": 3, "mode": "vector"}))
            .await?;
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
            .get(&hit.doc_id)
            .ok_or_else(|| format!("document {} is not one the demo ingested", hit.doc_id))?;
        let png = page_png(file.clone(), hit.page).await?;
        let image = base64::engine::general_purpose::STANDARD.encode(&png);
        found.maxsim = self
            .search_once(json!({"image": image, "k": 3, "mode": "visual"}))
            .await?;
        let best = found.maxsim.as_ref();
        self.out.event(
            "search",
            match best {
                Some(b) => format!(
                    "{MAXSIM_LABEL}: query = document {} page {} rendered at 110 dpi → best: \
                     document {} page {} (score {:.1})",
                    hit.doc_id, hit.page, b.doc_id, b.page, b.score
                ),
                None => format!("{MAXSIM_LABEL}: no page found"),
            },
            json!({"kind": "maxsim", "label": MAXSIM_LABEL, "embedder": "pixel-patch-fallback",
                   "query_kind": "page_image",
                   "query_page": {"doc_id": hit.doc_id, "page": hit.page},
                   "found": best.is_some(), "doc_id": best.map(|b| b.doc_id),
                   "page": best.map(|b| b.page), "score": best.map(|b| b.score)}),
        );
        Ok(found)
    }

    /// Asks SmolLM2, through the coordinator, to answer `question` from the best page (its text
    /// read back as Markdown from the admin API).
    pub async fn chat(&self, question: &str, page: &Hit) -> Result<String, String> {
        let doc = self
            .get(&format!("/api/v1/documents/{}/markdown", page.doc_id))
            .await?;
        let text = doc["pages"]
            .as_array()
            .and_then(|pages| {
                pages
                    .iter()
                    .find(|p| p["page_no"].as_u64() == Some(page.page))
            })
            .and_then(|p| p["markdown"].as_str())
            .unwrap_or(&page.snippet);
        let passage: String = one_line(text).chars().take(PASSAGE_CHARS).collect();
        let request = ChatRequest::new(
            "smollm2",
            vec![
                ChatMessage::system(
                    "You answer questions about a document. Use only the passage given. Answer \
                     in one or two sentences.",
                ),
                ChatMessage::user(format!("Passage:\n{passage}\n\nQuestion: {question}")),
            ],
        )
        .max_tokens(80)
        .temperature(0.0)
        // A 135M-parameter model loops easily; llama-server's repetition penalty keeps it short.
        .extra_field("repeat_penalty", 1.3.into())
        .extra_field("x_client_id", "horos-demo".into());
        let t0 = Instant::now();
        let answer = self
            .client
            .chat(&request)
            .await
            .map_err(|e| format!("chat through the coordinator: {e}"))?;
        let seconds = t0.elapsed().as_secs_f64();
        let text = answer.text().trim().to_owned();
        self.out.event(
            "chat",
            format!(
                "chat (smollm2 through the coordinator, {seconds:.1} s) about document {} page \
                 {}:\n    Q: {question}\n    A: {}",
                page.doc_id,
                page.page,
                one_line(&text)
            ),
            json!({"model": "smollm2", "question": question, "doc_id": page.doc_id,
                   "page": page.page, "answer": text, "seconds": seconds,
                   "finish_reason": answer.finish_reason()}),
        );
        Ok(text)
    }

    /// A job through the lane: queued in `chat`, fed to SmolLM2 in a batch by the feeder, its
    /// answer read back by id.
    pub async fn lane_job(&self, question: &str) -> Result<(), String> {
        let t0 = Instant::now();
        let prompt = format!("In five words or fewer, what is this question about? {question}");
        let s = self
            .post(
                "/api/v1/lanes/jobs",
                &json!({"queue": "chat", "prompt": prompt, "max_tokens": 24}),
            )
            .await?;
        let id = s["id"].as_i64().ok_or_else(|| format!("lane job: {s}"))?;
        loop {
            let job = self.get(&format!("/api/v1/lanes/jobs/{id}")).await?;
            match job["state"].as_str() {
                Some("done") => {
                    let answer = job["answer"].as_str().unwrap_or("").trim().to_owned();
                    let seconds = t0.elapsed().as_secs_f64();
                    self.out.event(
                        "lane_job",
                        format!(
                            "lane job {id} (queue chat, fed to smollm2 by the feeder, {seconds:.1} \
                             s): {}",
                            one_line(&answer)
                        ),
                        json!({"id": id, "queue": "chat", "state": "done", "answer": answer,
                               "seconds": seconds}),
                    );
                    return Ok(());
                }
                Some("dead") => {
                    return Err(format!("lane job {id} failed: {}", job["last_error"]));
                }
                _ if t0.elapsed() > Duration::from_secs(600) => {
                    return Err(format!("lane job {id} not done after 600 s: {job}"));
                }
                _ => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }

    /// `GET path`: its status code and the size of its body (0 with no answer).
    pub async fn page(&self, path: &str) -> (u16, usize) {
        match self.client.get_text(path).await {
            Ok((text, _)) => (200, text.len()),
            Err(e) => (e.status().unwrap_or(0), 0),
        }
    }
}

/// Page `page` of the PDF `file` rendered at 110 dpi (the pipeline stored it at 150), as PNG.
async fn page_png(file: PathBuf, page: u64) -> Result<Vec<u8>, String> {
    let page = u32::try_from(page).map_err(|e| e.to_string())?;
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
