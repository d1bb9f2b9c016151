//! Search by image through the binary with a real late-interaction model: `horos-ref run` with
//! `[ingest]`'s `visual_url` on real vLLM (CPU) serving the tiny ColPali of
//! `scripts/make_tiny_colpali.py` (`scripts/start_vllm_visual.sh`, `HOROS_VLLM_VISUAL_URL`,
//! default http://127.0.0.1:18084), with `visual_scan_max_pages = 0` so that every question goes
//! through the centroid index and its exact rerank. Four one-page PDFs of distinct colours and
//! shapes, one of them a near-duplicate of another, are ingested; then:
//! - a page's own image (`search --image`, and `POST /v1/search` with the image) finds that
//!   page first;
//! - a crop of it (the middle 70 %, as a user's cut-out of a page) finds it first too (or, for
//!   the page with a near-duplicate, it and its near-duplicate first);
//! - `search --like DOC:1` gives the page itself, then its near-duplicate.
//!
//! The model's weights are random: the rankings follow the pages' pixels, which is what these
//! checks need. Skipped when the server is absent, unless `HOROS_REQUIRE_VLLM=1`.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use base64::Engine;
use horos_fakeai::{FakeConfig, FakeServer};
use serde_json::{Value, json};

mod common;

use common::{cli, free_port, json, spawn_run, wait_for};

/// A one-page PDF: the page filled with `bg`, a rectangle of `fg` at `rect` (x, y, w, h in
/// points), and a line of text.
fn colour_pdf(bg: [f32; 3], fg: [f32; 3], rect: [u32; 4], text: &str) -> Vec<u8> {
    let content = format!(
        "{} {} {} rg 0 0 612 792 re f\n{} {} {} rg {} {} {} {} re f\n\
         0 0 0 rg BT /F1 24 Tf 72 740 Td ({text}) Tj ET",
        bg[0], bg[1], bg[2], fg[0], fg[1], fg[2], rect[0], rect[1], rect[2], rect[3]
    );
    horos_testkit::pdf::page(&content)
}

