//! The hostile-client suite (issue 46): `horos-ref run` on real sockets, tried as a stranger, a
//! tenant and a web page on the same machine would. Each refusal is checked with what stayed
//! behind it: fakeai's request log (nothing was forwarded), the queue's rows (nothing was
//! deleted or added), `/metrics` (nothing was recorded), run's log (no panic).
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{curl, free_port, runtime, spawn_run, wait_for};
use horos_fakeai::{FakeConfig, FakeServer, Reply};
use horos_testkit::raw_http::{RawAnswer, request};
use serde_json::{Value, json};

const ADMIN: &str = "hostile-admin";
const ALICE: &str = "sk-alice-0123456789";
const BOB: &str = "sk-bob-0123456789";

/// A running box: the binary, its address, its directory and its fake upstream.
struct Box {
    addr: SocketAddr,
    base: String,
    dir: tempfile::TempDir,
    fake: FakeServer,
    _run: common::Running,
    _rt: tokio::runtime::Runtime,
}

impl Box {
    /// `run` with `[coordinator]` extended by `coordinator` and one model `m` on fakeai, whose
    /// every answer is 64 words.
    fn start(coordinator: &str) -> Box {
        Box::start_with(coordinator, "")
    }

    /// [`Box::start`] with more sections after `[coordinator]`'s (`{fake}`: fakeai's URL).
    fn start_with(coordinator: &str, more: &str) -> Box {
        let rt = runtime();
        let words: Vec<String> = (0..64).map(|i| format!("w{i}")).collect();
        let fake = rt
            .block_on(FakeServer::start(FakeConfig {
                reply: Reply::Fixed(words.join(" ")),
                ..FakeConfig::default()
            }))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = format!(
            "database = \"jobs.db\"\n[coordinator]\nbind = \"127.0.0.1:{port}\"\n{coordinator}\n\
             [[coordinator.model]]\nname = \"m\"\nurl = \"{}\"\n{}",
            fake.url(),
            more.replace("{fake}", &fake.url())
        );
        let path = dir.path().join("horos.toml");
        std::fs::write(&path, config).unwrap();
        let run = spawn_run(&path, &dir.path().join("run.err"));
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let base = format!("http://{addr}");
        wait_for("the coordinator", Duration::from_secs(60), || {
            curl("GET", &format!("{base}/health"), None, None).0 == 200
        });
        Box {
            addr,
            base,
            dir,
            fake,
            _run: run,
            _rt: rt,
        }
    }

    /// The configuration with keys: alice (50 tokens a minute), bob, an admin key, callers
    /// without a key let in.
    fn with_keys() -> Box {
        Box::start(&format!(
            "api_key = \"{ADMIN}\"\nallow_anonymous = true\n\
             [coordinator.keys.alice]\nkey_sha256 = \"{}\"\ntpm = 50\n\
             [coordinator.keys.bob]\nkey_sha256 = \"{}\"\n",
            horos_testkit::sha256_hex(ALICE),
            horos_testkit::sha256_hex(BOB)
        ))
    }

    /// The peak resident memory of `run`'s process so far (VmHWM), bytes.
    fn peak_bytes(&self) -> u64 {
        horos_testkit::memory::Process::of(self._run.0.id())
            .peak_rss_bytes()
            .unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("run.err")).unwrap_or_default()
    }

    fn db(&self) -> std::path::PathBuf {
        self.dir.path().join("jobs.db")
    }

    /// `method path` with `headers` and `body`, on a socket of its own.
    fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> RawAnswer {
        request(self.addr, method, path, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path}: no answer ({e})\n{}", self.log()))
    }

    /// A JSON call with `key` (none: a caller without a key).
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
    ) -> (u16, Value) {
        curl(method, &format!("{}{path}", self.base), body, key)
    }

    fn metrics(&self) -> String {
        self.raw(
            "GET",
            "/metrics",
            &[("authorization", &format!("Bearer {ADMIN}"))],
            b"",
        )
        .text()
    }
}

