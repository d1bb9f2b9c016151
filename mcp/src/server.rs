//! The transport-independent MCP server: one incoming message in, the line to write out.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value, json};

use crate::jsonrpc::{self, Id, Incoming, Message, Response, RpcError};
use crate::schema::validate_arguments;
use crate::tool::{Tool, ToolError, ToolRegistry};

/// The protocol revisions this server speaks, newest first.
pub const SUPPORTED_PROTOCOL_VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2024-11-05"];

/// The revision answered to a client asking for one this server does not speak.
pub const LATEST_PROTOCOL_VERSION: &str = SUPPORTED_PROTOCOL_VERSIONS[0];

/// What the server says about itself in the `initialize` result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// The implementation's name (`serverInfo.name`).
    pub name: String,
    /// Its version (`serverInfo.version`).
    pub version: String,
    /// An optional display name (`serverInfo.title`).
    pub title: Option<String>,
    /// Optional hints for the model on how to use the tools (`instructions`).
    pub instructions: Option<String>,
}

impl ServerInfo {
    /// A name and a version, without title or instructions.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            title: None,
            instructions: None,
        }
    }

    /// Sets the display name.
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Sets the instructions for the model.
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }
}

/// What the client said in its `initialize` request.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientSession {
    /// The protocol revision agreed on.
    pub protocol_version: &'static str,
    /// The revision the client asked for.
    pub requested_version: String,
    /// `clientInfo`, as sent (`Value::Null` when absent).
    pub client_info: Value,
    /// `capabilities`, as sent (`Value::Null` when absent).
    pub capabilities: Value,
}

/// A response still being computed (tool calls running); resolves to the line to write.
pub type PendingResponse = Pin<Box<dyn Future<Output = Option<String>> + Send + 'static>>;

/// What [`Server::dispatch`] made of one message.
pub enum Dispatch {
    /// Answered at once: the line to write (a JSON object, or an array for a batch), or nothing
    /// (notifications, client responses, a batch of notifications).
    Ready(Option<String>),
    /// Tool calls are running; await the future for the line.
    Pending(PendingResponse),
}

impl Dispatch {
    /// The line to write, once every call of the message has finished.
    pub async fn finish(self) -> Option<String> {
        match self {
            Self::Ready(line) => line,
            Self::Pending(future) => future.await,
        }
    }
}

impl std::fmt::Debug for Dispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ready(line) => f.debug_tuple("Ready").field(line).finish(),
            Self::Pending(_) => f.write_str("Pending(..)"),
        }
    }
}

/// A tool call whose arguments passed the checks, not started yet.
struct Call {
    id: Id,
    name: String,
    tool: Arc<dyn Tool>,
    args: Value,
}

/// What one request turned into.
enum Step {
    Done(Option<Response>),
    Call(Call),
}

/// An MCP server for one client session (one stdio connection): the lifecycle state, the
/// server's description and its tools.
///
/// It knows nothing of transports: [`Server::dispatch`] takes one message (a line of the stdio
/// transport, a body of an HTTP one) and gives the line to send back.
#[derive(Debug)]
pub struct Server {
    info: ServerInfo,
    tools: Arc<ToolRegistry>,
    session: OnceLock<ClientSession>,
    client_ready: AtomicBool,
}

impl Server {
    /// A server in its uninitialised state. The registry may be shared by several sessions.
    pub fn new(info: ServerInfo, tools: impl Into<Arc<ToolRegistry>>) -> Self {
        Self {
            info,
            tools: tools.into(),
            session: OnceLock::new(),
            client_ready: AtomicBool::new(false),
        }
    }

    /// The server's description.
    pub fn info(&self) -> &ServerInfo {
        &self.info
    }

    /// The tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// The session agreed by `initialize`, once it has been answered.
    pub fn session(&self) -> Option<&ClientSession> {
        self.session.get()
    }

    /// Whether the client has sent `notifications/initialized`.
    pub fn client_ready(&self) -> bool {
        self.client_ready.load(Ordering::Acquire)
    }

