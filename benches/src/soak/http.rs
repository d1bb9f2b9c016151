//! The bench's HTTP client: one request per connection over the test kit's raw HTTP/1.1
//! exchange (no client library, so that nothing pools or retries behind the ledger's back).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use horos_testkit::raw_http::{RawAnswer, request_within};
use serde_json::Value;

/// One answer: its status, its body as JSON (`Null` when not JSON) and as text, its time.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The body parsed as JSON, `Null` when it is not.
    pub json: Value,
    /// The body as text (chunked transfer decoded).
    pub text: String,
    /// From the connect to the last byte.
    pub elapsed: Duration,
}

/// A listener of `run` (the data plane or the control plane).
#[derive(Debug, Clone, Copy)]
pub struct Http {
    /// Its address.
    pub addr: SocketAddr,
}

impl Http {
    /// `method path` with `key` as a Bearer token and `body` as JSON, within `timeout`.
    ///
    /// # Errors
    ///
    /// No answer (refused, reset, or nothing within `timeout`).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Reply, String> {
        let bearer = key.map(|k| format!("Bearer {k}"));
        let mut headers: Vec<(&str, &str)> = Vec::new();
        if let Some(b) = &bearer {
            headers.push(("authorization", b));
        }
        let payload = body.map(Value::to_string).unwrap_or_default();
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        let started = Instant::now();
        let raw = request_within(
            self.addr,
            method,
            path,
            &headers,
            payload.as_bytes(),
            timeout,
        )?;
        Ok(reply(&raw, started.elapsed()))
    }
}

fn reply(raw: &RawAnswer, elapsed: Duration) -> Reply {
    let chunked = raw
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(&raw.body)
    } else {
        raw.body.clone()
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    Reply {
        status: raw.status,
        json: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
        elapsed,
    }
}

/// A chunked body's data (what can be decoded of it).
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = body.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&body[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok());
        let Some(size) = size.filter(|s| *s > 0) else {
            break;
        };
        let start = eol + 2;
        let end = (start + size).min(body.len());
        out.extend_from_slice(&body[start..end]);
        body = body.get(end + 2..).unwrap_or_default();
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_chunked_body_is_joined() {
        assert_eq!(
            super::dechunk(b"3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n"),
            b"abcde"
        );
    }
}
