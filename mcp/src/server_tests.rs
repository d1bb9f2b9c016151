//! Unit tests of [`Server`]: every method and error case, one message at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::jsonrpc::{
    INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
    SERVER_NOT_INITIALIZED,
};
use crate::server::MAX_BATCH_MESSAGES;
use crate::{Dispatch, LATEST_PROTOCOL_VERSION, Server, ServerInfo, Tool, ToolError, ToolRegistry};

struct Add;

#[async_trait]
impl Tool for Add {
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "Adds two integers."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]
        })
    }
    async fn call(&self, args: Value) -> Result<Value, ToolError> {
        #[derive(serde::Deserialize)]
        struct Args {
            a: i64,
            b: i64,
        }
        let Args { a, b } = serde_json::from_value(args)?;
        let sum = a
            .checked_add(b)
            .ok_or_else(|| ToolError::failed("overflow"))?;
        Ok(json!({ "sum": sum }))
    }
}

/// Returns its `value` argument, or fails as told by `fail`.
struct Echo {
    calls: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Echoes `value`; `fail` = failed | internal | panic makes it fail that way."
    }
    fn title(&self) -> Option<&str> {
        Some("Echo")
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"value": {}, "fail": {"type": "string"}}})
    }
    async fn call(&self, args: Value) -> Result<Value, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match args.get("fail").and_then(Value::as_str) {
            Some("failed") => Err(ToolError::failed("it failed")),
            Some("internal") => Err(ToolError::internal("lost the database")),
            Some("panic") => panic!("echo was told to panic"),
            _ => Ok(args.get("value").cloned().unwrap_or(Value::Null)),
        }
    }
}

fn server_with_calls() -> (Server, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = ToolRegistry::new()
        .with(Add)
        .unwrap()
        .with(Echo {
            calls: Arc::clone(&calls),
        })
        .unwrap();
    let info = ServerInfo::new("test-server", "1.2.3")
        .with_title("Test")
        .with_instructions("Use add.");
    (Server::new(info, tools), calls)
}

fn server() -> Server {
    server_with_calls().0
}

async fn send(server: &Server, message: &str) -> Option<Value> {
    server.handle(message).await.map(|line| {
        assert!(!line.contains('\n'), "{line}");
        serde_json::from_str(&line).unwrap()
    })
}

async fn initialized() -> Server {
    let server = server();
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    send(&server, init).await.unwrap();
    assert_eq!(
        send(
            &server,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
        )
        .await,
        None
    );
    server
}

fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {response}"))
}

async fn call(server: &Server, params: Value) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params});
    send(server, &request.to_string()).await.unwrap()
}

#[tokio::test]
async fn initialize_negotiates_the_version_and_describes_the_server() {
    for (asked, answered) in [
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2024-11-05"),
        ("1999-01-01", LATEST_PROTOCOL_VERSION),
        ("2099-12-31", LATEST_PROTOCOL_VERSION),
    ] {
        let server = server();
        assert!(server.session().is_none());
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": asked, "capabilities": {"roots": {}}, "clientInfo": {"name": "c", "version": "9"}}});
        let response = send(&server, &request.to_string()).await.unwrap();
        assert_eq!(
            response,
            json!({"jsonrpc": "2.0", "id": 1, "result": {
                "protocolVersion": answered,
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "test-server", "version": "1.2.3", "title": "Test"},
                "instructions": "Use add."
            }}),
            "{asked}"
        );
        let session = server.session().unwrap();
        assert_eq!(session.protocol_version, answered);
        assert_eq!(session.requested_version, asked);
        assert_eq!(session.client_info, json!({"name": "c", "version": "9"}));
        assert_eq!(session.capabilities, json!({"roots": {}}));
        assert!(!server.client_ready());
        send(
            &server,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        )
        .await;
        assert!(server.client_ready());
    }
}

#[tokio::test]
async fn initialize_without_optional_fields_and_with_bad_params() {
    let server = Server::new(ServerInfo::new("bare", "0.1.0"), ToolRegistry::new());
    for bad in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":[]}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":20250618}}"#,
    ] {
        assert_eq!(
            error_code(&send(&server, bad).await.unwrap()),
            INVALID_PARAMS,
            "{bad}"
        );
        assert!(server.session().is_none());
    }
    let ok = r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2024-11-05"}}"#;
    let response = send(&server, ok).await.unwrap();
    assert_eq!(
        response["result"],
        json!({"protocolVersion": "2024-11-05", "capabilities": {"tools": {"listChanged": false}},
               "serverInfo": {"name": "bare", "version": "0.1.0"}})
    );
    assert_eq!(server.session().unwrap().client_info, Value::Null);
    // A second initialize is refused and changes nothing.
    let again = r#"{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#;
    let response = send(&server, again).await.unwrap();
    assert_eq!(error_code(&response), INVALID_REQUEST);
    assert_eq!(response["id"], 3);
    assert_eq!(server.session().unwrap().protocol_version, "2024-11-05");
}

