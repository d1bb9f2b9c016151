//! `horos-ref ingest PATH`: a PDF from the inbox queued for the pipeline.

use std::path::Path;

use crate::config::Config;
use crate::error::AppError;

pub async fn ingest(config: &Config, path: &Path, json_out: bool) -> Result<(), AppError> {
    let inbox = config
        .ingest
        .as_ref()
        .map(|i| i.inbox.clone())
        .ok_or_else(|| AppError::Usage("the configuration has no [ingest]".into()))?;
    let file = crate::ingest::confine(&inbox, path).map_err(AppError::Usage)?;
    let pipeline = crate::ingest::open_configured(config)
        .await
        .map_err(AppError::Usage)?;
    let out = crate::ingest::submit(&pipeline, &file)
        .await
        .map_err(AppError::Usage)?;
    if json_out {
        println!("{out}");
    } else {
        println!(
            "document {} {}: {}",
            out["document"],
            out["status"].as_str().unwrap_or_default(),
            file.display()
        );
    }
    Ok(())
}
