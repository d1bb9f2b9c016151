//! `horos-ref convert PATH... --out DIR`: PDFs read in this process and written as Markdown or
//! JSON Lines (horos-ops' `Documents::convert`), its progress shown as `ingest`'s.

use horos_ops::documents::{self, ConvertArgs as Convert, ConvertStatus, Converted, Documents};

use super::ingest_progress::View;
use super::{print_json, row};
use crate::cli::ConvertArgs;
use crate::config::Config;
use crate::error::AppError;
use crate::ingest::NO_INGEST;

pub async fn convert(
    config: Option<&Config>,
    args: ConvertArgs,
    json_out: bool,
) -> Result<(), AppError> {
    let settings = match config {
        Some(config) => {
            let section = config
                .ingest
                .as_ref()
                .ok_or_else(|| AppError::Usage(NO_INGEST.to_owned()))?;
            Some(section.settings(None).map_err(|e| AppError::Usage(e.0))?)
        }
        None => None,
    };
    let docs = Documents::for_conversion(&args.out, settings).await?;
    if !json_out && let Some(why) = documents::ocr_unavailable() {
        eprintln!("note: {why}");
    }
    let mut view: Option<View> = None;
    let run = docs.convert(
        Convert {
            paths: args.paths,
            out: args.out.clone(),
            format: args.format.into(),
        },
        |p| {
            view.get_or_insert_with(|| View::new(json_out, p, "convert"))
                .show(p)
        },
    );
    let converted = tokio::select! {
        converted = run => Some(converted),
        _ = tokio::signal::ctrl_c() => None,
    };
    if let Some(view) = &view {
        view.finish();
    }
    let Some(converted) = converted else {
        return Err(AppError::Usage(
            "stopped: run the same command again to go on (what was converted is kept)".into(),
        ));
    };
    let converted = converted?;
    if json_out {
        print_json(&converted);
    } else {
        print_summary(&converted, &args.out);
    }
    if converted.failed > 0 {
        return Err(AppError::Usage(format!(
            "{} of {} files failed (see above)",
            converted.failed,
            converted.files.len()
        )));
    }
    Ok(())
}

/// A line per file that failed or was written now, then the counts.
fn print_summary(c: &Converted, out: &std::path::Path) {
    for f in &c.files {
        match (&f.status, &f.failure, &f.output) {
            (ConvertStatus::Failed, Some(why), _) => {
                row!("failed: {} ({}): {}", f.path, why.kind.as_str(), why.error);
            }
            (ConvertStatus::Converted, _, Some(file)) => row!("{} -> {file}", f.path),
            _ => {}
        }
    }
    if c.converted == 0 && c.failed == 0 {
        println!(
            "nothing to convert: {} file(s) already converted into {}",
            c.already_converted,
            out.display()
        );
        return;
    }
    println!(
        "{} converted ({} pages in {:.1} s), {} already converted, {} failed",
        c.converted, c.pages, c.seconds, c.already_converted, c.failed
    );
}