#[tokio::test]
async fn requests_before_initialize_are_refused_except_ping() {
    let server = server();
    let ping = send(&server, r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#)
        .await
        .unwrap();
    assert_eq!(ping, json!({"jsonrpc": "2.0", "id": "p", "result": {}}));
    for method in ["tools/list", "tools/call"] {
        let request =
            json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": {"name": "add"}});
        let response = send(&server, &request.to_string()).await.unwrap();
        assert_eq!(error_code(&response), SERVER_NOT_INITIALIZED, "{method}");
        assert_eq!(response["id"], 5);
    }
    // notifications/initialized before initialize does not open the session either.
    assert_eq!(
        send(
            &server,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
        )
        .await,
        None
    );
    assert!(!server.client_ready());
    let response = send(&server, r#"{"jsonrpc":"2.0","id":6,"method":"tools/list"}"#)
        .await
        .unwrap();
    assert_eq!(error_code(&response), SERVER_NOT_INITIALIZED);
}

#[tokio::test]
async fn tools_list_describes_every_tool() {
    let server = initialized().await;
    let response = send(
        &server,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"ignored"}}"#,
    )
    .await
    .unwrap();
    let tools = response["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["name"], "add");
    assert_eq!(tools[0]["description"], "Adds two integers.");
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["a", "b"]));
    assert!(tools[0].get("title").is_none());
    assert_eq!(tools[1]["name"], "echo");
    assert_eq!(tools[1]["title"], "Echo");
    assert!(response["result"].get("nextCursor").is_none());
}

#[tokio::test]
async fn tools_call_returns_content_and_structured_content() {
    let server = initialized().await;
    let response = call(
        &server,
        json!({"name": "add", "arguments": {"a": 2, "b": 40}}),
    )
    .await;
    assert_eq!(
        response,
        json!({"jsonrpc": "2.0", "id": 9, "result": {
            "content": [{"type": "text", "text": "{\"sum\":42}"}],
            "structuredContent": {"sum": 42},
            "isError": false
        }})
    );
    // Non-object results are wrapped; a string is shown as itself.
    let response = call(
        &server,
        json!({"name": "echo", "arguments": {"value": "hi\nthere"}}),
    )
    .await;
    assert_eq!(response["result"]["content"][0]["text"], "hi\nthere");
    assert_eq!(
        response["result"]["structuredContent"],
        json!({"result": "hi\nthere"})
    );
    let response = call(
        &server,
        json!({"name": "echo", "arguments": {"value": [1, 2]}}),
    )
    .await;
    assert_eq!(response["result"]["content"][0]["text"], "[1,2]");
    assert_eq!(
        response["result"]["structuredContent"],
        json!({"result": [1, 2]})
    );
    // Absent or null arguments are an empty object.
    let response = call(&server, json!({"name": "echo"})).await;
    assert_eq!(
        response["result"]["structuredContent"],
        json!({"result": null})
    );
    let response = call(&server, json!({"name": "echo", "arguments": null})).await;
    assert_eq!(response["result"]["isError"], false);
}

#[tokio::test]
async fn tool_failures_are_results_with_is_error() {
    let server = initialized().await;
    let response = call(
        &server,
        json!({"name": "echo", "arguments": {"fail": "failed"}}),
    )
    .await;
    assert_eq!(
        response["result"],
        json!({"content": [{"type": "text", "text": "it failed"}], "isError": true})
    );
    let response = call(
        &server,
        json!({"name": "add", "arguments": {"a": i64::MAX, "b": 1}}),
    )
    .await;
    assert_eq!(response["result"]["isError"], true);
    assert_eq!(response["result"]["content"][0]["text"], "overflow");
}

