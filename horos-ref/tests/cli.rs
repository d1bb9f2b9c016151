//! The binary end to end: configuration errors, submit (dedup key, delay, wait), run, graceful
//! stop, stats, dead, status.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use horos_fakeai::{FakeConfig, FakeServer};

mod common;

use common::{BIN, cli, free_port, json};

fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("horos.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn wait_exit(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "horos-ref did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_bad_key_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:8002\"\nbatchsize = 4\n",
    );
    let out = cli(&config, &["stats"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("batchsize") && err.contains("unknown field"),
        "{err}"
    );
    assert!(err.contains("horos.toml"), "{err}");
}

#[test]
fn submit_run_stop_on_sigterm_and_resume() {
    let rt = common::runtime();
    let server = rt
        .block_on(FakeServer::start(FakeConfig {
            latency: Duration::from_millis(400),
            ..FakeConfig::default()
        }))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\n\n\
             [[lane]]\nqueue = \"think\"\nurl = \"{}\"\nmodel = \"fake-model\"\nbatch_size = 4\n",
            server.url()
        ),
    );
    let mut ids = Vec::new();
    for i in 0..8 {
        let out = cli(
            &config,
            &[
                "--json",
                "submit",
                "--queue",
                "think",
                "--prompt",
                &format!("page {i}"),
            ],
        );
        ids.push(json(&out)["id"].as_i64().unwrap());
    }
    let stats = json(&cli(&config, &["--json", "stats"]));
    assert_eq!(stats[0]["ready"], 8, "{stats}");

    let queue = squeueha::Queue::open(dir.path().join("jobs.db")).unwrap();
    let spawn_run = || {
        Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .arg("run")
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };

    // SIGTERM while the first batch (4 jobs, 400 ms each) is in flight: the batch is finished and
    // stored, nothing else is claimed, nothing is left in flight.
    let mut run = spawn_run();
    wait_for("a batch in flight", || {
        queue.stats("think").unwrap().in_flight > 0
    });
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    assert!(wait_exit(&mut run, Duration::from_secs(30)).success());
    let s = queue.stats("think").unwrap();
    assert_eq!((s.in_flight, s.ready), (0, 4), "{s:?}");
    let sink = horos_feeder::TableSink::new(queue.clone()).unwrap();
    assert_eq!(sink.count().unwrap(), 4);

    // Run again: the rest completes; SIGINT stops it.
    let mut run = spawn_run();
    wait_for("the queue drained", || {
        let s = queue.stats("think").unwrap();
        s.ready + s.in_flight + s.delayed == 0
    });
    unsafe { libc::kill(run.id() as i32, libc::SIGINT) };
    assert!(wait_exit(&mut run, Duration::from_secs(30)).success());
    assert_eq!(sink.count().unwrap(), 8);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(sink.result_text(*id).unwrap(), Some(format!("page {i}")));
    }

    let dead = json(&cli(&config, &["--json", "dead", "--queue", "think"]));
    assert_eq!(dead, serde_json::json!([]));
    let status = json(&cli(&config, &["--json", "status"]));
    assert_eq!(status["lanes"][0]["healthy"], true, "{status}");
    assert_eq!(status["lanes"][0]["ready"], 0, "{status}");
}

