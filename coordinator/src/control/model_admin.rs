//! The admin API's model operations (`/api/v1/models...`): what runs, and load, unload, pin
//! and unpin a model, or unload every idle one (`POST /api/v1/models/unload`). They act on the data plane's upstream, on the data plane's runtime (the
//! admin API may be served from the control plane's own thread).

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use percent_encoding::percent_decode_str;
use serde_json::{Value, json};

use crate::data::core::Core;
use crate::error::ApiError;
use crate::upstream::{Readiness, SlotState, UpstreamError};

/// An operation on one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModelOp {
    Load,
    Unload,
    Pin,
    Unpin,
}

impl ModelOp {
    /// The operation and model of a `POST /api/v1/models/{*target}`'s target, `NAME/OP`: the
    /// name is what comes before the last `/` (it may hold `/` itself, or `%2F`), `%XX`
    /// decoded. An unknown operation or an empty name is a 404, as an unknown route is.
    pub fn parse(target: &str) -> Result<(ModelOp, String), ApiError> {
        let no_route = || {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!(
                    "no route for POST /api/v1/models/{target} (NAME/load, unload, pin, unpin)"
                ),
            )
            .code("unknown_url")
        };
        let (model, op) = target.rsplit_once('/').ok_or_else(no_route)?;
        let op = match op {
            "load" => ModelOp::Load,
            "unload" => ModelOp::Unload,
            "pin" => ModelOp::Pin,
            "unpin" => ModelOp::Unpin,
            _ => return Err(no_route()),
        };
        let model = percent_decode_str(model)
            .decode_utf8()
            .map_err(|_| ApiError::bad_request(format!("the model name {model} is not UTF-8")))?;
        if model.is_empty() {
            return Err(no_route());
        }
        Ok((op, model.into_owned()))
    }
}

fn upstream_error(e: UpstreamError) -> ApiError {
    match e {
        UpstreamError::UnknownModel(m) => ApiError::model_not_found(&m),
        UpstreamError::Unsupported(why) => {
            ApiError::new(StatusCode::CONFLICT, "invalid_request_error", why).code("unsupported")
        }
        UpstreamError::NoCapacity(m) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            format!("no room for `{m}` now"),
        )
        .code("no_capacity")
        .retry_after(5),
        UpstreamError::Failed(why) => {
            ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", why).code("upstream_error")
        }
    }
}

/// Runs `op` on `model`; its answer's JSON.
pub(crate) async fn run(core: Arc<Core>, op: ModelOp, model: String) -> Result<Value, ApiError> {
    let up = Arc::clone(core.upstream());
    if up.readiness(&model) == Readiness::Unknown {
        return Err(ApiError::model_not_found(&model));
    }
    match op {
        ModelOp::Load => {
            // Most important: an operator's preload may evict idle models of any priority.
            let budget = Duration::from_secs_f64(core.cfg().job_budget_s.clamp(1.0, 86_400.0));
            let took = core.preload(&model, i32::MIN, budget).await?;
            Ok(json!({"model": model, "ready": true, "took_s": took.as_secs_f64()}))
        }
        ModelOp::Unload => {
            let unloaded = up.unload(&model).await.map_err(upstream_error)?;
            if unloaded {
                core.places().room().freed();
            }
            Ok(json!({"model": model, "unloaded": unloaded}))
        }
        ModelOp::Pin | ModelOp::Unpin => {
            let pinned = op == ModelOp::Pin;
            up.pin(&model, pinned).map_err(upstream_error)?;
            Ok(json!({"model": model, "pinned": pinned}))
        }
    }
}

/// Unloads every model the upstream holds loaded and may unload (llama-swap's `/unload`): each
/// ready model that is neither pinned nor serving a request. Pinned and busy ones stay, and are
/// named; a fixed server (not loaded on demand) is not touched.
pub(crate) async fn unload_all(core: Arc<Core>) -> Result<Value, ApiError> {
    let up = Arc::clone(core.upstream());
    let (mut unloaded, mut kept) = (Vec::new(), Vec::new());
    for slot in up.slots() {
        if slot.state != SlotState::Ready || slot.port.is_none() {
            continue;
        }
        if slot.pinned || slot.active > 0 {
            kept.push(slot.model);
            continue;
        }
        match up.unload(&slot.model).await {
            Ok(true) => unloaded.push(slot.model),
            Ok(false) => kept.push(slot.model),
            // Served by something the upstream cannot unload (a fixed server).
            Err(UpstreamError::Unsupported(_) | UpstreamError::UnknownModel(_)) => {}
            Err(e) => return Err(upstream_error(e)),
        }
    }
    if !unloaded.is_empty() {
        core.places().room().freed();
    }
    Ok(json!({"unloaded": unloaded, "kept": kept}))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn targets_name_the_model_and_the_operation() {
        let ok = |t: &str| ModelOp::parse(t).ok();
        assert_eq!(
            ok("Qwen/Qwen2.5-7B/load"),
            Some((ModelOp::Load, "Qwen/Qwen2.5-7B".to_owned()))
        );
        assert_eq!(
            ok("Qwen%2FQwen2.5-7B/load"),
            Some((ModelOp::Load, "Qwen/Qwen2.5-7B".to_owned()))
        );
        assert_eq!(ok("m/unpin"), Some((ModelOp::Unpin, "m".to_owned())));
        for bad in ["/load", "m/explode", "load", "%2F/x", ""] {
            let e = ModelOp::parse(bad).unwrap_err();
            assert_eq!(e.status, StatusCode::NOT_FOUND, "{bad}");
        }
        assert_eq!(
            ModelOp::parse("%FF/load").unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
    }
}
