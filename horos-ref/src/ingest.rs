//! `[ingest]`: the document pipeline of `run` (PDFs → page images → reading → text, tables,
//! embeddings, searchable), and the submission of documents (`ingest` subcommand, MCP tool).
//! Documents are accepted only from the configured inbox directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ingest_pipeline::embed::{EmbedError, PixelPatchFallback, VisualEmbedder};
use ingest_pipeline::fallback::FallbackReader;
use ingest_pipeline::hybrid::{self, Mode};
use ingest_pipeline::maxsim::MultiVector;
use ingest_pipeline::openai::{OpenAiEmbedder, OpenAiVisionReader};
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig, Running, Submission};
use ingest_pipeline::pooling::PoolingEmbedder;
use ingest_pipeline::store::PageHit;
use ingest_pipeline::vision::{ReadBy, Reading, TesseractReader, VisionError, VisionReader};
use serde_json::{Value, json};

use crate::config::{Config, IngestSection, ReaderKind, VisualKind};

/// Tesseract on the CPU, or an OpenAI-compatible vision model.
#[derive(Debug)]
pub enum Reader {
    /// The `tesseract` command.
    Tesseract(TesseractReader),
    /// A vision-language model (Qwen2-VL style prompt).
    Vision(OpenAiVisionReader),
    /// A vision-language model, Tesseract for the pages it cannot read while its server is
    /// down (`vision_fallback = true`, the default).
    VisionOrTesseract(FallbackReader<OpenAiVisionReader, TesseractReader>),
}

impl VisionReader for Reader {
    fn name(&self) -> &str {
        match self {
            Reader::Tesseract(r) => r.name(),
            Reader::Vision(r) => r.name(),
            Reader::VisionOrTesseract(r) => r.name(),
        }
    }

    fn read_by(&self) -> ReadBy {
        match self {
            Reader::Tesseract(r) => r.read_by(),
            Reader::Vision(r) => r.read_by(),
            Reader::VisionOrTesseract(r) => r.read_by(),
        }
    }

    async fn read(&self, png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        match self {
            Reader::Tesseract(r) => r.read(png).await,
            Reader::Vision(r) => r.read(png).await,
            Reader::VisionOrTesseract(r) => r.read(png).await,
        }
    }
}

/// The configured visual embedder: a late-interaction model, or the offline pixel fallback
/// (which refuses text questions with `EmbedError::NoTextQuery`).
#[derive(Debug)]
pub enum Visual {
    /// vLLM's `/pooling` (`token_embed`).
    Pooling(PoolingEmbedder),
    /// Pixel patches, no model.
    PixelPatchFallback(PixelPatchFallback),
}

impl Visual {
    /// The embedder `[ingest]` selects.
    pub fn from_section(section: &IngestSection) -> Result<Self, String> {
        Ok(match &section.visual {
            VisualKind::Pooling { url, model } => {
                Visual::Pooling(PoolingEmbedder::new(url, model).map_err(|e| e.to_string())?)
            }
            VisualKind::PixelPatchFallback => {
                Visual::PixelPatchFallback(PixelPatchFallback::default())
            }
        })
    }
}

impl VisualEmbedder for Visual {
    fn name(&self) -> &str {
        match self {
            Visual::Pooling(e) => e.name(),
            Visual::PixelPatchFallback(e) => e.name(),
        }
    }

    async fn embed_image(&self, png: Arc<Vec<u8>>) -> Result<MultiVector, EmbedError> {
        match self {
            Visual::Pooling(e) => e.embed_image(png).await,
            Visual::PixelPatchFallback(e) => e.embed_image(png).await,
        }
    }

    async fn embed_query(&self, text: String) -> Result<MultiVector, EmbedError> {
        match self {
            Visual::Pooling(e) => e.embed_query(text).await,
            Visual::PixelPatchFallback(e) => e.embed_query(text).await,
        }
    }
}