/// `submit --dedup-key` twice queues one job; `--delay` leaves a job delayed; `--wait` prints the
/// answer once `run` fed it to the (fake) server.
#[test]
fn submit_dedups_delays_and_waits_for_the_answer() {
    let rt = common::runtime();
    let server = rt
        .block_on(FakeServer::start(FakeConfig::default()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\n\n\
             [[lane]]\nqueue = \"think\"\nurl = \"{}\"\nmodel = \"fake-model\"\nmax_attempts = 2\n",
            server.url()
        ),
    );
    let keyed = ["--json", "submit", "--queue", "think", "--prompt", "once"];
    let keyed = [&keyed[..], &["--dedup-key", "k1", "--delay", "3600"]].concat();
    let first = json(&cli(&config, &keyed));
    let again = json(&cli(&config, &keyed));
    assert_eq!(first["id"], again["id"]);
    assert_eq!(
        (&first["duplicate"], &again["duplicate"]),
        (&serde_json::json!(false), &serde_json::json!(true))
    );
    let id = first["id"].as_i64().unwrap().to_string();
    let job = json(&cli(&config, &["--json", "result", &id]));
    assert_eq!(job["state"], "delayed", "{job}");
    let stats = json(&cli(&config, &["--json", "stats"]));
    assert_eq!(
        (&stats[0]["delayed"], &stats[0]["ready"]),
        (&serde_json::json!(1), &serde_json::json!(0)),
        "{stats}"
    );
    let queue = squeueha::Queue::open(dir.path().join("jobs.db")).unwrap();
    assert_eq!(
        queue
            .get(id.parse().unwrap())
            .unwrap()
            .unwrap()
            .max_attempts,
        2
    );

    let mut run = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("run")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let out = cli(
        &config,
        &[
            "submit",
            "--queue",
            "think",
            "--prompt",
            "waited for",
            "--wait",
        ],
    );
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    assert!(wait_exit(&mut run, Duration::from_secs(30)).success());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "waited for");
}

/// The binary starts its server from the lane's `command` (this test binary re-executed as a fake
/// server that crashes on `POISON`), isolates the poison job, restarts the server, completes the
/// rest, and kills the server at exit.
#[test]
fn a_managed_server_poison_pill_end_to_end() {
    horos_fakeai::run_child_if_requested();
    let port = free_port();
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\nrelease_delay_ms = 0\n\n\
             [[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:{port}\"\nmodel = \"fake-model\"\n\
             batch_size = 8\nstart_wait_s = 30\n\
             command = [{exe:?}, \"--exact\", \"a_managed_server_poison_pill_end_to_end\", \"--nocapture\", \"--test-threads=1\"]\n"
        ),
    );
    let child_args = serde_json::to_string(&[
        "--port",
        &port.to_string(),
        "--slots",
        "8",
        "--crash-marker",
        "POISON",
        "--crash-action",
        "exit",
    ])
    .unwrap();
    let mut ids = Vec::new();
    for i in 0..8 {
        let prompt = if i == 3 {
            "page 3 POISON".to_owned()
        } else {
            format!("page {i}")
        };
        let out = cli(
            &config,
            &["--json", "submit", "--queue", "think", "--prompt", &prompt],
        );
        ids.push(json(&out)["id"].as_i64().unwrap());
    }
    let queue = squeueha::Queue::open(dir.path().join("jobs.db")).unwrap();
    let mut run = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("run")
        .env(horos_fakeai::CHILD_ENV, child_args)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the queue drained", || {
        let s = queue.stats("think").unwrap();
        s.ready + s.in_flight + s.delayed == 0
    });
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    assert!(wait_exit(&mut run, Duration::from_secs(30)).success());

    let sink = horos_feeder::TableSink::new(queue.clone()).unwrap();
    assert_eq!(sink.count().unwrap(), 7);
    let dead = json(&cli(&config, &["--json", "dead", "--queue", "think"]));
    assert_eq!(dead.as_array().unwrap().len(), 1, "{dead}");
    assert_eq!(dead[0]["id"], ids[3]);
    assert!(
        dead[0]["reason"].as_str().unwrap().contains("poison pill"),
        "{dead}"
    );
    // The server died with the binary.
    wait_for("the server gone", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
    });
}

