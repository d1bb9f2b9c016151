//! The admin API's client profiles: `GET /api/v1/profiles`, and `GET`, `PUT`, `DELETE`
//! `/api/v1/profiles/{name}` (a [`ClientProfile`] as JSON). A change applies to the next
//! request and is kept in the state file, if there is one (see [`crate::tenancy::profiles`]); the
//! database is written on a blocking thread.

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::tenancy::profiles::{ClientProfile, Profiles};

fn not_found(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("no profile `{name}`"),
    )
    .code("profile_not_found")
}

/// Answers one profiles call; `body` is read only for a `PUT`.
pub(crate) fn handle(
    profiles: &Profiles,
    method: &Method,
    name: Option<&str>,
    body: Option<Bytes>,
) -> Result<(StatusCode, Value), ApiError> {
    match (method, name) {
        (&Method::GET, None) => Ok((StatusCode::OK, json!({ "profiles": profiles.all() }))),
        (&Method::GET, Some(n)) => {
            let p = profiles.get(n).ok_or_else(|| not_found(n))?;
            Ok((StatusCode::OK, json!({ "name": n, "profile": p })))
        }
        (&Method::PUT, Some(n)) => {
            let body = body.unwrap_or_default();
            let p: ClientProfile = serde_json::from_slice(&body)
                .map_err(|e| ApiError::bad_request(format!("not a client profile: {e}")))?;
            profiles.put(n, p.clone())?;
            Ok((StatusCode::OK, json!({ "name": n, "profile": p })))
        }
        (&Method::DELETE, Some(n)) => match profiles.remove(n)? {
            true => Ok((StatusCode::OK, json!({ "name": n, "deleted": true }))),
            false => Err(not_found(n)),
        },
        _ => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!("{method} is not allowed here (GET the list; GET, PUT, DELETE one)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_put_get_delete() {
        let p = Profiles::default();
        let body = Bytes::from_static(br#"{"aliases":{"fast":"small"},"priority":2}"#);
        let (s, v) = handle(&p, &Method::PUT, Some("c1"), Some(body)).unwrap();
        assert_eq!(s, StatusCode::OK);
        assert_eq!(v["profile"]["aliases"]["fast"], "small");
        let (_, v) = handle(&p, &Method::GET, None, None).unwrap();
        assert_eq!(v["profiles"]["c1"]["priority"], 2);
        let e = handle(
            &p,
            &Method::PUT,
            Some("c1"),
            Some(Bytes::from_static(b"{\"nope\":1}")),
        )
        .unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(handle(&p, &Method::DELETE, Some("c1"), None).is_ok());
        assert_eq!(
            handle(&p, &Method::GET, Some("c1"), None)
                .unwrap_err()
                .status,
            StatusCode::NOT_FOUND
        );
    }
}
