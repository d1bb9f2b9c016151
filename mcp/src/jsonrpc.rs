//! JSON-RPC 2.0 wire format: error codes, the classification of one incoming message, and
//! the responses written back.
//!
//! Request ids are kept as raw JSON text and echoed byte for byte, so `1.0`, `1e3`, integers
//! beyond 64 bits and escaped strings come back exactly as the client wrote them.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// Invalid JSON was received (the id is always `null`).
pub const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist or is not available.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters (also: an unknown tool name in `tools/call`).
pub const INVALID_PARAMS: i64 = -32602;
/// Internal JSON-RPC error (also: a tool that failed with [`crate::ToolError::Internal`] or
/// panicked).
pub const INTERNAL_ERROR: i64 = -32603;
/// A request other than `initialize` or `ping` arrived before `initialize`; taken from the
/// implementation-defined server-error range (-32000 to -32099), as the LSP does.
pub const SERVER_NOT_INITIALIZED: i64 = -32002;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RpcError {
    /// One of the codes of this module, or an application code.
    pub code: i64,
    /// A short description.
    pub message: String,
    /// Optional details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with a code and a message, without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// -32700, for a message that is not JSON.
    pub fn parse_error(detail: impl std::fmt::Display) -> Self {
        Self::new(PARSE_ERROR, format!("Parse error: {detail}"))
    }

    /// -32600, for a message that is JSON but not a valid request.
    pub fn invalid_request(detail: impl std::fmt::Display) -> Self {
        Self::new(INVALID_REQUEST, format!("Invalid Request: {detail}"))
    }

    /// -32601.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    /// -32602.
    pub fn invalid_params(detail: impl std::fmt::Display) -> Self {
        Self::new(INVALID_PARAMS, format!("Invalid params: {detail}"))
    }

    /// -32603.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(INTERNAL_ERROR, format!("Internal error: {detail}"))
    }
}

/// The id a response carries: raw JSON text (a number, a string, or `null` when the request's
/// id could not be determined).
pub(crate) type Id = Box<RawValue>;

/// The `null` id of responses to messages whose id could not be read.
pub(crate) fn null_id() -> Id {
    // "null" is valid JSON, so this never fails; the fallback keeps the library panic-free.
    RawValue::from_string("null".to_owned()).unwrap_or_else(|_| Box::<RawValue>::default())
}

/// One response to write.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) id: Id,
    pub(crate) outcome: Result<Value, RpcError>,
}

impl Response {
    pub(crate) fn error(id: Id, error: RpcError) -> Self {
        Self {
            id,
            outcome: Err(error),
        }
    }
}

#[derive(Serialize)]
struct Success<'a> {
    jsonrpc: &'static str,
    id: &'a RawValue,
    result: &'a Value,
}

#[derive(Serialize)]
struct Failure<'a> {
    jsonrpc: &'static str,
    id: &'a RawValue,
    error: &'a RpcError,
}

impl Serialize for Response {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.outcome {
            Ok(result) => Success {
                jsonrpc: "2.0",
                id: &self.id,
                result,
            }
            .serialize(serializer),
            Err(error) => Failure {
                jsonrpc: "2.0",
                id: &self.id,
                error,
            }
            .serialize(serializer),
        }
    }
}

/// Serialises one response or a batch of them as one line (compact JSON never contains a raw
/// newline: newlines inside strings are escaped).
pub(crate) fn to_line<T: Serialize + ?Sized>(value: &T) -> String {
    match serde_json::to_string(value) {
        Ok(line) => line,
        // Only a non-string map key or a failing Serialize impl can get here; tool results are
        // `Value`s, whose keys are strings. Answer something valid rather than nothing.
        Err(e) => {
            let fallback = Response::error(
                null_id(),
                RpcError::internal(format!("serialising the response: {e}")),
            );
            serde_json::to_string(&fallback).unwrap_or_default()
        }
    }
}

/// What one incoming JSON value (a whole message, or one element of a batch) is.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A call that wants an answer.
    Request {
        id: Id,
        method: String,
        params: Option<Value>,
    },
    /// A call without an id: never answered, not even with an error.
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// A response from the client (to a server-to-client request; this server sends none).
    Response,
    /// Not a valid request: answered with this error (`id` is `null` when it was unreadable).
    Invalid(Response),
}

/// Whether raw JSON text is a valid request id (a string or a number; MCP forbids `null`).
fn id_kind(raw: &RawValue) -> Result<(), &'static str> {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'"' | b'-' | b'0'..=b'9') => Ok(()),
        Some(b'n') => Err("id must not be null"),
        _ => Err("id must be a string or a number"),
    }
}

