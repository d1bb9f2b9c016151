//! The status page of a whole `horos-ref run` in headless Chromium, driven over the DevTools
//! protocol as a person would use it: lanes on a simulated two-GPU fleet switched by the
//! allocator, a model pool, ingest with a document done, requests through the coordinator and a
//! dead letter. Every section is present, the GPU charts are drawn from data, a screenshot is
//! kept (target/test-artifacts/horos-ref-status.png), and the page's requeue button is refused
//! without the admin key and works with it, typed into the page before its refresh.
//!
//! Needs Chromium (Debian: `apt-get install --no-install-recommends chromium`), found as
//! `HOROS_CHROMIUM`, else `chromium` on the PATH; skips without it unless
//! `HOROS_REQUIRE_BROWSER=1`.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use common::{
    cli, curl, fake_server_command, free_port, free_ports, json, spawn_run, tiny_pdf, wait_for,
};
use horos_fakeai::{FakeConfig, FakeServer};
use serde_json::{Value, json};
use squeueha::{NewJob, Queue};
use tungstenite::{Message, WebSocket, stream::MaybeTlsStream};

const TEST: &str = "the_status_page_of_a_whole_run_in_chromium";
const KEY: &str = "status-admin";

fn chromium() -> Option<PathBuf> {
    let exe = PathBuf::from(std::env::var("HOROS_CHROMIUM").unwrap_or_else(|_| "chromium".into()));
    if Command::new(&exe)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Some(exe);
    }
    common::skip_or_fail(
        "HOROS_REQUIRE_BROWSER",
        &format!(
            "{} does not run (Debian: apt-get install chromium)",
            exe.display()
        ),
    );
    None
}

