//! `horos-ref docs`: the pipeline's documents, their status, pages and errors.

use crate::config::Config;
use crate::error::AppError;

pub async fn docs(config: &Config, json_out: bool) -> Result<(), AppError> {
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
