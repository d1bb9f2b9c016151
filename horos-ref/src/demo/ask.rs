//! The demo's questions: a full-text, a vector and a MaxSim search over the ingested pages, and
//! a chat about the best passage, answered through the coordinator. The demo's visual index is
//! the offline pixel-patch fallback (no model): its MaxSim query is a page image, never the
//! question, and the demo says so.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use horos_vllm_client::{ChatMessage, ChatRequest, Client, ClientConfig};
use ingest_pipeline::embed::{PixelPatchFallback, TextEmbedder};
use ingest_pipeline::openai::OpenAiEmbedder;
use ingest_pipeline::render::{RenderConfig, encode_png, render_pages};
use ingest_pipeline::store::{self, PageHit};
use serde_json::json;

use super::ingest::DemoPipeline;
use super::out::Out;

/// The best page of each search.
#[derive(Debug, Default)]
pub struct Found {
    /// Full text (FTS5, BM25).
    pub full_text: Option<PageHit>,
    /// MiniLM vectors (cosine).
    pub vector: Option<PageHit>,
    /// Page images (MaxSim over the pixel-patch fallback, a page image as the query):
    /// `(doc_id, page_no, score)`.
    pub maxsim: Option<(i64, u32, f32)>,
}

/// How the demo names its page-image search: the offline fallback, whose query is a page image.
const MAXSIM_LABEL: &str = "maxsim (pixel-patch fallback, a page image as the query)";

/// The visual embedder's name in the search event's JSON (`embedder`), as `[ingest] visual`
/// names it.
const PIXEL_PATCH_FALLBACK: &str = "pixel-patch-fallback";

/// The words of `query` as an FTS5 OR query (each word quoted: FTS5 operators and punctuation
/// in the user's text are taken literally). BM25 ranks rare words higher, so the common words
/// of a question weigh little.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn blocking<X: Send + 'static>(
    f: impl FnOnce() -> Result<X, String> + Send + 'static,
) -> Result<X, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| e.to_string())?
}

/// The three searches for `query`; each prints its best page.
pub async fn search(
    pipeline: &DemoPipeline,
    embedder: &OpenAiEmbedder,
    query: &str,
    out: &Out,
) -> Result<Found, String> {
    let mut found = Found::default();

    let p = pipeline.clone();
    let q = ingest_pipeline::store::words_query(query);
    let hits = blocking(move || {
        if q.is_empty() {
            return Ok(Vec::new()); // no word to look for (FTS5 refuses an empty query)
        }
        let mut conn = p.reads();
        store::search_text(&mut conn, &q, 3).map_err(|e| e.to_string())
    })
    .await?;
    found.full_text = hits.into_iter().next();
    report_hit(
        out,
        "full_text",
        "full-text (FTS5)",
        query,
        found.full_text.as_ref(),
    );

    let t0 = Instant::now();
    let v = embedder
        .embed(vec![query.to_owned()])
        .await
        .map_err(|e| format!("embedding the query through the coordinator: {e}"))?
        .into_iter()
        .next()
        .ok_or("the embedding server returned no vector")?;
    let embed_s = t0.elapsed().as_secs_f64();
    let p = pipeline.clone();
    let hits = blocking(move || {
        let mut conn = p.reads();
        store::search_vectors(&mut conn, &v, 3).map_err(|e| e.to_string())
    })
    .await?;
    found.vector = hits.into_iter().next();
    report_hit(
        out,
        "vector",
        &format!("vector (MiniLM, query embedded in {embed_s:.2} s)"),
        query,
        found.vector.as_ref(),
    );

    // The pixel-patch fallback has no text tower: its query is an image. The demo asks for the
    // full-text hit's page rendered again at another resolution (110 dpi instead of 150) and
    // checks that MaxSim finds it among all pages; a late-interaction model (ColPali, ColQwen
    // behind [ingest] visual_url) would take the question itself.
    if let Some(hit) = found.full_text.clone().or_else(|| found.vector.clone()) {
        let p = pipeline.clone();
        let (doc_id, page_no) = (hit.doc_id, hit.page_no);
        let best = blocking(move || {
            let mut conn = p.reads();
            let doc = store::document(&mut conn, doc_id)
                .map_err(|e| e.to_string())?
                .ok_or("document vanished")?;
            let bytes = std::fs::read(&doc.path).map_err(|e| format!("{}: {e}", doc.path))?;
            let render = RenderConfig {
                dpi: 110.0,
                ..RenderConfig::default()
            };
            let mut png = None;
            render_pages(bytes, &render, page_no, |page| {
                png = Some(encode_png(&page.image));
                ControlFlow::Break(())
            })
            .map_err(|e| e.to_string())?;
            let png = png.ok_or("page not rendered")?.map_err(|e| e.to_string())?;
            let embedder = PixelPatchFallback::default();
            let query = embedder.query_from_png(&png).map_err(|e| e.to_string())?;
            let index =
                store::load_visual_index(&mut conn, embedder.dim()).map_err(|e| e.to_string())?;
            let hits = index.search(&query, 3, 2).map_err(|e| e.to_string())?;
            Ok(hits.first().map(|h| (h.key.0, h.key.1, h.score)))
        })
        .await?;
        found.maxsim = best;
        let text = match best {
            Some((d, p, s)) => format!(
                "{MAXSIM_LABEL}: query = document {doc_id} page {page_no} rendered at 110 dpi → best: document {d} page {p} (score {s:.1})"
            ),
            None => format!("{MAXSIM_LABEL}: no page found"),
        };
        out.event(
            "search",
            text,
            json!({"kind": "maxsim", "label": MAXSIM_LABEL, "embedder": PIXEL_PATCH_FALLBACK,
                   "query_kind": "page_image",
                   "query_page": {"doc_id": doc_id, "page": page_no},
                   "found": best.is_some(), "doc_id": best.map(|b| b.0),
                   "page": best.map(|b| b.1), "score": best.map(|b| b.2)}),
        );
    } else {
        out.event(
            "search",
            format!("{MAXSIM_LABEL}: skipped, no page to look for"),
            json!({"kind": "maxsim", "label": MAXSIM_LABEL, "embedder": PIXEL_PATCH_FALLBACK,
                   "query_kind": "page_image",
                   "found": false}),
        );
    }
    Ok(found)
}

