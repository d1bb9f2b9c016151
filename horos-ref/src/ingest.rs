//! `[ingest]` in the binary: the pipeline the configuration describes, opened (for the
//! commands and MCP tools: [`documents`], horos-ops' documents of it) or started (for `run`).
//! What the pipeline is made of (its readers, the inbox rule, its routes on the coordinator) is
//! ingest-pipeline's; what is done with its documents is horos-ops'.

use horos_ops::documents::Documents;
use ingest_pipeline::configured::{
    self, ConfiguredPipeline, PipelineSettings, Reader, TextEmbeddings, Visual,
};
use ingest_pipeline::gateway;
use ingest_pipeline::inbox::Inbox;
use ingest_pipeline::pipeline::Running;

use crate::config::{Config, IngestSection};
use crate::error::AppError;

/// The binary's pipeline type.
pub type RefPipeline = ConfiguredPipeline;

/// The pipeline of `run`, set once it has started (the coordinator's search and admin routes are
/// built before it).
pub type LatePipeline = gateway::LatePipeline<Reader, TextEmbeddings, Visual>;

/// Opens the pipeline of `section` (creating its tables), without starting workers: on the
/// PostgreSQL `database` of `config` when it is one (shared with the other nodes), else in
/// `section.dir`'s own SQLite file.
pub async fn open(config: &Config, section: &IngestSection) -> Result<RefPipeline, String> {
    let settings = section.settings(config.database_url())?;
    configured::open(&settings).await.map_err(|e| e.to_string())
}

/// Opens the pipeline `settings` describe and starts the workers of every stage (they run until
/// [`Running::shutdown`]). Documents are read in PDF worker processes, this binary's own
/// `worker pdf` unless `[ingest.pdf_workers] command` names another (`count = 0`: in this
/// process).
pub async fn start(settings: &PipelineSettings) -> Result<(RefPipeline, Running), String> {
    let mut settings = settings.clone();
    let workers = &mut settings.tuning.pdf_workers;
    if workers.command.is_none() {
        let exe = std::env::current_exe()
            .map_err(|e| format!("the PDF workers: this program's path: {e}"))?;
        workers.command = Some(vec![
            exe.to_string_lossy().into_owned(),
            "worker".into(),
            "pdf".into(),
        ]);
    }
    let pipeline = configured::open(&settings)
        .await
        .map_err(|e| e.to_string())?;
    let running = pipeline.start();
    Ok((pipeline, running))
}

/// The documents of the pipeline of `config`, from its inbox (an error naming the missing
/// section without one).
pub async fn documents(config: &Config) -> Result<Documents, AppError> {
    let section = config
        .ingest
        .as_ref()
        .ok_or_else(|| AppError::Usage(NO_INGEST.to_owned()))?;
    let pipeline = open(config, section).await.map_err(AppError::Usage)?;
    Ok(Documents::new(pipeline, Inbox::new(&section.inbox)))
}

/// The error of a command that needs `[ingest]` in a configuration without one.
pub const NO_INGEST: &str = "this configuration has no [ingest] section: add one (horos-ref/README.md \
                             has a sample: inbox, database, reader) to ingest and search documents";
