//! An MCP server on stdin/stdout with two tools, `add` and `echo`.
//!
//! ```text
//! cargo run -p horos-mcp --example echo_server
//! {"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"me","version":"0"}}}
//! {"jsonrpc":"2.0","method":"notifications/initialized"}
//! {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}
//! ```
//!
//! The stdio integration test (`tests/stdio_process.rs`) includes this file and runs
//! [`run`] in a child process, so what is tested is exactly this example.

use horos_mcp::{Server, ServerInfo, StdioError, Tool, ToolError, ToolRegistry, async_trait};
use serde_json::{Value, json};

/// Adds two integers; overflow is a tool error (`isError: true`).
pub struct Add;

#[async_trait]
impl Tool for Add {
    fn name(&self) -> &str {
        "add"
    }

    fn description(&self) -> &str {
        "Adds two integers and returns {\"sum\": a + b}."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "description": "first term"},
                "b": {"type": "integer", "description": "second term"}
            },
            "required": ["a", "b"],
            "additionalProperties": false
        })
    }

    async fn call(&self, args: Value) -> Result<Value, ToolError> {
        #[derive(serde::Deserialize)]
        struct Args {
            a: i64,
            b: i64,
        }
        let Args { a, b } = serde_json::from_value(args)?;
        let sum = a
            .checked_add(b)
            .ok_or_else(|| ToolError::failed(format!("{a} + {b} overflows a 64-bit integer")))?;
        Ok(json!({ "sum": sum }))
    }
}

/// Returns its `text`; an empty text is a tool error, to show what one looks like.
pub struct Echo;

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }

    fn description(&self) -> &str {
        "Returns `text` unchanged; fails on an empty text."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"]
        })
    }

    async fn call(&self, args: Value) -> Result<Value, ToolError> {
        match args.get("text").and_then(Value::as_str) {
            Some("") | None => Err(ToolError::failed("nothing to echo: `text` is empty")),
            Some(text) => Ok(json!(text)),
        }
    }
}

/// The example's server: its description and its two tools.
pub fn server() -> Result<Server, horos_mcp::RegistryError> {
    let tools = ToolRegistry::new().with(Add)?.with(Echo)?;
    let info = ServerInfo::new("echo-server", env!("CARGO_PKG_VERSION"))
        .with_instructions("Call `add` to add integers and `echo` to repeat a text.");
    Ok(Server::new(info, tools))
}

/// Serves the process's stdin and stdout until stdin closes.
pub async fn run() -> Result<(), StdioError> {
    let server = match server() {
        Ok(server) => server,
        Err(error) => {
            // stdout is the protocol channel: diagnostics go to stderr.
            eprintln!("echo_server: {error}");
            std::process::exit(2);
        }
    };
    eprintln!("echo_server: serving MCP on stdin/stdout");
    horos_mcp::serve_process_stdio(server).await
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(error) = run().await {
        eprintln!("echo_server: {error}");
        std::process::exit(1);
    }
}
