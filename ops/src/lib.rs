//! The operations of a HOROS system, the one layer a command line, an MCP server and an admin
//! HTTP API all call: one file per operation, each with a typed argument struct (serde
//! `Deserialize`, unknown fields refused, so a front's JSON arguments deserialise into it) and
//! a typed, `Serialize` answer. Every operation fails with [`OpsError`], whose variants say what
//! the caller can do ([`OpsError::kind`] sorts them for a front).
//!
//! - [`lanes::LaneJobs`]: chat jobs on a lane's queue (an [`squeueha::AsyncQueue`]):
//!   `submit`, `status` (state and answer), `stats`, `dead` (list, requeue, purge; an ingest
//!   stage's in the pipeline's database).
//! - [`documents::Documents`]: PDFs from an inbox through an
//!   [`ingest_pipeline::configured::ConfiguredPipeline`]: `ingest`, `retry`, `follow` (progress
//!   until done or failed), `list`, `pages`, `report`, `export`, `delete`, `search`.
//! - [`models::models`]: a running coordinator's models through its admin API
//!   ([`admin::AdminClient`]); [`logs`]: its servers' logs (list, tail, follow);
//!   [`reload::reload`]: its keys, limits and profiles read again from its configuration.
//! - [`http::LaneAdmin`], [`http::DocumentAdmin`]: the lane-job and document operations as
//!   routes of a coordinator's admin API (`/api/v1/lanes/...`, `/api/v1/documents/...`, each a
//!   `horos_server_control::AdminExtension`).
//! - [`remote::Remote`]: the same operations called over a running system's HTTP API (a client
//!   with the coordinator's address only); [`speech`]: text to speech through it; [`jobs`]:
//!   the coordinator's async jobs; [`answers`]: questions answered from the pages, citing them.
//! - [`mcp::McpTools`]: the operations as the nine MCP tools of a [`horos_mcp::Server`]
//!   (`submit`, `status`, `stats`, `dead`, `ingest`, `search`, `document`, `models`, `answer`).
//! - [`status::LanesSection`] and [`status::NodesSection`]: the lanes (gates, servers, batch
//!   fill) and the nodes sharing the database as sections of a coordinator's status page
//!   (`horos_server_control::StatusSection`).
//!
//! The crate takes what it needs as plain values (a queue handle, a pipeline, an inbox, a base
//! URL and key), never a configuration file's types: the binary that reads the configuration
//! builds them.

pub mod admin;
pub mod answers;
pub mod documents;
mod error;
pub mod http;
pub mod jobs;
pub mod lanes;
pub mod logs;
pub mod mcp;
pub mod models;
pub mod reload;
pub mod remote;
pub mod speech;
pub mod status;

pub use error::{ErrorKind, OpsError};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
