//! The CLI as a person sees it, under a pseudo-terminal (util-linux `script`), and as a script
//! sees it through a pipe: `ingest DIR` draws progress bars on a terminal and writes plain
//! progress lines when piped, says what to do about a failed document, and `top` redraws the
//! status page on a terminal and prints it once, without escape codes, when piped.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use horos_fakeai::{FakeConfig, FakeServer};

mod common;

use common::{BIN, free_port, runtime, spawn_run, tiny_pdf, wait_for};

/// `horos-ref --config CONFIG ARGS` on a pseudo-terminal: everything it wrote there.
fn on_terminal(config: &Path, args: &str) -> Output {
    on_terminal_via("", config, args)
}

/// The same, run by `wrapper` (a command prefix such as `timeout ...`).
fn on_terminal_via(wrapper: &str, config: &Path, args: &str) -> Output {
    let line = format!("{wrapper} {BIN} --config {} {args}", config.display());
    Command::new("script")
        .args(["--quiet", "--return", "--command", &line, "/dev/null"])
        .env("COLUMNS", "100")
        .env("LINES", "40")
        .output()
        .unwrap()
}

fn piped(config: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A directory of `n` born-digital PDFs (distinct texts, so distinct documents).
fn pdfs(dir: &Path, n: usize, tag: &str) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        std::fs::write(
            dir.join(format!("{tag}-{i}.pdf")),
            tiny_pdf(&format!("Report {tag} number {i} on grain prices")),
        )
        .unwrap();
    }
}

#[test]
fn ingest_and_top_talk_to_a_terminal_and_to_a_pipe() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIP: util-linux `script` is not installed (Debian: bsdutils)");
        return;
    }
    let rt = runtime();
    let embeddings = rt
        .block_on(FakeServer::start(FakeConfig::default()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    pdfs(&d.join("inbox/first"), 5, "first");
    pdfs(&d.join("inbox/second/nested"), 4, "second");
    // Not a PDF under its name: queued, then failed by the pipeline with a reason.
    std::fs::write(d.join("inbox/second/broken.pdf"), b"this is not a PDF").unwrap();
    let config = d.join("horos.toml");
    std::fs::write(
        &config,
        format!(
            "database = \"jobs.db\"\n[ingest]\ninbox = \"inbox\"\nembeddings_url = \"{}\"\n\
             embeddings_model = \"fake-embed\"\n\
             [coordinator]\nbind = \"127.0.0.1:{}\"\n",
            embeddings.url(),
            free_port()
        ),
    )
    .unwrap();
    let _run = spawn_run(&config, &d.join("run.log"));
    wait_for("the coordinator", Duration::from_secs(60), || {
        piped(&config, &["--json", "ps"]).status.success()
    });

    // On a terminal: two bars (files, pages) redrawn in place, then the outcome.
    let out = on_terminal(&config, "ingest first");
    let screen = text(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(screen.contains("files ["), "{screen}");
    assert!(screen.contains("pages ["), "{screen}");
    assert!(screen.contains("5/5"), "{screen}");
    assert!(
        screen.contains('\x1b'),
        "bars are redrawn with escape codes: {screen:?}"
    );
    assert!(screen.contains("5 ingested, 0 failed"), "{screen}");

    // Piped: plain progress lines on stderr, the outcome on stdout, no escape codes; the
    // broken file fails with its reason and the command to retry it; the exit status says so.
    let out = piped(&config, &["ingest", "second"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "a failed document fails the command");
    assert!(
        !stdout.contains('\x1b') && !stderr.contains('\x1b'),
        "{stdout}{stderr}"
    );
    assert!(stdout.contains("5 documents queued"), "{stdout}");
    assert!(stderr.contains("ingest: 5/5 files (1 failed)"), "{stderr}");
    assert!(stdout.contains("4 ingested, 1 failed"), "{stdout}");
    let failed = stdout
        .lines()
        .find(|l| l.contains("failed: document"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(failed.contains("broken.pdf"), "{failed}");
    assert!(stdout.contains("horos-ref ingest --retry"), "{stdout}");

    // `--json`: no progress at all, one JSON object with the outcome.
    pdfs(&d.join("inbox/third"), 2, "third");
    let out = piped(&config, &["--json", "ingest", "third"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ingested"]["done"], 2, "{v}");
    assert_eq!(v["submitted"].as_array().unwrap().len(), 2, "{v}");

    // `top` on a terminal redraws (clear screen) until interrupted.
    let out = on_terminal_via(
        "timeout --foreground --preserve-status --signal INT 2",
        &config,
        "top --interval 0.2",
    );
    let screen = text(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(
        screen.matches("\x1b[2J").count() >= 2,
        "redrawn more than once: {screen:?}"
    );
    assert!(screen.contains("INGEST  12 documents"), "{screen}");
    // Piped: printed once, plain.
    let out = piped(&config, &["top"]);
    let page = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!page.contains('\x1b'), "{page:?}");
    assert!(
        page.contains("INGEST  12 documents: 0 in progress, 11 done, 1 failed"),
        "{page}"
    );
    assert!(
        page.contains("broken"),
        "the failed document is listed: {page}"
    );
}