/// `(document, page)` of each hit of a JSON answer (`hits` of the CLI, `data` of HTTP).
fn pages(hits: &Value) -> Vec<(i64, i64)> {
    hits.as_array()
        .map(|a| {
            a.iter()
                .map(|h| {
                    (
                        h["document"].as_i64().unwrap_or(-1),
                        h["page"].as_i64().unwrap_or(-1),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The middle 70 % of a PNG, as PNG.
fn crop(png: &[u8]) -> Vec<u8> {
    let img = image::load_from_memory(png).unwrap();
    let (w, h) = (img.width(), img.height());
    let cut = img.crop_imm(w * 15 / 100, h * 15 / 100, w * 70 / 100, h * 70 / 100);
    let mut out = Vec::new();
    cut.write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

#[test]
fn a_page_its_crop_and_its_near_duplicate_are_found_by_image_with_real_vllm() {
    let url = std::env::var("HOROS_VLLM_VISUAL_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:18084".to_owned());
    let up = std::process::Command::new("curl")
        .args(["-sf", "-m", "5", &format!("{url}/health")])
        .status()
        .is_ok_and(|s| s.success());
    if !up {
        horos_testkit::skip_or_fail(
            "HOROS_REQUIRE_VLLM",
            &format!(
                "no vLLM serving tiny-colpali at {url}: start it with scripts/start_vllm_visual.sh"
            ),
        );
        return;
    }
    let rt = common::runtime();
    // Text embeddings are not what this test is about: a fake server answers them.
    let text_model = rt
        .block_on(FakeServer::start(FakeConfig::default()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let inbox = dir.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let (red, green, blue, white, yellow) = (
        [0.9, 0.1, 0.1],
        [0.1, 0.8, 0.2],
        [0.1, 0.2, 0.9],
        [1.0, 1.0, 1.0],
        [0.95, 0.9, 0.1],
    );
    let docs = [
        (
            "a.pdf",
            colour_pdf(red, blue, [60, 60, 300, 300], "Quarterly report"),
        ),
        (
            "b.pdf",
            colour_pdf(green, yellow, [250, 400, 300, 300], "Installation guide"),
        ),
        (
            "c.pdf",
            colour_pdf(white, blue, [0, 300, 612, 120], "Invoice 2041"),
        ),
        // b's near-duplicate: the same layout, its rectangle moved a little, another title.
        (
            "d.pdf",
            colour_pdf(green, yellow, [240, 390, 300, 300], "Installation guide v2"),
        ),
    ];
    for (name, pdf) in &docs {
        std::fs::write(inbox.join(name), pdf).unwrap();
    }
    let port = free_port();
    let config = dir.path().join("horos.toml");
    std::fs::write(
        &config,
        format!(
            "database = \"jobs.db\"\n[coordinator]\nbind = \"127.0.0.1:{port}\"\n\
             [ingest]\ninbox = \"inbox\"\nembeddings_url = \"{text}\"\n\
             embeddings_model = \"fake-embed\"\nvisual_url = \"{url}\"\n\
             visual_model = \"tiny-colpali\"\ndpi = 40\nvisual_scan_max_pages = 0\n\
             detect_rotation = false\n",
            text = text_model.url()
        ),
    )
    .unwrap();
    let mut ids = Vec::new();
    for (name, _) in &docs {
        let queued = json(&cli(&config, &["--json", "ingest", name]));
        ids.push(queued["document"].as_i64().unwrap());
    }
    let log = dir.path().join("run.log");
    let _run = spawn_run(&config, &log);
    let mut listed = Value::Null;
    wait_for("the documents ingested", Duration::from_secs(300), || {
        listed = json(&cli(&config, &["--json", "docs"]));
        listed
            .as_array()
            .is_some_and(|d| d.iter().all(|d| d["status"] != "pending"))
    });
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["status"] == "done"),
        "{listed}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let image_of = |doc: i64| {
        let mut conn = rusqlite::Connection::open(dir.path().join("ingest/ingest.db")).unwrap();
        let info = ingest_pipeline::store::page_info(&mut conn, doc, 1)
            .unwrap()
            .unwrap();
        std::fs::read(info.image_path).unwrap()
    };

    for (i, doc) in ids.iter().enumerate().take(3) {
        let png = image_of(*doc);
        // The page's own image, through the CLI.
        let file = dir.path().join(format!("page{i}.png"));
        std::fs::write(&file, &png).unwrap();
        let found = json(&cli(
            &config,
            &[
                "--json",
                "search",
                "--image",
                file.to_str().unwrap(),
                "--k",
                "3",
            ],
        ));
        assert_eq!(pages(&found).first(), Some(&(*doc, 1)), "{found}");
        // A crop of it.
        let file = dir.path().join(format!("crop{i}.png"));
        std::fs::write(&file, crop(&png)).unwrap();
        let found = json(&cli(
            &config,
            &[
                "--json",
                "search",
                "--image",
                file.to_str().unwrap(),
                "--k",
                "3",
            ],
        ));
        let found = pages(&found);
        if i == 1 {
            // b's crop is as close to d (b moved by 10 points) as to b: both come first.
            let mut two = found[..2].to_vec();
            two.sort_unstable();
            assert_eq!(two, [(ids[1], 1), (ids[3], 1)], "crop of b: {found:?}");
        } else {
            assert_eq!(found.first(), Some(&(*doc, 1)), "crop: {found:?}");
        }
    }

    // The same over HTTP: the image as base64 in `POST /v1/search`.
    let png = image_of(ids[2]);
    let (code, v) = common::curl(
        "POST",
        &format!("http://127.0.0.1:{port}/v1/search"),
        Some(&json!({
            "image": base64::engine::general_purpose::STANDARD.encode(&png),
            "k": 3
        })),
        None,
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(pages(&v["data"]).first(), Some(&(ids[2], 1)), "{v}");

    // Pages like b's: b itself, then its near-duplicate d.
    let like = json(&cli(
        &config,
        &[
            "--json",
            "search",
            "--like",
            &format!("{}:1", ids[1]),
            "--k",
            "3",
        ],
    ));
    assert_eq!(pages(&like)[..2], [(ids[1], 1), (ids[3], 1)], "{like}");
}
