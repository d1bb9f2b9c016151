//! An MCP client talking to a real server process over pipes.
//!
//! This test has its own `main` (`harness = false`): run with `HOROS_MCP_TEST_CHILD=1` it *is*
//! the server (the `echo_server` example, included below); run plainly it starts itself that
//! way as a child process and goes through the MCP handshake and tool calls the way a client
//! does. libtest would print its banner on stdout, the protocol channel, hence no harness.

// Without libtest, cfg(test) is not set and clippy's allow-unwrap-in-tests does not apply.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

#[path = "../examples/echo_server.rs"]
#[allow(dead_code)] // the example's `main` is not used here
mod echo_server;

const CHILD_ENV: &str = "HOROS_MCP_TEST_CHILD";

fn main() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build();
        let Ok(runtime) = runtime else {
            eprintln!("child: no tokio runtime");
            std::process::exit(3);
        };
        if let Err(error) = runtime.block_on(echo_server::run()) {
            eprintln!("child: {error}");
            std::process::exit(1);
        }
        return;
    }
    if std::env::args().any(|arg| arg == "--list") {
        println!("mcp_client_session_over_pipes: test");
        return;
    }
    // A hang guard, not a timing assertion: a broken server must not block the test run forever.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(300));
        eprintln!("test mcp_client_session_over_pipes ... FAILED: no progress in 300 s");
        std::process::exit(101);
    });
    mcp_client_session_over_pipes();
    println!("test mcp_client_session_over_pipes ... ok");
}

/// The client end of the pipes.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Client {
    fn start() -> Self {
        let exe = std::env::current_exe().expect("the test's own path");
        let mut child = Command::new(exe)
            .env(CHILD_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server process");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Self {
            child,
            stdin,
            stdout,
        }
    }

    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: Value) {
        self.send_line(&message.to_string());
    }

    fn receive(&mut self) -> Value {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).unwrap();
        assert!(n > 0, "the server closed its output");
        assert!(
            line.ends_with('\n'),
            "every message is a whole line: {line:?}"
        );
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout must carry only JSON-RPC ({e}): {line:?}"))
    }

    fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id.clone(), "method": method, "params": params}));
        let response = self.receive();
        assert_eq!(response["jsonrpc"], "2.0");
        assert_eq!(response["id"], id, "{response}");
        response
    }

    fn call(&mut self, id: i64, name: &str, arguments: Value) -> Value {
        self.request(
            json!(id),
            "tools/call",
            json!({"name": name, "arguments": arguments}),
        )
    }
}

fn mcp_client_session_over_pipes() {
    let mut client = Client::start();

    // Before initialize only ping is served.
    let early = client.request(json!(0), "tools/list", json!({}));
    assert_eq!(early["error"]["code"], -32002, "{early}");

    let init = client.request(
        json!(1),
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe-test", "version": "1"}}),
    );
    let result = &init["result"];
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert_eq!(
        result["capabilities"],
        json!({"tools": {"listChanged": false}})
    );
    assert_eq!(result["serverInfo"]["name"], "echo-server");
    assert!(
        result["instructions"]
            .as_str()
            .is_some_and(|s| s.contains("add"))
    );
    // A notification has no answer: the next line read answers the next request.
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    let ping = client.request(json!("ping-1"), "ping", json!({}));
    assert_eq!(ping["result"], json!({}));

    let list = client.request(json!(2), "tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["add", "echo"]);
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object");
        assert!(tool["description"].as_str().is_some_and(|d| !d.is_empty()));
    }

    let sum = client.call(3, "add", json!({"a": 2, "b": 3}));
    assert_eq!(
        sum["result"],
        json!({"content": [{"type": "text", "text": "{\"sum\":5}"}], "structuredContent": {"sum": 5}, "isError": false})
    );
    let echo = client.call(4, "echo", json!({"text": "multi\nline"}));
    assert_eq!(echo["result"]["content"][0]["text"], "multi\nline");

    // Failures the model can act on are results with isError, not protocol errors.
    let failed = client.call(5, "echo", json!({"text": ""}));
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    assert!(
        failed["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("nothing to echo")
    );
    let overflow = client.call(6, "add", json!({"a": i64::MAX, "b": 1}));
    assert_eq!(overflow["result"]["isError"], true);
    let bad_args = client.call(7, "add", json!({"a": "two", "b": 3}));
    assert_eq!(bad_args["result"]["isError"], true);
    assert_eq!(
        bad_args["result"]["content"][0]["text"],
        "argument `a` must be integer, not string"
    );
    let extra = client.call(8, "add", json!({"a": 1, "b": 2, "c": 3}));
    assert_eq!(
        extra["result"]["content"][0]["text"],
        "unknown argument `c`"
    );

    // Protocol errors.
    let unknown_tool = client.call(9, "subtract", json!({}));
    assert_eq!(unknown_tool["error"]["code"], -32602, "{unknown_tool}");
    let unknown_method = client.request(json!(10), "prompts/list", json!({}));
    assert_eq!(unknown_method["error"]["code"], -32601);
    client.send_line("{this is not json");
    let parse = client.receive();
    assert_eq!(
        (parse["id"].clone(), parse["error"]["code"].clone()),
        (Value::Null, json!(-32700))
    );

    // A batch: answered as one array line, in order.
    client.send(json!([
        {"jsonrpc": "2.0", "id": 11, "method": "ping"},
        {"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 40, "b": 2}}}
    ]));
    let batch = client.receive();
    assert_eq!(batch[0]["id"], 11);
    assert_eq!(batch[1]["result"]["structuredContent"], json!({"sum": 42}));

    // The session still works after all the errors.
    let last = client.call(13, "add", json!({"a": -1, "b": 1}));
    assert_eq!(last["result"]["structuredContent"], json!({"sum": 0}));

    // Closing stdin ends the session cleanly: output closes, exit status 0.
    drop(client.stdin.take());
    let mut rest = String::new();
    client.stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "", "nothing after the last answer");
    let status = client.child.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut stderr = String::new();
    client
        .child
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        stderr.contains("serving MCP"),
        "logs go to stderr: {stderr:?}"
    );
}