fn report_hit(out: &Out, kind: &str, label: &str, query: &str, hit: Option<&PageHit>) {
    match hit {
        Some(h) => out.event(
            "search",
            format!(
                "{label}: best: document {} page {} (score {:.3}) “{}”",
                h.doc_id,
                h.page_no,
                h.score,
                one_line(&h.snippet)
            ),
            json!({"kind": kind, "query": query, "found": true, "doc_id": h.doc_id,
                   "page": h.page_no, "score": h.score, "snippet": one_line(&h.snippet)}),
        ),
        None => out.event(
            "search",
            format!("{label}: nothing found"),
            json!({"kind": kind, "query": query, "found": false}),
        ),
    }
}

/// The page text given to the chat model: SmolLM2's slot holds 1,024 tokens, so about 1,500
/// characters of passage leave room for the question and the answer.
const PASSAGE_CHARS: usize = 1500;

/// Asks the chat model, through the coordinator, to answer `question` from the best page.
pub async fn chat(
    pipeline: &DemoPipeline,
    coordinator_url: &str,
    question: &str,
    page: &PageHit,
    out: &Out,
) -> Result<String, String> {
    let p = pipeline.clone();
    let (doc_id, page_no) = (page.doc_id, page.page_no);
    let text = blocking(move || {
        let mut conn = p.reads();
        store::page_text(&mut conn, doc_id, page_no).map_err(|e| e.to_string())
    })
    .await?
    .unwrap_or_else(|| page.snippet.clone());
    let passage: String = one_line(&text).chars().take(PASSAGE_CHARS).collect();
    let client = Client::with_config(
        ClientConfig::new(coordinator_url).total_timeout(Duration::from_secs(180)),
    )
    .map_err(|e| e.to_string())?;
    let request = ChatRequest::new(
        "smollm2",
        vec![
            ChatMessage::system(
                "You answer questions about a document. Use only the passage given. Answer in one or two sentences.",
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
    let answer = client
        .chat(&request)
        .await
        .map_err(|e| format!("chat through the coordinator: {e}"))?;
    let seconds = t0.elapsed().as_secs_f64();
    let text = answer.text().trim().to_owned();
    out.event(
        "chat",
        format!(
            "chat (smollm2 through the coordinator, {seconds:.1} s) about document {doc_id} page {page_no}:\n    Q: {question}\n    A: {}",
            one_line(&text)
        ),
        json!({"model": "smollm2", "question": question, "doc_id": doc_id, "page": page_no,
               "answer": text, "seconds": seconds, "finish_reason": answer.finish_reason()}),
    );
    Ok(text)
}