    /// Handles one message and waits for its answer: a convenience over
    /// [`dispatch`](Self::dispatch) for callers that handle one message at a time.
    pub async fn handle(&self, message: impl AsRef<[u8]>) -> Option<String> {
        self.dispatch(message.as_ref()).finish().await
    }

    /// Handles one message (a request, a notification, a response or a batch of them).
    ///
    /// Everything but tool calls is done before this returns, in the order messages are
    /// dispatched, so `initialize` takes effect before the next message is looked at even when
    /// the caller runs the returned futures concurrently. Tool calls start when the
    /// [`Dispatch::Pending`] future is first polled; under a tokio runtime each runs on its own
    /// task, so that a panicking tool is answered with -32603 instead of taking the session down.
    pub fn dispatch(&self, message: &[u8]) -> Dispatch {
        let message = match jsonrpc::parse(message) {
            Ok(message) => message,
            Err(error) => return ready(Some(Response::error(jsonrpc::null_id(), error))),
        };
        match message {
            Message::Single(raw) => match self.step(jsonrpc::classify(raw), false) {
                Step::Done(response) => ready(response),
                Step::Call(call) => Dispatch::Pending(Box::pin(async move {
                    let response = call.run().await;
                    Some(jsonrpc::to_line(&response))
                })),
            },
            Message::Batch(items) if items.is_empty() => ready(Some(Response::error(
                jsonrpc::null_id(),
                RpcError::invalid_request("empty batch"),
            ))),
            // Every message of a batch is answered in one line held in memory until the last
            // answer: a bound on the messages bounds that line (and the work one line can start).
            Message::Batch(items) if items.len() > MAX_BATCH_MESSAGES => {
                ready(Some(Response::error(
                    jsonrpc::null_id(),
                    RpcError::invalid_request(format!(
                        "a batch holds at most {MAX_BATCH_MESSAGES} messages; this one holds {}",
                        items.len()
                    )),
                )))
            }
            Message::Batch(items) => {
                let steps: Vec<Step> = items
                    .into_iter()
                    .map(|raw| self.step(jsonrpc::classify(raw), true))
                    .collect();
                if steps.iter().all(|step| matches!(step, Step::Done(_))) {
                    let responses: Vec<Response> = steps
                        .into_iter()
                        .filter_map(|step| match step {
                            Step::Done(response) => response,
                            Step::Call(_) => None,
                        })
                        .collect();
                    return Dispatch::Ready(
                        (!responses.is_empty()).then(|| jsonrpc::to_line(&responses)),
                    );
                }
                Dispatch::Pending(Box::pin(run_batch(steps)))
            }
        }
    }

    /// One request, notification or response of a message.
    fn step(&self, incoming: Incoming, in_batch: bool) -> Step {
        match incoming {
            Incoming::Invalid(response) => Step::Done(Some(response)),
            Incoming::Response => {
                tracing::debug!(
                    "ignoring a response from the client: this server sends no requests"
                );
                Step::Done(None)
            }
            Incoming::Notification { method, params } => {
                self.notification(&method, params.as_ref());
                Step::Done(None)
            }
            Incoming::Request { id, method, params } => {
                match self.request(&method, params, in_batch) {
                    Ok(Routed::Result(result)) => Step::Done(Some(Response {
                        id,
                        outcome: Ok(result),
                    })),
                    Ok(Routed::Call { name, tool, args }) => Step::Call(Call {
                        id,
                        name,
                        tool,
                        args,
                    }),
                    Err(error) => Step::Done(Some(Response::error(id, error))),
                }
            }
        }
    }

    fn notification(&self, method: &str, _params: Option<&Value>) {
        match method {
            "notifications/initialized" => {
                if self.session.get().is_none() {
                    tracing::warn!("notifications/initialized before initialize; ignored");
                } else {
                    self.client_ready.store(true, Ordering::Release);
                }
            }
            // Cancellation is advisory in MCP; calls run to completion and the client drops
            // the late answer.
            "notifications/cancelled" => {
                tracing::debug!("cancellation noted; the call runs to completion")
            }
            other => tracing::debug!(method = other, "ignoring an unknown notification"),
        }
    }

