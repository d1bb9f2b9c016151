//! `horos-ref mcp`: the HOROS tools over JSON-RPC 2.0 / MCP on stdin/stdout: `submit`,
//! `status`, `stats`, `dead`, `ingest` on the configuration's database, and `models` on the
//! running coordinator's admin API. The jobs are run by
//! `horos-ref run` (a separate process on the same SQLite file).

use std::path::PathBuf;
use std::sync::Arc;

use horos_feeder::TableSink;
use horos_mcp::{Server, ServerInfo, Tool, ToolError, ToolRegistry, async_trait};
use horos_vllm_client::{ChatMessage, ChatRequest};
use serde::Deserialize;
use serde_json::{Value, json};
use squeueha::{AsyncQueue, JobState, NewJob};

use crate::config::Config;

struct Ctx {
    config: Config,
    queue: AsyncQueue,
    sink: TableSink,
    /// Opened at the first `ingest` call, then reused.
    pipeline: tokio::sync::OnceCell<crate::ingest::RefPipeline>,
}

fn failed(e: impl std::fmt::Display) -> ToolError {
    ToolError::failed(e)
}

struct Submit(Arc<Ctx>);
struct Status(Arc<Ctx>);
struct Stats(Arc<Ctx>);
struct Dead(Arc<Ctx>);
struct Ingest(Arc<Ctx>);
struct Models(Arc<Ctx>);
struct Search(Arc<Ctx>);
struct DocumentReport(Arc<Ctx>);

#[derive(Deserialize)]
struct SubmitArgs {
    queue: String,
    prompt: Option<String>,
    request: Option<Value>,
    model: Option<String>,
    max_tokens: Option<u32>,
    #[serde(default)]
    priority: i32,
}

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
        json!({"type": "object", "properties": {
            "queue": {"type": "string", "description": "The lane's queue"},
            "prompt": {"type": "string", "description": "A user message"},
            "request": {"type": "object", "description": "A whole chat completion request"},
            "model": {"type": "string"},
            "max_tokens": {"type": "integer", "minimum": 1},
            "priority": {"type": "integer", "description": "Higher runs first"}
        }, "required": ["queue"]})
    }
    async fn call(&self, args: Value) -> Result<Value, ToolError> {
        let a: SubmitArgs = serde_json::from_value(args)?;
        let lane = self
            .0
            .config
            .lanes
            .iter()
            .find(|l| l.queue == a.queue)
            .ok_or_else(|| ToolError::invalid_arguments(format!("no lane `{}`", a.queue)))?;
        let mut request: ChatRequest = match (a.request, a.prompt) {
            (Some(r), _) => serde_json::from_value(r)
                .map_err(|e| ToolError::invalid_arguments(format!("not a chat request: {e}")))?,
            (None, Some(prompt)) => {
                let model = a
                    .model
                    .clone()
                    .or_else(|| lane.model.clone())
                    .ok_or_else(|| {
                        ToolError::invalid_arguments("give `model` (the lane has no default)")
                    })?;
                ChatRequest::new(model, vec![ChatMessage::user(prompt)])
            }
            (None, None) => return Err(ToolError::invalid_arguments("give `prompt` or `request`")),
        };
        if let Some(m) = a.model {
            request.model = m;
        }
        if a.max_tokens.is_some() {
            request.max_tokens = a.max_tokens;
        }
        let job = NewJob::json(&request).map_err(failed)?.priority(a.priority);
        let id = self
            .0
            .queue
            .enqueue(&a.queue, job)
            .await
            .map_err(failed)?
            .id();
        Ok(json!({"id": id, "queue": a.queue}))
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
        json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]})
    }
    async fn call(&self, args: Value) -> Result<Value, ToolError> {
        let id = args["id"]
            .as_i64()
            .ok_or_else(|| ToolError::invalid_arguments("`id` must be an integer"))?;
        let sink = self.0.sink.clone();
        let answer = tokio::task::spawn_blocking(move || sink.result_text(id))
            .await
            .map_err(ToolError::internal)?
            .map_err(failed)?;
        if let Some(text) = answer {
            return Ok(json!({"id": id, "state": JobState::Done, "answer": text}));
        }
        match self.0.queue.get(id).await.map_err(failed)? {
            Some(job) => {
                // squeueha's states serialise as `ready`, `in_flight`, `delayed`, `done`, `dead`.
                Ok(json!({"id": id, "state": job.state, "queue": job.queue,
                          "attempts": job.attempts, "last_error": job.last_error}))
            }
            None => Err(ToolError::failed(format!("no job {id}"))),
        }
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
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _args: Value) -> Result<Value, ToolError> {
        let stats = self.0.queue.all_stats().await.map_err(failed)?;
        Ok(json!({"queues": stats}))
    }
}

