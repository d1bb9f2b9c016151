//! `horos-ref ingest PATH`: a PDF, or a directory of PDFs, from the inbox queued for the pipeline
//! (and followed with a progress bar until ingested: `--wait`, the default for a directory);
//! `--retry` a failed document ingested again.

use std::ffi::OsStr;
use std::path::Path;

use ingest_pipeline::inbox::Inbox;
use serde_json::{Value, json};

use super::ingest_progress;
use crate::cli::IngestArgs;
use crate::config::Config;
use crate::error::AppError;

pub async fn ingest(config: &Config, args: IngestArgs, json_out: bool) -> Result<(), AppError> {
    let inbox = config
        .ingest
        .as_ref()
        .map(|i| Inbox::new(&i.inbox))
        .ok_or_else(|| AppError::Usage(crate::ingest::NO_INGEST.into()))?;
    let pipeline = crate::ingest::open_configured(config)
        .await
        .map_err(AppError::Usage)?;
    let mut is_dir = false;
    let submitted = match (&args.path, &args.retry) {
        (_, Some(target)) => vec![Ok(retry(&pipeline, &inbox, target).await?)],
        (Some(path), None) => {
            let target = inbox.confine(path).map_err(usage)?;
            if target.is_dir() {
                is_dir = true;
                submit_dir(&pipeline, &inbox, &target).await?
            } else {
                let file = inbox.file(path).map_err(usage)?;
                let out = crate::ingest::submit(&pipeline, &file)
                    .await
                    .map_err(AppError::Usage)?;
                vec![Ok(out)]
            }
        }
        (None, None) => return Err(AppError::Usage("a PDF or --retry is needed".into())),
    };
    let wait = args.wait || (is_dir && !args.no_wait);
    let ids: Vec<i64> = submitted
        .iter()
        .filter_map(|s| s.as_ref().ok()?["document"].as_i64())
        .collect();
    let refused: Vec<&String> = submitted.iter().filter_map(|s| s.as_ref().err()).collect();
    if !json_out {
        if submitted.len() == 1 || !wait {
            for out in submitted.iter().flatten() {
                println!(
                    "document {} {}: {}",
                    out["document"],
                    out["status"].as_str().unwrap_or_default(),
                    out["path"].as_str().unwrap_or_default()
                );
            }
        } else {
            let known = submitted
                .iter()
                .flatten()
                .filter(|o| o["status"] == "known")
                .count();
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
        Some(ingest_progress::follow(&pipeline, &ids, json_out).await?)
    } else {
        None
    };
    if json_out {
        let submissions: Vec<Value> = submitted
            .iter()
            .map(|s| match s {
                Ok(out) => out.clone(),
                Err(e) => json!({"refused": e}),
            })
            .collect();
        match (&followed, submissions.as_slice()) {
            (None, [one]) if !is_dir => println!("{one}"),
            _ => println!(
                "{}",
                json!({"submitted": submissions,
                       "ingested": followed.as_ref().map(ingest_progress::Outcome::to_json)})
            ),
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

/// Submits every PDF under `dir`; a file that cannot be submitted is refused with its reason
/// and the others still go.
async fn submit_dir(
    pipeline: &crate::ingest::RefPipeline,
    inbox: &Inbox,
    dir: &Path,
) -> Result<Vec<Result<Value, String>>, AppError> {
    let files = inbox.pdfs_under(dir).map_err(usage)?;
    if files.is_empty() {
        return Err(AppError::Usage(format!(
            "no PDF under {}: put .pdf files there, or name one file",
            dir.display()
        )));
    }
    let mut out = Vec::with_capacity(files.len());
    for file in files {
        out.push(match file {
            Ok(file) => crate::ingest::submit(pipeline, &file)
                .await
                .map_err(|e| format!("{}: {e}", file.display())),
            Err(e) => Err(e.to_string()),
        });
    }
    Ok(out)
}

/// `--retry ID` or `--retry PATH` (confined to the inbox like a new PDF).
async fn retry(
    pipeline: &crate::ingest::RefPipeline,
    inbox: &Inbox,
    target: &OsStr,
) -> Result<serde_json::Value, AppError> {
    let id = match target.to_str().and_then(|s| s.parse::<i64>().ok()) {
        Some(id) => id,
        None => {
            let file = inbox.file(Path::new(target)).map_err(usage)?;
            crate::ingest::failed_document_at(pipeline, &file)
                .await
                .map_err(AppError::Usage)?
        }
    };
    crate::ingest::retry(pipeline, id)
        .await
        .map_err(AppError::Usage)
}

/// A path the inbox refused, as the user's mistake.
fn usage(e: ingest_pipeline::inbox::InboxError) -> AppError {
    AppError::Usage(e.to_string())
}
