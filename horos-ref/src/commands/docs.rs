//! `horos-ref docs`: the pipeline's documents, their status, pages, collection and errors;
//! `docs show ID` (a document's report), `docs delete ID`, `docs pages ID` (what read each page),
//! `docs export ID` (Markdown), `docs export --all --out DIR` (every document into files). Each
//! is an operation of horos-ops' `Documents`.

use horos_ops::documents::{DocumentArgs, Documents, ExportAllArgs, ListArgs};

use super::{print_json, row};
use crate::cli::{DocsCommand, Format};
use crate::config::Config;
use crate::error::AppError;

pub async fn docs(
    config: &Config,
    action: Option<DocsCommand>,
    json_out: bool,
) -> Result<(), AppError> {
    let documents = crate::ingest::documents(config).await?;
    match action {
        Some(DocsCommand::Show { id }) => show(&documents, id, json_out).await,
        Some(DocsCommand::Delete { id }) => delete(&documents, id, json_out).await,
        Some(DocsCommand::Pages { id }) => pages(&documents, id, json_out).await,
        Some(DocsCommand::Export {
            id: Some(id),
            all: false,
            format,
            ..
        }) => export(&documents, id, format, json_out).await,
        Some(DocsCommand::Export { out, format, .. }) => {
            let out = out.ok_or_else(|| AppError::Usage("--all needs --out DIR".into()))?;
            export_all(&documents, out, format, json_out).await
        }
        None => list(&documents, json_out).await,
    }
}

/// `docs show ID`: the document's report.
async fn show(documents: &Documents, id: i64, json_out: bool) -> Result<(), AppError> {
    let r = documents.report(DocumentArgs { id }).await?;
    if json_out {
        print_json(&r);
        return Ok(());
    }
    let d = &r.document;
    println!(
        "document {id}: {} ({}) {}",
        d.title,
        d.status.as_str(),
        d.error.as_deref().unwrap_or_default()
    );
    println!(
        "pages {} of {}, tiles {}, chunks {}, tables {}",
        r.pages,
        d.pages.map_or("null".to_owned(), |p| p.to_string()),
        r.tiles,
        r.chunks,
        r.tables
    );
    for st in &r.stages {
        println!(
            "  {:<16} {} jobs {:>9.2} s ({:.2} s in models)",
            st.stage, st.jobs, st.seconds, st.inference_seconds
        );
    }
    println!(
        "wall {:.1} s, inference {:.1} s, estimated cost {:.4}",
        r.wall_seconds, r.inference_seconds, r.estimated_cost
    );
    Ok(())
}

/// `docs`: one line per document.
async fn list(documents: &Documents, json_out: bool) -> Result<(), AppError> {
    let docs = documents.list(ListArgs {}).await?;
    if json_out {
        print_json(&docs);
        return Ok(());
    }
    for d in docs {
        row!(
            "{} {} pages={} collection={} {} {}",
            d.id,
            d.status.as_str(),
            d.pages.map_or("null".to_owned(), |p| p.to_string()),
            d.collection,
            d.title,
            d.error.unwrap_or_default()
        );
    }
    Ok(())
}

/// `docs delete ID`.
async fn delete(documents: &Documents, id: i64, json_out: bool) -> Result<(), AppError> {
    let out = documents.delete(DocumentArgs { id }).await?;
    if json_out {
        print_json(&out);
    } else {
        println!("document {id} deleted: {}", out.path);
    }
    Ok(())
}

/// `docs pages ID`: one line per page, `PAGE READ_BY READER rotation=DEG chars=N`.
async fn pages(documents: &Documents, id: i64, json_out: bool) -> Result<(), AppError> {
    let pages = documents.pages(DocumentArgs { id }).await?;
    if json_out {
        print_json(&pages);
        return Ok(());
    }
    for p in pages {
        println!(
            "{} {} {} rotation={} chars={}",
            p.page_no,
            p.read_by.map_or("-", |r| r.as_str()),
            p.reader.as_deref().unwrap_or("-"),
            p.rotation,
            p.chars
        );
    }
    Ok(())
}

/// `docs export ID`: the document as Markdown (`--json`: with each page's), or JSON Lines.
async fn export(
    documents: &Documents,
    id: i64,
    format: Format,
    json_out: bool,
) -> Result<(), AppError> {
    if json_out {
        print_json(&documents.export(DocumentArgs { id }).await?);
    } else {
        print!(
            "{}",
            documents
                .export_as(DocumentArgs { id }, format.into())
                .await?
        );
    }
    Ok(())
}

/// `docs export --all --out DIR`: every done document into a file of DIR.
async fn export_all(
    documents: &Documents,
    out: std::path::PathBuf,
    format: Format,
    json_out: bool,
) -> Result<(), AppError> {
    let args = ExportAllArgs {
        out,
        format: format.into(),
    };
    let done = documents.export_all(args).await?;
    if json_out {
        print_json(&done);
        return Ok(());
    }
    for d in &done.documents {
        match &d.output {
            Some(file) => row!("{} {} -> {file}", d.document, d.path),
            None => row!(
                "{} {} not written: {}",
                d.document,
                d.path,
                d.status.as_str()
            ),
        }
    }
    println!(
        "{} of {} documents written",
        done.written,
        done.documents.len()
    );
    Ok(())
}
