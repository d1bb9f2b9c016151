//! The operations as MCP tools ([`McpTools`]): each tool is its name, its description, its
//! input schema and a call to one operation with the arguments deserialised into the
//! operation's own type (the same [`SubmitArgs`], [`SearchArgs`], ... the command line and
//! the admin HTTP API use), its typed answer as the tool's JSON result. The input schema is
//! derived from that type ([`input_schema_for`]: its fields, defaults, doc comments, bounds and
//! examples), so the two cannot drift. [`McpTools::server`]
//! gives the [`horos_mcp::Server`] a binary serves on stdin/stdout.
//!
//! | tool | operation | on |
//! |---|---|---|
//! | `submit` | [`LaneJobs::submit`] | the lanes' queue database |
//! | `status` | [`LaneJobs::status`] | the lanes' queue database |
//! | `stats` | [`LaneJobs::stats`] | the lanes' queue database |
//! | `dead` | [`LaneJobs::dead`] | the lanes' queue database (an ingest stage's: the pipeline's) |
//! | `ingest` | [`Documents::ingest`] | the document pipeline |
//! | `search` | [`Documents::search`] | the document pipeline |
//! | `document` | [`Documents::report`] | the document pipeline |
//! | `models` | [`models::models`] | a running coordinator's admin API |
//! | `answer` | [`Remote::ask`] | a running coordinator's `/v1/answers` (its data plane) |
//!
//! A mistake in the arguments (an unknown lane, a path outside the inbox) is a tool error
//! with `isError: true` the model sees ([`ToolError::InvalidArguments`]); a failure of the
//! system, [`ToolError::Failed`].

use std::sync::Arc;

use async_trait::async_trait;
use horos_mcp::{
    RegistryError, Server, ServerInfo, Tool, ToolError, ToolRegistry, input_schema_for,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::admin::AdminClient;
use crate::answers::AskArgs;
use crate::documents::{DocumentArgs, Documents, IngestArgs, SearchArgs, SimilarArgs};
use crate::error::{ErrorKind, OpsError};
use crate::lanes::{DeadArgs, LaneJobs, StatsArgs, StatusArgs, SubmitArgs, is_ingest_stage};
use crate::models::{self, ModelsArgs};
use crate::remote::Remote;

#[cfg(test)]
mod tests;

/// The tools' names, in the order [`McpTools::registry`] registers them.
pub const TOOL_NAMES: [&str; 9] = [
    "submit", "status", "stats", "dead", "ingest", "search", "document", "models", "answer",
];

/// What the server tells a client about the tools as a whole (its `instructions`).
pub const INSTRUCTIONS: &str = "HOROS runs inference jobs on local GPU servers from a durable \
     SQLite queue: `submit` a chat job, poll it with `status` (its answer once done), watch \
     `stats` and `dead`, `ingest` PDFs and `search` them, `answer` a question from them with \
     each claim citing its page, see and manage the coordinator's `models`.";

/// An error a binary gives the tools to answer with (its message is the tool's).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Opens the document pipeline when a tool first needs it (`ingest`, `search`, `document`,
/// and `dead` on an ingest stage); the tools keep what it opened, so its visual index stays
/// in memory between questions.
#[async_trait]
pub trait OpenDocuments: Send + Sync + 'static {
    /// Whether there is a pipeline to open: without one, `dead` reads every queue, an ingest
    /// stage's included, in the lanes' database.
    fn configured(&self) -> bool;

    /// The documents, or why there are none (the message `ingest`, `search` and `document`
    /// fail with).
    async fn open(&self) -> Result<Documents, BoxError>;
}

/// What the tools call.
struct Ctx {
    lanes: LaneJobs,
    opener: Box<dyn OpenDocuments>,
    /// Opened at the first call that needs the pipeline, then reused.
    documents: tokio::sync::OnceCell<Documents>,
    /// The coordinator's admin API, or why there is none (`models` fails with it).
    admin: Result<AdminClient, BoxError>,
    /// The coordinator's data plane, or why there is none (`answer` fails with it).
    data: Result<Remote, BoxError>,
}

impl Ctx {
    async fn documents(&self) -> Result<&Documents, ToolError> {
        self.documents
            .get_or_try_init(|| self.opener.open())
            .await
            .map_err(ToolError::failed)
    }
}

