//! PDF workers as real processes: a document read in one, and each way a worker can fail the
//! pipeline: a bomb past its address-space limit, a hang past its time, garbage, a death in the
//! middle of a frame, an answer past the ceiling, another protocol version. Each ends as a
//! typed [`WorkerError`], the worker killed and reaped, and the test process's memory unmoved.
//!
//! The real worker is this test binary run again (`worker_child`, with `HOROS_PDF_TEST_WORKER`
//! set): its harness prints to standard output, so it speaks the protocol on descriptor 3, the
//! pipe the pool gave as its standard output. The misbehaving workers are `sh` scripts.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use horos_pdf::render::{FailureReason, RenderConfig};
use horos_pdf::worker::protocol::{self, ProtocolError, Reply};
use horos_pdf::worker::{PoolConfig, Worker, WorkerCommand, WorkerError, WorkerLimits, WorkerPool};

const CHILD_ENV: &str = "HOROS_PDF_TEST_WORKER";

/// The worker's side when this binary runs as one: `serve`, except that a document holding
/// `CRASH-ME` aborts the worker and one holding `HANG-ME` makes it sleep.
#[test]
fn worker_child() {
    let Ok(_) = std::env::var(CHILD_ENV) else {
        return;
    };
    use std::os::fd::FromRawFd;
    // SAFETY: descriptor 3 is the pipe the wrapper script moved our standard output to.
    let out = unsafe { std::fs::File::from_raw_fd(3) };
    let served = horos_pdf::worker::serve_with(std::io::stdin(), out, |_, bytes| {
        if contains(bytes, b"CRASH-ME") {
            std::process::abort();
        }
        if contains(bytes, b"HANG-ME") {
            std::thread::sleep(Duration::from_secs(3600));
        }
    });
    std::process::exit(i32::from(served.is_err()));
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn real_worker() -> WorkerCommand {
    let exe = std::env::current_exe().unwrap();
    WorkerCommand::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 3>&1 1>&2; exec env {CHILD_ENV}=1 \"$0\" --exact worker_child --nocapture \
             --test-threads=1"
        ))
        .arg(exe)
}

fn script(body: &str) -> WorkerCommand {
    WorkerCommand::new("sh").arg("-c").arg(body.to_owned())
}

fn limits() -> WorkerLimits {
    WorkerLimits {
        memory_bytes: Some(512 << 20),
        cpu_seconds: 60,
        page_timeout: Duration::from_secs(20),
        no_network: true,
        max_reply_bytes: 64 << 20,
    }
}

/// A file holding a worker's hello of `version`.
fn hello_file(dir: &Path, version: u32) -> String {
    let mut hello = Vec::new();
    protocol::write_message(
        &mut hello,
        &Reply::Hello {
            protocol: version,
            network: None,
        },
    )
    .unwrap();
    let path = dir.join(format!("hello-{version}"));
    std::fs::write(&path, hello).unwrap();
    path.display().to_string()
}

fn broken(e: WorkerError) -> (FailureReason, Option<ProtocolError>) {
    match e {
        WorkerError::Broken { reason, cause, .. } => (reason, cause),
        other => panic!("not a broken worker: {other:?}"),
    }
}

fn rt() -> tokio::runtime::Runtime {
    horos_testkit::runtime()
}

#[test]
fn a_worker_reads_a_document_and_decodes_images() {
    rt().block_on(async {
        let mut w = Worker::spawn(&real_worker(), limits()).await.unwrap();
        println!("the worker sees a network: {:?}", w.network());
        let pdf = horos_testkit::pdf::text(&["walrus lighthouse"; 30], 12);
        let pages = w.open(&pdf, &RenderConfig::default()).await.unwrap();
        assert_eq!(pages, 1);
        let page = w.render_page(1).await.unwrap();
        assert_eq!((page.page_no, page.page_count), (1, 1));
        assert!(page.png.starts_with(b"\x89PNG"), "{} bytes", page.png.len());
        let text = page.text_layer.unwrap().text;
        assert!(text.contains("walrus lighthouse"), "{text}");
        let text_only = w.text_layer(1).await.unwrap();
        assert!(text_only.png.is_empty() && text_only.text_layer.is_some());
        // The document's own failures are its own: the worker goes on.
        assert!(matches!(
            w.render_page(7).await,
            Err(WorkerError::Document(m)) if m.contains("no page 7")
        ));
        assert!(matches!(
            w.open(b"not a pdf", &RenderConfig::default()).await,
            Err(WorkerError::Document(_))
        ));
        let decoded = w.decode_image(&page.png, 50_000_000).await.unwrap();
        assert_eq!((decoded.width, decoded.height), page.size);
        let bomb = horos_testkit::png::declaring(11585, 11585);
        assert!(matches!(
            w.decode_image(&bomb, 40_000_000).await,
            Err(WorkerError::Image(m)) if m.contains("too_large")
        ));
        assert!(!w.is_broken());
    });
}