    fn request(
        &self,
        method: &str,
        params: Option<Value>,
        in_batch: bool,
    ) -> Result<Routed, RpcError> {
        match method {
            "initialize" if in_batch => Err(RpcError::invalid_request(
                "initialize must not be part of a batch",
            )),
            "initialize" => self.initialize(params).map(Routed::Result),
            "ping" => Ok(Routed::Result(json!({}))),
            "tools/list" | "tools/call" if self.session.get().is_none() => Err(RpcError::new(
                jsonrpc::SERVER_NOT_INITIALIZED,
                format!("Server not initialized: send initialize before {method}"),
            )),
            "tools/list" => Ok(Routed::Result(json!({ "tools": self.tools.list() }))),
            "tools/call" => self.tools_call(params),
            other => Err(RpcError::method_not_found(other)),
        }
    }

    fn initialize(&self, params: Option<Value>) -> Result<Value, RpcError> {
        let mut params = match params {
            Some(Value::Object(params)) => params,
            _ => {
                return Err(RpcError::invalid_params(
                    "initialize needs an object with protocolVersion",
                ));
            }
        };
        let Some(Value::String(requested)) = params.remove("protocolVersion") else {
            return Err(RpcError::invalid_params("protocolVersion must be a string"));
        };
        let protocol_version = SUPPORTED_PROTOCOL_VERSIONS
            .into_iter()
            .find(|v| *v == requested)
            .unwrap_or(LATEST_PROTOCOL_VERSION);
        let session = ClientSession {
            protocol_version,
            requested_version: requested,
            client_info: params.remove("clientInfo").unwrap_or(Value::Null),
            capabilities: params.remove("capabilities").unwrap_or(Value::Null),
        };
        if self.session.set(session).is_err() {
            return Err(RpcError::invalid_request(
                "the session is already initialized",
            ));
        }
        let client = self
            .session
            .get()
            .map(|s| s.client_info.to_string())
            .unwrap_or_default();
        tracing::info!(protocol_version, client, "MCP session initialized");
        let mut server_info = Map::new();
        server_info.insert("name".into(), json!(self.info.name));
        server_info.insert("version".into(), json!(self.info.version));
        if let Some(title) = &self.info.title {
            server_info.insert("title".into(), json!(title));
        }
        let mut result = Map::new();
        result.insert("protocolVersion".into(), json!(protocol_version));
        result.insert(
            "capabilities".into(),
            json!({ "tools": { "listChanged": false } }),
        );
        result.insert("serverInfo".into(), Value::Object(server_info));
        if let Some(instructions) = &self.info.instructions {
            result.insert("instructions".into(), json!(instructions));
        }
        Ok(Value::Object(result))
    }

    fn tools_call(&self, params: Option<Value>) -> Result<Routed, RpcError> {
        let Some(Value::Object(mut params)) = params else {
            return Err(RpcError::invalid_params(
                "tools/call needs an object with name and arguments",
            ));
        };
        let Some(Value::String(name)) = params.remove("name") else {
            return Err(RpcError::invalid_params("name must be a string"));
        };
        let args = match params.remove("arguments") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(args @ Value::Object(_)) => args,
            Some(_) => return Err(RpcError::invalid_params("arguments must be an object")),
        };
        let (Some(tool), Some(schema)) = (self.tools.get(&name), self.tools.input_schema(&name))
        else {
            return Err(RpcError::invalid_params(format!("unknown tool: {name}")));
        };
        // Argument mistakes are tool execution errors, not protocol errors (MCP 2025-11-25,
        // SEP-1303): the model sees the message and can correct its call.
        if let Err(error) = validate_arguments(schema, &args) {
            tracing::debug!(tool = %name, %error, "arguments rejected");
            return Ok(Routed::Result(error_result(&error.to_string())));
        }
        Ok(Routed::Call {
            name,
            tool: Arc::clone(tool),
            args,
        })
    }
}