/// The HOROS tools over the operations: lane jobs, documents and a coordinator's models.
#[derive(Clone)]
pub struct McpTools(Arc<Ctx>);

impl McpTools {
    /// The tools over `lanes`, the documents `documents` opens, and the coordinator's admin
    /// API `admin` (or why there is none: the `models` tool fails with it). Give `admin` a
    /// timeout as long as a job may take: a `load` waits until the model serves.
    pub fn new(
        lanes: LaneJobs,
        documents: impl OpenDocuments,
        admin: Result<AdminClient, BoxError>,
    ) -> Self {
        Self(Arc::new(Ctx {
            lanes,
            opener: Box::new(documents),
            documents: tokio::sync::OnceCell::new(),
            admin,
            data: Err("no coordinator to answer questions (its data plane was not given)".into()),
        }))
    }

    /// The coordinator's data plane (a [`Remote`] with the data-plane key), or why there is
    /// none: the `answer` tool's. Call it on the tools just made, before they are cloned (a
    /// clone shares what the first has).
    pub fn with_data_plane(mut self, data: Result<Remote, BoxError>) -> Self {
        if let Some(ctx) = Arc::get_mut(&mut self.0) {
            ctx.data = data;
        }
        self
    }

    /// The tools in a registry, in [`TOOL_NAMES`]' order.
    pub fn registry(&self) -> Result<ToolRegistry, RegistryError> {
        let c = &self.0;
        ToolRegistry::new()
            .with(Submit(Arc::clone(c)))?
            .with(Status(Arc::clone(c)))?
            .with(Stats(Arc::clone(c)))?
            .with(Dead(Arc::clone(c)))?
            .with(Ingest(Arc::clone(c)))?
            .with(Search(Arc::clone(c)))?
            .with(DocumentReport(Arc::clone(c)))?
            .with(Models(Arc::clone(c)))?
            .with(Answer(Arc::clone(c)))
    }

