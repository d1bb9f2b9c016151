//! `horos-ref search QUERY`: full-text search over the ingested pages.

use crate::config::Config;
use crate::error::AppError;

pub async fn search(
    config: &Config,
    query: String,
    k: usize,
    json_out: bool,
) -> Result<(), AppError> {
    let hits = crate::ingest::search(config, query, k.clamp(1, 100))
        .await
        .map_err(AppError::Usage)?;
    if json_out {
        println!("{hits}");
        return Ok(());
    }
    for h in hits.as_array().into_iter().flatten() {
        println!(
            "document {} page {} ({:.2}): {}",
            h["document"],
            h["page"],
            h["score"].as_f64().unwrap_or_default(),
            h["snippet"].as_str().unwrap_or_default()
        );
    }
    Ok(())
}
