//! The document operations on a coordinator's admin API ([`DocumentAdmin`], serving
//! `/api/v1/documents/...` behind the admin key): what `horos-ref ingest` and `horos-ref docs`
//! do, for a client that has only HTTP.
//!
//! - `POST /api/v1/documents` with [`IngestArgs`] (`{"path", "collection"}`: a PDF or a
//!   directory of the inbox, and the collection its documents belong to, `"default"` without
//!   one; a bad name is a 400 naming it): 201 and [`Ingested`].
//! - `GET /api/v1/documents`: every document (id, title, collection, status, pages done).
//! - `GET /api/v1/documents/ID`: its report (status, pages, each stage's work).
//! - `GET /api/v1/documents/ID/pages`: its pages (reader, rotation, characters, tiles).
//! - `GET /api/v1/documents/ID/markdown`: [`Exported`], the document as Markdown.
//! - `POST /api/v1/documents/ID/retry`: a failed document ingested again ([`Submitted`]).
//! - `DELETE /api/v1/documents/ID`: the document and everything derived from it.
//!
//! Paths are confined to the inbox exactly as the command line's are: a path outside it is a
//! 400 naming `path`. Until the pipeline has started, every route answers 503.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use horos_server_control::{AdminAnswer, AdminExtension, error_answer};
use http::{Method, StatusCode};
use ingest_pipeline::configured::ConfiguredPipeline;
use ingest_pipeline::inbox::Inbox;
use serde_json::Value;

use horos_server_control::routes::{RouteError, RouteTable};

use super::{body, find, not_found, ok, param, table};
use crate::documents::{DocumentArgs, Documents, IngestArgs, ListArgs, RetryArgs};
#[cfg(doc)]
use crate::documents::{Exported, Ingested, Submitted};

/// The documents of a pipeline that starts after the routes are built, as admin routes under
/// `/api/v1/documents`.
#[derive(Clone)]
pub struct DocumentAdmin {
    pipeline: Arc<OnceLock<ConfiguredPipeline>>,
    inbox: Inbox,
}

impl std::fmt::Debug for DocumentAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocumentAdmin")
            .field("inbox", &self.inbox)
            .field("started", &self.pipeline.get().is_some())
            .finish()
    }
}

impl DocumentAdmin {
    /// The routes over `pipeline` once it is set (the one the searcher and the ingest admin
    /// routes hold), accepting files from `inbox` only.
    pub fn new(pipeline: Arc<OnceLock<ConfiguredPipeline>>, inbox: Inbox) -> Self {
        Self { pipeline, inbox }
    }

    fn documents(&self) -> Result<Documents, AdminAnswer> {
        let pipeline = self.pipeline.get().ok_or_else(|| {
            error_answer(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "the ingest pipeline is starting",
                None,
                None,
            )
        })?;
        Ok(Documents::new(pipeline.clone(), self.inbox.clone()))
    }

    async fn route(
        &self,
        method: &Method,
        rest: &str,
        b: Value,
    ) -> Result<AdminAnswer, AdminAnswer> {
        let found = find(document_routes()?, method, "/api/v1/documents", rest)?;
        let docs = self.documents()?;
        let id = || document(&param(&found.params, "id")?);
        Ok(match *found.route {
            Doc::Ingest => {
                let args: IngestArgs = body(b, "an ingestion")?;
                ok(StatusCode::CREATED, docs.ingest(args).await)
            }
            Doc::List => ok(StatusCode::OK, docs.list(ListArgs {}).await),
            Doc::Report => ok(StatusCode::OK, docs.report(id()?).await),
            Doc::Pages => ok(StatusCode::OK, docs.pages(id()?).await),
            Doc::Markdown => ok(StatusCode::OK, docs.export(id()?).await),
            Doc::Retry => {
                let DocumentArgs { id } = id()?;
                ok(StatusCode::OK, docs.retry(RetryArgs::Document(id)).await)
            }
            Doc::Delete => ok(StatusCode::OK, docs.delete(id()?).await),
        })
    }
}

/// A document route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Doc {
    Ingest,
    List,
    Report,
    Pages,
    Markdown,
    Retry,
    Delete,
}

/// The document routes (under `/api/v1/documents`), built once.
fn document_routes() -> Result<&'static RouteTable<Doc>, AdminAnswer> {
    static TABLE: OnceLock<Result<RouteTable<Doc>, RouteError>> = OnceLock::new();
    table(TABLE.get_or_init(|| {
        RouteTable::new([
            (Some(Method::POST), "/", Doc::Ingest),
            (Some(Method::GET), "/", Doc::List),
            (Some(Method::GET), "/{id}", Doc::Report),
            (Some(Method::DELETE), "/{id}", Doc::Delete),
            (Some(Method::GET), "/{id}/pages", Doc::Pages),
            (Some(Method::GET), "/{id}/markdown", Doc::Markdown),
            (Some(Method::POST), "/{id}/retry", Doc::Retry),
        ])
    }))
}