    /// An MCP server named `name` at `version` with the tools and [`INSTRUCTIONS`].
    pub fn server(&self, name: &str, version: &str) -> Result<Server, RegistryError> {
        let info = ServerInfo::new(name, version).with_instructions(INSTRUCTIONS);
        Ok(Server::new(info, self.registry()?))
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

struct Submit(Arc<Ctx>);
struct Status(Arc<Ctx>);
struct Stats(Arc<Ctx>);
struct Dead(Arc<Ctx>);
struct Ingest(Arc<Ctx>);
struct Models(Arc<Ctx>);
struct Answer(Arc<Ctx>);
struct Search(Arc<Ctx>);
struct DocumentReport(Arc<Ctx>);
#[async_trait]
impl Tool for Submit {
    fn name(&self) -> &str {
        "submit"
    }
    fn description(&self) -> &str {
        "Queue a chat job on a lane (think, vision, ...): a prompt, or a whole OpenAI chat \
         request. Returns the job id (`duplicate`: true when a job with the same `dedup_key` \
         was already queued, whose id it is); poll it with `status`."
    }
    fn input_schema(&self) -> Value {
        input_schema_for::<SubmitArgs>()
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
        input_schema_for::<StatusArgs>()
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
        input_schema_for::<StatsArgs>()
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
        input_schema_for::<DeadArgs>()
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        let a: DeadArgs = args(a)?;
        let documents = if self.0.opener.configured() && is_ingest_stage(&a.queue) {
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
         embedded, made searchable) into a collection (who may read it: the data-plane keys \
         that name it; \"default\" when none is given). The path must be inside the configured \
         [ingest] inbox. Known documents are not processed twice (and stay in their collection)."
    }
    fn input_schema(&self) -> Value {
        input_schema_for::<IngestArgs>()
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
        input_schema_for::<DocumentArgs>()
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        let a: DocumentArgs = args(a)?;
        answer(self.0.documents().await?.report(a).await)
    }
}

/// The `search` tool's arguments: a text `query`, or an `image` (base64), or `like` (a stored
/// page); the one the caller gives decides the operation.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = json!({"query": "quarterly revenue"}))]
#[schemars(example = json!({"query": "\"net income\" 2024", "mode": "hybrid", "k": 5, "document": 3}))]
#[schemars(example = json!({"image": "iVBORw0KGgo=", "query": "signature"}))]
#[schemars(example = json!({"like": {"document": 3, "page": 2}}))]
struct SearchToolArgs {
    /// What to look for.
    #[serde(default)]
    query: Option<String>,
    /// Instead of query: an image, base64 (PNG or JPEG); with a query too, the two fused.
    #[serde(default)]
    image: Option<String>,
    /// Instead of query: the pages that look like this page.
    #[serde(default)]
    like: Option<LikeArg>,
    /// Pages (default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    k: Option<usize>,
    /// For a text query: text (the default), vector, visual or hybrid.
    #[serde(default)]
    #[schemars(extend("enum" = ["text", "vector", "visual", "hybrid", null]))]
    mode: Option<String>,
    /// Only this document.
    #[serde(default)]
    document: Option<i64>,
}

/// A stored page.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct LikeArg {
    /// The document.
    document: i64,
    /// The page, from 1.
    #[schemars(range(min = 1))]
    page: u32,
}

#[async_trait]
impl Tool for Search {
    fn name(&self) -> &str {
        "search"
    }
    fn description(&self) -> &str {
        "Search the ingested documents' pages; the best pages (document, page, score, \
         snippet). Give `query` (text), or `image` (a base64 PNG or JPEG: the pages that look \
         like it; with `query` too, the two fused), or `like` ({document, page}: the pages \
         that look like that page). Modes for \
         a text query: text (the default: the words they contain; any text is accepted, a \
         page must contain every word, else any, a \"quoted phrase\" stays a phrase, a trailing \
         * is a prefix), vector (by meaning: the text chunks' embeddings), visual (the page \
         images by MaxSim: needs a late-interaction model, [ingest] visual_url), hybrid (the \
         three fused by rank)."
    }
    fn input_schema(&self) -> Value {
        input_schema_for::<SearchToolArgs>()
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        use base64::Engine as _;
        let a: SearchToolArgs = args(a)?;
        let k = a.k.unwrap_or(crate::documents::DEFAULT_K);
        let docs = self.0.documents().await?;
        let hits = match (a.query, a.image, a.like) {
            (Some(query), None, None) => {
                let mut search = json!({"query": query, "k": k, "document": a.document});
                if let Some(mode) = a.mode {
                    search["mode"] = json!(mode);
                }
                let search: SearchArgs = args(search)?;
                docs.search(search).await
            }
            (query, Some(image), None) if a.mode.is_none() => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(image.trim())
                    .map_err(|e| {
                        ToolError::invalid_arguments(format!("`image` is not base64: {e}"))
                    })?;
                match query.filter(|q| !q.trim().is_empty()) {
                    Some(q) => docs.search_image_and_text(bytes, q, k, a.document).await,
                    None => docs.search_image(bytes, k, a.document).await,
                }
            }
            (None, None, Some(like)) if a.mode.is_none() => {
                docs.similar(SimilarArgs {
                    document: like.document,
                    page: like.page,
                    k,
                    within: a.document,
                })
                .await
            }
            _ => {
                return Err(ToolError::invalid_arguments(
                    "give one of `query`, `image` or `like` (`mode` goes with `query` only)",
                ));
            }
        };
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
         `unpin`; or `unload_all` (every idle model loaded on demand)."
    }
    fn input_schema(&self) -> Value {
        input_schema_for::<ModelsArgs>()
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        let a: ModelsArgs = args(a)?;
        let admin = self.0.admin.as_ref().map_err(ToolError::failed)?;
        answer(models::models(admin, a).await)
    }
}

#[async_trait]
impl Tool for Answer {
    fn name(&self) -> &str {
        "answer"
    }
    fn description(&self) -> &str {
        "Answer a question from the ingested documents: the pages that hold its words or its \
         meaning are given to a chat model (through the running coordinator), and each claim \
         of its answer cites its page as [n] (citations: document, page). When no page \
         supports the question the answer says so and no model is called."
    }
    fn input_schema(&self) -> Value {
        input_schema_for::<AskArgs>()
    }
    async fn call(&self, a: Value) -> Result<Value, ToolError> {
        let a: AskArgs = args(a)?;
        let data = self.0.data.as_ref().map_err(ToolError::failed)?;
        answer(data.ask(&a).await)
    }
}
