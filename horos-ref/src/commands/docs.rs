//! `horos-ref docs`: the pipeline's documents, their status, pages and errors; `docs show ID`
//! (a document's report), `docs delete ID`, `docs pages ID` (what read each page), `docs export
//! ID` (Markdown).

use super::row;
use crate::cli::DocsCommand;
use crate::config::Config;
use crate::error::AppError;

pub async fn docs(
    config: &Config,
    action: Option<DocsCommand>,
    json_out: bool,
) -> Result<(), AppError> {
    match action {
        Some(DocsCommand::Show { id }) => show(config, id, json_out).await,
        Some(DocsCommand::Delete { id }) => delete(config, id, json_out).await,
        Some(DocsCommand::Pages { id }) => pages(config, id, json_out).await,
        Some(DocsCommand::Export { id }) => export(config, id, json_out).await,
        None => list(config, json_out).await,
    }
}

/// `docs show ID`: the document's report.
async fn show(config: &Config, id: i64, json_out: bool) -> Result<(), AppError> {
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
    Ok(())
}

/// `docs`: one line per document.
async fn list(config: &Config, json_out: bool) -> Result<(), AppError> {
    let docs = crate::ingest::documents(config)
        .await
        .map_err(AppError::Usage)?;
    if json_out {
        println!("{docs}");
        return Ok(());
    }
    for d in docs.as_array().into_iter().flatten() {
        row!(
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

/// `docs delete ID`.
async fn delete(config: &Config, id: i64, json_out: bool) -> Result<(), AppError> {
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
    Ok(())
}

/// `docs pages ID`: one line per page, `PAGE READ_BY READER rotation=DEG chars=N`.
async fn pages(config: &Config, id: i64, json_out: bool) -> Result<(), AppError> {
    let pages = crate::ingest::pages(config, id)
        .await
        .map_err(AppError::Usage)?;
    if json_out {
        println!("{pages}");
        return Ok(());
    }
    for p in pages.as_array().into_iter().flatten() {
        println!(
            "{} {} {} rotation={} chars={}",
            p["page_no"],
            p["read_by"].as_str().unwrap_or("-"),
            p["reader"].as_str().unwrap_or("-"),
            p["rotation"],
            p["chars"]
        );
    }
    Ok(())
}

/// `docs export ID`: the document as Markdown (`--json`: with each page's).
async fn export(config: &Config, id: i64, json_out: bool) -> Result<(), AppError> {
    let out = crate::ingest::export(config, id)
        .await
        .map_err(AppError::Usage)?;
    if json_out {
        println!("{out}");
    } else {
        print!("{}", out["markdown"].as_str().unwrap_or_default());
    }
    Ok(())
}
