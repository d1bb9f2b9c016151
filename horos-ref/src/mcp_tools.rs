//! `horos-ref mcp`: the HOROS tools over JSON-RPC 2.0 / MCP on stdin/stdout. Each tool is its
//! input schema and a call to one horos-ops operation with the arguments deserialised into the
//! operation's own type: `submit`, `status`, `stats`, `dead` on the configuration's database
//! (an ingest stage's dead letters in the pipeline's), `ingest`, `search`, `document` on the
//! `[ingest]` pipeline, and `models` on the running coordinator's admin API. The jobs are run
//! by `horos-ref run` (a separate process on the same database).

use std::sync::Arc;
use std::time::Duration;

use horos_mcp::{Server, ServerInfo, Tool, ToolError, ToolRegistry, async_trait};
use horos_ops::documents::{DocumentArgs, Documents, IngestArgs, SearchArgs};
use horos_ops::lanes::{DeadArgs, LaneJobs, StatsArgs, StatusArgs, SubmitArgs, is_ingest_stage};
use horos_ops::models::ModelsArgs;
use horos_ops::{ErrorKind, OpsError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use squeueha::AsyncQueue;

use crate::config::Config;

struct Ctx {
    config: Config,
    lanes: LaneJobs,
    /// Opened at the first call that needs the pipeline, then reused (its visual index stays
    /// in memory between questions).
    documents: tokio::sync::OnceCell<Documents>,
}

impl Ctx {
    async fn documents(&self) -> Result<&Documents, ToolError> {
        self.documents
            .get_or_try_init(|| crate::ingest::documents(&self.config))
            .await
            .map_err(ToolError::failed)
    }
}

/// The tool's arguments as the operation's type (the server checked them against the schema
/// first: a remaining mistake, such as an unknown mode, is named by the operation's type).
fn args<T: DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    Ok(serde_json::from_value(args)?)
}

/// An operation's answer as the tool's, or its error: the caller's arguments, or a failure.
fn answer<T: Serialize>(r: Result<T, OpsError>) -> Result<Value, ToolError> {
    match r {
        Ok(v) => serde_json::to_value(v).map_err(ToolError::internal),
        Err(e) if e.kind() == ErrorKind::InvalidArgument => Err(ToolError::invalid_arguments(e)),
        Err(e) => Err(ToolError::failed(e)),
    }
}

/// An object schema of `properties`, `required` ones, no others.
fn schema(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required,
           "additionalProperties": false})
}

struct Submit(Arc<Ctx>);
struct Status(Arc<Ctx>);
struct Stats(Arc<Ctx>);
struct Dead(Arc<Ctx>);
struct Ingest(Arc<Ctx>);
struct Models(Arc<Ctx>);
struct Search(Arc<Ctx>);
struct DocumentReport(Arc<Ctx>);

#[async_trait]
impl Tool for Submit {
    fn name(&self) -> &str {
        "submit"
    }
    fn description(&self) -> &str {
        "Queue a chat job on a lane (think, vision, ...): a prompt, or a whole OpenAI chat \
         request. Returns the job id; poll it with `status`."
    }
    fn input_schema(&self) -> Value {
        schema(
            json!({
                "queue": {"type": "string", "description": "The lane's queue"},
                "prompt": {"type": "string", "description": "A user message"},
                "request": {"type": "object", "description": "A whole chat completion request"},
                "model": {"type": "string"},
                "max_tokens": {"type": "integer", "minimum": 1},
                "priority": {"type": "integer", "description": "Higher runs first"}
            }),
            &["queue"],
        )
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        answer(self.0.lanes.submit(args::<SubmitArgs>(a)?).await)
    }
}

#[async_trait]
impl Tool for Status {
    fn name(&self) -> &str {
        "status"
    }
    fn description(&self) -> &str {
        "The state of a job (ready, in_flight, delayed, done, dead) and its answer once done."
    }
    fn input_schema(&self) -> Value {
        schema(json!({"id": {"type": "integer"}}), &["id"])
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        answer(self.0.lanes.status(args::<StatusArgs>(a)?).await)
    }
}

#[async_trait]
impl Tool for Stats {
    fn name(&self) -> &str {
        "stats"
    }
    fn description(&self) -> &str {
        "Per queue: jobs ready, in flight, delayed, done (retained) and dead."
    }
    fn input_schema(&self) -> Value {
        schema(json!({}), &[])
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        answer(self.0.lanes.stats(args::<StatsArgs>(a)?).await)
    }
}

#[async_trait]
impl Tool for Dead {
    fn name(&self) -> &str {
        "dead"
    }
    fn description(&self) -> &str {
        "Dead letters of a queue (poison pills, bad requests) with their reasons; `requeue` one \
         back (an ingest stage's only while its document is being ingested), or `purge` a \
         lane's. The ingest pipeline's stages (pdf_to_images, image_to_ocr, ocr_to_database, \
         embed_text, embed_visual) are read in the pipeline's database."
    }
    fn input_schema(&self) -> Value {
        schema(
            json!({
                "queue": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                "requeue": {"type": "integer", "description": "Requeue this dead job"},
                "purge": {"type": "boolean", "description": "Delete the queue's dead letters"}
            }),
            &["queue"],
        )
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        let a: DeadArgs = args(a)?;
        let documents = if self.0.config.ingest.is_some() && is_ingest_stage(&a.queue) {
            Some(self.0.documents().await?)
        } else {
            None
        };
        answer(
            self.0
                .lanes
                .dead(documents.map(Documents::pipeline), a)
                .await,
        )
    }
}

