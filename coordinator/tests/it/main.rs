//! horos-coordinator's integration tests, in one binary: one link instead of thirteen (each
//! module was a test binary of its own). Each module is a subject; `common` is their shared kit.

mod common;

mod admin_models;
mod answers;
mod collections;
mod control;
mod e2e_manifest_python;
mod e2e_openai_python;
mod e2e_status_browser;
mod fallback;
mod hostile_clients;
mod http;
mod jobs_admin;
mod jobs_admission;
mod limits;
mod manifest;
mod operator;
mod pool;
mod remote;
mod speech;
