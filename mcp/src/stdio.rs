//! The stdio transport: newline-delimited JSON-RPC, one message per line.
//!
//! Requests are handled concurrently (a slow tool does not hold up `ping`), and every answer is
//! written as one whole line by a single writer, so lines never interleave. Nothing but
//! protocol messages is written to the output; diagnostics go through `tracing`, which the
//! program must send to stderr.

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::jsonrpc::{self, Response, RpcError};
use crate::server::{Dispatch, Server};

/// The longest line read by default: 16 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How many messages may be in progress at once by default.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;

/// Settings of [`serve_stdio_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StdioConfig {
    /// The longest line accepted, in bytes, newline excluded. A longer line is skipped and
    /// answered with a -32600 error with id `null` (its id is never read).
    pub max_line_bytes: usize,
    /// How many messages with running tool calls may be in progress; reading pauses at the limit.
    pub max_in_flight: usize,
}

impl Default for StdioConfig {
    fn default() -> Self {
        Self {
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
        }
    }
}

/// Why [`serve_stdio`] stopped before the end of its input.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// The input could not be read.
    #[error("reading the input stream: {0}")]
    Read(#[source] io::Error),
    /// The output could not be written (the client went away).
    #[error("writing the output stream: {0}")]
    Write(#[source] io::Error),
}

/// One line of input.
pub(crate) enum Line {
    Message(Vec<u8>),
    TooLong(usize),
    Eof,
}

/// Reads up to the next `\n` (or the end of input) without ever buffering more than `max`
/// bytes: the rest of an overlong line is consumed and dropped.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    buf.clear();
    let mut seen = 0usize;
    let mut started = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            // End of input: a last line without newline still counts.
            return Ok(match (started, seen > max) {
                (false, _) => Line::Eof,
                (true, true) => Line::TooLong(seen),
                (true, false) => Line::Message(std::mem::take(buf)),
            });
        }
        started = true;
        let (chunk, newline) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], true),
            None => (available, false),
        };
        seen = seen.saturating_add(chunk.len());
        if seen <= max {
            buf.extend_from_slice(chunk);
        } else {
            buf.clear();
        }
        let used = chunk.len() + usize::from(newline);
        reader.consume(used);
        if newline {
            return Ok(if seen > max {
                Line::TooLong(seen)
            } else {
                Line::Message(std::mem::take(buf))
            });
        }
    }
}

/// Serves one MCP session over newline-delimited JSON with the default [`StdioConfig`]; returns
/// at the end of the input once every answer has been written.
///
/// Needs a tokio runtime (tool calls run on their own tasks).
pub async fn serve_stdio<R, W>(
    server: impl Into<Arc<Server>>,
    reader: R,
    writer: W,
) -> Result<(), StdioError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    serve_stdio_with(server, reader, writer, StdioConfig::default()).await
}

/// Serves one MCP session on the process's own stdin and stdout.
pub async fn serve_process_stdio(server: impl Into<Arc<Server>>) -> Result<(), StdioError> {
    serve_stdio(
        server,
        BufReader::new(tokio::io::stdin()),
        tokio::io::stdout(),
    )
    .await
}

/// [`serve_stdio`] with explicit settings.
pub async fn serve_stdio_with<R, W>(
    server: impl Into<Arc<Server>>,
    mut reader: R,
    mut writer: W,
    config: StdioConfig,
) -> Result<(), StdioError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let server: Arc<Server> = server.into();
    let max_in_flight = config.max_in_flight.max(1);
    let (lines, mut outbox) = mpsc::channel::<String>(max_in_flight);

    // The only writer: whole lines, flushed when nothing else is queued.
    let write = async move {
        while let Some(line) = outbox.recv().await {
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            writer.write_all(&bytes).await.map_err(StdioError::Write)?;
            if outbox.is_empty() {
                writer.flush().await.map_err(StdioError::Write)?;
            }
        }
        writer.flush().await.map_err(StdioError::Write)
    };

    let read = async move {
        let mut running = JoinSet::new();
        let mut buf = Vec::new();
        loop {
            while let Some(done) = running.try_join_next() {
                log_task_end(done);
            }
            if running.len() >= max_in_flight
                && let Some(done) = running.join_next().await
            {
                log_task_end(done);
            }
            let answer = match read_line(&mut reader, &mut buf, config.max_line_bytes)
                .await
                .map_err(StdioError::Read)?
            {
                Line::Eof => break,
                Line::TooLong(bytes) => {
                    tracing::warn!(
                        bytes,
                        limit = config.max_line_bytes,
                        "skipping an overlong line"
                    );
                    let error = RpcError::invalid_request(format!(
                        "message too large: {bytes} bytes on one line, the limit is {}",
                        config.max_line_bytes
                    ));
                    Dispatch::Ready(Some(jsonrpc::to_line(&Response::error(
                        jsonrpc::null_id(),
                        error,
                    ))))
                }
                Line::Message(message) => {
                    let message = message.strip_suffix(b"\r").unwrap_or(&message);
                    if message.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    server.dispatch(message)
                }
            };
            match answer {
                Dispatch::Ready(None) => {}
                Dispatch::Ready(Some(line)) => {
                    if lines.send(line).await.is_err() {
                        break; // the writer failed; its error is what try_join reports
                    }
                }
                Dispatch::Pending(future) => {
                    let lines = lines.clone();
                    running.spawn(async move {
                        if let Some(line) = future.await {
                            // A send error means the writer failed; it reports why.
                            let _ = lines.send(line).await;
                        }
                    });
                }
            }
        }
        // End of input: let running calls answer before the writer closes.
        while let Some(done) = running.join_next().await {
            log_task_end(done);
        }
        drop(lines);
        Ok::<(), StdioError>(())
    };

    tokio::try_join!(read, write)?;
    tracing::info!("MCP stdio session ended");
    Ok(())
}

fn log_task_end(done: Result<(), tokio::task::JoinError>) {
    if let Err(error) = done {
        tracing::error!(%error, "a message task failed");
    }
}
