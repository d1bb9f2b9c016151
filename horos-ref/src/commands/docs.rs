//! `horos-ref docs`: the pipeline's documents, their status, pages and errors; `docs show ID`
//! (a document's report), `docs delete ID`.

use crate::cli::DocsCommand;
use crate::config::Config;
use crate::error::AppError;

pub async fn docs(
    config: &Config,
    action: Option<DocsCommand>,
    json_out: bool,
) -> Result<(), AppError> {
    if let Some(DocsCommand::Show { id }) = action {
        let r = crate::ingest::report(config, id)
            .await
            .map_err(AppError::Usage)?;
        if json_out {
            println!("{r}");
            return Ok(());
        }
        let d = &r["document"];
        println!(
            "document {id}: {} ({}) {}",
            d["title"].as_str().unwrap_or_default(),
            d["status"].as_str().unwrap_or_default(),
            d["error"].as_str().unwrap_or_default()
        );
        println!(
            "pages {} of {}, tiles {}, chunks {}, tables {}",
            r["pages"], d["pages"], r["tiles"], r["chunks"], r["tables"]
        );
        for st in r["stages"].as_array().into_iter().flatten() {
            println!(
                "  {:<16} {:>5} jobs {:>9.2} s ({:.2} s in models)",
                st["stage"].as_str().unwrap_or_default(),
                st["jobs"],
                st["seconds"].as_f64().unwrap_or(0.0),
                st["inference_seconds"].as_f64().unwrap_or(0.0)
            );
        }
        println!(
            "wall {:.1} s, inference {:.1} s, estimated cost {:.4}",
            r["wall_seconds"].as_f64().unwrap_or(0.0),
            r["inference_seconds"].as_f64().unwrap_or(0.0),
            r["estimated_cost"].as_f64().unwrap_or(0.0)
        );
        return Ok(());
    }
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
