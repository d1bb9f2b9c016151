//! The VRAM ledger's leases on an admin API (`/api/v1/leases...`, behind its key): any process —
//! a training job, a script — books GPU memory in the ledger the model pool places its models
//! in, so no two holders book the same megabytes. Acquire with a TTL, renew before it runs out,
//! release when done. [`LeaseAdmin`] is the seam's [`AdminExtension`]: a gateway serves it
//! without knowing the ledger.
//!
//! - `GET /api/v1/leases`: the live leases, `{"data": [...]}`.
//! - `POST /api/v1/leases` with `{"owner", "parts": [[gpu, mb], ...], "ttl_s", "pid"?}`: 201 and
//!   the lease, or 409 `insufficient_vram` (all parts or none).
//! - `POST /api/v1/leases/ID/renew` with `{"ttl_s"}`; `DELETE /api/v1/leases/ID`: 404
//!   `lease_not_found` once it expired or was released.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use horos_server_control::routes::{PathParams, RouteError, RouteTable};
use horos_server_control::{AdminAnswer, AdminExtension, error_answer};
use http::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::ledger::{LeaseRequest, LedgerError, VramLedger, lease_ttl};

/// The ledger's leases as admin routes under `/api/v1/leases`.
#[derive(Debug, Clone)]
pub struct LeaseAdmin(pub Arc<VramLedger>);

/// `POST /api/v1/leases`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AcquireBody {
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
struct RenewBody {
    ttl_s: f64,
}

fn bad(message: impl Into<String>, param: Option<&str>) -> AdminAnswer {
    error_answer(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        message,
        None,
        param,
    )
}

fn ttl(s: f64) -> Result<Duration, AdminAnswer> {
    lease_ttl(s).ok_or_else(|| {
        bad(
            "ttl_s must be a number of seconds, at most 30 days",
            Some("ttl_s"),
        )
    })
}

fn ledger_error(e: LedgerError) -> AdminAnswer {
    match e {
        LedgerError::Insufficient { .. } => error_answer(
            StatusCode::CONFLICT,
            "invalid_request_error",
            e.to_string(),
            Some("insufficient_vram"),
            None,
        ),
        other => error_answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            format!("VRAM ledger: {other}"),
            None,
            None,
        ),
    }
}

fn gone(id: &str) -> AdminAnswer {
    error_answer(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("no live lease {id} (expired or released)"),
        Some("lease_not_found"),
        None,
    )
}

/// Runs a ledger operation on the blocking pool (the ledger is a SQLite file).
async fn blocking(f: impl FnOnce() -> AdminAnswer + Send + 'static) -> AdminAnswer {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        error_answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            e.to_string(),
            None,
            None,
        )
    })
}

fn parse<T: serde::de::DeserializeOwned>(body: Value, what: &str) -> Result<T, AdminAnswer> {
    serde_json::from_value(body).map_err(|e| bad(format!("{what}: {e}"), None))
}

impl LeaseAdmin {
    async fn acquire(&self, body: Value) -> Result<AdminAnswer, AdminAnswer> {
        let b: AcquireBody = parse(body, "a lease request")?;
        if b.owner.trim().is_empty() || b.owner.len() > 256 {
            return Err(bad("owner: 1 to 256 bytes", Some("owner")));
        }
        if b.parts.is_empty() || b.parts.iter().any(|(_, mb)| *mb == 0) {
            return Err(bad("parts: one or more [gpu, mb], mb > 0", Some("parts")));
        }
        let req = LeaseRequest {
            owner: b.owner,
            pid: b.pid,
            parts: b.parts,
            ttl: ttl(b.ttl_s)?,
        };
        let ledger = Arc::clone(&self.0);
        Ok(blocking(move || match ledger.acquire(&req) {
            Ok(lease) => (
                StatusCode::CREATED,
                serde_json::to_value(lease).unwrap_or(Value::Null),
            ),
            Err(e) => ledger_error(e),
        })
        .await)
    }

    async fn renew(&self, id: String, body: Value) -> Result<AdminAnswer, AdminAnswer> {
        let b: RenewBody = parse(body, "a renewal")?;
        let t = ttl(b.ttl_s)?;
        let ledger = Arc::clone(&self.0);
        Ok(blocking(move || match ledger.renew(&id, t) {
            Ok(true) => (StatusCode::OK, json!({"id": id, "renewed": true})),
            Ok(false) => gone(&id),
            Err(e) => ledger_error(e),
        })
        .await)
    }
}

/// A lease route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseRoute {
    List,
    Acquire,
    Renew,
    Release,
}

/// The lease routes (under `/api/v1/leases`), built once; the 500 of a table that could not
/// be built (a route its tests refuse).
fn lease_routes() -> Result<&'static RouteTable<LeaseRoute>, AdminAnswer> {
    static TABLE: OnceLock<Result<RouteTable<LeaseRoute>, RouteError>> = OnceLock::new();
    let built = TABLE.get_or_init(|| {
        RouteTable::new([
            (Some(Method::GET), "/", LeaseRoute::List),
            (Some(Method::POST), "/", LeaseRoute::Acquire),
            (Some(Method::POST), "/{id}/renew", LeaseRoute::Renew),
            (Some(Method::DELETE), "/{id}", LeaseRoute::Release),
        ])
    });
    built.as_ref().map_err(RouteError::answer)
}