/// A document id of the path, or a 404 (no document can have it).
fn document(s: &str) -> Result<DocumentArgs, AdminAnswer> {
    s.parse()
        .map(|id| DocumentArgs { id })
        .map_err(|_| not_found(format!("`{s}` is not a document id"), "document_not_found"))
}

#[async_trait]
impl AdminExtension for DocumentAdmin {
    fn name(&self) -> &str {
        "documents"
    }

    async fn call(&self, method: &Method, rest: &str, body: Value) -> AdminAnswer {
        self.route(method, rest, body).await.unwrap_or_else(|e| e)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::documents::testing as test_kit;

    #[tokio::test]
    async fn documents_are_ingested_read_and_deleted_over_the_admin_routes() {
        let late = Arc::new(OnceLock::new());
        let (dir, docs) = test_kit::documents().await;
        let admin = DocumentAdmin::new(Arc::clone(&late), docs.inbox().clone());
        let (status, _) = admin.call(&Method::GET, "", Value::Null).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(late.set(docs.pipeline().clone()).is_ok());

        test_kit::pdf(dir.path(), "a.pdf", "alpha");
        let (status, v) = admin
            .call(&Method::POST, "", json!({"path": "a.pdf"}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
        assert_eq!(v["status"], "queued", "{v}");
        let id = v["document"].as_i64().unwrap();
        let (status, again) = admin
            .call(&Method::POST, "/", json!({"path": "a.pdf"}))
            .await;
        assert_eq!(
            (status, &again["status"]),
            (StatusCode::CREATED, &json!("known"))
        );

        let (status, list) = admin.call(&Method::GET, "", Value::Null).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
        assert_eq!(list[0]["collection"], "default", "{list}");
        // Into a collection, shown in the list; a name that is not one is a 400 naming it.
        test_kit::pdf(dir.path(), "b.pdf", "beta");
        let (status, v) = admin
            .call(
                &Method::POST,
                "",
                json!({"path": "b.pdf", "collection": "beta"}),
            )
            .await;
        assert_eq!(
            (status, &v["collection"]),
            (StatusCode::CREATED, &json!("beta")),
            "{v}"
        );
        let (status, e) = admin
            .call(
                &Method::POST,
                "",
                json!({"path": "b.pdf", "collection": "a b"}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains("`a b`"),
            "{e}"
        );
        let (_, list) = admin.call(&Method::GET, "", Value::Null).await;
        assert_eq!(list[1]["collection"], "beta", "{list}");
        let beta = list[1]["id"].as_i64().unwrap();
        let (status, _) = admin
            .call(&Method::DELETE, &format!("/{beta}"), Value::Null)
            .await;
        assert_eq!(status, StatusCode::OK);
        test_kit::read_page(&docs, id, 1, "the first page");
        let (status, md) = admin
            .call(&Method::GET, &format!("/{id}/markdown"), Value::Null)
            .await;
        assert_eq!(status, StatusCode::OK, "{md}");
        assert!(
            md["markdown"].as_str().unwrap().contains("the first page"),
            "{md}"
        );
        let (status, pages) = admin
            .call(&Method::GET, &format!("/{id}/pages"), Value::Null)
            .await;
        assert_eq!(status, StatusCode::OK, "{pages}");
        assert_eq!(pages[0]["page_no"], 1, "{pages}");
        let (status, report) = admin
            .call(&Method::GET, &format!("/{id}"), Value::Null)
            .await;
        assert_eq!(status, StatusCode::OK, "{report}");

        // Refusals: a path outside the inbox names `path`; unknown ids and routes are 404s; a
        // document that did not fail is not retried.
        let (status, e) = admin
            .call(&Method::POST, "", json!({"path": "/etc/passwd"}))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
        assert_eq!(e["error"]["param"], "path", "{e}");
        let (status, e) = admin
            .call(&Method::POST, "", json!({"file": "a.pdf"}))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
        for path in ["/999", "/x", "/999/markdown"] {
            let (status, e) = admin.call(&Method::GET, path, Value::Null).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {e}");
        }
        let (status, e) = admin
            .call(&Method::POST, &format!("/{id}/retry"), Value::Null)
            .await;
        assert!(status.is_client_error(), "{e}");
        // A path served under other methods is a 405 naming them.
        let (status, e) = admin.call(&Method::PUT, "", Value::Null).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("GET, POST")
                || e["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("POST, GET"),
            "{e}"
        );

        let (status, deleted) = admin
            .call(&Method::DELETE, &format!("/{id}"), Value::Null)
            .await;
        assert_eq!(status, StatusCode::OK, "{deleted}");
        let (_, list) = admin.call(&Method::GET, "", Value::Null).await;
        assert_eq!(list, json!([]));
    }
}
