//! Pages: what read each page of a document, the degrees it was turned, its characters.

use ingest_pipeline::store::{self, PageSummary};

use super::{DocumentArgs, Documents};
use crate::error::OpsError;

impl Documents {
    /// The stored pages of document `args.id`, in order ([`OpsError::NoDocument`] when there is
    /// no such document).
    pub async fn pages(&self, args: DocumentArgs) -> Result<Vec<PageSummary>, OpsError> {
        let id = args.id;
        self.read(move |reads| {
            if store::document(reads, id)?.is_none() {
                return Err(OpsError::NoDocument(id));
            }
            Ok(store::document_pages(reads, id)?)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::documents::testing::{documents, ingested, read_page};

    #[tokio::test]
    async fn each_stored_page_says_what_read_it() {
        let (dir, docs) = documents().await;
        let id = ingested(dir.path(), &docs, "a").await;
        assert!(docs.pages(DocumentArgs { id }).await.unwrap().is_empty());
        read_page(&docs, id, 1, "twelve chars");
        let pages = docs.pages(DocumentArgs { id }).await.unwrap();
        assert_eq!(pages.len(), 1);
        assert_eq!((pages[0].page_no, pages[0].chars), (1, 12));
        assert_eq!(pages[0].reader.as_deref(), Some("test"));
        let e = docs.pages(DocumentArgs { id: 999 }).await.unwrap_err();
        assert_eq!(e.to_string(), "no document 999");
    }
}
