//! The admin API's server logs, from the owner's [`LogBook`]: `GET /api/v1/logs` (every log:
//! name, kind, size) and `GET /api/v1/logs/{name}` with `?lines=N` (the last N whole lines,
//! 100 by default) or `?after=OFFSET` (the whole lines written since a read that answered
//! `next: OFFSET`: how `horos-ref logs -f` follows). A name is looked up among the book's
//! logs, never used as a path. Files are read on a blocking thread.

use std::sync::Arc;

use http::StatusCode;
use serde_json::{Value, json};

use crate::error::ApiError;
use horos_server_control::{LogBook, LogChunk, LogError, LogWindow};

/// Lines of a tail when the request names none.
const DEFAULT_LINES: usize = 100;

/// Most lines one tail returns.
const MAX_LINES: usize = 10_000;

/// The window a query string asks for: `lines=N` or `after=OFFSET`, not both.
fn window(pairs: &[(String, String)]) -> Result<LogWindow, ApiError> {
    let mut w = None;
    for (k, v) in pairs {
        let bad = |what: &str| ApiError::bad_request(format!("{k}={v}: {what}")).param(k);
        let next = match k.as_str() {
            "lines" => LogWindow::Tail {
                lines: v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LINES).contains(n))
                    .ok_or_else(|| bad("a number of lines from 1 to 10000"))?,
            },
            "after" => LogWindow::After {
                offset: v
                    .parse::<u64>()
                    .map_err(|_| bad("a byte offset (a read's `next`)"))?,
            },
            _ => return Err(bad("unknown parameter (lines, after)")),
        };
        if w.replace(next).is_some() {
            return Err(bad("give one of lines and after"));
        }
    }
    Ok(w.unwrap_or(LogWindow::Tail {
        lines: DEFAULT_LINES,
    }))
}

fn no_log(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        LogError::Unknown(name.to_owned()).to_string(),
    )
    .code("log_not_found")
}

/// `GET /api/v1/logs`: `{"data": [{"name", "kind", "bytes"}]}` (empty without a book).
pub(crate) async fn list(book: Option<&Arc<dyn LogBook>>) -> Result<Value, ApiError> {
    let Some(book) = book.cloned() else {
        return Ok(json!({"data": []}));
    };
    // Sizes are read from the files.
    let logs = tokio::task::spawn_blocking(move || book.logs())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(json!({ "data": logs }))
}

/// `GET /api/v1/logs/{name}?…`: a [`LogChunk`] (`{"name", "text", "next"}`).
pub(crate) async fn read(
    book: Option<&Arc<dyn LogBook>>,
    name: String,
    query: &[(String, String)],
) -> Result<Value, ApiError> {
    let window = window(query)?;
    let Some(book) = book.cloned() else {
        return Err(no_log(&name));
    };
    let chunk = tokio::task::spawn_blocking(move || book.read(&name, window))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    match chunk {
        Ok(c) => serde_json::to_value(c).map_err(|e| ApiError::internal(e.to_string())),
        Err(LogError::Unknown(name)) => Err(no_log(&name)),
        Err(e) => Err(ApiError::internal(e.to_string())),
    }
}

/// The last `lines` lines of every log, for the status page (a log that cannot be read is
/// left out).
pub(crate) async fn tails(book: Option<&Arc<dyn LogBook>>, lines: usize) -> Vec<LogChunk> {
    let Some(book) = book.cloned() else {
        return Vec::new();
    };
    tokio::task::spawn_blocking(move || {
        book.logs()
            .into_iter()
            .filter_map(|l| book.read(&l.name, LogWindow::Tail { lines }).ok())
            .collect()
    })
    .await
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pairs(q: &[(&str, &str)]) -> Vec<(String, String)> {
        q.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn queries_name_a_window() {
        assert_eq!(
            window(&[]).unwrap(),
            LogWindow::Tail {
                lines: DEFAULT_LINES
            }
        );
        assert_eq!(
            window(&pairs(&[("lines", "5")])).unwrap(),
            LogWindow::Tail { lines: 5 }
        );
        assert_eq!(
            window(&pairs(&[("after", "1234")])).unwrap(),
            LogWindow::After { offset: 1234 }
        );
        for bad in [
            vec![("lines", "0")],
            vec![("lines", "x")],
            vec![("after", "-1")],
            vec![("path", "/etc/passwd")],
            vec![("lines", "5"), ("after", "0")],
        ] {
            let e = window(&pairs(&bad)).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad:?}");
        }
    }
}
