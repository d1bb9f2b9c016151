//! The ingest pipeline on the coordinator's admin API: its workers per stage, changed while it
//! runs.

use async_trait::async_trait;
use serde_json::Value;

use crate::ingest::LatePipeline;

/// `/api/v1/ingest/workers` on the coordinator's admin API: `GET` each stage's workers (target
/// and running), `PUT {"image_to_ocr": 4, ...}` changes them while the pipeline runs.
pub struct IngestAdmin(pub LatePipeline);

/// The most workers one stage may be given at run time.
const MAX_WORKERS: u64 = 64;

#[async_trait]
impl horos_coordinator::AdminExtension for IngestAdmin {
    fn name(&self) -> &str {
        "ingest"
    }

    async fn call(
        &self,
        method: &http::Method,
        rest: &str,
        body: Value,
    ) -> horos_coordinator::AdminAnswer {
        use http::StatusCode;
        use ingest_pipeline::pipeline::Stage;
        let error =
            |status: StatusCode, m: String| (status, serde_json::json!({"error": {"message": m}}));
        let Some(pipeline) = self.0.get() else {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the ingest pipeline is starting".into(),
            );
        };
        if rest != "/workers" {
            return error(
                StatusCode::NOT_FOUND,
                format!("no route /api/v1/ingest{rest}"),
            );
        }
        if *method == http::Method::PUT {
            let Some(changes) = body.as_object() else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "the body is {\"STAGE\": WORKERS, ...}".into(),
                );
            };
            // Every change checked before any is applied.
            let mut parsed = Vec::new();
            for (name, n) in changes {
                let stage = Stage::ALL.into_iter().find(|s| s.queue() == name);
                match (stage, n.as_u64().filter(|n| *n <= MAX_WORKERS)) {
                    (Some(stage), Some(n)) => parsed.push((stage, n as usize)),
                    (None, _) => {
                        return error(
                            StatusCode::BAD_REQUEST,
                            format!("`{name}` is not a stage of the pipeline"),
                        );
                    }
                    (_, None) => {
                        return error(
                            StatusCode::BAD_REQUEST,
                            format!("`{name}`: workers must be an integer from 0 to {MAX_WORKERS}"),
                        );
                    }
                }
            }
            for (stage, n) in parsed {
                tracing::info!(stage = stage.queue(), workers = n, "ingest workers changed");
                pipeline.set_workers(stage, n);
            }
        } else if *method != http::Method::GET {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{method} is not allowed on /api/v1/ingest/workers"),
            );
        }
        let stages: serde_json::Map<String, Value> = Stage::ALL
            .into_iter()
            .map(|s| {
                (
                    s.queue().to_owned(),
                    serde_json::json!({"workers": pipeline.target_workers(s),
                                       "running": pipeline.active_workers(s)}),
                )
            })
            .collect();
        (StatusCode::OK, Value::Object(stages))
    }
}
