//! Export: a document as Markdown (its pages in reading order, each page's text, then its
//! tables as Markdown tables and its figures), whole and per page; or every document of the
//! store written into a directory, one file each, as Markdown or JSON Lines (the rendering
//! `convert` writes too: [`DocumentExport::render`]).

use std::path::PathBuf;

use ingest_pipeline::store::{self, DocStatus, DocumentExport, ExportFormat, PageMarkdown};
use serde::{Deserialize, Serialize};

use super::output::{Outputs, output_name};
use super::{DocumentArgs, Documents};
use crate::error::OpsError;

/// A document as Markdown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exported {
    /// The document's id.
    pub document: i64,
    /// Its title.
    pub title: String,
    /// The whole document: a title heading, then each page after its `<!-- page N -->` mark.
    pub markdown: String,
    /// Each stored page (a page not read yet is absent).
    pub pages: Vec<PageMarkdown>,
}

/// Where [`Documents::export_all`] writes, and how.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportAllArgs {
    /// The directory: one file per document, named after its PDF.
    pub out: PathBuf,
    /// Markdown or JSON Lines.
    #[serde(default)]
    pub format: ExportFormat,
}

/// One document of [`ExportedAll`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportedDocument {
    /// The document's id.
    pub document: i64,
    /// The file it was submitted from, shown lossily.
    pub path: String,
    /// Its status: only a done document is written.
    pub status: DocStatus,
    /// The file written, shown lossily.
    pub output: Option<String>,
}

/// What [`Documents::export_all`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportedAll {
    /// Each document, by id.
    pub documents: Vec<ExportedDocument>,
    /// Files written.
    pub written: usize,
}

impl Documents {
    /// Document `args.id` as Markdown ([`OpsError::NoDocument`] when there is no such
    /// document).
    pub async fn export(&self, args: DocumentArgs) -> Result<Exported, OpsError> {
        let doc = self.document_export(args.id).await?;
        let md = doc.markdown();
        Ok(Exported {
            document: md.doc_id,
            title: md.title.clone(),
            markdown: md.to_markdown(),
            pages: md.pages,
        })
    }

    /// Document `args.id` as the file [`Documents::export_all`] would write for it, in
    /// `format` ([`OpsError::NoDocument`] when there is no such document).
    pub async fn export_as(
        &self,
        args: DocumentArgs,
        format: ExportFormat,
    ) -> Result<String, OpsError> {
        Ok(self.document_export(args.id).await?.render(format)?)
    }

    /// Writes every done document into `args.out`, one file each in `args.format`, named after
    /// the file it was submitted from (`manual.pdf` → `manual.md`; a name two documents share
    /// gets the second's SHA-256 prefix); pending and failed documents are listed, not written.
    pub async fn export_all(&self, args: ExportAllArgs) -> Result<ExportedAll, OpsError> {
        let docs = self.read(|reads| Ok(store::documents(reads)?)).await?;
        let mut outputs = Outputs::new(&args.out, args.format);
        let mut out = Vec::with_capacity(docs.len());
        for d in docs {
            let output = if d.status == DocStatus::Done {
                let export = self.document_export(d.id).await?;
                let file = outputs.file_for(&output_name(&d.source_path(), None), &d.sha256);
                outputs.write(&file, &export)?;
                Some(file.to_string_lossy().into_owned())
            } else {
                None
            };
            out.push(ExportedDocument {
                document: d.id,
                path: d.path,
                status: d.status,
                output,
            });
        }
        Ok(ExportedAll {
            written: out.iter().filter(|d| d.output.is_some()).count(),
            documents: out,
        })
    }

    /// Document `id` with its stored pages ([`OpsError::NoDocument`] when there is none).
    pub(super) async fn document_export(&self, id: i64) -> Result<DocumentExport, OpsError> {
        self.read(move |reads| Ok(store::document_export(reads, id)?))
            .await?
            .ok_or(OpsError::NoDocument(id))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::documents::IngestArgs;
    use crate::documents::testing::{documents, pdf, read_page};

    #[tokio::test]
    async fn a_document_is_exported_page_by_page_under_its_title() {
        let (dir, docs) = documents().await;
        pdf(dir.path(), "Manual.pdf", "m");
        let id = docs
            .ingest(IngestArgs::new("Manual.pdf"))
            .await
            .unwrap()
            .documents()[0]
            .document;
        read_page(&docs, id, 1, "First page.");
        read_page(&docs, id, 2, "Second page.");
        let out = docs.export(DocumentArgs { id }).await.unwrap();
        assert_eq!(out.pages.len(), 2);
        assert!(out.markdown.starts_with("# Manual\n"), "{}", out.markdown);
        let first = out.markdown.find("<!-- page 1 -->").unwrap();
        let second = out.markdown.find("Second page.").unwrap();
        assert!(first < second, "{}", out.markdown);
        let e = docs.export(DocumentArgs { id: 999 }).await.unwrap_err();
        assert_eq!(e.to_string(), "no document 999");
    }
}