fn chat(extra: Value) -> Value {
    let mut b = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[test]
fn strangers_and_tenants_reach_only_what_is_theirs() {
    let b = Box::with_keys();
    let forwarded = || b.fake.requests().len();

    // A lane's job in the shared database (a queue no coordinator job is in), waiting.
    let q = squeueha::Queue::open(b.db()).unwrap();
    let lane_job = q
        .enqueue(
            "think",
            squeueha::NewJob::new(b"{}".to_vec()).delay(Duration::from_secs(600)),
        )
        .unwrap()
        .id();
    for (key, who) in [(None, "a caller without a key"), (Some(BOB), "bob")] {
        let (s, v) = b.call("POST", &format!("/v1/jobs/{lane_job}/cancel"), None, key);
        assert_eq!(s, 404, "{who} cancelling a lane job: {v}");
        let (s, _) = b.call("GET", &format!("/v1/jobs/{lane_job}"), None, key);
        assert_eq!(s, 404, "{who} reading a lane job");
    }
    // Not through the coordinator's admin job routes either: lane jobs have their own.
    let (s, _) = b.call(
        "POST",
        &format!("/api/v1/jobs/{lane_job}/cancel"),
        None,
        Some(ADMIN),
    );
    assert_eq!(s, 404);
    assert!(
        q.get(lane_job).unwrap().is_some(),
        "the lane job is still queued"
    );

    // bob's job is his: alice and strangers neither see nor cancel it.
    let (s, v) = b.call(
        "POST",
        "/v1/jobs",
        Some(&json!({"kind": "chat", "request": chat(json!({}))})),
        Some(BOB),
    );
    assert_eq!(s, 202, "{v}");
    let id = v["id"].as_i64().unwrap();
    for key in [None, Some(ALICE)] {
        assert_eq!(
            b.call("POST", &format!("/v1/jobs/{id}/cancel"), None, key)
                .0,
            404
        );
        assert_eq!(b.call("GET", &format!("/v1/jobs/{id}"), None, key).0, 404);
    }
    assert_eq!(
        b.call("GET", &format!("/v1/jobs/{id}"), None, Some(BOB)).0,
        200
    );

    // A caller without a key cannot take a key's name (and its profile).
    let before = forwarded();
    let (s, v) = b.call(
        "POST",
        "/v1/chat/completions",
        Some(&chat(json!({"x_client_id": "key:alice"}))),
        None,
    );
    assert_eq!((s, code(&v)), (400, "invalid_client_id"), "{v}");
    // A 4 MiB label on a route without the chat check: refused before anything is recorded.
    let huge = json!({"query": "q", "x_client_id": "x".repeat(4 << 20)}).to_string();
    let r = b.raw(
        "POST",
        "/v1/search",
        &[("content-type", "application/json")],
        huge.as_bytes(),
    );
    let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    assert_eq!((r.status, code(&v)), (400, "invalid_client_id"), "{v}");
    assert_eq!(
        forwarded(),
        before,
        "nothing was forwarded for a refused label"
    );
    let m = b.metrics();
    assert!(m.len() < 256 * 1024, "/metrics is {} bytes", m.len());
    for label in ["xxxxxxxx", "client:key:alice"] {
        let found: Vec<&str> = m.lines().filter(|l| l.contains(label)).collect();
        assert!(found.is_empty(), "{label} recorded: {found:?}");
    }

    // A wrong key is refused from the headers alone: the body it announces is never waited for
    // (a server reading it would see the socket close and answer 400 instead).
    let r = b.raw(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", "Bearer sk-wrong"),
            ("content-type", "application/json"),
            ("content-length", "8000000"),
        ],
        b"",
    );
    assert_eq!(r.status, 401, "{}", r.text());

    // Many callers: the per-caller series on /metrics stay bounded (50 by name and `_other`).
    for i in 0..80 {
        let (s, v) = b.call(
            "POST",
            "/v1/chat/completions",
            Some(&chat(
                json!({"x_client_id": format!("tenant-{i}"), "max_tokens": 1}),
            )),
            None,
        );
        assert_eq!(s, 200, "{v}");
    }
    let series = b
        .metrics()
        .lines()
        .filter(|l| l.starts_with("horos_coordinator_caller_requests_total{"))
        .count();
    assert!(series <= 51, "{series} caller series on /metrics");

    // An image by address is not fetched on a caller's behalf; a data: URL passes.
    let before = forwarded();
    let image = |url: &str| {
        chat(json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": url}}]}]}))
    };
    let (s, v) = b.call(
        "POST",
        "/v1/chat/completions",
        Some(&image("http://169.254.169.254/latest/meta-data/")),
        Some(BOB),
    );
    assert_eq!((s, code(&v)), (400, "remote_image_refused"), "{v}");
    assert_eq!(v["error"]["param"], "messages[0].content[1].image_url");
    assert_eq!(
        forwarded(),
        before,
        "the refused request never reached the upstream"
    );
    let (s, v) = b.call(
        "POST",
        "/v1/chat/completions",
        Some(&image("data:image/png;base64,iVBORw0KGgo=")),
        Some(BOB),
    );
    assert_eq!(s, 200, "{v}");

    // A stream is charged like an answer: alice (50 tokens a minute) gets her first 64-token
    // stream, without the usage event she did not ask for, and the next call waits.
    let stream = chat(json!({"stream": true}));
    let r = b.raw(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &format!("Bearer {ALICE}")),
            ("content-type", "application/json"),
        ],
        stream.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.text().contains("[DONE]") && !r.text().contains("\"usage\""),
        "{}",
        r.text()
    );
    let sent = b.fake.requests().last().unwrap().body.clone();
    assert!(
        sent.contains("include_usage"),
        "usage asked of the upstream: {sent}"
    );
    let (s, v) = b.call("POST", "/v1/chat/completions", Some(&stream), Some(ALICE));
    assert_eq!(s, 429, "the stream's tokens were charged: {v}");

    assert!(!b.log().contains("panicked"), "{}", b.log());
}