/// A headless Chromium showing `url`, and a DevTools connection to its page.
struct Browser {
    child: Child,
    page: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    fn open(exe: &Path, profile: &Path, url: &str) -> Self {
        let child = Command::new(exe)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--hide-scrollbars",
                "--window-size=1280,900",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Chromium writes the port it chose into the profile.
        let port_file = profile.join("DevToolsActivePort");
        let mut port = String::new();
        wait_for("Chromium's DevTools port", Duration::from_secs(60), || {
            port = std::fs::read_to_string(&port_file).unwrap_or_default();
            port.lines()
                .next()
                .is_some_and(|l| l.parse::<u16>().is_ok())
        });
        let port: u16 = port.lines().next().unwrap().parse().unwrap();
        let mut ws_url = None;
        wait_for(
            "the page's DevTools target",
            Duration::from_secs(30),
            || {
                let (_, targets) = curl(
                    "GET",
                    &format!("http://127.0.0.1:{port}/json/list"),
                    None,
                    None,
                );
                ws_url = targets.as_array().and_then(|t| {
                    t.iter()
                        .find(|t| t["type"] == "page")
                        .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(str::to_owned))
                });
                ws_url.is_some()
            },
        );
        let (page, _) = tungstenite::connect(ws_url.unwrap()).unwrap();
        let mut b = Browser {
            child,
            page,
            next_id: 0,
        };
        // The target may still be the blank page Chromium opens before navigating.
        let loaded = format!("document.readyState === 'complete' && location.href === '{url}'");
        wait_for("the page to load", Duration::from_secs(30), || {
            b.eval(&loaded) == true
        });
        b
    }

    /// Sends DevTools `method` and returns its result (events in between are skipped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.page
            .send(Message::text(
                json!({"id": id, "method": method, "params": params}).to_string(),
            ))
            .unwrap();
        loop {
            let Message::Text(t) = self.page.read().unwrap() else {
                continue;
            };
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["id"] == id {
                assert!(v["error"].is_null(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// The value of JavaScript `expression` in the page (promises awaited).
    fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
        );
        assert!(r["exceptionDetails"].is_null(), "{expression}: {r}");
        r["result"]["value"].clone()
    }
}

#[test]
fn the_status_page_of_a_whole_run_in_chromium() {
    horos_fakeai::run_child_if_requested();
    let Some(exe) = chromium() else { return };
    let rt = common::runtime();
    let embeddings = rt
        .block_on(FakeServer::start(FakeConfig::default()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (think_port, vision_port, pool_port, port) =
        (free_ports(2), free_ports(2), free_ports(2), free_port());
    let lane = |queue: &str, lane_port: u16| {
        format!(
            "[[lane]]\nqueue = \"{queue}\"\nurl = \"http://127.0.0.1:{lane_port}\"\n\
             model = \"{queue}-model\"\nbatch_size = 4\nstart_wait_s = 30\nswap_in_s = 0.2\n\
             job_s = 0.1\nvram_mb = 300\ncommand = {}\n",
            fake_server_command(TEST, &["--port", "{port}", "--slots", "4"])
        )
    };
    std::fs::create_dir_all(d.join("inbox")).unwrap();
    std::fs::write(
        d.join("inbox/harvest.pdf"),
        tiny_pdf("Harvest report: barley and oats"),
    )
    .unwrap();
    let config = d.join("horos.toml");
    std::fs::write(
        &config,
        format!(
            "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\n\
             [gpus]\nsource = \"simulated\"\nsimulated_mb = [1000, 1000]\ninterval_ms = 100\n\
             [allocator]\ngpus = [0, 1]\ntick_s = 0.1\n\
             [ingest]\ninbox = \"inbox\"\nembeddings_url = \"{}\"\nembeddings_model = \"fake-embed\"\n\
             [coordinator]\nbind = \"127.0.0.1:{port}\"\napi_key = \"{KEY}\"\n\
             [coordinator.pool]\nmargin_mb = 0\nport_min = {pool_port}\nport_max = {}\n\
             [[coordinator.pool.model]]\nname = \"pooled\"\ncommand = {}\nvram_mb = 100\n\n{}{}",
            embeddings.url(),
            pool_port + 1,
            fake_server_command(TEST, &["--port", "{port}", "--model", "pooled"]),
            lane("think", think_port),
            lane("vision", vision_port),
        ),
    )
    .unwrap();
    // A dead letter on a lane: a job that failed for good before the run.
    let poison = {
        let queue = Queue::open(d.join("jobs.db")).unwrap();
        let id = queue
            .enqueue("think", NewJob::new(b"{not a chat request".to_vec()))
            .unwrap()
            .id();
        let leased = queue
            .poll_batch("think", 1, Duration::from_secs(60))
            .unwrap();
        queue
            .bury(leased[0].lease, "malformed payload (test)")
            .unwrap();
        // Work scheduled for later: the think queue's depth is 3 all along the test.
        for i in 0..3 {
            let later = NewJob::json(&json!({"model": "think-model",
                "messages": [{"role": "user", "content": format!("later {i}")}]}))
            .unwrap()
            .delay(Duration::from_secs(3600));
            queue.enqueue("think", later).unwrap();
        }
        id
    };
    let queued = json(&cli(&config, &["--json", "ingest", "harvest.pdf"]));
    assert_eq!(queued["status"], "queued", "{queued}");

    let _run = spawn_run(&config, &d.join("run.log"));
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the coordinator", Duration::from_secs(60), || {
        curl("GET", &format!("{base}/health"), None, None).0 == 200
    });
    for model in ["think-model", "vision-model", "pooled"] {
        let body = json!({"model": model, "x_timeout_s": 300,
            "messages": [{"role": "user", "content": "hello"}]});
        let (code, v) = curl(
            "POST",
            &format!("{base}/v1/chat/completions"),
            Some(&body),
            None,
        );
        assert_eq!(code, 200, "{model}: {v}");
    }
    wait_for("the document ingested", Duration::from_secs(120), || {
        json(&cli(&config, &["--json", "docs"]))[0]["status"] == "done"
    });

    let profile = tempfile::tempdir().unwrap();
    let mut browser = Browser::open(&exe, profile.path(), &format!("{base}/status"));
    let headings = browser.eval("[...document.querySelectorAll('h2')].map(h => h.textContent)");
    for section in [
        "Models",
        "Job queues",
        "Modes",
        "GPUs",
        "Lanes",
        "Ingest",
        "Recent decisions",
        "Dead letters",
    ] {
        assert!(
            headings.as_array().unwrap().iter().any(|h| h == section),
            "no {section} section: {headings}"
        );
    }
    // Charts drawn from data: one per GPU and measure (memory, temperature, utilisation), each
    // a line through its points (one column per 15 s of the hour: this run is seconds old) and
    // a dot at the latest reading.
    let charts = browser.eval(
        "[...document.querySelectorAll('svg[data-points]')].map(s => \
         [Number(s.dataset.points), s.querySelectorAll('polyline').length, \
         s.querySelectorAll('circle.now').length])",
    );
    let drawn = charts
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c[0].as_u64().unwrap() >= 1 && c[1] == 1 && c[2] == 1)
        .count();
    assert_eq!(
        drawn, 7,
        "two GPUs' three charts and the think queue's: {charts}"
    );
    let depth = browser.eval(
        "[...document.querySelectorAll('svg[data-points] title')].map(t => t.textContent)\
         .filter(t => t.includes('depth'))",
    );
    assert_eq!(
        depth,
        json!(["think depth (jobs)"]),
        "only a queue with work is drawn"
    );
    // The page refreshes itself (every 3 s, no reload): the ingest section catches up with the
    // document done.
    wait_for(
        "the page to show the document done",
        Duration::from_secs(30),
        || browser.eval("document.body.innerText.includes('0 in progress, 1 done')") == true,
    );
    let page = browser.eval("document.body.innerText");
    let page = page.as_str().unwrap();
    assert!(page.contains("harvest"), "the ingested document: {page}");
    assert!(
        page.contains("malformed payload (test)"),
        "the dead letter: {page}"
    );
    for model in ["think-model", "vision-model", "pooled"] {
        assert!(page.contains(model), "{model}: {page}");
    }
    assert!(page.contains("pages/s over the last minute"), "{page}");
    let fill = browser
        .eval("[...document.querySelectorAll('th')].some(th => th.textContent === 'batch fill')");
    assert_eq!(fill, true, "the lanes' batch fill column");

    // A screenshot of the whole page, kept to look at.
    let shot = browser.call(
        "Page.captureScreenshot",
        json!({"format": "png", "captureBeyondViewport": true}),
    );
    let png = base64::engine::general_purpose::STANDARD
        .decode(shot["data"].as_str().unwrap())
        .unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000);
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::write(artifacts.join("horos-ref-status.png"), &png).unwrap();

    // The requeue button clicked without the key: refused, said on the page, the job still
    // dead.
    let mut said = String::new();
    let mut click_and_wait = |browser: &mut Browser, what: &str| {
        browser.eval(&format!(
            "document.getElementById('requeue-result').textContent = ''; \
             document.querySelector('button[onclick=\"requeue({poison})\"]').click()"
        ));
        wait_for(what, Duration::from_secs(10), || {
            said = browser
                .eval("document.getElementById('requeue-result').textContent")
                .as_str()
                .unwrap_or_default()
                .to_owned();
            !said.is_empty()
        });
        said.clone()
    };
    let refused = click_and_wait(&mut browser, "the refused requeue to be said");
    assert!(
        refused.starts_with(&format!("job {poison}: 401")),
        "{refused}"
    );
    let dead_ids = || {
        let dead = json(&cli(&config, &["--json", "dead", "--queue", "think"]));
        let ids: Vec<i64> = dead
            .as_array()
            .unwrap_or_else(|| panic!("{dead}"))
            .iter()
            .map(|j| j["id"].as_i64().unwrap())
            .collect();
        ids
    };
    assert!(dead_ids().contains(&poison));
    // The key typed into the page survives the page's refresh (every 3 s), then the button
    // works.
    browser.eval("document.getElementById('admin-key').value = 'status-admin'");
    std::thread::sleep(Duration::from_millis(3500));
    let done = click_and_wait(&mut browser, "the requeue to be said");
    assert_eq!(done, format!("job {poison} requeued"));
    // Back in its queue under a new id: no longer a dead letter.
    assert!(!dead_ids().contains(&poison));
    // The document's row links to its report, a page of its own.
    browser.eval("location.href = document.querySelector('a[href^=\"/status/documents/\"]').href");
    wait_for("the document's report", Duration::from_secs(30), || {
        browser.eval("location.pathname.startsWith('/status/documents/') && document.readyState === 'complete' && !!document.querySelector('h1')") == true
    });
    let report = browser.eval("document.body.innerText");
    let report = report.as_str().unwrap();
    assert!(
        report.contains("Document ") && report.contains("harvest"),
        "{report}"
    );
    assert!(
        report.contains("Stages") && report.contains("pdf_to_images"),
        "{report}"
    );
    let mut log = String::new();
    std::fs::File::open(d.join("run.log"))
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(!log.contains("panicked"), "{log}");
}