#[async_trait]
impl Tool for Dead {
    fn name(&self) -> &str {
        "dead"
    }
    fn description(&self) -> &str {
        "Dead letters of a queue (poison pills, bad requests) with their reasons."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "queue": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000}
        }, "required": ["queue"]})
    }
    async fn call(&self, args: Value) -> Result<Value, ToolError> {
        let queue = args["queue"].as_str().unwrap_or_default().to_owned();
        let limit = args["limit"].as_u64().unwrap_or(20).min(1000) as usize;
        let dead = self
            .0
            .queue
            .dead_letters(&queue, limit)
            .await
            .map_err(failed)?;
        let list: Vec<Value> = dead
            .iter()
            .map(|d| json!({"id": d.id, "attempts": d.attempts, "reason": d.last_error}))
            .collect();
        Ok(json!({"queue": queue, "dead": list}))
    }
}

#[async_trait]
impl Tool for Ingest {
    fn name(&self) -> &str {
        "ingest"
    }
    fn description(&self) -> &str {
        "Queue a PDF for ingestion (pages rendered, read, embedded, made searchable). The path \
         must be inside the configured [ingest] inbox. Known documents are not processed twice."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string", "description": "A PDF inside the inbox directory"}
        }, "required": ["path"]})
    }
    async fn call(&self, args: Value) -> Result<Value, ToolError> {
        let Some(ingest) = &self.0.config.ingest else {
            return Err(ToolError::failed(
                "this configuration has no [ingest] section",
            ));
        };
        let path = PathBuf::from(args["path"].as_str().unwrap_or_default());
        let file = ingest_pipeline::inbox::Inbox::new(&ingest.inbox)
            .file(&path)
            .map_err(ToolError::invalid_arguments)?;
        let pipeline = self
            .0
            .pipeline
            .get_or_try_init(|| crate::ingest::open_configured(&self.0.config))
            .await
            .map_err(failed)?;
        let submission = crate::ingest::submit(pipeline, &file)
            .await
            .map_err(failed)?;
        Ok(submission)
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
        json!({"type": "object", "properties": {
            "id": {"type": "integer", "description": "The document's id (from ingest)"}
        }, "required": ["id"]})
    }
    async fn call(&self, args: Value) -> Result<Value, ToolError> {
        let id = args["id"]
            .as_i64()
            .ok_or_else(|| ToolError::invalid_arguments("`id` must be an integer"))?;
        crate::ingest::report(&self.0.config, id)
            .await
            .map_err(failed)
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
        json!({"type": "object", "properties": {
            "query": {"type": "string", "description": "What to look for"},
            "k": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Pages (default 10)"},
            "mode": {"type": "string", "enum": ["text", "vector", "visual", "hybrid"],
                     "description": "Default: text"},
            "document": {"type": "integer", "description": "Only this document"}
        }, "required": ["query"]})
    }
    async fn call(&self, args: Value) -> Result<Value, ToolError> {
        if self.0.config.ingest.is_none() {
            return Err(ToolError::failed(
                "this configuration has no [ingest] section",
            ));
        }
        let query = args["query"].as_str().unwrap_or_default().to_owned();
        let k = args["k"].as_u64().unwrap_or(10).clamp(1, 100) as usize;
        let mode = match args["mode"].as_str() {
            None => ingest_pipeline::hybrid::Mode::Text,
            Some(m) => m.parse().map_err(ToolError::invalid_arguments)?,
        };
        // The server's one pipeline: its visual index stays in memory between questions.
        let pipeline = self
            .0
            .pipeline
            .get_or_try_init(|| crate::ingest::open_configured(&self.0.config))
            .await
            .map_err(failed)?;
        let hits = pipeline
            .search(mode, query, k, args["document"].as_i64())
            .await
            .map_err(failed)?;
        Ok(json!({"hits": ingest_pipeline::gateway::hits_json(&hits)}))
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
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["list", "load", "unload", "pin", "unpin"],
                       "description": "Default: list"},
            "model": {"type": "string", "description": "The model (every action but list)"}
        }})
    }
    async fn call(&self, args: Value) -> Result<Value, ToolError> {
        let action = args["action"].as_str().unwrap_or("list");
        let admin = crate::admin::Admin::new(&self.0.config, std::time::Duration::from_secs(3600))
            .map_err(failed)?;
        if action == "list" {
            return admin.get("/api/v1/models").await.map_err(failed);
        }
        if !matches!(action, "load" | "unload" | "pin" | "unpin") {
            return Err(ToolError::invalid_arguments(format!(
                "unknown action `{action}` (list, load, unload, pin, unpin)"
            )));
        }
        let model = args["model"]
            .as_str()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| ToolError::invalid_arguments(format!("`{action}` needs `model`")))?;
        admin
            .post(&crate::admin::model_op_path(model, action))
            .await
            .map_err(failed)
    }
}

/// Serves the tools on stdin/stdout until end of input.
pub async fn serve(config: Config, queue: AsyncQueue) -> Result<(), String> {
    let sink = TableSink::new(queue.blocking().clone()).map_err(|e| e.to_string())?;
    let ctx = Arc::new(Ctx {
        config,
        queue,
        sink,
        pipeline: tokio::sync::OnceCell::new(),
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
             `submit` a chat job, poll it with `status`, watch `stats` and `dead`, `ingest` PDFs \
             and `search` them, see and manage the coordinator's `models`.",
        ),
        tools,
    );
    horos_mcp::serve_process_stdio(server)
        .await
        .map_err(|e| e.to_string())
}
