//! Export: a document as Markdown (its pages in reading order, each page's text, then its
//! tables as Markdown tables and its figures), whole and per page.

use ingest_pipeline::store::{self, PageMarkdown};
use serde::{Deserialize, Serialize};

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

impl Documents {
    /// Document `args.id` as Markdown ([`OpsError::NoDocument`] when there is no such
    /// document).
    pub async fn export(&self, args: DocumentArgs) -> Result<Exported, OpsError> {
        let id = args.id;
        let doc = self
            .read(move |reads| Ok(store::document_markdown(reads, id)?))
            .await?
            .ok_or(OpsError::NoDocument(id))?;
        Ok(Exported {
            document: doc.doc_id,
            title: doc.title.clone(),
            markdown: doc.to_markdown(),
            pages: doc.pages,
        })
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
            .ingest(IngestArgs {
                path: "Manual.pdf".into(),
            })
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
