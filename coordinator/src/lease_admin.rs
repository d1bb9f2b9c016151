//! The admin API's VRAM leases (`/api/v1/leases...`): any process — a training job, a script —
//! books GPU memory in the ledger the model pool places its models in, so no two holders book
//! the same megabytes. Acquire with a TTL, renew before it runs out, release when done.

use std::sync::Arc;
use std::time::Duration;

use horos_gpu_alloc::ledger::{LeaseRequest, LedgerError, VramLedger, lease_ttl};
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;

/// `POST /api/v1/leases`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AcquireBody {
    owner: String,
    /// `[[gpu, mb], ...]`.
    parts: Vec<(u32, u64)>,
    ttl_s: f64,
    #[serde(default)]
    pid: Option<u32>,
}

/// `POST /api/v1/leases/ID/renew`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RenewBody {
    ttl_s: f64,
}

fn ttl(s: f64) -> Result<Duration, ApiError> {
    lease_ttl(s).ok_or_else(|| {
        ApiError::bad_request("ttl_s must be a number of seconds, at most 30 days").param("ttl_s")
    })
}

fn ledger_error(e: LedgerError) -> ApiError {
    match e {
        LedgerError::Insufficient { .. } => {
            ApiError::new(StatusCode::CONFLICT, "invalid_request_error", e.to_string())
                .code("insufficient_vram")
        }
        other => ApiError::internal(format!("VRAM ledger: {other}")),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
}

/// The live leases.
pub(crate) async fn list(ledger: Arc<VramLedger>) -> Result<Value, ApiError> {
    blocking(move || {
        let rows = ledger.leases().map_err(ledger_error)?;
        Ok(json!({ "data": rows }))
    })
    .await
}

/// Acquires a lease (all parts or none).
pub(crate) async fn acquire(ledger: Arc<VramLedger>, body: &[u8]) -> Result<Value, ApiError> {
    let b: AcquireBody = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("a lease request: {e}")))?;
    if b.owner.trim().is_empty() || b.owner.len() > 256 {
        return Err(ApiError::bad_request("owner: 1 to 256 bytes").param("owner"));
    }
    if b.parts.is_empty() || b.parts.iter().any(|(_, mb)| *mb == 0) {
        return Err(ApiError::bad_request("parts: one or more [gpu, mb], mb > 0").param("parts"));
    }
    let req = LeaseRequest {
        owner: b.owner,
        pid: b.pid,
        parts: b.parts,
        ttl: ttl(b.ttl_s)?,
    };
    blocking(move || {
        let lease = ledger.acquire(&req).map_err(ledger_error)?;
        serde_json::to_value(lease).map_err(|e| ApiError::internal(e.to_string()))
    })
    .await
}

/// Renews a live lease.
pub(crate) async fn renew(
    ledger: Arc<VramLedger>,
    id: String,
    body: &[u8],
) -> Result<Value, ApiError> {
    let b: RenewBody = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("a renewal: {e}")))?;
    let t = ttl(b.ttl_s)?;
    blocking(move || match ledger.renew(&id, t).map_err(ledger_error)? {
        true => Ok(json!({"id": id, "renewed": true})),
        false => Err(gone(&id)),
    })
    .await
}

/// Releases a lease.
pub(crate) async fn release(ledger: Arc<VramLedger>, id: String) -> Result<Value, ApiError> {
    blocking(move || match ledger.release(&id).map_err(ledger_error)? {
        true => Ok(json!({"id": id, "released": true})),
        false => Err(gone(&id)),
    })
    .await
}

fn gone(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("no live lease {id} (expired or released)"),
    )
    .code("lease_not_found")
}
