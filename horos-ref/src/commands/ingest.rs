//! `horos-ref ingest PATH`: a PDF from the inbox queued for the pipeline; `--retry` a failed
//! document ingested again.

use std::ffi::OsStr;
use std::path::Path;

use crate::cli::IngestArgs;
use crate::config::Config;
use crate::error::AppError;

pub async fn ingest(config: &Config, args: IngestArgs, json_out: bool) -> Result<(), AppError> {
    let inbox = config
        .ingest
        .as_ref()
        .map(|i| i.inbox.clone())
        .ok_or_else(|| AppError::Usage("the configuration has no [ingest]".into()))?;
    let pipeline = crate::ingest::open_configured(config)
        .await
        .map_err(AppError::Usage)?;
    let out = match (&args.path, &args.retry) {
        (_, Some(target)) => retry(&pipeline, &inbox, target).await?,
        (Some(path), None) => {
            let file = crate::ingest::confine(&inbox, path).map_err(AppError::Usage)?;
            crate::ingest::submit(&pipeline, &file)
                .await
                .map_err(AppError::Usage)?
        }
        (None, None) => return Err(AppError::Usage("a PDF or --retry is needed".into())),
    };
    if json_out {
        println!("{out}");
    } else {
        println!(
            "document {} {}: {}",
            out["document"],
            out["status"].as_str().unwrap_or_default(),
            out["path"].as_str().unwrap_or_default()
        );
    }
    Ok(())
}

/// `--retry ID` or `--retry PATH` (confined to the inbox like a new PDF).
async fn retry(
    pipeline: &crate::ingest::RefPipeline,
    inbox: &Path,
    target: &OsStr,
) -> Result<serde_json::Value, AppError> {
    let id = match target.to_str().and_then(|s| s.parse::<i64>().ok()) {
        Some(id) => id,
        None => {
            let file = crate::ingest::confine(inbox, Path::new(target)).map_err(AppError::Usage)?;
            crate::ingest::failed_document_at(pipeline, &file)
                .await
                .map_err(AppError::Usage)?
        }
    };
    crate::ingest::retry(pipeline, id)
        .await
        .map_err(AppError::Usage)
}
