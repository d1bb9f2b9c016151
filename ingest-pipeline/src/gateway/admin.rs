//! The pipeline's workers on the admin API: `/api/v1/ingest/workers`, changed while it runs.

use std::sync::OnceLock;

use async_trait::async_trait;
use horos_server_control::routes::{RouteError, RouteTable};
use horos_server_control::{AdminAnswer, AdminExtension, error_answer};
use http::{Method, StatusCode};
use serde_json::{Map, Value, json};

use super::LatePipeline;
use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::pipeline::{Pipeline, Stage};
use crate::vision::VisionReader;

/// `/api/v1/ingest/workers` on the admin API: `GET` each stage's workers (target and running),
/// `PUT {"image_to_ocr": 4, ...}` changes them while the pipeline runs (every change checked
/// before any is applied).
pub struct IngestAdmin<R, T, V>(pub LatePipeline<R, T, V>);

/// The most workers one stage may be given at run time.
const MAX_WORKERS: u64 = 64;

#[async_trait]
impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> AdminExtension for IngestAdmin<R, T, V> {
    fn name(&self) -> &str {
        "ingest"
    }

    async fn call(&self, method: &Method, rest: &str, body: Value) -> AdminAnswer {
        let Some(pipeline) = self.0.get() else {
            return error_answer(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "the ingest pipeline is starting",
                None,
                None,
            );
        };
        let route = match worker_routes() {
            Ok(table) => table.at(method, rest).map(|found| *found.route),
            Err(e) => {
                return error_answer(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    e.to_string(),
                    None,
                    None,
                );
            }
        };
        match route {
            Err(miss) => return miss.answer(method, &format!("/api/v1/ingest{rest}")),
            Ok(Workers::Read) => {}
            Ok(Workers::Change) => {
                let changes = match parse_changes(&body) {
                    Ok(changes) => changes,
                    Err(why) => return invalid(StatusCode::BAD_REQUEST, why),
                };
                for (stage, n) in changes {
                    tracing::info!(stage = stage.queue(), workers = n, "ingest workers changed");
                    pipeline.set_workers(stage, n);
                }
            }
        }
        (StatusCode::OK, workers(pipeline))
    }
}

/// A route of the workers' path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workers {
    Read,
    Change,
}

/// The ingest admin routes (under `/api/v1/ingest`), built once: the same table answers their
/// 404 and 405.
fn worker_routes() -> Result<&'static RouteTable<Workers>, &'static RouteError> {
    static TABLE: OnceLock<Result<RouteTable<Workers>, RouteError>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            RouteTable::new([
                (Some(Method::GET), "/workers", Workers::Read),
                (Some(Method::PUT), "/workers", Workers::Change),
            ])
        })
        .as_ref()
}

/// A request at fault, answered `status`.
fn invalid(status: StatusCode, message: String) -> AdminAnswer {
    error_answer(status, "invalid_request_error", message, None, None)
}

/// The changes of a `PUT` body `{"STAGE": WORKERS, ...}`, or why it is refused.
fn parse_changes(body: &Value) -> Result<Vec<(Stage, usize)>, String> {
    let changes = body
        .as_object()
        .ok_or("the body is {\"STAGE\": WORKERS, ...}")?;
    let mut parsed = Vec::with_capacity(changes.len());
    for (name, n) in changes {
        let stage = Stage::ALL
            .into_iter()
            .find(|s| s.queue() == name)
            .ok_or_else(|| format!("`{name}` is not a stage of the pipeline"))?;
        let n = n
            .as_u64()
            .filter(|n| *n <= MAX_WORKERS)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                format!("`{name}`: workers must be an integer from 0 to {MAX_WORKERS}")
            })?;
        parsed.push((stage, n));
    }
    Ok(parsed)
}

/// Each stage's workers: `{"STAGE": {"workers": TARGET, "running": N}}`.
fn workers<R: VisionReader, T: TextEmbedder, V: VisualEmbedder>(
    pipeline: &Pipeline<R, T, V>,
) -> Value {
    let stages: Map<String, Value> = Stage::ALL
        .into_iter()
        .map(|s| {
            (
                s.queue().to_owned(),
                json!({"workers": pipeline.target_workers(s),
                       "running": pipeline.active_workers(s)}),
            )
        })
        .collect();
    Value::Object(stages)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::embed::{HashingEmbedder, PixelPatchFallback};
    use crate::pipeline::PipelineConfig;
    use crate::vision::TesseractReader;

    type TestAdmin = IngestAdmin<TesseractReader, HashingEmbedder, PixelPatchFallback>;

    fn admin(dir: &std::path::Path) -> TestAdmin {
        let pipeline = Pipeline::open(
            PipelineConfig::new(dir),
            TesseractReader::default(),
            HashingEmbedder::default(),
            PixelPatchFallback::default(),
        )
        .unwrap();
        IngestAdmin(Arc::new(std::sync::OnceLock::from(pipeline)))
    }

    #[tokio::test]
    async fn workers_are_read_and_changed_per_stage() {
        let dir = tempfile::tempdir().unwrap();
        let a = admin(dir.path());
        let (status, body) = a.call(&Method::GET, "/workers", Value::Null).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["image_to_ocr"]["workers"], 8);
        assert_eq!(body["image_to_ocr"]["running"], 0);
        let (status, body) = a
            .call(
                &Method::PUT,
                "/workers",
                json!({"image_to_ocr": 3, "embed_text": 0}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["image_to_ocr"]["workers"], 3);
        assert_eq!(body["embed_text"]["workers"], 0);
    }

    #[tokio::test]
    async fn a_bad_change_is_refused_and_none_is_applied() {
        let dir = tempfile::tempdir().unwrap();
        let a = admin(dir.path());
        for (body, why) in [
            (json!({"image_to_ocr": 3, "ocr": 1}), "not a stage"),
            (json!({"image_to_ocr": 3, "embed_text": 65}), "from 0 to 64"),
            (json!({"embed_text": -1}), "from 0 to 64"),
            (json!([1]), "the body is"),
        ] {
            let (status, answer) = a.call(&Method::PUT, "/workers", body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST);
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains(why), "{message}");
            assert_eq!(answer["error"]["type"], "invalid_request_error");
        }
        let (_, body) = a.call(&Method::GET, "/workers", Value::Null).await;
        assert_eq!(body["image_to_ocr"]["workers"], 8);
    }

    #[tokio::test]
    async fn other_routes_methods_and_a_pipeline_not_started_are_answered() {
        let dir = tempfile::tempdir().unwrap();
        let a = admin(dir.path());
        let (status, _) = a.call(&Method::GET, "/stages", Value::Null).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = a.call(&Method::DELETE, "/workers", Value::Null).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        let starting: TestAdmin = IngestAdmin(Arc::default());
        let (status, answer) = starting.call(&Method::GET, "/workers", Value::Null).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            answer["error"]["message"],
            "the ingest pipeline is starting"
        );
    }
}