/// The binary's pipeline type.
pub type RefPipeline = Pipeline<Reader, OpenAiEmbedder, Visual>;

/// The pipeline of `run`, set once it has started (the coordinator's search and admin routes are
/// built before it).
pub type LatePipeline = Arc<std::sync::OnceLock<RefPipeline>>;

/// Opens the pipeline of `section` (creating its tables), without starting workers: on the
/// PostgreSQL `database` of `config` when it is one (shared with the other nodes), else in
/// `section.dir`'s own SQLite file.
pub async fn open(config: &Config, section: &IngestSection) -> Result<RefPipeline, String> {
    // Orientation is detected once per page, by the pipeline when it renders it (for every
    // reader, and for the visual embedder): Tesseract reading the upright page need not again.
    let tesseract = TesseractReader::default().with_orientation(false);
    let reader = match section.reader {
        ReaderKind::Tesseract => Reader::Tesseract(tesseract),
        ReaderKind::Openai => {
            let url = section
                .vision_url
                .as_deref()
                .ok_or("ingest.vision_url is needed with reader = \"openai\"")?;
            let model =
                OpenAiVisionReader::new(url, &section.vision_model).map_err(|e| e.to_string())?;
            if section.vision_fallback {
                Reader::VisionOrTesseract(FallbackReader::new(model, tesseract))
            } else {
                Reader::Vision(model)
            }
        }
    };
    let embedder = OpenAiEmbedder::new(&section.embeddings_url, &section.embeddings_model)
        .map_err(|e| e.to_string())?;
    let visual = Visual::from_section(section)?;
    let cfg = pipeline_config(section, config.database_url());
    if cfg.database_url.is_some() && cfg.db_path.exists() {
        tracing::warn!(
            file = %cfg.db_path.display(),
            "[ingest] uses the PostgreSQL database: the documents of this earlier SQLite file are \
             not read (submit them again to share them)"
        );
    }
    tokio::task::spawn_blocking(move || {
        Pipeline::open(cfg, reader, embedder, visual).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())?
}

/// The pipeline's settings of `section`: its tuning, orientation detection when
/// `detect_rotation` is on, and the PostgreSQL database when `database_url` is given.
pub fn pipeline_config(section: &IngestSection, database_url: Option<&str>) -> PipelineConfig {
    let mut cfg = PipelineConfig::new(&section.dir);
    cfg.database_url = database_url.map(str::to_owned);
    section.tuning.apply(&mut cfg);
    cfg.orientation = section.detect_rotation.then(TesseractReader::default);
    cfg
}

/// Starts the workers of every stage (they run until [`Running::shutdown`]).
pub async fn start(
    config: &Config,
    section: &IngestSection,
) -> Result<(RefPipeline, Running), String> {
    let pipeline = open(config, section).await?;
    let running = pipeline.start();
    Ok((pipeline, running))
}

/// `path` if it is a file inside `inbox` (symbolic links and `..` resolved first), else why not.
pub fn confine(inbox: &Path, path: &Path) -> Result<PathBuf, String> {
    let file = confine_path(inbox, path)?;
    if !file.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    Ok(file)
}

/// `path` (a file or a directory) resolved inside `inbox` (symbolic links and `..` resolved
/// first), else why not.
pub fn confine_path(inbox: &Path, path: &Path) -> Result<PathBuf, String> {
    let inbox = std::fs::canonicalize(inbox)
        .map_err(|e| format!("the inbox {} is not usable: {e}", inbox.display()))?;
    let candidate = if path.is_relative() {
        inbox.join(path)
    } else {
        path.to_path_buf()
    };
    let file =
        std::fs::canonicalize(&candidate).map_err(|e| format!("{}: {e}", candidate.display()))?;
    if !file.starts_with(&inbox) {
        return Err(format!(
            "{} is outside the inbox {}",
            path.display(),
            inbox.display()
        ));
    }
    Ok(file)
}

/// The PDFs under directory `dir` (recursively, by path), each confined to `inbox` (a symbolic
/// link that leads out of it is refused with its reason, not followed).
pub fn pdfs_under(inbox: &Path, dir: &Path) -> Result<Vec<Result<PathBuf, String>>, String> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    // Directories by their real path: a link back up the tree is read once, not forever.
    let mut seen = std::collections::HashSet::new();
    while let Some(d) = dirs.pop() {
        let Ok(real) = confine_path(inbox, &d) else {
            continue; // a link out of the inbox
        };
        if !seen.insert(real) {
            continue;
        }
        let entries = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| format!("{}: {e}", d.display()))?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("pdf"))
            {
                found.push(confine(inbox, &path).map_err(|e| (path, e)));
            }
        }
    }
    found.sort_by(|a, b| sort_key(a).cmp(sort_key(b)));
    Ok(found.into_iter().map(|f| f.map_err(|(_, e)| e)).collect())
}

