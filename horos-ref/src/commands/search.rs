//! `horos-ref search QUERY`: full-text (default) or visual (`--mode visual`, MaxSim by the
//! question's text) search over the ingested pages.

use crate::cli::SearchMode;
use crate::config::Config;
use crate::error::AppError;

pub async fn search(
    config: &Config,
    query: String,
    k: usize,
    mode: SearchMode,
    docs: Vec<i64>,
    json_out: bool,
) -> Result<(), AppError> {
    let k = k.clamp(1, 100);
    if mode == SearchMode::Fts && !docs.is_empty() {
        return Err(AppError::Usage(
            "--doc filters the visual search only (--mode visual)".into(),
        ));
    }
    let hits = match mode {
        SearchMode::Fts => crate::ingest::search(config, query, k).await,
        SearchMode::Visual => crate::ingest::search_visual(config, query, k, docs).await,
    }
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
