//! One HTTP/1.1 exchange written and read by hand over a TCP socket: for tests that send what a
//! well-behaved client never would (any method, path, header or body bytes) and check that an
//! answer comes back.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// An answer as read from the socket.
#[derive(Debug, Clone)]
pub struct RawAnswer {
    /// The status code of the status line.
    pub status: u16,
    /// The head (status line and headers), as text.
    pub head: String,
    /// The body as it came (chunked transfer left as it is).
    pub body: Vec<u8>,
}

impl RawAnswer {
    /// The value of header `name` (case-insensitive), if the head has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The body as (lossy) text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `request` (the whole request, head and body) to `addr` and reads until the server
/// closes or `timeout` passes; `Err` when no status line came back. The writing half stays open
/// (a server may take a half-closed connection for a client that left); send
/// `Connection: close` for the server to close after its answer.
pub fn exchange(addr: SocketAddr, request: &[u8], timeout: Duration) -> Result<RawAnswer, String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    // A server may answer (413, 400) and close before the whole body is written: that is an
    // answer, not a failure.
    let _ = s.write_all(request);
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no answer head in {} bytes", got.len()))?;
    let head = String::from_utf8_lossy(&got[..end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line: {head:?}"))?;
    Ok(RawAnswer {
        status,
        head,
        body: got[end + 4..].to_vec(),
    })
}

/// `method path` with `headers` (`Host: addr` and `Connection: close` added unless given) and
/// `body` (its `Content-Length` added), exchanged as [`exchange`] does, within 30 s.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<RawAnswer, String> {
    request_within(addr, method, path, headers, body, Duration::from_secs(30))
}

/// [`request`] within `timeout` (a chat that waits for a model to load, say).
pub fn request_within(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> Result<RawAnswer, String> {
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    let has = |n: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    if !has("host") {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    if !has("connection") {
        head.push_str("Connection: close\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() && !has("content-length") && !has("transfer-encoding") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    exchange(addr, &bytes, timeout)
}