fn sort_key(f: &Result<PathBuf, (PathBuf, String)>) -> &Path {
    match f {
        Ok(p) | Err((p, _)) => p,
    }
}

/// Submits one document (already confined) to `pipeline`.
pub async fn submit(pipeline: &RefPipeline, file: &Path) -> Result<Value, String> {
    let submission = pipeline.submit(file).await.map_err(|e| e.to_string())?;
    Ok(submission_json(submission, &file.to_string_lossy()))
}

/// What a submission of `path` did, as the `ingest` command and MCP tool answer it. The path is
/// shown lossily (a file name need not be UTF-8; the pipeline keeps its exact bytes).
fn submission_json(submission: Submission, path: &str) -> Value {
    let (doc, status) = match submission {
        Submission::Queued(doc) => (doc, "queued"),
        Submission::Known(doc) => (doc, "known"),
    };
    json!({"document": doc.id, "status": status, "title": doc.title, "path": path})
}

/// Ingests failed document `id` again from scratch (`Pipeline::retry`): the answer of a
/// submission, plus `retried` (the failed document's id, deleted).
pub async fn retry(pipeline: &RefPipeline, id: i64) -> Result<Value, String> {
    let submission = pipeline.retry(id).await.map_err(|e| e.to_string())?;
    let path = submission.document().path.clone();
    let mut out = submission_json(submission, &path);
    out["retried"] = json!(id);
    Ok(out)
}