#[tokio::test]
async fn argument_mistakes_are_results_with_is_error_and_the_tool_is_not_called() {
    let (server, calls) = server_with_calls();
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#;
    send(&server, init).await.unwrap();
    for (args, message) in [
        (json!({"a": 1}), "missing required argument `b`"),
        (
            json!({"a": "1", "b": 2}),
            "argument `a` must be integer, not string",
        ),
        (
            json!({"a": 1.5, "b": 2}),
            "argument `a` must be integer, not number",
        ),
    ] {
        let response = call(&server, json!({"name": "add", "arguments": args})).await;
        assert_eq!(response["result"]["isError"], true, "{args}");
        assert_eq!(response["result"]["content"][0]["text"], message);
    }
    let response = call(&server, json!({"name": "echo", "arguments": {"fail": 3}})).await;
    assert_eq!(response["result"]["isError"], true);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn malformed_tool_calls_are_invalid_params() {
    let server = initialized().await;
    for params in [
        json!({"name": "nope", "arguments": {}}),
        json!({"arguments": {}}),
        json!({"name": 5}),
        json!({"name": "add", "arguments": [1, 2]}),
        json!({"name": "add", "arguments": "a=1"}),
        json!(["add"]),
    ] {
        let response = call(&server, params.clone()).await;
        assert_eq!(error_code(&response), INVALID_PARAMS, "{params}");
        assert_eq!(response["id"], 9);
    }
    let response = send(&server, r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#)
        .await
        .unwrap();
    assert_eq!(error_code(&response), INVALID_PARAMS);
    let response = call(&server, json!({"name": "nope"})).await;
    assert_eq!(
        response["error"]["message"],
        "Invalid params: unknown tool: nope"
    );
}

#[tokio::test]
async fn internal_tool_errors_and_panics_are_internal_errors() {
    let server = initialized().await;
    let response = call(
        &server,
        json!({"name": "echo", "arguments": {"fail": "internal"}}),
    )
    .await;
    assert_eq!(error_code(&response), INTERNAL_ERROR);
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .contains("lost the database")
    );
    let response = call(
        &server,
        json!({"name": "echo", "arguments": {"fail": "panic"}}),
    )
    .await;
    assert_eq!(error_code(&response), INTERNAL_ERROR);
    assert_eq!(response["id"], 9);
    // The session goes on.
    let response = call(&server, json!({"name": "echo", "arguments": {"value": 1}})).await;
    assert_eq!(
        response["result"]["structuredContent"],
        json!({"result": 1})
    );
}

#[test]
fn tool_calls_run_without_a_tokio_runtime() {
    let server = server();
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#;
    assert!(matches!(
        server.dispatch(init.as_bytes()),
        Dispatch::Ready(Some(_))
    ));
    let request = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}"#;
    let dispatch = server.dispatch(request.as_bytes());
    assert!(format!("{dispatch:?}").starts_with("Pending"));
    // A minimal executor: the Add future never waits, so one poll finishes it.
    let mut future = std::pin::pin!(dispatch.finish());
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let std::task::Poll::Ready(Some(line)) = future.as_mut().poll(&mut context) else {
        panic!("the call did not finish in one poll");
    };
    let response: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(response["result"]["structuredContent"], json!({"sum": 3}));
}

#[tokio::test]
async fn unknown_methods_and_invalid_messages() {
    let server = initialized().await;
    let response = send(
        &server,
        r#"{"jsonrpc":"2.0","id":"x","method":"resources/list"}"#,
    )
    .await
    .unwrap();
    assert_eq!(response["id"], "x");
    assert_eq!(error_code(&response), METHOD_NOT_FOUND);
    for (message, code) in [
        ("{", PARSE_ERROR),
        ("not json", PARSE_ERROR),
        ("", PARSE_ERROR),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"} trailing"#,
            PARSE_ERROR,
        ),
        ("42", INVALID_REQUEST),
        (
            r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#,
            INVALID_REQUEST,
        ),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            INVALID_REQUEST,
        ),
        (
            r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
            INVALID_REQUEST,
        ),
    ] {
        let response = send(&server, message).await.unwrap();
        assert_eq!(error_code(&response), code, "{message}");
        assert_eq!(response["id"], Value::Null, "{message}");
        assert_eq!(response["jsonrpc"], "2.0");
    }
    // An invalid request whose id could be read echoes it.
    let response = send(&server, r#"{"jsonrpc":"1.0","id":77,"method":"ping"}"#)
        .await
        .unwrap();
    assert_eq!(
        (error_code(&response), &response["id"]),
        (INVALID_REQUEST, &json!(77))
    );
    // Invalid UTF-8 is a parse error too.
    let line = server.handle(b"\xff\xfe".as_slice()).await.unwrap();
    assert!(line.contains("-32700"));
}

#[tokio::test]
async fn notifications_and_client_responses_get_no_answer() {
    let server = initialized().await;
    for message in [
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
        r#"{"jsonrpc":"2.0","method":"unknown/notification"}"#,
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"nope"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}"#,
    ] {
        assert_eq!(send(&server, message).await, None, "{message}");
    }
}

