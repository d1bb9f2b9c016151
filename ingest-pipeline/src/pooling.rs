//! [`PoolingEmbedder`]: a late-interaction model (ColPali, ColQwen class) served by vLLM's pooling
//! API with the `token_embed` task: a page image becomes N×D vectors, a text question M×D vectors
//! of the same model, so that MaxSim compares them.
//!
//! The wire format, from vLLM 0.32's `entrypoints/pooling/pooling/protocol.py`:
//!
//! - `POST /pooling` with `{"model", "task": "token_embed", "input": "question"}` (text:
//!   `PoolingCompletionRequest`) or `{"model", "task": "token_embed", "messages": [{"role":
//!   "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,…"}}]}]}`
//!   (an image: `PoolingChatRequest`);
//! - answer `{"model", "data": [{"index": 0, "object": "pooling", "data": [[f32; D]; N]}],
//!   "usage"}`: one matrix per input, one row per token.
//!
//! Answers are read bounded: at most [`MAX_RESPONSE_BYTES`] of JSON, [`MAX_VECTORS`] rows of at
//! most [`MAX_DIM`] finite values, every row the same length; anything else is
//! [`EmbedError::Shape`], never a panic.

use std::sync::Arc;
use std::time::Duration;

use horos_vllm_client::{ChatMessage, Client, ClientConfig, ContentPart, ErrorClass};
use serde::{Deserialize, Serialize};

use crate::embed::{EmbedError, VisualEmbedder};
use crate::maxsim::MultiVector;

/// The pooling endpoint's path (vLLM serves it at the root, not under `/v1`).
pub const POOLING_PATH: &str = "/pooling";

/// Largest answer read: a ColPali page (1,030 × 128 values as JSON) is about 2 MB.
pub const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

/// Most vectors accepted for one input (ColQwen2 at its largest image setting stays below).
pub const MAX_VECTORS: usize = 16_384;

/// Largest vector dimension accepted.
pub const MAX_DIM: usize = 4096;

/// A late-interaction model behind vLLM's `/pooling` (`token_embed`).
#[derive(Clone)]
pub struct PoolingEmbedder {
    client: Client,
    model: String,
}

impl std::fmt::Debug for PoolingEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolingEmbedder")
            .field("base_url", &self.client.base_url())
            .field("model", &self.model)
            .finish()
    }
}

#[derive(Serialize)]
struct TextRequest<'a> {
    model: &'a str,
    task: &'static str,
    input: &'a str,
}

#[derive(Serialize)]
struct ImageRequest<'a> {
    model: &'a str,
    task: &'static str,
    messages: [ChatMessage; 1],
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    data: ItemData,
}

/// What vLLM may put in an item's `data`: a matrix (`token_embed`), one vector (a model pooled
/// to one vector: the wrong task) or a base64 string (another `encoding_format`).
#[derive(Deserialize)]
#[serde(untagged)]
enum ItemData {
    Matrix(Vec<Vec<f32>>),
    Vector(Vec<f32>),
    Encoded(String),
}

impl PoolingEmbedder {
    /// A client for `model` served at `base_url` (e.g. `http://127.0.0.1:8002`, no `/v1`).
    pub fn new(base_url: &str, model: &str) -> Result<Self, EmbedError> {
        let mut config = ClientConfig::new(base_url)
            .total_timeout(Duration::from_secs(120))
            .max_concurrency(8);
        config.max_response_bytes = MAX_RESPONSE_BYTES;
        let client = Client::with_config(config).map_err(|e| EmbedError::Backend {
            message: e.to_string(),
            retryable: false,
        })?;
        Ok(Self::with_client(client, model))
    }

    /// Uses an existing client (its response limit applies).
    pub fn with_client(client: Client, model: &str) -> Self {
        Self {
            client,
            model: model.into(),
        }
    }

    /// The body sent for a text question.
    pub fn text_request(&self, text: &str) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(TextRequest {
            model: &self.model,
            task: "token_embed",
            input: text,
        })
    }

    /// The body sent for a PNG page image.
    pub fn image_request(&self, png: &[u8]) -> serde_json::Result<serde_json::Value> {
        let parts = vec![ContentPart::image_bytes(png, Some("image/png"))];
        serde_json::to_value(ImageRequest {
            model: &self.model,
            task: "token_embed",
            messages: [ChatMessage::user_parts(parts)],
        })
    }

    async fn pool(&self, body: serde_json::Value) -> Result<MultiVector, EmbedError> {
        let resp: Response =
            self.client
                .post(POOLING_PATH, &body)
                .await
                .map_err(|e| EmbedError::Backend {
                    retryable: matches!(
                        e.class(),
                        ErrorClass::Retryable | ErrorClass::ServerCrashed
                    ),
                    message: e.to_string(),
                })?;
        let mut items = resp.data.into_iter();
        let (Some(item), None) = (items.next(), items.next()) else {
            return Err(EmbedError::Shape(
                "expected exactly one pooled item for one input".into(),
            ));
        };
        matrix(item.data)
    }
}