#[async_trait]
impl Tool for Ingest {
    fn name(&self) -> &str {
        "ingest"
    }
    fn description(&self) -> &str {
        "Queue a PDF, or every PDF under a directory, for ingestion (pages rendered, read, \
         embedded, made searchable). The path must be inside the configured [ingest] inbox. \
         Known documents are not processed twice."
    }
    fn input_schema(&self) -> Value {
        schema(
            json!({"path": {"type": "string",
                            "description": "A PDF or a directory inside the inbox"}}),
            &["path"],
        )
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        let a: IngestArgs = args(a)?;
        answer(self.0.documents().await?.ingest(a).await)
    }
}

#[async_trait]
impl Tool for DocumentReport {
    fn name(&self) -> &str {
        "document"
    }
    fn description(&self) -> &str {
        "One ingested document's report: status (and why it failed), pages, tiles, chunks, \
         tables, time and model time per stage, estimated cost."
    }
    fn input_schema(&self) -> Value {
        schema(
            json!({"id": {"type": "integer", "description": "The document's id (from ingest)"}}),
            &["id"],
        )
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        let a: DocumentArgs = args(a)?;
        answer(self.0.documents().await?.report(a).await)
    }
}

#[async_trait]
impl Tool for Search {
    fn name(&self) -> &str {
        "search"
    }
    fn description(&self) -> &str {
        "Search the ingested documents' pages; the best pages (document, page, score, \
         snippet). Modes: text (the default: the words they contain; any text is accepted, a \
         page must contain every word, else any, a \"quoted phrase\" stays a phrase, a trailing \
         * is a prefix), vector (by meaning: the text chunks' embeddings), visual (the page \
         images by MaxSim: needs a late-interaction model, [ingest] visual_url), hybrid (the \
         three fused by rank)."
    }
    fn input_schema(&self) -> Value {
        schema(
            json!({
                "query": {"type": "string", "description": "What to look for"},
                "k": {"type": "integer", "minimum": 1, "maximum": 100,
                      "description": "Pages (default 10)"},
                "mode": {"type": "string", "enum": ["text", "vector", "visual", "hybrid"],
                         "description": "Default: text"},
                "document": {"type": "integer", "description": "Only this document"}
            }),
            &["query"],
        )
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        let a: SearchArgs = args(a)?;
        let hits = self.0.documents().await?.search(a).await;
        answer(hits.map(|hits| json!({ "hits": hits })))
    }
}

#[async_trait]
impl Tool for Models {
    fn name(&self) -> &str {
        "models"
    }
    fn description(&self) -> &str {
        "The running coordinator's models and their state (ready, loading, idle; pinned; \
         remote), or an operation on one: `load` (wait until it serves), `unload`, `pin`, \
         `unpin`."
    }
    fn input_schema(&self) -> Value {
        schema(
            json!({
                "action": {"type": "string", "enum": ["list", "load", "unload", "pin", "unpin"],
                           "description": "Default: list"},
                "model": {"type": "string", "description": "The model (every action but list)"}
            }),
            &[],
        )
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        let a: ModelsArgs = args(a)?;
        // A load waits until the model serves: as long as a job may.
        let admin = crate::admin::client(&self.0.config, Duration::from_secs(3600))
            .map_err(ToolError::failed)?;
        answer(horos_ops::models::models(&admin, a).await)
    }
}

/// Serves the tools on stdin/stdout until end of input.
pub async fn serve(config: Config, queue: AsyncQueue) -> Result<(), String> {
    let lanes = crate::lanes::lane_jobs(&config, queue);
    let ctx = Arc::new(Ctx {
        config,
        lanes,
        documents: tokio::sync::OnceCell::new(),
    });
    let mut tools = ToolRegistry::new();
    let reg = |r: Result<(), horos_mcp::RegistryError>| r.map_err(|e| e.to_string());
    reg(tools.register(Submit(Arc::clone(&ctx))))?;
    reg(tools.register(Status(Arc::clone(&ctx))))?;
    reg(tools.register(Stats(Arc::clone(&ctx))))?;
    reg(tools.register(Dead(Arc::clone(&ctx))))?;
    reg(tools.register(Ingest(Arc::clone(&ctx))))?;
    reg(tools.register(Search(Arc::clone(&ctx))))?;
    reg(tools.register(DocumentReport(Arc::clone(&ctx))))?;
    reg(tools.register(Models(Arc::clone(&ctx))))?;
    let server = Server::new(
        ServerInfo::new("horos-ref", env!("CARGO_PKG_VERSION")).with_instructions(
            "HOROS runs inference jobs on local GPU servers from a durable SQLite queue: \
             `submit` a chat job, poll it with `status` (its answer once done), watch `stats` \
             and `dead`, `ingest` PDFs and `search` them, see and manage the coordinator's \
             `models`.",
        ),
        tools,
    );
    horos_mcp::serve_process_stdio(server)
        .await
        .map_err(|e| e.to_string())
}