#[test]
fn a_bomb_past_the_address_space_limit_kills_the_worker_not_the_caller() {
    rt().block_on(async {
        let before = horos_testkit::memory::rss_bytes();
        let mut w = Worker::spawn(&real_worker(), limits()).await.unwrap();
        // The decoded-size ceiling off (4 GiB): only the worker's 512 MiB stand in the way.
        let config = RenderConfig {
            max_decoded_bytes: 4 << 30,
            ..RenderConfig::default()
        };
        let bomb = horos_testkit::pdf::bomb_then_text(2 << 30, &["after the bomb"]);
        assert_eq!(w.open(&bomb, &config).await.unwrap(), 2);
        let pid = w.id().unwrap();
        let e = w.render_page(1).await.unwrap_err();
        println!("{e}");
        assert!(e.to_string().starts_with("resource_limit"), "{e}");
        assert_eq!(broken(e).0, FailureReason::ResourceLimit);
        assert!(w.is_broken());
        // Reaped: no such process any more.
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        // A broken worker answers nothing more.
        assert_eq!(
            broken(w.render_page(2).await.unwrap_err()).0,
            FailureReason::Crashed
        );
        if let (Some(before), Some(after)) = (before, horos_testkit::memory::rss_bytes()) {
            let grown = after.saturating_sub(before);
            println!(
                "the caller's RSS: {} MB before, {} MB after",
                before >> 20,
                after >> 20
            );
            assert!(grown < 64 << 20, "the caller grew by {} MB", grown >> 20);
        }
    });
}

#[test]
fn a_crashing_worker_fails_its_document_and_the_pool_replaces_it() {
    rt().block_on(async {
        let pool = WorkerPool::new(PoolConfig {
            count: 1,
            command: real_worker(),
            limits: limits(),
        });
        let mut crash = horos_testkit::pdf::text(&["walrus"; 30], 12);
        crash.extend_from_slice(b"\n% CRASH-ME\n%%EOF\n");
        let mut w = pool.get().await.unwrap();
        let (reason, _) = broken(w.open(&crash, &RenderConfig::default()).await.unwrap_err());
        assert_eq!(reason, FailureReason::Crashed);
        drop(w);
        // Its place is free again, and the next worker reads.
        let mut w = pool.get().await.unwrap();
        let pdf = horos_testkit::pdf::text(&["walrus"; 30], 12);
        assert_eq!(w.open(&pdf, &RenderConfig::default()).await.unwrap(), 1);
        drop(w);
        assert_eq!(pool.counts().started, 2);
        assert_eq!(pool.counts().broken, 1);
        // A probe starts one more, which says hello and ends.
        let network = pool.probe().await.unwrap();
        assert_eq!(pool.counts().started, 3);
        assert_eq!(pool.counts().broken, 1);
        println!("the pool's workers see a network: {network:?}");
        // Its health: a free place, a worker started there says hello.
        pool.health().await.unwrap();
        assert_eq!(pool.counts().started, 4);
        // Every place taken (by a live worker): healthy without starting another.
        let busy = pool.get().await.unwrap();
        pool.health().await.unwrap();
        assert_eq!(pool.counts().started, 5);
        busy.finish().await;
        // A pool whose program is not there says so.
        let nowhere = WorkerPool::new(PoolConfig {
            count: 1,
            command: WorkerCommand::new("/no/such/worker"),
            limits: limits(),
        });
        assert!(matches!(
            nowhere.probe().await,
            Err(WorkerError::Spawn { .. })
        ));
        assert!(nowhere.health().await.is_err());
    });
}

#[test]
fn a_hung_worker_is_killed_at_its_time() {
    rt().block_on(async {
        let mut hang = horos_testkit::pdf::text(&["walrus"; 30], 12);
        hang.extend_from_slice(b"\n% HANG-ME\n%%EOF\n");
        let mut w = Worker::spawn(
            &real_worker(),
            WorkerLimits {
                page_timeout: Duration::from_secs(2),
                ..limits()
            },
        )
        .await
        .unwrap();
        let pid = w.id().unwrap();
        let started = Instant::now();
        let e = w.open(&hang, &RenderConfig::default()).await.unwrap_err();
        assert_eq!(broken(e).0, FailureReason::Timeout);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        // A worker that never says hello is killed at the same time.
        let e = Worker::spawn(
            &script("sleep 60"),
            WorkerLimits {
                page_timeout: Duration::from_secs(1),
                ..limits()
            },
        )
        .await
        .unwrap_err();
        assert_eq!(broken(e).0, FailureReason::Timeout);
    });
}

