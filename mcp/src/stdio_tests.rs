//! Tests of the stdio transport over in-memory streams.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Notify;

use crate::stdio::{Line, read_line};
use crate::{
    Server, ServerInfo, StdioConfig, StdioError, Tool, ToolError, ToolRegistry, serve_stdio,
    serve_stdio_with,
};

/// Waits until the test opens the gate, then answers "opened".
struct Gate(Arc<Notify>);

#[async_trait]
impl Tool for Gate {
    fn name(&self) -> &str {
        "gate"
    }
    fn description(&self) -> &str {
        "Waits for the test."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _args: Value) -> Result<Value, ToolError> {
        self.0.notified().await;
        Ok(json!("opened"))
    }
}

fn server(gate: Arc<Notify>) -> Server {
    Server::new(
        ServerInfo::new("stdio-test", "0.0.1"),
        ToolRegistry::new().with(Gate(gate)).unwrap(),
    )
}

const INIT: &str =
    r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#;

fn parse_lines(output: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(output).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "{text:?}");
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test]
async fn serves_a_session_to_the_end_of_input() {
    let gate = Arc::new(Notify::new());
    gate.notify_one(); // a permit: the one call below goes straight through
    let input = [
        INIT,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "",
        "   ",
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\r",
        "this is not json",
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"gate"}}"#,
        // The last line has no newline and still counts.
    ]
    .join("\n")
        + "\n{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}";
    let mut output = Vec::new();
    serve_stdio(server(gate), input.as_bytes(), &mut output)
        .await
        .unwrap();
    let mut responses = parse_lines(&output);
    // The call may answer after the ping: order by id (the parse error has none).
    responses.sort_by_key(|r| r["id"].as_i64().unwrap_or(0));
    assert_eq!(responses.len(), 5, "{responses:?}");
    assert_eq!(responses[0]["error"]["code"], -32700);
    assert_eq!(responses[1]["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(responses[2]["result"]["tools"][0]["name"], "gate");
    assert_eq!(responses[3]["result"]["content"][0]["text"], "opened");
    assert_eq!(
        responses[4],
        json!({"jsonrpc": "2.0", "id": 4, "result": {}})
    );
}

#[tokio::test]
async fn a_slow_call_does_not_hold_up_other_requests() {
    let gate = Arc::new(Notify::new());
    let (client, server_end) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server_end);
    let serving = tokio::spawn(serve_stdio(
        server(Arc::clone(&gate)),
        BufReader::new(server_read),
        server_write,
    ));
    let (client_read, mut client_write) = tokio::io::split(client);
    let mut replies = BufReader::new(client_read).lines();
    let mut send = async |line: &str| {
        client_write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    };
    send(INIT).await;
    let init: Value = serde_json::from_str(&replies.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(init["id"], 1);
    send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"gate"}}"#).await;
    send(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#).await;
    // The ping is answered while the call still waits at the gate.
    let ping: Value = serde_json::from_str(&replies.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(ping["id"], 3);
    gate.notify_one();
    let call: Value = serde_json::from_str(&replies.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(
        (
            call["id"].clone(),
            call["result"]["structuredContent"].clone()
        ),
        (json!(2), json!({"result": "opened"}))
    );
    // End of input (dropping one half of a split stream would not close it).
    client_write.shutdown().await.unwrap();
    serving.await.unwrap().unwrap();
    assert_eq!(
        replies.next_line().await.unwrap(),
        None,
        "the output closes after the end of input"
    );
}

#[tokio::test]
async fn calls_still_running_at_end_of_input_are_answered() {
    let gate = Arc::new(Notify::new());
    let input = format!(
        "{INIT}\n{}\n",
        r#"{"jsonrpc":"2.0","id":"late","method":"tools/call","params":{"name":"gate"}}"#
    );
    let opener = Arc::clone(&gate);
    let mut output = Vec::new();
    let serve = serve_stdio(server(gate), input.as_bytes(), &mut output);
    // Opens the gate only once the server is already waiting at end of input (or soon after).
    let open = async move {
        tokio::task::yield_now().await;
        opener.notify_one();
    };
    let (served, ()) = tokio::join!(serve, open);
    served.unwrap();
    let responses = parse_lines(&output);
    assert_eq!(responses.len(), 2);
    assert_eq!(responses[1]["id"], "late");
}

#[tokio::test]
async fn overlong_lines_are_skipped_with_an_error() {
    let gate = Arc::new(Notify::new());
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(500)
    );
    let input = format!(
        "{INIT}\n{long}\n{}\n{long}",
        r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#
    );
    let mut output = Vec::new();
    let config = StdioConfig {
        max_line_bytes: 200,
        ..StdioConfig::default()
    };
    // A 7-byte buffer makes every line arrive in many pieces.
    let reader = BufReader::with_capacity(7, input.as_bytes());
    serve_stdio_with(server(gate), reader, &mut output, config)
        .await
        .unwrap();
    let responses = parse_lines(&output);
    assert_eq!(responses.len(), 4, "{responses:?}");
    for too_long in [&responses[1], &responses[3]] {
        assert_eq!(too_long["id"], Value::Null);
        assert_eq!(too_long["error"]["code"], -32600);
        let message = too_long["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("message too large") && message.contains("200"),
            "{message}"
        );
    }
    assert_eq!(responses[2]["id"], 3);
}

#[tokio::test]
async fn read_line_splits_and_limits() {
    let input = b"ab\n\ncdefgh\nij";
    let mut reader = BufReader::with_capacity(3, &input[..]);
    let mut buf = Vec::new();
    let mut lines = Vec::new();
    loop {
        match read_line(&mut reader, &mut buf, 4).await.unwrap() {
            Line::Eof => break,
            Line::Message(bytes) => lines.push(String::from_utf8(bytes).unwrap()),
            Line::TooLong(n) => lines.push(format!("too long: {n}")),
        }
    }
    assert_eq!(lines, ["ab", "", "too long: 6", "ij"]);
}

/// A writer that always fails, like stdout whose reader has gone.
struct Broken;

impl AsyncWrite for Broken {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn a_failing_output_stops_the_session_with_an_error() {
    let input = format!("{INIT}\n{INIT}\n{INIT}\n");
    let error = serve_stdio(server(Arc::new(Notify::new())), input.as_bytes(), Broken)
        .await
        .unwrap_err();
    assert!(matches!(error, StdioError::Write(_)), "{error}");
    assert!(error.to_string().starts_with("writing the output stream"));
}
