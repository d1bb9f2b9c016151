//! Issue 48's first "done when", through the binary: a bomb PDF, a crashing reader and a hung
//! reader each fail their document alone, with its typed reason (`resource_limit`, `crashed`,
//! `timeout`) in the documents' CLI, while chat keeps answering and the other documents of the
//! same ingest are read; `run`'s memory, read from `/proc`, does not move with the bomb. Beside
//! it: the failed documents stay dead letters across a restart of `run`, no worker is left
//! behind (alive or zombie), a hung worker holds none of `run`'s descriptors, an image question
//! is decoded in a worker, and a pool that cannot start a worker fails `/health/ready`.
//!
//! The bomb is read by the real worker, `horos-ref worker pdf` (the default command). The
//! crashing and hung readers are this test binary run again as the pool's command
//! (`pdf_worker_child`): horos-pdf's `serve_with`, the real reading, which aborts on a document
//! holding `CRASH-ME` and sleeps on one holding `HANG-ME`. Its harness prints on standard
//! output, so the protocol goes out on descriptor 3, where the wrapper script moved the pipe.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{cli, curl, free_port, json, runtime, spawn_run, wait_for};
use horos_fakeai::{FakeConfig, FakeServer, Reply};
use horos_testkit::memory::Process;
use serde_json::{Value, json};

const CHILD_ENV: &str = "HOROS_REF_TEST_PDF_WORKER";

/// The fake reader's side when this binary runs as the pool's worker.
#[test]
fn pdf_worker_child() {
    let Ok(_) = std::env::var(CHILD_ENV) else {
        return;
    };
    use std::os::fd::FromRawFd;
    // SAFETY: descriptor 3 is the pipe the wrapper script moved our standard output to.
    let out = unsafe { std::fs::File::from_raw_fd(3) };
    let served = ingest_pipeline::worker::serve_with(std::io::stdin(), out, |_, bytes| {
        let holds = |marker: &[u8]| bytes.windows(marker.len()).any(|w| w == marker);
        if holds(b"CRASH-ME") {
            std::process::abort();
        }
        if holds(b"HANG-ME") {
            std::thread::sleep(Duration::from_secs(3600));
        }
    });
    std::process::exit(i32::from(served.is_err()));
}

/// `run` with a chat model on fakeai and `[ingest]` with `workers` (the `[ingest.pdf_workers]`
/// keys).
struct Gateway {
    base: String,
    dir: tempfile::TempDir,
    run: common::Running,
    _fake: FakeServer,
    _rt: tokio::runtime::Runtime,
}

impl Gateway {
    fn start(workers: &str) -> Gateway {
        let rt = runtime();
        let fake = rt
            .block_on(FakeServer::start(FakeConfig {
                reply: Reply::Fixed("still answering".into()),
                ..FakeConfig::default()
            }))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        // The decoded-size ceiling is set out of the way (4 GiB): the worker's address space is
        // what stops the bomb.
        let config = format!(
            "database = \"jobs.db\"\n[coordinator]\nbind = \"127.0.0.1:{port}\"\n\
             [[coordinator.model]]\nname = \"m\"\nurl = \"{url}\"\n\
             [ingest]\ninbox = \"inbox\"\nembeddings_url = \"{url}\"\n\
             embeddings_model = \"fake-embed\"\ndpi = 50\ndetect_rotation = false\n\
             max_decoded_mb = 4096\n[ingest.pdf_workers]\n{workers}\n",
            url = fake.url()
        );
        let path = dir.path().join("horos.toml");
        std::fs::write(&path, config).unwrap();
        std::fs::create_dir_all(dir.path().join("inbox")).unwrap();
        let run = spawn_run(&path, &dir.path().join("run.err"));
        let base = format!("http://127.0.0.1:{port}");
        wait_for("the coordinator", Duration::from_secs(60), || {
            curl("GET", &format!("{base}/health"), None, None).0 == 200
        });
        Gateway {
            base,
            dir,
            run,
            _fake: fake,
            _rt: rt,
        }
    }

    /// Stops `run` (SIGTERM) and starts it again on the same files.
    fn restart(&mut self) {
        let _ = common::stop(&mut self.run.0, libc::SIGTERM);
        self.run = spawn_run(&self.config(), &self.dir.path().join("run.err"));
        wait_for("the coordinator again", Duration::from_secs(60), || {
            curl("GET", &format!("{}/health", self.base), None, None).0 == 200
        });
    }