/// The failed document submitted from `file` (its exact path), the latest if several were.
pub async fn failed_document_at(pipeline: &RefPipeline, file: &Path) -> Result<i64, String> {
    let mut reads = pipeline.reads();
    let docs = tokio::task::spawn_blocking(move || {
        ingest_pipeline::store::documents(&mut reads).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())??;
    let mut from_file = docs.iter().filter(|d| d.source_path() == file).peekable();
    if from_file.peek().is_none() {
        return Err(format!("no document was submitted from {}", file.display()));
    }
    from_file
        .filter(|d| d.status == ingest_pipeline::store::DocStatus::Failed)
        .map(|d| d.id)
        .next_back()
        .ok_or_else(|| format!("no document submitted from {} has failed", file.display()))
}

/// Deletes document `id` with everything derived from it (`Pipeline::delete`).
pub async fn delete(config: &Config, id: i64) -> Result<Value, String> {
    let pipeline = open_configured(config).await?;
    let doc = pipeline
        .delete(id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no document {id}"))?;
    Ok(json!({"deleted": doc.id, "title": doc.title, "path": doc.path}))
}

/// The report of document `id`: pages, tiles, chunks, tables, time per stage, inference time,
/// estimated cost, and its status and error.
pub async fn report(config: &Config, id: i64) -> Result<Value, String> {
    let pipeline = open_configured(config).await?;
    let report = tokio::task::spawn_blocking(move || pipeline.report(id))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    serde_json::to_value(report).map_err(|e| e.to_string())
}

/// Opens the pipeline of `config` (an error naming the missing section without one).
pub async fn open_configured(config: &Config) -> Result<RefPipeline, String> {
    open(config, section(config)?).await
}

/// The documents of the pipeline of `config`, newest last.
pub async fn documents(config: &Config) -> Result<Value, String> {
    let pipeline = open_configured(config).await?;
    let mut reads = pipeline.reads();
    let docs = tokio::task::spawn_blocking(move || {
        ingest_pipeline::store::documents(&mut reads).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())??;
    serde_json::to_value(docs).map_err(|e| e.to_string())
}

/// The pages of document `id`: what read each, its rotation, its characters.
pub async fn pages(config: &Config, id: i64) -> Result<Value, String> {
    let mut reads = open_configured(config).await?.reads();
    let pages = tokio::task::spawn_blocking(move || {
        if ingest_pipeline::store::document(&mut reads, id)
            .map_err(|e| e.to_string())?
            .is_none()
        {
            return Err(format!("no document {id}"));
        }
        ingest_pipeline::store::document_pages(&mut reads, id).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())??;
    serde_json::to_value(pages).map_err(|e| e.to_string())
}

/// Document `id` as Markdown (`store::document_markdown`): `{"document", "title", "markdown",
/// "pages": [{"page_no", "read_by", "markdown"}]}`.
pub async fn export(config: &Config, id: i64) -> Result<Value, String> {
    let mut reads = open_configured(config).await?.reads();
    let doc = tokio::task::spawn_blocking(move || {
        ingest_pipeline::store::document_markdown(&mut reads, id).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())??
    .ok_or_else(|| format!("no document {id}"))?;
    Ok(json!({
        "document": doc.doc_id,
        "title": doc.title,
        "markdown": doc.to_markdown(),
        "pages": doc.pages,
    }))
}

/// The best `k` pages of `pipeline` for `text` (any text a person typed) in `mode`: full text,
/// text vectors, visual MaxSim or their fusion (`ingest_pipeline::hybrid`), within `document`
/// when given.
pub async fn search_pages(
    pipeline: &RefPipeline,
    mode: Mode,
    text: String,
    k: usize,
    document: Option<i64>,
) -> Result<Vec<PageHit>, hybrid::SearchError> {
    let q = hybrid::Query {
        text,
        k,
        document,
        threads: std::thread::available_parallelism().map_or(1, usize::from),
    };
    let open = || Ok(pipeline.reads());
    hybrid::search(
        open,
        pipeline.text_embedder(),
        pipeline.visual(),
        pipeline.visual_index(),
        mode,
        &q,
    )
    .await
}

/// [`search_pages`] over the pipeline of `config`, as JSON (the `search` command and the MCP
/// tool).
pub async fn search(
    config: &Config,
    mode: Mode,
    text: String,
    k: usize,
    document: Option<i64>,
) -> Result<Value, String> {
    let pipeline = open_configured(config).await?;
    let hits = search_pages(&pipeline, mode, text, k, document)
        .await
        .map_err(|e| e.to_string())?;
    Ok(hits_json(&hits))
}

/// Search hits as the `search` command, the MCP tool and `/v1/search` answer them:
/// `[{"document", "page", "score", "snippet"}]`.
pub fn hits_json(hits: &[PageHit]) -> Value {
    Value::Array(
        hits.iter()
            .map(|h| {
                json!({"document": h.doc_id, "page": h.page_no, "score": h.score,
                       "snippet": h.snippet})
            })
            .collect(),
    )
}

/// The error of a command that needs `[ingest]` in a configuration without one.
pub const NO_INGEST: &str = "this configuration has no [ingest] section: add one (horos-ref/README.md \
                             has a sample: inbox, database, reader) to ingest and search documents";

fn section(config: &Config) -> Result<&IngestSection, String> {
    config.ingest.as_ref().ok_or_else(|| NO_INGEST.to_owned())
}