/// Where a request went.
enum Routed {
    Result(Value),
    Call {
        name: String,
        tool: Arc<dyn Tool>,
        args: Value,
    },
}

fn ready(response: Option<Response>) -> Dispatch {
    Dispatch::Ready(response.map(|r| jsonrpc::to_line(&r)))
}

/// Most messages in one batch; a larger batch is refused whole with one JSON-RPC error.
pub const MAX_BATCH_MESSAGES: usize = 1000;

/// Most tool calls of one batch running at once: a batch is one message to the reader's
/// in-flight limit, so without this one line of many thousand calls would start them all.
pub(crate) const BATCH_CONCURRENCY: usize = 8;

/// Runs the calls of a batch, at most [`BATCH_CONCURRENCY`] at a time, started in message
/// order, then gives the answers in message order.
async fn run_batch(steps: Vec<Step>) -> Option<String> {
    type Running = Pin<Box<dyn Future<Output = Response> + Send>>;
    // One entry per message; a call's is filled when it answers.
    let mut answers: Vec<Option<Response>> = Vec::with_capacity(steps.len());
    let mut running: VecDeque<(usize, Running)> = VecDeque::new();
    for step in steps {
        match step {
            Step::Done(response) => answers.push(response),
            Step::Call(call) => {
                if running.len() >= BATCH_CONCURRENCY
                    && let Some((at, oldest)) = running.pop_front()
                {
                    answers[at] = Some(oldest.await);
                }
                running.push_back((answers.len(), call.start()));
                answers.push(None);
            }
        }
    }
    for (at, call) in running {
        answers[at] = Some(call.await);
    }
    let responses: Vec<Response> = answers.into_iter().flatten().collect();
    (!responses.is_empty()).then(|| jsonrpc::to_line(&responses))
}

impl Call {
    async fn run(self) -> Response {
        self.start().await
    }

    /// Spawns the call on the current tokio runtime (so that it runs while other calls are
    /// awaited, and a panic is caught), or runs it inline when there is none.
    fn start(self) -> Pin<Box<dyn Future<Output = Response> + Send>> {
        let Call {
            id,
            name,
            tool,
            args,
        } = self;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let task = runtime.spawn(async move { tool.call(args).await });
                Box::pin(async move {
                    let outcome = match task.await {
                        Ok(result) => call_result(&name, result),
                        Err(join_error) => {
                            tracing::error!(tool = %name, error = %join_error, "tool task failed");
                            Err(RpcError::internal(format!(
                                "tool {name} failed: {join_error}"
                            )))
                        }
                    };
                    Response { id, outcome }
                })
            }
            Err(_) => Box::pin(async move {
                let result = tool.call(args).await;
                Response {
                    id,
                    outcome: call_result(&name, result),
                }
            }),
        }
    }
}

/// A `CallToolResult` with `isError: true` and the message as text.
fn error_result(message: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": message }], "isError": true })
}

/// Turns what a tool returned into the `tools/call` result (or, for a server fault, an error).
fn call_result(name: &str, result: Result<Value, ToolError>) -> Result<Value, RpcError> {
    match result {
        Ok(value) => {
            // The text block carries the same data for clients that ignore structuredContent
            // (protocol revisions before 2025-06-18); a bare string is shown as itself.
            let text = match &value {
                Value::String(text) => text.clone(),
                other => jsonrpc::to_line(other),
            };
            let structured = match value {
                Value::Object(object) => Value::Object(object),
                other => json!({ "result": other }),
            };
            Ok(json!({
                "content": [{ "type": "text", "text": text }],
                "structuredContent": structured,
                "isError": false,
            }))
        }
        Err(ToolError::Internal(message)) => {
            tracing::error!(tool = %name, %message, "tool internal error");
            Err(RpcError::internal(format!("tool {name}: {message}")))
        }
        Err(error) => {
            tracing::debug!(tool = %name, %error, "tool call failed");
            Ok(error_result(&error.to_string()))
        }
    }
}
