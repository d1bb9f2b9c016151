//! `[ingest]` in the binary: the pipeline the configuration describes, opened and started, and
//! the `ingest`, `docs` and `search` commands' and MCP tools' answers as JSON. What the pipeline
//! is made of (its readers, the inbox rule, its routes on the coordinator) is ingest-pipeline's:
//! `configured`, `inbox` and `gateway`.

use std::path::Path;

use ingest_pipeline::configured::{self, ConfiguredPipeline, PipelineSettings, Reader, Visual};
use ingest_pipeline::gateway;
use ingest_pipeline::hybrid::Mode;
use ingest_pipeline::openai::OpenAiEmbedder;
use ingest_pipeline::pipeline::{Running, Submission};
use serde_json::{Value, json};

use crate::config::{Config, IngestSection};

/// The binary's pipeline type.
pub type RefPipeline = ConfiguredPipeline;

/// The pipeline of `run`, set once it has started (the coordinator's search and admin routes are
/// built before it).
pub type LatePipeline = gateway::LatePipeline<Reader, OpenAiEmbedder, Visual>;

/// Opens the pipeline of `section` (creating its tables), without starting workers: on the
/// PostgreSQL `database` of `config` when it is one (shared with the other nodes), else in
/// `section.dir`'s own SQLite file.
pub async fn open(config: &Config, section: &IngestSection) -> Result<RefPipeline, String> {
    let settings = section.settings(config.database_url())?;
    configured::open(&settings).await.map_err(|e| e.to_string())
}

/// Opens the pipeline `settings` describe and starts the workers of every stage (they run until
/// [`Running::shutdown`]).
pub async fn start(settings: &PipelineSettings) -> Result<(RefPipeline, Running), String> {
    let pipeline = configured::open(settings)
        .await
        .map_err(|e| e.to_string())?;
    let running = pipeline.start();
    Ok((pipeline, running))
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

/// [`Pipeline::search`](ingest_pipeline::pipeline::Pipeline::search) over the pipeline of
/// `config`, as JSON (the `search` command).
pub async fn search(
    config: &Config,
    mode: Mode,
    text: String,
    k: usize,
    document: Option<i64>,
) -> Result<Value, String> {
    let pipeline = open_configured(config).await?;
    let hits = pipeline
        .search(mode, text, k, document)
        .await
        .map_err(|e| e.to_string())?;
    Ok(gateway::hits_json(&hits))
}

/// The error of a command that needs `[ingest]` in a configuration without one.
pub const NO_INGEST: &str = "this configuration has no [ingest] section: add one (horos-ref/README.md \
                             has a sample: inbox, database, reader) to ingest and search documents";

fn section(config: &Config) -> Result<&IngestSection, String> {
    config.ingest.as_ref().ok_or_else(|| NO_INGEST.to_owned())
}