#[test]
fn no_request_panics_a_connection() {
    let b = Box::with_keys();
    let admin = format!("Bearer {ADMIN}");
    // The shapes that panicked, and short, malformed, percent-encoded and very long paths on
    // every router (the data plane, the control pages, the admin API, its extensions): a 400,
    // 404 or 405 in the error shape, never a panic; a 405 (of the coordinator's own tables or
    // an extension's) names the methods the path is served under in `Allow`.
    let alice = format!("Bearer {ALICE}");
    let (admin, alice) = (Some(admin.as_str()), Some(alice.as_str()));
    let long = format!("/v1/{}", "a/".repeat(4_000));
    let long_admin = format!("/api/v1/leases/{}", "%2F/".repeat(3_000));
    for (method, path, key, status, allow) in [
        ("POST", "/v1/jobs/cancel", None, 405, Some("GET")),
        ("POST", "/v1/jobs//cancel", None, 404, None),
        ("GET", "/v1/jobs/1/2", alice, 404, None),
        ("GET", "/v1/jobs/%ZZ", alice, 404, None),
        ("GET", "/v1/jobs/%FF", alice, 400, None),
        ("POST", "/v1/jobs/%ZZ/cancel", alice, 404, None),
        ("GET", "/v1/chat/completions", None, 405, Some("POST")),
        ("GET", "/v1/%6Aobs", None, 404, None),
        ("GET", long.as_str(), None, 404, None),
        ("POST", "/metrics", None, 405, Some("GET")),
        ("GET", "/status/", admin, 404, None),
        ("POST", "/api/v1/jobs/cancel", admin, 405, Some("GET")),
        ("GET", "/api/v1/jobs/7/cancel", admin, 405, Some("POST")),
        ("POST", "/api/v1/dead/requeue", admin, 404, None),
        ("POST", "/api/v1/dead//requeue", admin, 404, None),
        ("POST", "/api/v1/models/%2F/load", admin, 404, None),
        ("POST", "/api/v1/models/load", admin, 404, None),
        ("GET", "/api/v1/logs/%FF", admin, 400, None),
        ("GET", "/api/v1/logs/no%2Fsuch", admin, 404, None),
        (
            "POST",
            "/api/v1/profiles/x",
            admin,
            405,
            Some("GET, PUT, DELETE"),
        ),
        ("GET", "/api/v1/nothing", admin, 404, None),
        ("POST", "/api/v1/leases/renew", admin, 405, Some("DELETE")),
        ("POST", "/api/v1/leases//renew", admin, 404, None),
        ("GET", long_admin.as_str(), admin, 404, None),
        ("PUT", "/api/v1/lanes/jobs", admin, 405, Some("POST")),
        ("GET", "/api/v1/lanes/jobs/%ZZ", admin, 404, None),
        ("GET", "/api/v1/documents/%FF", admin, 400, None),
    ] {
        let headers: Vec<(&str, &str)> = key.map(|k| ("authorization", k)).into_iter().collect();
        let r = b.raw(method, path, &headers, b"");
        let what = format!("{method} {}", &path[..path.len().min(80)]);
        let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        assert!(v["error"]["message"].is_string(), "{what}: {}", r.text());
        // An extension that is not mounted answers 404 for all of its paths.
        let extension = path.starts_with("/api/v1/leases")
            || path.starts_with("/api/v1/lanes")
            || path.starts_with("/api/v1/documents");
        assert!(
            r.status == status || (extension && r.status == 404),
            "{what}: {} (expected {status})\n{}",
            r.head,
            r.text()
        );
        if let Some(allow) = allow.filter(|_| r.status == 405) {
            let head = r.head.to_ascii_lowercase();
            assert!(
                head.contains(&format!("allow: {}", allow.to_ascii_lowercase())),
                "{what}: {}",
                r.head
            );
        }
    }

    // Arbitrary methods, paths, headers and bodies: every one gets an HTTP answer.
    let methods = [
        "GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW",
    ];
    let parts = [
        "/v1/",
        "/api/v1/",
        "jobs",
        "cancel",
        "dead",
        "requeue",
        "leases",
        "renew",
        "models",
        "unload",
        "pin",
        "status",
        "logs",
        "profiles",
        "lanes",
        "chat/completions",
        "search",
        "answers",
        "metrics",
        "7",
        "-1",
        "99999999999999999999",
        "%",
        "%zz",
        "%2F",
        "..",
        "/",
        "//",
        "?state=x&limit=0",
        "?fragment=main",
        "x",
        "gpus",
        "config",
        "reload",
        "usage",
    ];
    let bodies = [
        "",
        "{",
        "[]",
        "null",
        "{\"model\":1}",
        "{\"x_client_id\":{\"a\":[]}}",
        "{\"model\":\"m\",\"messages\":7}",
        "{\"query\":\"\",\"k\":-5}",
        "\u{0}\u{ff}",
        "{\"parts\":[[0,-1]],\"ttl_s\":1e309}",
        "{\"kind\":\"chat\",\"request\":[]}",
    ];
    let content_types = [
        "application/json",
        "text/plain",
        "application/json; charset=x",
        "",
    ];
    let keys = [
        "",
        "Bearer ",
        "Bearer sk-wrong",
        "Basic x",
        "Bearer hostile-admin",
    ];
    let mut rng = horos_testkit::rng::XorShift::new(0x5eed_cafe_f00d);
    for i in 0..400 {
        let method = *rng.pick(&methods);
        let mut path = String::new();
        for _ in 0..1 + rng.below(4) {
            let part: &&str = rng.pick(&parts);
            path.push_str(part);
        }
        if !path.starts_with('/') {
            path.insert(0, '/');
        }
        let body = *rng.pick(&bodies);
        let mut headers = vec![];
        let ct = *rng.pick(&content_types);
        if !ct.is_empty() {
            headers.push(("content-type", ct));
        }
        let key = *rng.pick(&keys);
        if !key.is_empty() {
            headers.push(("authorization", key));
        }
        let r = request(b.addr, method, &path, &headers, body.as_bytes());
        let r = r.unwrap_or_else(|e| panic!("#{i} {method} {path}: no answer ({e})\n{}", b.log()));
        assert!(
            (100..600).contains(&r.status),
            "#{i} {method} {path}: {}",
            r.head
        );
    }
    assert!(
        !b.log().contains("panicked"),
        "a request panicked a handler:\n{}",
        b.log()
    );
}