    fn config(&self) -> std::path::PathBuf {
        self.dir.path().join("horos.toml")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("run.err")).unwrap_or_default()
    }

    /// `run`'s memory, as `/proc` reports it.
    fn memory(&self) -> Process {
        Process::of(self.run.0.id())
    }

    /// `run`'s child processes: `PID STATE COMMAND` of each.
    fn children(&self) -> Vec<String> {
        let run = self.run.0.id().to_string();
        let mut children = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid ...`: the command may hold spaces, not a `)`.
            let Some((head, rest)) = stat.rsplit_once(") ") else {
                continue;
            };
            let mut fields = rest.split(' ');
            let (state, ppid) = (fields.next(), fields.next());
            if ppid == Some(run.as_str()) {
                children.push(format!("{head}) {}", state.unwrap_or("?")));
            }
        }
        children
    }

    /// The open descriptors of each of `run`'s children that can be read (`PID STATE COMMAND`,
    /// its descriptors), once it runs its own program (between fork and exec a child is still
    /// `run`, with `run`'s descriptors about to close).
    fn children_fds(&self) -> Vec<(String, Vec<u32>)> {
        self.children()
            .into_iter()
            .filter(|child| !child.contains("(horos-ref)"))
            .filter_map(|child| {
                let pid = child.split(' ').next()?.to_owned();
                let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
                let fds = fds
                    .flatten()
                    .filter_map(|f| f.file_name().to_str()?.parse().ok())
                    .collect();
                Some((child, fds))
            })
            .collect()
    }

    /// `GET /health/ready`.
    fn ready(&self) -> (u16, Value) {
        curl("GET", &format!("{}/health/ready", self.base), None, None)
    }

    /// `POST /v1/search` with `image` as the question.
    fn search_image(&self, image: &[u8]) -> (u16, Value) {
        use base64::Engine as _;
        let image = base64::engine::general_purpose::STANDARD.encode(image);
        curl(
            "POST",
            &format!("{}/v1/search", self.base),
            Some(&json!({"query": "", "image": image})),
            None,
        )
    }

    /// Drops `files` in the inbox and queues each.
    fn ingest(&self, files: &[(&str, Vec<u8>)]) {
        for (name, bytes) in files {
            std::fs::write(self.dir.path().join("inbox").join(name), bytes).unwrap();
            let queued = json(&cli(&self.config(), &["--json", "ingest", name]));
            assert_eq!(queued["status"], "queued", "{name}: {queued}");
        }
    }

    /// The documents, once none is pending, by file name; chat is asked once a second
    /// meanwhile and must answer each time: `(documents, chats answered, slowest chat)`.
    fn settle_while_chatting(&self, limit: Duration) -> (Vec<Value>, usize, Duration) {
        let started = Instant::now();
        let (mut chats, mut slowest) = (0, Duration::ZERO);
        loop {
            let t = Instant::now();
            let (status, answer) = curl(
                "POST",
                &format!("{}/v1/chat/completions", self.base),
                Some(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})),
                None,
            );
            assert_eq!(status, 200, "chat: {answer}\n{}", self.log());
            chats += 1;
            slowest = slowest.max(t.elapsed());
            let docs = json(&cli(&self.config(), &["--json", "docs"]));
            let docs = docs.as_array().cloned().unwrap_or_default();
            if !docs.is_empty() && docs.iter().all(|d| d["status"] != "pending") {
                return (docs, chats, slowest);
            }
            assert!(
                started.elapsed() < limit,
                "documents still pending after {limit:?}: {docs:?}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

fn doc<'a>(docs: &'a [Value], name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["path"].as_str().is_some_and(|p| p.ends_with(name)))
        .unwrap_or_else(|| panic!("no document {name} in {docs:?}"))
}

fn text_pdf(words: &str) -> Vec<u8> {
    horos_testkit::pdf::text(&[words; 12], 12)
}

/// A text PDF with `marker` in a comment (no page shows it).
fn marked_pdf(words: &str, marker: &str) -> Vec<u8> {
    let mut pdf = text_pdf(words);
    pdf.extend_from_slice(format!("\n% {marker}\n%%EOF\n").as_bytes());
    pdf
}

fn assert_failed_with(d: &Value, reason: &str) {
    assert_eq!(d["status"], "failed", "{d}");
    let error = d["error"].as_str().unwrap_or_default();
    assert!(error.contains(reason), "{reason} not in {d}");
}

#[test]
fn a_bomb_fails_its_document_in_horos_ref_worker_and_run_does_not_grow() {
    let g = Gateway::start("count = 2\nmemory_mb = 512\npage_timeout_s = 60");
    // `run` settled: the first chat and the first document through its pool.
    g.ingest(&[("warmup.pdf", text_pdf("walrus lighthouse warmup"))]);
    let (docs, _, _) = g.settle_while_chatting(Duration::from_secs(120));
    assert_eq!(doc(&docs, "warmup.pdf")["status"], "done", "{docs:?}");
    // run probed its workers at start, and said what holds; the deep health check asks them.
    assert!(g.log().contains("PDF workers ready"), "{}", g.log());
    let (code, ready) = g.ready();
    assert_eq!(code, 200, "{ready}");
    assert!(ready.to_string().contains("pdf_workers"), "{ready}");
    // An image question is decoded in a worker too: a good one is searched, a broken one (a
    // sound header, no pixels behind it) is the caller's 400, and a bomb's header a 413.
    let mut png = Vec::new();
    image::RgbImage::from_pixel(64, 48, image::Rgb([200, 30, 30]))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let (status, hits) = g.search_image(&png);
    assert_eq!(status, 200, "{hits}\n{}", g.log());
    let (status, answer) = g.search_image(&horos_testkit::png::declaring(640, 480));
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = g.search_image(&horos_testkit::png::declaring(11585, 11585));
    assert_eq!(status, 413, "{answer}");
    let rss_before = g.memory().rss_bytes().unwrap();
    let reset = g.memory().reset_peak_rss();
    let hwm_before = g.memory().peak_rss_bytes().unwrap();
    // 2 GiB of zeros in a 13 MB content stream on page 1, text on page 2; two readable
    // documents in the same ingest.
    g.ingest(&[
        (
            "bomb.pdf",
            horos_testkit::pdf::bomb_then_text(2 << 30, &["after the bomb"]),
        ),
        ("one.pdf", text_pdf("walrus lighthouse one")),
        ("two.pdf", text_pdf("walrus lighthouse two")),
    ]);
    let (docs, chats, slowest) = g.settle_while_chatting(Duration::from_secs(180));
    let bomb = doc(&docs, "bomb.pdf");
    assert_failed_with(bomb, "resource_limit");
    for name in ["one.pdf", "two.pdf"] {
        assert_eq!(doc(&docs, name)["status"], "done", "{docs:?}");
    }
    let rss_after = g.memory().rss_bytes().unwrap();
    let hwm_after = g.memory().peak_rss_bytes().unwrap();
    println!(
        "bomb: {}\nrun's VmRSS {} MB before, {} MB after; VmHWM {} MB before, {} MB after \
         (peak reset: {reset}); {chats} chats answered meanwhile, the slowest in {slowest:?}",
        bomb["error"],
        rss_before >> 20,
        rss_after >> 20,
        hwm_before >> 20,
        hwm_after >> 20,
    );
    // What a 2 GiB bomb read in `run` would add is 2048 MB: 64 MB allows for the documents'
    // bytes and pages in flight.
    let grown = hwm_after.saturating_sub(if reset { hwm_before } else { rss_before });
    assert!(grown < 64 << 20, "run's peak grew by {} MB", grown >> 20);
    assert!(!g.log().contains("panicked"), "{}", g.log());
}

#[test]
fn a_crashing_reader_and_a_hung_reader_each_fail_their_document_alone() {
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "exec 3>&1 1>&2; exec env {CHILD_ENV}=1 \"$0\" --exact pdf_worker_child --nocapture \
         --test-threads=1"
    );
    let command = serde_json::to_string(&["sh", "-c", &script, &exe.to_string_lossy()]).unwrap();
    let mut g = Gateway::start(&format!(
        "count = 2\nmemory_mb = 1024\npage_timeout_s = 6\ncommand = {command}"
    ));
    let rss_before = g.memory().rss_bytes().unwrap();
    g.ingest(&[
        (
            "crash.pdf",
            marked_pdf("walrus lighthouse crash", "CRASH-ME"),
        ),
        ("hang.pdf", marked_pdf("walrus lighthouse hang", "HANG-ME")),
        ("one.pdf", text_pdf("walrus lighthouse one")),
        ("two.pdf", text_pdf("walrus lighthouse two")),
        ("three.pdf", text_pdf("walrus lighthouse three")),
    ]);
    // The hung worker, caught while it hangs: it holds its pipes and nothing of run's (no
    // socket, no database): descriptors 0 to 2, and 3 where the wrapper moved its output.
    let mut held = Vec::new();
    wait_for("a worker of run", Duration::from_secs(30), || {
        held = g.children_fds();
        !held.is_empty()
    });
    for (worker, fds) in &held {
        let pid = worker.split(' ').next().unwrap();
        let what: Vec<String> = fds
            .iter()
            .map(|fd| {
                let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}"));
                format!("{fd} -> {:?}", link.unwrap_or_default())
            })
            .collect();
        assert!(fds.iter().all(|&fd| fd <= 3), "{worker} holds {what:?}");
    }
    let (docs, chats, slowest) = g.settle_while_chatting(Duration::from_secs(180));
    assert_failed_with(doc(&docs, "crash.pdf"), "crashed");
    assert_failed_with(doc(&docs, "hang.pdf"), "timeout");
    for name in ["one.pdf", "two.pdf", "three.pdf"] {
        assert_eq!(doc(&docs, name)["status"], "done", "{docs:?}");
    }
    // The failed documents are not claimed again, a restart of run included: their render
    // jobs are dead letters, once each.
    let dead = |g: &Gateway| {
        json(&cli(
            &g.config(),
            &["--json", "dead", "--queue", "pdf_to_images"],
        ))
    };
    let before = dead(&g);
    assert_eq!(before.as_array().map(Vec::len), Some(2), "{before}");
    g.restart();
    std::thread::sleep(Duration::from_secs(3));
    let again = json(&cli(&g.config(), &["--json", "docs"]));
    for name in ["crash.pdf", "hang.pdf"] {
        assert_eq!(doc(again.as_array().unwrap(), name)["status"], "failed");
    }
    assert_eq!(dead(&g), before);
    // Every worker ended and was reaped: `run` has no child left, alive or zombie.
    assert_eq!(g.children(), Vec::<String>::new());
    let rss_after = g.memory().rss_bytes().unwrap();
    println!(
        "crash: {}\nhang: {}\nrun's VmRSS {} MB before, {} MB after; {chats} chats answered \
         meanwhile, the slowest in {slowest:?}",
        doc(&docs, "crash.pdf")["error"],
        doc(&docs, "hang.pdf")["error"],
        rss_before >> 20,
        rss_after >> 20
    );
    assert!(!g.log().contains("panicked"), "{}", g.log());
}

/// A pool that cannot start a worker (its program is gone) is named by `/health/ready` (503,
/// `pdf_workers` failing), while `/health` and chat still answer.
#[test]
fn a_pool_that_cannot_start_a_worker_fails_the_deep_health_check() {
    let g = Gateway::start("command = [\"/no/such/pdf-worker\", \"pdf\"]");
    // Healthy while the pipeline starts; named once it has.
    let mut ready = Value::Null;
    wait_for("pdf_workers failing", Duration::from_secs(60), || {
        let (code, answer) = g.ready();
        ready = answer;
        code == 503
    });
    let failing: Vec<&str> = ready["failing"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["part"].as_str())
        .collect();
    assert_eq!(failing, ["pdf_workers"], "{ready}");
    assert!(ready.to_string().contains("/no/such/pdf-worker"), "{ready}");
    assert_eq!(
        curl("GET", &format!("{}/health", g.base), None, None).0,
        200
    );
    let (status, answer) = curl(
        "POST",
        &format!("{}/v1/chat/completions", g.base),
        Some(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})),
        None,
    );
    assert_eq!(status, 200, "{answer}");
    assert!(g.log().contains("PDF workers cannot start"), "{}", g.log());
}
