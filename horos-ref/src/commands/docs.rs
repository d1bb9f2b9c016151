//! `horos-ref docs`: the pipeline's documents, their status, pages and errors; `docs delete ID`.

use crate::cli::DocsCommand;
use crate::config::Config;
use crate::error::AppError;

pub async fn docs(
    config: &Config,
    action: Option<DocsCommand>,
    json_out: bool,
) -> Result<(), AppError> {
    if let Some(DocsCommand::Delete { id }) = action {
        let out = crate::ingest::delete(config, id)
            .await
            .map_err(AppError::Usage)?;
        if json_out {
            println!("{out}");
        } else {
            println!(
                "document {id} deleted: {}",
                out["path"].as_str().unwrap_or_default()
            );
        }
        return Ok(());
    }
    let docs = crate::ingest::documents(config)
        .await
        .map_err(AppError::Usage)?;
    if json_out {
        println!("{docs}");
        return Ok(());
    }
    for d in docs.as_array().into_iter().flatten() {
        println!(
            "{} {} pages={} {} {}",
            d["id"],
            d["status"].as_str().unwrap_or_default(),
            d["pages"],
            d["title"].as_str().unwrap_or_default(),
            d["error"].as_str().unwrap_or_default()
        );
    }
    Ok(())
}