/// Classifies one message object (or one batch element).
pub(crate) fn classify(raw: &RawValue) -> Incoming {
    let invalid = |id: Option<&RawValue>, detail: &str| {
        let id = id.map_or_else(null_id, |raw| raw.to_owned());
        Incoming::Invalid(Response::error(id, RpcError::invalid_request(detail)))
    };
    let fields: HashMap<String, &RawValue> = match serde_json::from_str(raw.get()) {
        Ok(fields) => fields,
        Err(_) => return invalid(None, "a message must be a JSON object"),
    };
    let id = match fields.get("id") {
        None => None,
        Some(raw) => match id_kind(raw) {
            Ok(()) => Some(*raw),
            Err(detail) => return invalid(None, detail),
        },
    };
    match fields
        .get("jsonrpc")
        .map(|raw| serde_json::from_str::<&str>(raw.get()))
    {
        Some(Ok("2.0")) => {}
        _ => return invalid(id, "\"jsonrpc\" must be \"2.0\""),
    }
    let Some(method) = fields.get("method") else {
        if fields.contains_key("result") || fields.contains_key("error") {
            return Incoming::Response;
        }
        return invalid(id, "\"method\" is missing");
    };
    let Ok(method) = serde_json::from_str::<String>(method.get()) else {
        return invalid(id, "\"method\" must be a string");
    };
    let params = match fields.get("params") {
        None => None,
        Some(raw) => match serde_json::from_str::<Value>(raw.get()) {
            Ok(value @ (Value::Object(_) | Value::Array(_))) => Some(value),
            _ => return invalid(id, "\"params\" must be an object or an array"),
        },
    };
    match id {
        Some(id) => Incoming::Request {
            id: id.to_owned(),
            method,
            params,
        },
        None => Incoming::Notification { method, params },
    }
}

/// The shape of a whole incoming message.
#[derive(Debug)]
pub(crate) enum Message<'a> {
    /// One JSON value (normally an object).
    Single(&'a RawValue),
    /// A JSON array (a batch; may be empty).
    Batch(Vec<&'a RawValue>),
}

/// Parses the outer layer of a message; the error is a -32700 parse error.
pub(crate) fn parse(message: &[u8]) -> Result<Message<'_>, RpcError> {
    let text = std::str::from_utf8(message)
        .map_err(|e| RpcError::parse_error(format!("not UTF-8: {e}")))?;
    let raw: &RawValue = serde_json::from_str(text).map_err(RpcError::parse_error)?;
    if raw.get().trim_start().starts_with('[') {
        let items: Vec<&RawValue> =
            serde_json::from_str(raw.get()).map_err(RpcError::parse_error)?;
        Ok(Message::Batch(items))
    } else {
        Ok(Message::Single(raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify_str(text: &str) -> Incoming {
        let raw: &RawValue = serde_json::from_str(text).unwrap();
        classify(raw)
    }

    #[test]
    fn request_ids_are_kept_as_written() {
        for id in [
            "1",
            "1.0",
            "1e3",
            "-7",
            "123456789012345678901234567890",
            r#""a\u0041""#,
            r#""""#,
        ] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            match classify_str(&text) {
                Incoming::Request {
                    id: got,
                    method,
                    params,
                } => {
                    assert_eq!(got.get(), id);
                    assert_eq!(method, "ping");
                    assert!(params.is_none());
                }
                other => panic!("{id}: {other:?}"),
            }
        }
    }

    #[test]
    fn notifications_responses_and_invalid_messages() {
        assert!(matches!(
            classify_str(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Incoming::Notification { .. }
        ));
        assert!(matches!(
            classify_str(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#),
            Incoming::Response
        ));
        assert!(matches!(
            classify_str(r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}"#),
            Incoming::Response
        ));
        let cases = [
            (r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, "null"),
            (r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#, "null"),
            (r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#, "null"),
            (r#"{"jsonrpc":"1.0","id":4,"method":"ping"}"#, "4"),
            (r#"{"id":5,"method":"ping"}"#, "5"),
            (r#"{"jsonrpc":"2.0","id":6,"method":7}"#, "6"),
            (r#"{"jsonrpc":"2.0","id":"s"}"#, r#""s""#),
            (
                r#"{"jsonrpc":"2.0","id":8,"method":"ping","params":"x"}"#,
                "8",
            ),
            (r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#, "null"),
            ("1", "null"),
            (r#""text""#, "null"),
        ];
        for (text, id) in cases {
            match classify_str(text) {
                Incoming::Invalid(response) => {
                    assert_eq!(response.id.get(), id, "{text}");
                    assert_eq!(
                        response.outcome.unwrap_err().code,
                        INVALID_REQUEST,
                        "{text}"
                    );
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn parse_splits_batches_and_rejects_bad_json() {
        assert!(matches!(parse(b"[]"), Ok(Message::Batch(items)) if items.is_empty()));
        assert!(matches!(parse(b" [1, {}]"), Ok(Message::Batch(items)) if items.len() == 2));
        assert!(matches!(parse(b"{}"), Ok(Message::Single(_))));
        let bad_messages: [&[u8]; 5] = [b"{", b"", b"[1,", b"\xff\xfe", b"{} {}"];
        for bad in bad_messages {
            assert_eq!(parse(bad).unwrap_err().code, PARSE_ERROR, "{bad:?}");
        }
    }

    #[test]
    fn responses_serialise_with_the_raw_id() {
        let id = RawValue::from_string("1e3".into()).unwrap();
        let line = to_line(&Response {
            id,
            outcome: Ok(serde_json::json!({"a": "x\ny"})),
        });
        assert_eq!(line, r#"{"jsonrpc":"2.0","id":1e3,"result":{"a":"x\ny"}}"#);
        assert!(!line.contains('\n'));
        let line = to_line(&Response::error(null_id(), RpcError::method_not_found("m")));
        assert_eq!(
            line,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"Method not found: m"}}"#
        );
    }
}