/// A cross-site request as a browser sends it from `origin`.
fn from_page<'a>(origin: &'a str, host: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("host", host),
        ("origin", origin),
        ("sec-fetch-site", "cross-site"),
        ("content-type", "text/plain;charset=UTF-8"),
    ]
}

fn assert_page_refused(r: &RawAnswer, status: u16, what: &str) {
    assert_eq!(r.status, status, "{what}: {}\n{}", r.head, r.text());
    assert!(
        r.header("access-control-allow-origin").is_none(),
        "{what}: CORS"
    );
}

#[test]
fn a_web_page_neither_drives_nor_reads_the_box() {
    // The configuration `init` writes: no key at all.
    let b = Box::start("");
    let host = b.addr.to_string();
    let evil = "https://evil.example";
    let job = json!({"kind": "chat", "request": chat(json!({}))}).to_string();

    // DNS rebinding: a page on a name pointed at 127.0.0.1 reads nothing, whatever the route.
    for path in [
        "/api/v1/config",
        "/api/v1/logs/run",
        "/status",
        "/metrics",
        "/v1/models",
    ] {
        let r = b.raw(
            "GET",
            path,
            &[("host", "rebind.attacker.example:8210")],
            b"",
        );
        assert_page_refused(&r, 421, path);
        assert!(
            !r.text().contains("database"),
            "{path} leaked: {}",
            r.text()
        );
    }
    // CSRF: a cross-site form or fetch changes nothing.
    let before = b.fake.requests().len();
    for (path, body) in [
        ("/v1/jobs", job.as_str()),
        ("/api/v1/lanes/jobs", "{\"queue\":\"think\",\"payload\":{}}"),
        ("/api/v1/models/unload", ""),
        ("/v1/chat/completions", "{\"model\":\"m\",\"messages\":[]}"),
    ] {
        let r = b.raw("POST", path, &from_page(evil, &host), body.as_bytes());
        assert_page_refused(&r, 403, path);
        let r = b.raw("POST", path, &from_page("null", &host), body.as_bytes());
        assert_page_refused(&r, 403, path);
    }
    // Same origin but not JSON (a form on one of the box's own pages, or a confused client).
    let r = b.raw(
        "POST",
        "/v1/jobs",
        &[("content-type", "application/x-www-form-urlencoded")],
        job.as_bytes(),
    );
    assert_page_refused(&r, 415, "a form body");
    assert_eq!(b.fake.requests().len(), before, "nothing was forwarded");
    let (s, v) = b.call("GET", "/api/v1/jobs", None, None);
    assert_eq!(s, 200);
    assert_eq!(v["data"], json!([]), "no job was queued");
    let q = squeueha::Queue::open(b.db()).unwrap();
    assert_eq!(q.stats("think").unwrap().ready, 0, "no lane job was queued");

    // The status page's own fetch (same origin) still works, and its answers are hardened.
    let own = format!("http://{host}");
    let r = b.raw(
        "POST",
        "/api/v1/models/unload",
        &[("origin", &own), ("sec-fetch-site", "same-origin")],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let page = b.raw("GET", "/status", &[], b"");
    assert_eq!(page.status, 200);
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    let csp = page.header("content-security-policy").unwrap_or("");
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    assert!(!b.log().contains("panicked"), "{}", b.log());
}

#[test]
fn with_an_admin_key_a_foreign_host_reads_no_page_either() {
    let b = Box::with_keys();
    for path in ["/status", "/metrics", "/health"] {
        let r = b.raw("GET", path, &[("host", "rebind.attacker.example")], b"");
        assert_page_refused(&r, 421, path);
    }
    // A host the operator names is served.
    drop(b);
    let b = Box::start("public_hosts = [\"gpu.example.org\"]");
    let r = b.raw("GET", "/health", &[("host", "gpu.example.org:8210")], b"");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Decompression bombs cost the page (or the question), not the process that serves everyone:
/// four image questions declaring 11585 x 11585 pixels are refused from their headers (413),
/// and a 13 MB PDF whose first page inflates to 2 GiB fails that page alone
/// (`too_large`) while its second page is read; `run`'s peak memory, read from /proc, stays
/// far below what either bomb would take.
#[test]
fn decoder_bombs_cost_the_page_not_the_process() {
    if std::process::Command::new("tesseract")
        .arg("--version")
        .output()
        .is_err()
    {
        horos_testkit::skip_or_fail("HOROS_REQUIRE_OCR", "tesseract is not installed");
        return;
    }
    use base64::Engine as _;
    let b = Box::start_with(
        "",
        "[ingest]\ninbox = \"inbox\"\nembeddings_url = \"{fake}\"\n\
         embeddings_model = \"fake-embed\"\ndpi = 50\n",
    );
    wait_for("the ingest pipeline", Duration::from_secs(60), || {
        let r = b.raw(
            "POST",
            "/v1/search",
            &[("content-type", "application/json")],
            br#"{"query": "walrus"}"#,
        );
        r.status == 200
    });
    let before = b.peak_bytes();
    let bomb = base64::engine::general_purpose::STANDARD
        .encode(horos_testkit::png::declaring(11585, 11585));
    let body = json!({"query": "", "image": bomb}).to_string();
    let answers: Vec<RawAnswer> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    b.raw(
                        "POST",
                        "/v1/search",
                        &[("content-type", "application/json")],
                        body.as_bytes(),
                    )
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    for r in &answers {
        assert_eq!(r.status, 413, "{}", r.text());
        assert!(r.text().contains("too_large"), "{}", r.text());
    }
    // A 2 GiB bomb on page 1, text on page 2, dropped in the inbox and ingested.
    let inbox = b.dir.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    std::fs::write(
        inbox.join("bomb.pdf"),
        horos_testkit::pdf::bomb_then_text(2 << 30, &["walrus lighthouse"]),
    )
    .unwrap();
    let config = b.dir.path().join("horos.toml");
    let queued = common::json(&common::cli(&config, &["--json", "ingest", "bomb.pdf"]));
    assert_eq!(queued["status"], "queued", "{queued}");
    let mut doc = Value::Null;
    wait_for(
        "the bomb's document ingested",
        Duration::from_secs(180),
        || {
            doc = common::json(&common::cli(&config, &["--json", "docs"]))[0].clone();
            doc["status"] != "pending"
        },
    );
    assert_eq!(doc["status"], "done", "{doc}\n{}", b.log());
    let id = doc["id"].to_string();
    let pages = common::json(&common::cli(&config, &["--json", "docs", "pages", &id]));
    let failures: Vec<&Value> = pages
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["failure"])
        .collect();
    assert!(
        failures[0].to_string().contains("too_large") && failures[1].is_null(),
        "{pages}"
    );
    let grown = b.peak_bytes().saturating_sub(before);
    assert!(
        grown < 512 << 20,
        "run's peak memory grew by {} MB",
        grown >> 20
    );
    println!(
        "peak memory of run: {} MB before the bombs, {} MB after",
        before >> 20,
        b.peak_bytes() >> 20
    );
    assert!(!b.log().contains("panicked"), "{}", b.log());
}
