//! `horos-ref search QUERY`: full text (default), text vectors, visual (MaxSim by the question's
//! text) or hybrid search over the ingested pages (`--mode`), optionally within one document
//! (horos-ops' `Documents::search`).

use horos_ops::documents::SearchArgs;

use crate::cli::SearchMode;
use crate::config::Config;
use crate::error::AppError;

pub async fn search(
    config: &Config,
    query: String,
    k: usize,
    mode: SearchMode,
    document: Option<i64>,
    json_out: bool,
) -> Result<(), AppError> {
    let documents = crate::ingest::documents(config).await?;
    let hits = documents
        .search(SearchArgs {
            query,
            k,
            mode: mode.into(),
            document,
        })
        .await?;
    if json_out {
        super::print_json(&hits);
        return Ok(());
    }
    for h in hits {
        println!(
            "document {} page {} ({:.2}): {}",
            h.document, h.page, h.score, h.snippet
        );
    }
    Ok(())
}
