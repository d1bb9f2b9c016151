//! Delete: a document with everything derived from it (pages and their images, readings, text
//! and its full-text index, tables, chunks and their vectors, visual vectors).

use serde::{Deserialize, Serialize};

use super::{DocumentArgs, Documents};
use crate::error::OpsError;

/// A deleted document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    /// Its id.
    pub deleted: i64,
    /// Its title.
    pub title: String,
    /// The file it was submitted from.
    pub path: String,
}

impl Documents {
    /// Deletes document `args.id` ([`OpsError::NoDocument`] when there is no such document). A
    /// pending document's jobs still queued find nothing and are dropped.
    pub async fn delete(&self, args: DocumentArgs) -> Result<Deleted, OpsError> {
        let doc = self
            .pipeline
            .delete(args.id)
            .await?
            .ok_or(OpsError::NoDocument(args.id))?;
        Ok(Deleted {
            deleted: doc.id,
            title: doc.title,
            path: doc.path,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::documents::ListArgs;
    use crate::documents::testing::{documents, ingested, read_page};

    #[tokio::test]
    async fn a_deleted_document_is_gone_and_a_second_delete_says_so() {
        let (dir, docs) = documents().await;
        let id = ingested(dir.path(), &docs, "a").await;
        read_page(&docs, id, 1, "text");
        let gone = docs.delete(DocumentArgs { id }).await.unwrap();
        assert_eq!((gone.deleted, gone.title.as_str()), (id, "a"));
        assert!(docs.list(ListArgs {}).await.unwrap().is_empty());
        let e = docs.delete(DocumentArgs { id }).await.unwrap_err();
        assert!(matches!(e, OpsError::NoDocument(_)), "{e:?}");
    }
}
