//! A plain `GET` of the coordinator's own pages (`/status` is HTML, outside the OpenAI client's
//! API), so the demo can say that the address it prints answers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// `GET path` on `addr`; the status code and the body's length.
pub async fn get(addr: SocketAddr, path: &str) -> Result<(u16, usize), String> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || get_blocking(addr, &path))
        .await
        .map_err(|e| e.to_string())?
}

fn get_blocking(addr: SocketAddr, path: &str) -> Result<(u16, usize), String> {
    let timeout = Duration::from_secs(10);
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: */*\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    // Bounded: the status page is a few tens of kilobytes.
    s.take(16 << 20)
        .read_to_end(&mut raw)
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("GET {path}: no HTTP status line"))?;
    let body = text.find("\r\n\r\n").map_or(0, |i| raw.len() - i - 4);
    Ok((code, body))
}
