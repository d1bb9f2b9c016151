//! # horos-mcp — a small Model Context Protocol server
//!
//! JSON-RPC 2.0 with the MCP lifecycle and tools, for programs that expose tools to a model
//! over stdin/stdout:
//!
//! - [`Server`]: transport independent; [`Server::dispatch`] takes one message (a request, a
//!   notification, or a batch) and gives the line to write back, with the standard error codes
//!   (-32700, -32600, -32601, -32602, -32603) and ids echoed byte for byte. Methods:
//!   `initialize` (version negotiation among [`SUPPORTED_PROTOCOL_VERSIONS`]),
//!   `notifications/initialized`, `ping`, `tools/list`, `tools/call`.
//! - [`Tool`] (an `async_trait`) and [`ToolRegistry`]: a tool has a name, a description, an
//!   input schema (derived from its argument type: [`input_schema_for`]) and an async `call`;
//!   arguments are checked against the schema's `required` and property types first
//!   ([`validate_arguments`]).
//! - [`serve_stdio`]: the stdio transport (one JSON message per line, concurrent requests,
//!   whole-line writes, a line size limit, a clean stop at end of input).
//!
//! Error reporting follows the MCP specification: protocol mistakes (malformed request, unknown
//! method or tool, server faults) are JSON-RPC errors; argument mistakes and tool failures
//! are a `tools/call` result with `isError: true`, which the model sees and can act on.
//!
//! Logging uses `tracing`; a stdio server must send it to stderr, since stdout is the protocol.
//!
//! See the README for a runnable example.

pub mod jsonrpc;
mod schema;
mod server;
#[cfg(test)]
mod server_tests;
mod stdio;
#[cfg(test)]
mod stdio_tests;
mod tool;

pub use async_trait::async_trait;
pub use jsonrpc::RpcError;
pub use schema::{ArgumentError, input_schema_for, json_type, validate_arguments};
/// The schema derive the tools' argument types use ([`input_schema_for`]).
pub use schemars;
pub use server::{
    ClientSession, Dispatch, LATEST_PROTOCOL_VERSION, MAX_BATCH_MESSAGES, PendingResponse,
    SUPPORTED_PROTOCOL_VERSIONS, Server, ServerInfo,
};
pub use stdio::{
    DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_LINE_BYTES, StdioConfig, StdioError, serve_process_stdio,
    serve_stdio, serve_stdio_with,
};
pub use tool::{RegistryError, Tool, ToolError, ToolRegistry};

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
