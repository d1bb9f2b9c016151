//! The model manifest ([`horos_manifest`]) as the coordinator uses it, and nothing else: a
//! route and a request's extension fields as the manifest's [`Attempt`], a [`RawObject`] body
//! read in place and edited around the client's bytes, and the manifest's errors as the
//! coordinator's ([`ShapeError`] → an [`ApiError`], [`EntryError`] → an [`InvalidConfig`]).

use bytes::Bytes;
use horos_manifest::{Attempt, Endpoint, EntryError, Fields, Payload, ShapeError};
use serde_json::Value;

use crate::data::request::{RawObject, RequestMeta};
use crate::data::route::Route;
use crate::error::{ApiError, InvalidConfig};

pub(crate) use horos_manifest::{Manifest, Reshaper};

/// What goes upstream for one attempt, and how its answer comes back.
#[derive(Debug)]
pub(crate) struct Shaped {
    /// The upstream path.
    pub path: &'static str,
    /// The body.
    pub payload: Bytes,
    /// Applied to a successful answer's body.
    pub reshaper: Option<Reshaper>,
}

impl Fields for RawObject {
    fn field(&self, key: &str) -> Option<Value> {
        self.get(key)
    }
}

fn endpoint(route: Route) -> Endpoint {
    Endpoint {
        path: route.path(),
        chat: route.is_chat(),
    }
}

/// The path a request on `route` is sent to for `model`: its completion endpoint for a chat the
/// manifest renders through a template, else the route's own.
pub(crate) fn upstream_path(manifest: &Manifest, route: Route, model: &str) -> &'static str {
    manifest.upstream_path(endpoint(route), model)
}

/// Shapes `body` (its `model` already set to the upstream's name) for `model` on `route`; `id`
/// names the answer (`chatcmpl-…`).
pub(crate) fn shape(
    manifest: &Manifest,
    route: Route,
    model: &str,
    body: &RawObject,
    meta: &RequestMeta,
    id: u64,
) -> Result<Shaped, ApiError> {
    let attempt = Attempt {
        model,
        endpoint: endpoint(route),
        thinking: meta.thinking,
        template: meta.template.as_deref(),
        id,
    };
    let shaped = manifest.shape(&attempt, body)?;
    let payload = match shaped.payload {
        Payload::Edited(edits) if edits.is_empty() => Bytes::from(body.to_vec()),
        Payload::Edited(edits) => {
            let mut body = body.clone();
            for (key, value) in &edits {
                body.set(key, value)?;
            }
            Bytes::from(body.to_vec())
        }
        Payload::Rendered(bytes) => bytes,
    };
    Ok(Shaped {
        path: shaped.path,
        payload,
        reshaper: shaped.reshaper,
    })
}

impl From<ShapeError> for ApiError {
    fn from(e: ShapeError) -> Self {
        match (&e, e.param()) {
            (ShapeError::Encode(source), _) => ApiError::internal(source.to_string()),
            (_, Some(param)) => ApiError::bad_request(e.to_string()).param(param),
            (_, None) => ApiError::bad_request(e.to_string()),
        }
    }
}

impl From<EntryError> for InvalidConfig {
    fn from(e: EntryError) -> Self {
        InvalidConfig {
            key: e.key(),
            value: e.value(),
            expected: e.expected(),
        }
    }
}
