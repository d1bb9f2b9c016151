//! The model manifest and client profiles as a user reaches them: `horos-ref run` with a TOML
//! that gives a model a template file (next to the configuration) and a thinking mode, a
//! client a profile and another a cooldown. A chat naming only the profile's alias is rendered
//! through the template and sent to the upstream's completion endpoint (an echoing fakeai, so
//! the answer is the prompt); its reasoning comes back split; the profile is changed through
//! the admin API; a rerank passes; the bursty client is answered 429 with `Retry-After`.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::{curl, free_port, free_ports, runtime, skip_or_fail, spawn_run, wait_for};
use horos_fakeai::{FakeConfig, FakeServer, Reply};
use serde_json::json;

const ADMIN_KEY: &str = "manifest-admin";

#[test]
fn a_toml_manifest_templates_thinks_and_profiles_route() {
    let rt = runtime();
    let echo = rt
        .block_on(FakeServer::start(FakeConfig {
            reply: Reply::Echo,
            ..FakeConfig::default()
        }))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tmpl.jinja"),
        "{%- for m in messages %}{% if thinking %}<think>on {{ m.content }}</think>{% endif %}\
         [{{ m.role }}] {{ m.content }}{% endfor %}",
    )
    .unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let config = format!(
        r#"database = "jobs.db"
[coordinator]
bind = "127.0.0.1:{port}"
api_key = "{ADMIN_KEY}"
[coordinator.manifest.tmpl]
template_file = "tmpl.jinja"
thinking = false
[coordinator.profiles.app]
aliases = {{ fast = "tmpl" }}
[coordinator.clients.bursty]
cooldown = {{ requests = 1, window_s = 600.0, cooldown_s = 90.0 }}
[[coordinator.model]]
name = "tmpl"
url = "{echo}"
[[coordinator.model]]
name = "reranker"
url = "{echo}"
"#,
        echo = echo.url(),
    );
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, config).unwrap();
    let log = dir.path().join("run.log");
    let _run = spawn_run(&path, &log);
    wait_for("the coordinator", Duration::from_secs(60), || {
        curl("GET", &format!("{base}/health"), None, None).0 == 200
    });
    let chat_url = format!("{base}/v1/chat/completions");

    // The alias goes to `tmpl`, rendered by its template, thinking off by the manifest.
    let chat = json!({"model": "fast", "x_client_id": "app",
        "messages": [{"role": "user", "content": "hi"}]});
    let (code, v) = curl("POST", &chat_url, Some(&chat), None);
    assert_eq!(code, 200, "{v}\n{}", std::fs::read_to_string(&log).unwrap());
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "tmpl");
    assert_eq!(v["choices"][0]["message"]["content"], "[user] hi", "{v}");
    let sent = &echo.requests()[0];
    assert_eq!(sent.path, "/v1/completions");
    // Thinking on for this request: the reasoning the template asked for comes back split.
    let mut on = chat.clone();
    on["x_thinking"] = json!(true);
    let (_, v) = curl("POST", &chat_url, Some(&on), None);
    assert_eq!(v["choices"][0]["message"]["content"], "[user] hi", "{v}");
    assert_eq!(v["choices"][0]["message"]["reasoning_content"], "on hi");
    // Without the profile, `fast` is no model.
    let (code, _) = curl(
        "POST",
        &chat_url,
        Some(&json!({"model": "fast",
        "messages": [{"role": "user", "content": "hi"}]})),
        None,
    );
    assert_eq!(code, 404);

    // The profile changed at run time: `fast` is now the reranker's server, as a plain chat.
    let url = format!("{base}/api/v1/profiles/app");
    let profile = json!({"aliases": {"fast": "reranker"}});
    assert_eq!(curl("PUT", &url, Some(&profile), None).0, 401);
    let (code, v) = curl("PUT", &url, Some(&profile), Some(ADMIN_KEY));
    assert_eq!(code, 200, "{v}");
    let (code, v) = curl("POST", &chat_url, Some(&chat), None);
    assert_eq!(code, 200, "{v}");
    assert_eq!(echo.requests().last().unwrap().path, "/v1/chat/completions");
    assert_eq!(v["choices"][0]["message"]["content"], "hi", "{v}");

    // A rerank through the same front door.
    let (code, v) = curl(
        "POST",
        &format!("{base}/v1/rerank"),
        Some(&json!({"model": "reranker", "query": "red apple",
                     "documents": ["blue car", "red apple"]})),
        None,
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["results"][0]["index"], 1, "{v}");

    // The bursty client: one request, then a cooldown answered 429 with Retry-After.
    let burst = json!({"model": "reranker", "x_client_id": "bursty",
        "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(curl("POST", &chat_url, Some(&burst), None).0, 200);
    let out = Command::new("curl")
        .args([
            "-s",
            "-i",
            "-m",
            "30",
            "-H",
            "content-type: application/json",
        ])
        .args(["-d", &burst.to_string(), &chat_url])
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(head.starts_with("http/1.1 429"), "{head}");
    let after: u64 = head
        .lines()
        .find_map(|l| l.strip_prefix("retry-after: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!((1..=90).contains(&after), "{head}");
    assert!(head.contains("client_cooldown"), "{head}");
    let (_, status) = curl(
        "GET",
        &format!("{base}/api/v1/status"),
        None,
        Some(ADMIN_KEY),
    );
    assert_eq!(
        status["requestors"]["client:bursty"]["refused"], 1,
        "{status}"
    );
}

/// A pooled model that names its backend kind instead of a command: the pool starts
/// llama-server (horos-servers' registry builds its command from the GGUF file) when the first
/// chat needs it, and the chat goes through the coordinator's ChatML template, then through the
/// model's own (`template = "model"`: read from the pooled model's GGUF), to llama-server's own
/// `/completion`. Needs `HOROS_LLAMA_SERVER` and `HOROS_SMOLLM2_GGUF`
/// (scripts/setup_llama.sh); skips without them unless `HOROS_REQUIRE_LLAMA=1`.
#[test]
fn a_pooled_model_started_by_its_backend_kind_answers_through_its_template() {
    let (Ok(server), Ok(gguf)) = (
        std::env::var("HOROS_LLAMA_SERVER"),
        std::env::var("HOROS_SMOLLM2_GGUF"),
    ) else {
        skip_or_fail(
            "HOROS_REQUIRE_LLAMA",
            "no llama-server (HOROS_LLAMA_SERVER / HOROS_SMOLLM2_GGUF not set)",
        );
        return;
    };
    for template in ["chatml", "model"] {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let pool_port = free_ports(1);
        let base = format!("http://127.0.0.1:{port}");
        let config = format!(
            r#"database = "jobs.db"
[coordinator]
bind = "127.0.0.1:{port}"
default_load_s = 5.0
[coordinator.manifest.smol]
template = "{template}"
completion_api = "llama"
[coordinator.pool]
memory_mb = 4000
margin_mb = 0
port_min = {pool_port}
port_max = {pool_port}
start_timeout_s = 120
[[coordinator.pool.model]]
name = "smol"
backend = "llama-server"
binary = "{server}"
weights = "{gguf}"
vram_mb = 600
"#
        );
        let path = dir.path().join("horos.toml");
        std::fs::write(&path, config).unwrap();
        let log = dir.path().join("run.log");
        let _run = spawn_run(&path, &log);
        wait_for("the coordinator", Duration::from_secs(60), || {
            curl("GET", &format!("{base}/health"), None, None).0 == 200
        });
        let chat = json!({"model": "smol", "max_tokens": 8, "temperature": 0, "x_timeout_s": 120,
        "messages": [{"role": "user", "content": "Say hello."}]});
        let (code, v) = curl(
            "POST",
            &format!("{base}/v1/chat/completions"),
            Some(&chat),
            None,
        );
        assert_eq!(
            code,
            200,
            "{v}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert_eq!(v["object"], "chat.completion", "{v}");
        assert_eq!(v["model"], "smol");
        let content = v["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(!content.trim().is_empty(), "{v}");
        assert!(!content.contains("<|im_end|>"), "{v}");
        let used = v["usage"]["completion_tokens"].as_u64().unwrap();
        assert!((1..=8).contains(&used), "{v}");
        // The model has no `command`: only the registry's llama-server kind could have served it.
    }
}