/// `run` with a `[coordinator]`: the lane's model is an upstream of the OpenAI endpoint; chat,
/// an async job, `/metrics` and `/status` answer; `x_*` fields never reach the server.
#[test]
fn run_serves_the_coordinator_over_the_lanes_servers() {
    let rt = common::runtime();
    let server = rt
        .block_on(FakeServer::start(FakeConfig::default()))
        .unwrap();
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\n\n\
             [coordinator]\nbind = \"127.0.0.1:{port}\"\n\n\
             [[lane]]\nqueue = \"think\"\nurl = \"{}\"\nmodel = \"fake-model\"\nbatch_size = 4\n",
            server.url()
        ),
    );
    let mut run = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("run")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = horos_vllm_client::Client::new(base.clone()).unwrap();
    wait_for("the coordinator", || rt.block_on(client.models()).is_ok());
    let models = rt.block_on(client.models()).unwrap();
    assert!(
        models.data.iter().any(|m| m.id == "fake-model"),
        "{models:?}"
    );
    let request: horos_vllm_client::ChatRequest = serde_json::from_value(serde_json::json!({
        "model": "fake-model",
        "messages": [{"role": "user", "content": "through the coordinator"}],
        "x_priority": 1,
        "x_client_id": "test"
    }))
    .unwrap();
    let answer = rt.block_on(client.chat(&request)).unwrap();
    assert_eq!(answer.text(), "through the coordinator");
    let seen = server.requests();
    let body = &seen.last().unwrap().body;
    assert!(
        !body.contains("x_priority") && !body.contains("x_client_id"),
        "{body}"
    );

    let http = |path: &str| {
        let out = Command::new("curl")
            .args(["-s", "-w", "\n%{http_code}", &format!("{base}{path}")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let metrics = http("/metrics");
    assert!(
        metrics.ends_with("200") && metrics.contains("# TYPE"),
        "{metrics}"
    );
    // The feeder's totals and its lane's queue depth are on the same page.
    assert!(metrics.contains("horos_feeder_batches_total"), "{metrics}");
    wait_for("the lane's queue in the snapshot", || {
        http("/metrics").contains("queue=\"think\"")
    });
    let status = http("/status");
    assert!(
        status.ends_with("200") && status.contains("fake-model"),
        "{status}"
    );

    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    assert!(wait_exit(&mut run, Duration::from_secs(30)).success());
}

/// A coordinator stand-in that answers every request with 401 and an OpenAI-style error.
fn refusing_coordinator() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            use std::io::{Read, Write};
            let mut stream = stream;
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let body =
                r#"{"error":{"message":"invalid admin key","type":"invalid_request_error"}}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn errors_say_what_to_do_next() {
    let dir = tempfile::tempdir().unwrap();
    let port = refusing_coordinator();
    let plain = write_config(
        dir.path(),
        "[[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:8002\"\n",
    );
    let with_coordinator = dir.path().join("coordinator.toml");
    std::fs::write(
        &with_coordinator,
        format!("[coordinator]\nbind = \"127.0.0.1:{port}\"\napi_key = \"wrong\"\n"),
    )
    .unwrap();
    let missing = dir.path().join("nowhere.toml");
    // (configuration, arguments, what the error must say)
    let cases: [(&Path, &[&str], &str); 5] = [
        (&missing, &["stats"], "--config FILE"),
        (&plain, &["search", "x"], "add one"),
        (&plain, &["ingest", "a.pdf"], "add one"),
        (
            &plain,
            &["models"],
            "add [coordinator] and start `horos-ref run`",
        ),
        (&with_coordinator, &["models"], "set [coordinator] api_key"),
    ];
    for (config, args, hint) in cases {
        let out = cli(config, args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("horos-ref: "), "{args:?}: {err}");
        assert!(err.contains(hint), "{args:?}: {err}");
        // With --json the same error is one JSON object.
        let mut json_args = vec!["--json"];
        json_args.extend_from_slice(args);
        let out = cli(config, &json_args);
        assert!(!out.status.success(), "{args:?}");
        let err: serde_json::Value = serde_json::from_slice(&out.stderr)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert!(err["error"].as_str().unwrap().contains(hint), "{err}");
    }
}

#[test]
fn docs_id_is_the_documents_report() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("inbox")).unwrap();
    let config = write_config(
        dir.path(),
        "[ingest]\ninbox = \"inbox\"\nembeddings_url = \"http://127.0.0.1:9\"\n\
         embeddings_model = \"m\"\n",
    );
    // `docs 7` is `docs show 7`: the same answer, not a usage error.
    let short = cli(&config, &["docs", "7"]);
    let long = cli(&config, &["docs", "show", "7"]);
    assert!(!short.status.success());
    let (short, long) = (
        String::from_utf8_lossy(&short.stderr),
        String::from_utf8_lossy(&long.stderr),
    );
    assert!(short.contains("document 7"), "{short}");
    assert_eq!(short, long);
    let listed = json(&cli(&config, &["--json", "docs"]));
    assert_eq!(listed, serde_json::json!([]), "{listed}");
}