/// The rows of one answer as a multi-vector, checked.
fn matrix(data: ItemData) -> Result<MultiVector, EmbedError> {
    let rows = match data {
        ItemData::Matrix(rows) => rows,
        ItemData::Vector(v) => {
            return Err(EmbedError::Shape(format!(
                "one vector of {} values per input: the model pools to one embedding, not token_embed",
                v.len()
            )));
        }
        ItemData::Encoded(s) => {
            return Err(EmbedError::Shape(format!(
                "an encoded answer ({} characters) where floats were asked",
                s.len()
            )));
        }
    };
    let dim = rows.first().map_or(0, Vec::len);
    if rows.is_empty() || dim == 0 {
        return Err(EmbedError::Shape("no vectors".into()));
    }
    if rows.len() > MAX_VECTORS || dim > MAX_DIM {
        return Err(EmbedError::Shape(format!(
            "{} vectors of {dim} values exceed the limits ({MAX_VECTORS} × {MAX_DIM})",
            rows.len()
        )));
    }
    if rows.iter().any(|r| r.len() != dim) {
        return Err(EmbedError::Shape("vectors of different lengths".into()));
    }
    if rows.iter().flatten().any(|v| !v.is_finite()) {
        return Err(EmbedError::Shape("a value is not a finite number".into()));
    }
    MultiVector::from_rows(&rows).ok_or_else(|| EmbedError::Shape("ragged vectors".into()))
}

impl VisualEmbedder for PoolingEmbedder {
    fn name(&self) -> &str {
        &self.model
    }

    async fn embed_image(&self, png: Arc<Vec<u8>>) -> Result<MultiVector, EmbedError> {
        let body = self
            .image_request(&png)
            .map_err(|e| EmbedError::Shape(e.to_string()))?;
        self.pool(body).await
    }

    async fn embed_query(&self, text: String) -> Result<MultiVector, EmbedError> {
        let body = self
            .text_request(&text)
            .map_err(|e| EmbedError::Shape(e.to_string()))?;
        self.pool(body).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(json: &str) -> Result<MultiVector, EmbedError> {
        let r: Response =
            serde_json::from_str(json).map_err(|e| EmbedError::Shape(e.to_string()))?;
        let mut it = r.data.into_iter();
        matrix(it.next().ok_or(EmbedError::Shape("none".into()))?.data)
    }

    #[test]
    fn answers_of_the_wrong_shape_are_typed_errors() {
        let mv =
            parse(r#"{"data":[{"index":0,"object":"pooling","data":[[1,0],[0,1],[0.5,0.5]]}]}"#)
                .unwrap();
        assert_eq!((mv.dim, mv.len()), (2, 3));
        for bad in [
            r#"{"data":[{"index":0,"data":[0.1,0.2]}]}"#,
            r#"{"data":[{"index":0,"data":"AAAA"}]}"#,
            r#"{"data":[{"index":0,"data":[[1,2],[3]]}]}"#,
            r#"{"data":[{"index":0,"data":[]}]}"#,
            r#"{"data":[{"index":0,"data":[[]]}]}"#,
            r#"{"data":[{"index":0,"data":[[1e300]]}]}"#,
            r#"{"data":[{"index":0,"data":[["x"]]}]}"#,
        ] {
            let e = parse(bad).unwrap_err();
            assert!(matches!(e, EmbedError::Shape(_)), "{bad}: {e}");
            assert!(!e.is_retryable());
        }
        let wide = format!(
            r#"{{"data":[{{"data":[[{}]]}}]}}"#,
            vec!["0"; MAX_DIM + 1].join(",")
        );
        assert!(matches!(parse(&wide), Err(EmbedError::Shape(_))));
    }

    #[test]
    fn requests_have_vllms_shapes() {
        let e = PoolingEmbedder::new("http://127.0.0.1:9", "vidore/colpali-v1.3-hf").unwrap();
        let t = e.text_request("which table lists the types?").unwrap();
        assert_eq!(t["task"], "token_embed");
        assert_eq!(t["input"], "which table lists the types?");
        let i = e.image_request(b"\x89PNG").unwrap();
        assert_eq!(i["messages"][0]["role"], "user");
        let url = i["messages"][0]["content"][0]["image_url"]["url"]
            .as_str()
            .unwrap();
        assert!(url.starts_with("data:image/png;base64,"), "{url}");
    }
}
