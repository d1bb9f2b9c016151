//! `horos-ref ingest PATH [--collection NAME]`: a PDF, or a directory of PDFs, from the inbox
//! queued for the pipeline into a collection (who may read it; `default` without one), and
//! followed with a progress bar until ingested (`--wait`, the default for a directory);
//! `--retry` a failed document ingested again (horos-ops' `Documents::ingest` and `retry`).

use horos_ops::documents::{
    IngestArgs as Ingest, Ingested, RetryArgs, SubmissionStatus, Submitted,
};
use serde_json::json;

use super::ingest_progress;
use crate::cli::IngestArgs;
use crate::config::Config;
use crate::error::AppError;

pub async fn ingest(config: &Config, args: IngestArgs, json_out: bool) -> Result<(), AppError> {
    let documents = crate::ingest::documents(config).await?;
    let ingested = match (args.path, &args.retry) {
        (_, Some(target)) => Ingested::File(documents.retry(RetryArgs::from_target(target)).await?),
        (Some(path), None) => {
            let collection = args.collection;
            documents.ingest(Ingest { path, collection }).await?
        }
        (None, None) => return Err(AppError::Usage("a PDF or --retry is needed".into())),
    };
    let is_dir = matches!(ingested, Ingested::Directory { .. });
    let wait = args.wait || (is_dir && !args.no_wait);
    let submitted = ingested.documents();
    let ids: Vec<i64> = submitted.iter().map(|s| s.document).collect();
    let refused = ingested.refused();
    if !json_out {
        let files = match &ingested {
            Ingested::File(_) => 1,
            Ingested::Directory { submitted } => submitted.len(),
        };
        if files == 1 || !wait {
            for s in &submitted {
                print_submitted(s);
            }
        } else {
            let known = ingested.count(SubmissionStatus::Known);
            println!(
                "{} documents queued ({known} already known), {} refused",
                ids.len() - known,
                refused.len()
            );
        }
        for why in &refused {
            eprintln!("refused: {why}");
        }
    }
    let followed = if wait && !ids.is_empty() {
        Some(ingest_progress::follow(&documents, &ids, json_out).await?)
    } else {
        None
    };
    if json_out {
        match (&followed, &ingested) {
            (None, Ingested::File(one)) => super::print_json(one),
            (_, Ingested::File(one)) => super::print_json(&json!({
                "submitted": [one],
                "ingested": followed,
            })),
            (_, Ingested::Directory { submitted }) => super::print_json(&json!({
                "submitted": submitted,
                "ingested": followed,
            })),
        }
    }
    let failed = followed.as_ref().map_or(0, |f| f.failed.len());
    if failed > 0 || !refused.is_empty() {
        return Err(AppError::Usage(format!(
            "{failed} document(s) failed and {} file(s) were refused (see above)",
            refused.len()
        )));
    }
    Ok(())
}

/// `document N STATUS: PATH (collection NAME)`.
fn print_submitted(s: &Submitted) {
    println!(
        "document {} {}: {} (collection {})",
        s.document,
        s.status.as_str(),
        s.path,
        s.collection
    );
}
