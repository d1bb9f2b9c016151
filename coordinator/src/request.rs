//! Reading a request body: the size limit, JSON parsing, and the coordinator's extension
//! fields (`x_*`, `keep_alive`), which are taken out before the body goes upstream.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// What the coordinator reads from a request besides the upstream payload.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestMeta {
    /// `x_client_id`: who is calling (logs, decisions).
    pub client_id: Option<String>,
    /// `x_priority`: smaller is more important.
    pub priority: Option<i32>,
    /// `x_timeout_s`: the call's time budget, seconds.
    pub timeout_s: Option<f64>,
    /// `x_task`: a task of the registry.
    pub task: Option<String>,
    /// `keep_alive` (or `x_keep_alive`): how long the model stays warm after the call.
    pub keep_alive: Option<Duration>,
}

/// Reads a whole body, refusing more than `limit` bytes (413).
pub async fn read_limited(body: Incoming, limit: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::too_large(limit)),
        Err(e) => Err(ApiError::bad_request(format!(
            "could not read the body: {e}"
        ))),
    }
}

/// Parses a JSON object body (400 otherwise).
pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!("malformed JSON body: {e}"))),
    }
}

/// A duration given as seconds (number) or text with a unit (`"90s"`, `"5m"`, `"1h"`); a
/// negative number means "as long as possible" (capped at a day).
pub fn parse_keep_alive(v: &Value) -> Result<Duration, ApiError> {
    let bad = || ApiError::bad_request("keep_alive must be seconds or text like \"5m\"");
    let secs = match v {
        Value::Number(n) => n.as_f64().ok_or_else(bad)?,
        Value::String(s) => {
            let s = s.trim();
            let (num, mult) = match s.char_indices().last() {
                Some((i, 's')) => (&s[..i], 1.0),
                Some((i, 'm')) => (&s[..i], 60.0),
                Some((i, 'h')) => (&s[..i], 3600.0),
                _ => (s, 1.0),
            };
            num.trim().parse::<f64>().map_err(|_| bad())? * mult
        }
        _ => return Err(bad()),
    };
    if !secs.is_finite() {
        return Err(bad());
    }
    Ok(if secs < 0.0 {
        Duration::from_secs(86_400)
    } else {
        Duration::from_secs_f64(secs.min(86_400.0 * 365.0))
    })
}

/// Takes the extension fields out of `body`: every `x_*` key and `keep_alive` are removed;
/// the known ones are returned. Wrong types are a 400.
pub fn take_meta(body: &mut Map<String, Value>) -> Result<RequestMeta, ApiError> {
    let mut meta = RequestMeta::default();
    let keys: Vec<String> = body
        .keys()
        .filter(|k| k.starts_with("x_") || k.as_str() == "keep_alive")
        .cloned()
        .collect();
    for k in keys {
        let Some(v) = body.remove(&k) else { continue };
        match k.as_str() {
            "x_client_id" => {
                meta.client_id = Some(match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                })
            }
            "x_priority" => {
                let p = v
                    .as_i64()
                    .and_then(|p| i32::try_from(p).ok())
                    .ok_or_else(|| {
                        ApiError::bad_request("x_priority must be an integer").param("x_priority")
                    })?;
                meta.priority = Some(p);
            }
            "x_timeout_s" => {
                let t = v
                    .as_f64()
                    .filter(|t| t.is_finite() && *t > 0.0)
                    .ok_or_else(|| {
                        ApiError::bad_request("x_timeout_s must be a positive number")
                            .param("x_timeout_s")
                    })?;
                meta.timeout_s = Some(t);
            }
            "x_task" => {
                meta.task = Some(
                    v.as_str()
                        .ok_or_else(|| {
                            ApiError::bad_request("x_task must be a string").param("x_task")
                        })?
                        .to_owned(),
                )
            }
            "keep_alive" | "x_keep_alive" => {
                meta.keep_alive = Some(parse_keep_alive(&v).map_err(|e| e.param(&k))?)
            }
            _ => {} // other x_* fields: dropped, never forwarded
        }
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strips_every_x_field() {
        let Value::Object(mut m) = json!({
            "model": "m", "x_client_id": "c1", "x_priority": 2, "x_other": {"a": 1},
            "x_timeout_s": 3.5, "keep_alive": "5m", "x_task": "t", "temperature": 0
        }) else {
            unreachable!()
        };
        let meta = take_meta(&mut m).unwrap();
        assert_eq!(meta.client_id.as_deref(), Some("c1"));
        assert_eq!(meta.priority, Some(2));
        assert_eq!(meta.timeout_s, Some(3.5));
        assert_eq!(meta.task.as_deref(), Some("t"));
        assert_eq!(meta.keep_alive, Some(Duration::from_secs(300)));
        assert!(m.keys().all(|k| !k.starts_with("x_") && k != "keep_alive"));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn wrong_types_are_400() {
        let Value::Object(mut m) = json!({"x_priority": "high"}) else {
            unreachable!()
        };
        let e = take_meta(&mut m).unwrap_err();
        assert_eq!(e.status, 400);
        assert_eq!(e.param.as_deref(), Some("x_priority"));
        assert!(parse_object(b"{nope").is_err());
        assert!(parse_object(b"[1]").is_err());
    }

    #[test]
    fn keep_alive_forms() {
        assert_eq!(
            parse_keep_alive(&json!(10)).unwrap(),
            Duration::from_secs(10)
        );
        assert_eq!(
            parse_keep_alive(&json!("2h")).unwrap(),
            Duration::from_secs(7200)
        );
        assert_eq!(
            parse_keep_alive(&json!("30s")).unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(
            parse_keep_alive(&json!(-1)).unwrap(),
            Duration::from_secs(86_400)
        );
        assert!(parse_keep_alive(&json!("soon")).is_err());
        assert!(parse_keep_alive(&json!(true)).is_err());
    }
}
