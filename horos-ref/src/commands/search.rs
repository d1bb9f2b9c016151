//! `horos-ref search QUERY`: full text (default), text vectors, visual (MaxSim by the question's
//! text) or hybrid search over the ingested pages (`--mode`), optionally within one document.

use crate::cli::SearchMode;
use crate::config::Config;
use crate::error::AppError;

pub async fn search(
    config: &Config,
    query: String,
    k: usize,
    mode: SearchMode,
    doc: Option<i64>,
    json_out: bool,
) -> Result<(), AppError> {
    let k = k.clamp(1, 100);
    let hits = crate::ingest::search(config, mode.into(), query, k, doc)
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