/// The lease id of the path, `%XX` decoded; a 400 if it is not UTF-8 once decoded.
fn lease_id(params: &PathParams<'_, '_>) -> Result<String, AdminAnswer> {
    params.decoded("id").map(Cow::into_owned).map_err(|e| {
        error_answer(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            e.to_string(),
            None,
            Some("id"),
        )
    })
}

impl LeaseAdmin {
    async fn route(
        &self,
        method: &Method,
        rest: &str,
        body: Value,
    ) -> Result<AdminAnswer, AdminAnswer> {
        let path = if rest.is_empty() { "/" } else { rest };
        let found = lease_routes()?
            .at(method, path)
            .map_err(|miss| miss.answer(method, &format!("/api/v1/leases{rest}")))?;
        let ledger = Arc::clone(&self.0);
        match *found.route {
            LeaseRoute::List => Ok(blocking(move || match ledger.leases() {
                Ok(rows) => (StatusCode::OK, json!({ "data": rows })),
                Err(e) => ledger_error(e),
            })
            .await),
            LeaseRoute::Acquire => self.acquire(body).await,
            LeaseRoute::Renew => self.renew(lease_id(&found.params)?, body).await,
            LeaseRoute::Release => {
                let id = lease_id(&found.params)?;
                Ok(blocking(move || match ledger.release(&id) {
                    Ok(true) => (StatusCode::OK, json!({"id": id, "released": true})),
                    Ok(false) => gone(&id),
                    Err(e) => ledger_error(e),
                })
                .await)
            }
        }
    }
}

#[async_trait]
impl AdminExtension for LeaseAdmin {
    fn name(&self) -> &str {
        "leases"
    }

    async fn call(&self, method: &Method, rest: &str, body: Value) -> AdminAnswer {
        self.route(method, rest, body).await.unwrap_or_else(|e| e)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn short_and_odd_paths_are_answered_not_panicked() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Arc::new(VramLedger::open(dir.path().join("ledger.db")).unwrap());
        let api = LeaseAdmin(ledger);
        for (m, rest) in [
            (Method::POST, "/renew"),
            (Method::POST, "renew"),
            (Method::POST, "//renew"),
            (Method::POST, "/a/b/renew"),
            (Method::DELETE, "/"),
            (Method::DELETE, "/a/b"),
            (Method::PATCH, "/x"),
            (Method::GET, "/%FF/renew"),
            (Method::DELETE, "/%FF"),
        ] {
            let (code, v) = api.call(&m, rest, Value::Null).await;
            assert!(code.is_client_error(), "{m} {rest}: {code} {v}");
            assert!(v["error"]["message"].is_string(), "{m} {rest}: {v}");
        }
        // A path served under other methods: a 405 naming them, from the same table.
        let (code, v) = api.call(&Method::PUT, "", Value::Null).await;
        assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED, "{v}");
        assert_eq!(v["error"]["code"], "method_not_allowed", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("GET, POST"),
            "{v}"
        );
        let (code, v) = api.call(&Method::GET, "/abc/renew", Value::Null).await;
        assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED, "{v}");
        let (code, _) = api.call(&Method::DELETE, "/%FF", Value::Null).await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn leases_are_booked_renewed_and_released_through_the_admin_routes() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Arc::new(VramLedger::open(dir.path().join("ledger.db")).unwrap());
        ledger.set_capacity(0, 1000).unwrap();
        let api = LeaseAdmin(Arc::clone(&ledger));
        assert_eq!(api.name(), "leases");
        let (code, lease) = api
            .call(
                &Method::POST,
                "",
                json!({"owner": "train", "parts": [[0, 600]], "ttl_s": 60}),
            )
            .await;
        assert_eq!(code, StatusCode::CREATED, "{lease}");
        let id = lease["id"].as_str().unwrap().to_owned();
        // All parts or none: 600 more do not fit in what is left.
        let (code, v) = api
            .call(
                &Method::POST,
                "",
                json!({"owner": "greedy", "parts": [[0, 600]], "ttl_s": 60}),
            )
            .await;
        assert_eq!(code, StatusCode::CONFLICT);
        assert_eq!(v["error"]["code"], "insufficient_vram");
        let (code, v) = api
            .call(
                &Method::POST,
                "",
                json!({"owner": "", "parts": [], "ttl_s": 1}),
            )
            .await;
        assert_eq!(
            (code, &v["error"]["param"]),
            (StatusCode::BAD_REQUEST, &json!("owner"))
        );
        let (code, v) = api.call(&Method::GET, "", Value::Null).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(v["data"].as_array().unwrap().len(), 1, "{v}");
        let renew = format!("/{id}/renew");
        let (code, _) = api.call(&Method::POST, &renew, json!({"ttl_s": 120})).await;
        assert_eq!(code, StatusCode::OK);
        let (code, _) = api.call(&Method::POST, &renew, json!({"ttl_s": -1})).await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        let gone = format!("/{id}");
        assert_eq!(
            api.call(&Method::DELETE, &gone, Value::Null).await.0,
            StatusCode::OK
        );
        let (code, v) = api.call(&Method::DELETE, &gone, Value::Null).await;
        assert_eq!(
            (code, &v["error"]["code"]),
            (StatusCode::NOT_FOUND, &json!("lease_not_found"))
        );
        assert_eq!(
            api.call(&Method::PUT, "", Value::Null).await.0,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            api.call(&Method::GET, "/a/b", Value::Null).await.0,
            StatusCode::NOT_FOUND
        );
    }
}