#[tokio::test]
async fn ids_are_echoed_exactly() {
    let server = initialized().await;
    for id in [
        "0",
        "-1",
        "1.0",
        "1e3",
        "18446744073709551616",
        r#""abc""#,
        r#""\u00e9""#,
        r#""""#,
    ] {
        let line = server
            .handle(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#))
            .await
            .unwrap();
        assert_eq!(
            line,
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
        );
    }
}

#[tokio::test]
async fn batches_answer_every_request_in_order() {
    let server = initialized().await;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"value": "one"}}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 0}},
        {"jsonrpc": "2.0", "id": "two", "method": "ping"},
        1,
        {"jsonrpc": "2.0", "id": 3, "method": "nope"},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1, "b": 1}}},
    ]);
    let response = send(&server, &batch.to_string()).await.unwrap();
    let responses = response.as_array().unwrap();
    assert_eq!(responses.len(), 5);
    assert_eq!(responses[0]["id"], 1);
    assert_eq!(
        responses[0]["result"]["structuredContent"],
        json!({"result": "one"})
    );
    assert_eq!(
        responses[1],
        json!({"jsonrpc": "2.0", "id": "two", "result": {}})
    );
    assert_eq!(
        (error_code(&responses[2]), &responses[2]["id"]),
        (INVALID_REQUEST, &Value::Null)
    );
    assert_eq!(error_code(&responses[3]), METHOD_NOT_FOUND);
    assert_eq!(
        responses[4]["result"]["structuredContent"],
        json!({"sum": 2})
    );
}

#[tokio::test]
async fn batch_edge_cases() {
    let server = initialized().await;
    // Empty: one error, not an array.
    let response = send(&server, "[]").await.unwrap();
    assert_eq!(
        (error_code(&response), &response["id"]),
        (INVALID_REQUEST, &Value::Null)
    );
    // Not objects: one error each.
    let response = send(&server, "[1,2,3]").await.unwrap();
    assert_eq!(response.as_array().unwrap().len(), 3);
    // Only notifications: nothing at all.
    let only = r#"[{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","method":"x"}]"#;
    assert_eq!(send(&server, only).await, None);
    // Without tool calls the answer is ready at once.
    let pings =
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#;
    assert!(matches!(
        server.dispatch(pings.as_bytes()),
        Dispatch::Ready(Some(_))
    ));
    // Over the cap: one error for the whole batch, nothing of it run.
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let many = format!("[{}]", vec![ping; MAX_BATCH_MESSAGES + 1].join(","));
    let response = send(&server, &many).await.unwrap();
    assert_eq!(
        (error_code(&response), &response["id"]),
        (INVALID_REQUEST, &Value::Null)
    );
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most")
    );
    let at_cap = format!("[{}]", vec![ping; MAX_BATCH_MESSAGES].join(","));
    let response = send(&server, &at_cap).await.unwrap();
    assert_eq!(response.as_array().unwrap().len(), MAX_BATCH_MESSAGES);
    // A broken batch is a parse error.
    assert_eq!(
        error_code(
            &send(&server, r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},"#)
                .await
                .unwrap()
        ),
        PARSE_ERROR
    );
}

#[tokio::test]
async fn initialize_is_refused_inside_a_batch() {
    let server = server();
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}]"#;
    let response = send(&server, batch).await.unwrap();
    assert_eq!(error_code(&response[0]), INVALID_REQUEST);
    assert_eq!(response[0]["id"], 1);
    assert!(server.session().is_none());
}

#[tokio::test]
async fn dispatch_applies_initialize_before_the_next_message() {
    // A client that pipelines: initialize's effect must not depend on when futures are polled.
    let server = server();
    let init = server.dispatch(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}"#);
    let list = server.dispatch(br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    let list: Value = serde_json::from_str(&list.finish().await.unwrap()).unwrap();
    assert_eq!(list["result"]["tools"].as_array().unwrap().len(), 2);
    let init: Value = serde_json::from_str(&init.finish().await.unwrap()).unwrap();
    assert_eq!(init["result"]["protocolVersion"], "2025-03-26");
    assert_eq!(server.info().name, "test-server");
    assert_eq!(server.tools().len(), 2);
}

/// Counts the calls running at once.
struct Busy {
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Busy {
    fn name(&self) -> &str {
        "busy"
    }
    fn description(&self) -> &str {
        "Takes 20 ms."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _args: Value) -> Result<Value, ToolError> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        Ok(json!({}))
    }
}

#[tokio::test]
async fn a_batch_runs_a_bounded_number_of_calls_at_once_and_answers_them_all_in_order() {
    let most = Arc::new(AtomicUsize::new(0));
    let tools = ToolRegistry::new()
        .with(Busy {
            now: Arc::new(AtomicUsize::new(0)),
            most: Arc::clone(&most),
        })
        .unwrap();
    let server = Server::new(ServerInfo::new("t", "0"), tools);
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    send(&server, init).await.unwrap();
    let batch: Vec<Value> = (1..=50)
        .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "busy", "arguments": {}}}))
        .collect();
    let response = send(&server, &Value::from(batch).to_string())
        .await
        .unwrap();
    let ids: Vec<i64> = response
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, (1..=50).collect::<Vec<_>>());
    assert_eq!(
        most.load(Ordering::SeqCst),
        crate::server::BATCH_CONCURRENCY
    );
}