#[test]
fn a_worker_past_its_cpu_seconds_is_a_resource_limit() {
    let dir = tempfile::tempdir().unwrap();
    let hello = hello_file(dir.path(), protocol::PROTOCOL_VERSION);
    rt().block_on(async {
        // A sound hello, then a loop: RLIMIT_CPU's SIGXCPU ends it after 1 s of CPU, long
        // before its 20 s of wall-clock time.
        let mut w = Worker::spawn(
            &script(&format!("cat {hello}; while :; do :; done")),
            WorkerLimits {
                cpu_seconds: 1,
                ..limits()
            },
        )
        .await
        .unwrap();
        let started = Instant::now();
        let e = w.render_page(1).await.unwrap_err();
        assert!(e.to_string().contains("SIGXCPU"), "{e}");
        assert_eq!(broken(e).0, FailureReason::ResourceLimit);
        assert!(started.elapsed() < Duration::from_secs(15));
    });
}

#[test]
fn garbage_a_death_mid_frame_and_too_much_are_typed() {
    let dir = tempfile::tempdir().unwrap();
    let hello = hello_file(dir.path(), protocol::PROTOCOL_VERSION);
    let other = hello_file(dir.path(), 99);
    rt().block_on(async {
        let pdf = horos_testkit::pdf::text(&["walrus"; 30], 12);
        let config = RenderConfig::default();
        // Garbage where the hello is due, from a worker that then stays: killed.
        let e = Worker::spawn(&script("printf 'Hello, I am no worker'; sleep 60"), limits())
            .await
            .unwrap_err();
        let (reason, cause) = broken(e);
        assert_eq!(reason, FailureReason::Crashed);
        assert!(
            matches!(cause, Some(ProtocolError::WrongFrame { tag: b'o', .. })),
            "{cause:?}"
        );
        // Garbage after a good hello.
        let mut w = Worker::spawn(
            &script(&format!("cat {hello}; printf '\\000\\000\\000\\003\\001{{}}'; sleep 60")),
            limits(),
        )
        .await
        .unwrap();
        let (reason, cause) = broken(w.open(&pdf, &config).await.unwrap_err());
        assert_eq!(reason, FailureReason::Crashed);
        assert!(matches!(cause, Some(ProtocolError::Message(_))), "{cause:?}");
        // A death in the middle of a frame: its header says 4096 bytes, 4 come, it exits.
        let mut w = Worker::spawn(
            &script(&format!(
                "cat {hello}; head -c 5 >/dev/null; printf '\\000\\000\\020\\000\\001abc'; exit 3"
            )),
            limits(),
        )
        .await
        .unwrap();
        let e = w.open(&pdf, &config).await.unwrap_err();
        assert!(e.to_string().contains("exit status: 3"), "{e}");
        let (reason, cause) = broken(e);
        assert_eq!(reason, FailureReason::Crashed);
        assert!(
            matches!(cause, Some(ProtocolError::Truncated { expected: 4100, got: 8 })),
            "{cause:?}"
        );
        // An answer past the ceiling (a page whose PNG says 1 GiB), refused from its header
        // with nothing allocated for it.
        let before = horos_testkit::memory::rss_bytes();
        let page = r#"{"page":{"page":{"page_no":1,"page_count":1,"width":1,"height":1,"image":true,"text_layer":null,"failure":null}}}"#;
        let mut frame = u32::try_from(page.len() + 1).unwrap().to_be_bytes().to_vec();
        frame.push(1);
        frame.extend_from_slice(page.as_bytes());
        frame.extend_from_slice(&[0x40, 0, 0, 1, 2]);
        let answer = dir.path().join("answer");
        std::fs::write(&answer, frame).unwrap();
        let mut w = Worker::spawn(
            &script(&format!("cat {hello} {}; cat >/dev/null", answer.display())),
            limits(),
        )
        .await
        .unwrap();
        let (reason, cause) = broken(w.render_page(1).await.unwrap_err());
        assert_eq!(reason, FailureReason::Crashed);
        assert!(
            matches!(cause, Some(ProtocolError::TooLarge { len: 1073741824, limit }) if limit == 64 << 20),
            "{cause:?}"
        );
        if let (Some(before), Some(after)) = (before, horos_testkit::memory::rss_bytes()) {
            assert!(after.saturating_sub(before) < 32 << 20);
        }
        // Another protocol version.
        let e = Worker::spawn(&script(&format!("cat {other}; sleep 60")), limits())
            .await
            .unwrap_err();
        let (reason, cause) = broken(e);
        assert_eq!(reason, FailureReason::Crashed);
        assert!(matches!(cause, Some(ProtocolError::Unexpected(m)) if m.contains("99")));
    });
}
