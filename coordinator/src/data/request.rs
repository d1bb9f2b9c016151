//! Reading a request body: the size limit, JSON parsing, and the coordinator's extension
//! fields (`x_*`, `keep_alive`), which are taken out before the body goes upstream.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use std::ops::Range;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
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
    /// `x_thinking`: the model's thinking mode for this call (overrides its manifest's).
    pub thinking: Option<bool>,
    /// The built-in chat template of the caller's profile, for models whose template is
    /// rendered here (set from the profile, never from the request).
    pub template: Option<String>,
}

/// Reads a whole body, refusing more than `limit` bytes (413) or one that takes longer than
/// `timeout` to arrive (408).
pub async fn read_limited(
    body: Incoming,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    let Ok(collected) = tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await
    else {
        return Err(ApiError::body_timeout(timeout));
    };
    match collected {
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

/// Whether `key` is one of the coordinator's own fields (never forwarded).
fn is_extension(key: &str) -> bool {
    key.starts_with("x_") || key == "keep_alive"
}

/// Takes the extension fields out of `body`: every `x_*` key and `keep_alive` are removed;
/// the known ones are returned. Wrong types are a 400.
pub fn take_meta(body: &mut Map<String, Value>) -> Result<RequestMeta, ApiError> {
    let mut meta = RequestMeta::default();
    let keys: Vec<String> = body.keys().filter(|k| is_extension(k)).cloned().collect();
    for k in keys {
        if let Some(v) = body.remove(&k) {
            apply_meta(&mut meta, &k, v)?;
        }
    }
    Ok(meta)
}

/// Reads one extension field into `meta` (unknown `x_*` fields are dropped).
fn apply_meta(meta: &mut RequestMeta, k: &str, v: Value) -> Result<(), ApiError> {
    match k {
        "x_client_id" => {
            let id = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            crate::tenancy::caller::checked_client_id(&id)?;
            meta.client_id = Some(id);
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
        "x_thinking" => {
            meta.thinking = Some(v.as_bool().ok_or_else(|| {
                ApiError::bad_request("x_thinking must be true or false").param("x_thinking")
            })?)
        }
        "keep_alive" | "x_keep_alive" => {
            meta.keep_alive = Some(parse_keep_alive(&v).map_err(|e| e.param(k))?)
        }
        _ => {} // other x_* fields: dropped, never forwarded
    }
    Ok(())
}

/// One member of a [`RawObject`]: the text of the request's own value, or one the coordinator set.
#[derive(Debug, Clone)]
enum Member {
    Raw(Range<usize>),
    Set(String),
}

/// A JSON object body kept as its members' text. It is parsed once without building a value
/// tree — a base64 image or a long conversation is validated, not copied into `Value`s — the
/// coordinator's fields are taken out, and what goes upstream is the client's bytes around them.
/// A key given twice keeps its last value, as `serde_json::Map` does.
#[derive(Debug, Clone)]
pub struct RawObject {
    bytes: Bytes,
    members: Vec<(String, Member)>,
}

/// Members up to which a repeated key is found by scanning.
const SCAN_LIMIT: usize = 32;

#[cfg(test)]
use crate::tenancy::caller::MAX_CLIENT_ID_BYTES;

/// The members of an object, each value borrowed as raw text.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(String, &'de RawValue)> =
                    Vec::with_capacity(map.size_hint().unwrap_or(8));
                // Repeated keys are found by a scan while the object is small (a request's few
                // fields), by an index past that: a body of many keys costs linear time, not
                // quadratic.
                let mut index: Option<HashMap<String, usize>> = None;
                while let Some((k, v)) = map.next_entry::<String, &'de RawValue>()? {
                    let seen = match &index {
                        Some(ix) => ix.get(&k).copied(),
                        None => out.iter().position(|(key, _)| *key == k),
                    };
                    if let Some(slot) = seen.and_then(|i| out.get_mut(i)) {
                        slot.1 = v;
                        continue;
                    }
                    if let Some(ix) = &mut index {
                        ix.insert(k.clone(), out.len());
                    }
                    out.push((k, v));
                    if index.is_none() && out.len() > SCAN_LIMIT {
                        let ix = out.iter().enumerate().map(|(i, (k, _))| (k.clone(), i));
                        index = Some(ix.collect());
                    }
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl RawObject {
    /// Parses a JSON object body (400 otherwise).
    pub fn parse(bytes: Bytes) -> Result<RawObject, ApiError> {
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            // Not an object, or not JSON at all: say which.
            return match serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
                Ok(_) => Err(ApiError::bad_request("the body must be a JSON object")),
                Err(e) => Err(ApiError::bad_request(format!("malformed JSON body: {e}"))),
            };
        }
        let base = bytes.as_ptr() as usize;
        let members = match serde_json::from_slice::<Members<'_>>(&bytes) {
            Ok(Members(m)) => m
                .into_iter()
                .map(|(k, v)| {
                    let start = v.get().as_ptr() as usize - base;
                    (k, Member::Raw(start..start + v.get().len()))
                })
                .collect(),
            Err(e) => return Err(ApiError::bad_request(format!("malformed JSON body: {e}"))),
        };
        Ok(RawObject { bytes, members })
    }

    /// The object of a `Map` (an async job's stored request).
    pub fn from_map(map: &Map<String, Value>) -> Result<RawObject, ApiError> {
        let bytes = serde_json::to_vec(map).map_err(|e| ApiError::internal(e.to_string()))?;
        RawObject::parse(Bytes::from(bytes))
    }

    fn text<'a>(&'a self, m: &'a Member) -> &'a [u8] {
        match m {
            Member::Raw(r) => self.bytes.get(r.clone()).unwrap_or_default(),
            Member::Set(s) => s.as_bytes(),
        }
    }

    /// The value of `key` when it is a string.
    pub fn get_str(&self, key: &str) -> Option<String> {
        let (_, m) = self.members.iter().find(|(k, _)| k == key)?;
        serde_json::from_slice::<String>(self.text(m)).ok()
    }

    /// The raw JSON text of `key`'s value, unparsed (`None` when absent).
    pub fn raw(&self, key: &str) -> Option<&[u8]> {
        let (_, m) = self.members.iter().find(|(k, _)| k == key)?;
        Some(self.text(m))
    }

    /// The value of `key`, parsed (`None` when absent).
    pub fn get(&self, key: &str) -> Option<Value> {
        let (_, m) = self.members.iter().find(|(k, _)| k == key)?;
        serde_json::from_slice(self.text(m)).ok()
    }

    /// Sets `key` (replacing its value in place, or appending it).
    pub fn set(&mut self, key: &str, value: &impl serde::Serialize) -> Result<(), ApiError> {
        let text = serde_json::to_string(value).map_err(|e| ApiError::internal(e.to_string()))?;
        match self.members.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = Member::Set(text),
            None => self.members.push((key.to_owned(), Member::Set(text))),
        }
        Ok(())
    }

    /// Takes the extension fields out (see [`take_meta`]).
    pub fn take_meta(&mut self) -> Result<RequestMeta, ApiError> {
        let mut meta = RequestMeta::default();
        let mut kept = Vec::with_capacity(self.members.len());
        for (k, m) in std::mem::take(&mut self.members) {
            if is_extension(&k) {
                let v: Value = serde_json::from_slice(self.text(&m))
                    .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))?;
                apply_meta(&mut meta, &k, v)?;
            } else {
                kept.push((k, m));
            }
        }
        self.members = kept;
        Ok(meta)
    }

    /// Member names, in order.
    #[cfg(test)]
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|(k, _)| k.as_str())
    }

    /// The object's JSON text: the members' own bytes, in their order.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes.len() + 32);
        out.push(b'{');
        for (i, (k, m)) in self.members.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            // A String always serializes.
            let _ = serde_json::to_writer(&mut out, k);
            out.push(b':');
            out.extend_from_slice(self.text(m));
        }
        out.push(b'}');
        out
    }
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
    fn a_raw_object_forwards_the_clients_bytes_without_the_extension_fields() {
        let body = br#" {"model":"m","messages":[{"role":"user","content":"caf\u00e9 \"q\""}],
            "x_priority":2,"keep_alive":"5m","x_other":{"a":[1,2]},"temperature":0.50,"n":1e0,
            "weird\"key":null,"model":"m2"} "#;
        let mut o = RawObject::parse(Bytes::from_static(body)).unwrap();
        assert_eq!(
            o.get_str("model").as_deref(),
            Some("m2"),
            "the last duplicate wins"
        );
        let meta = o.take_meta().unwrap();
        assert_eq!(meta.priority, Some(2));
        assert_eq!(meta.keep_alive, Some(Duration::from_secs(300)));
        assert_eq!(
            o.keys().collect::<Vec<_>>(),
            ["model", "messages", "temperature", "n", "weird\"key"]
        );
        o.set("model", &"chosen").unwrap();
        let out = String::from_utf8(o.to_vec()).unwrap();
        // Numbers and escapes exactly as the client wrote them.
        assert_eq!(
            out,
            r#"{"model":"chosen","messages":[{"role":"user","content":"caf\u00e9 \"q\""}],"temperature":0.50,"n":1e0,"weird\"key":null}"#
        );
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["messages"][0]["content"], "café \"q\"");
        o.set("stream", &false).unwrap();
        assert!(o.to_vec().ends_with(br#","stream":false}"#));
    }

    #[test]
    fn a_large_object_keeps_the_last_value_of_a_repeated_key_and_its_first_place() {
        // Past the scan limit repeated keys are found through the index: same result.
        let mut text = String::from("{");
        for i in 0..100 {
            text.push_str(&format!("\"k{i}\":{i},"));
        }
        text.push_str("\"k3\":\"late\",\"k90\":[90],\"k100\":100}");
        let o = RawObject::parse(Bytes::from(text)).unwrap();
        let v: Value = serde_json::from_slice(&o.to_vec()).unwrap();
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 101);
        assert_eq!(v["k3"], "late");
        assert_eq!(v["k90"], json!([90]));
        assert_eq!(v["k99"], 99);
        let text = String::from_utf8(o.to_vec()).unwrap();
        assert!(text.find("\"k3\"") < text.find("\"k4\""), "{text}");
    }

    #[test]
    fn an_overlong_client_id_is_refused() {
        let long = "c".repeat(MAX_CLIENT_ID_BYTES + 1);
        let mut o = RawObject::parse(Bytes::from(format!(
            "{{\"model\":\"m\",\"x_client_id\":\"{long}\"}}"
        )))
        .unwrap();
        let e = o.take_meta().unwrap_err();
        assert_eq!(e.status, http::StatusCode::BAD_REQUEST);
        assert!(e.message.contains("x_client_id"), "{}", e.message);
        let mut o = RawObject::parse(Bytes::from(format!(
            "{{\"model\":\"m\",\"x_client_id\":\"{}\"}}",
            &long[1..]
        )))
        .unwrap();
        assert_eq!(
            o.take_meta().unwrap().client_id.map(|c| c.len()),
            Some(MAX_CLIENT_ID_BYTES)
        );
        // A label of another shape, or a key's name, is refused too.
        for id in ["a b", "<script>", "key:alice", "", "é"] {
            let mut o = RawObject::parse(Bytes::from(
                json!({"model": "m", "x_client_id": id}).to_string(),
            ))
            .unwrap();
            let e = o.take_meta().unwrap_err();
            assert_eq!(e.code, Some("invalid_client_id"), "{id}");
        }
    }

    #[test]
    fn a_raw_object_refuses_what_is_not_one_json_object() {
        for (body, want) in [
            (&b"[1]"[..], "must be a JSON object"),
            (b"", "malformed JSON"),
            (b"{nope", "malformed JSON"),
            (b"{\"a\":1} x", "malformed JSON"),
            (b"{\"a\":1,}", "malformed JSON"),
            (b"\"text\"", "must be a JSON object"),
        ] {
            let e = RawObject::parse(Bytes::copy_from_slice(body)).unwrap_err();
            assert_eq!(e.status, 400);
            assert!(e.message.contains(want), "{body:?}: {}", e.message);
        }
        let mut o = RawObject::parse(Bytes::from_static(br#"{"x_priority":"high"}"#)).unwrap();
        assert_eq!(
            o.take_meta().unwrap_err().param.as_deref(),
            Some("x_priority")
        );
        let from_map =
            RawObject::from_map(&Map::from_iter([("a".to_owned(), json!([1, "b"]))])).unwrap();
        assert_eq!(from_map.to_vec(), br#"{"a":[1,"b"]}"#);
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
