//! `search --mode visual QUESTION`: the question embedded by `[ingest]`'s late-interaction model
//! (vLLM's `/pooling`, here `horos-fakeai` on 127.0.0.1 answering one scripted vector per word)
//! and the stored page images ranked by MaxSim; `--doc` filters; with the pixel-patch fallback
//! configured the command fails with a message saying a model is needed.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use horos_fakeai::{FakeConfig, FakeServer, IMAGE_WORDS_KEYWORD};
use ingest_pipeline::embed::VisualEmbedder;
use ingest_pipeline::maxsim::MultiVector;
use ingest_pipeline::pooling::PoolingEmbedder;
use ingest_pipeline::store::{self, PageImage};
use ingest_pipeline::vision::Reading;

mod common;

use common::{cli, json};

/// The chunks of a PNG that carry `words` (the fake model reads only the `tEXt` chunk).
fn png_with_words(words: &str) -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut data = IMAGE_WORDS_KEYWORD.as_bytes().to_vec();
    data.push(0);
    data.extend_from_slice(words.as_bytes());
    png.extend_from_slice(&(data.len() as u32).to_be_bytes());
    png.extend_from_slice(b"tEXt");
    png.extend_from_slice(&data);
    png.extend_from_slice(&[0; 4]);
    png
}

const PAGES: [&str; 3] = [
    "Installing the stub generator from source",
    "Attribute table: marshalling types, unique pointers, bigarray",
    "COM interfaces and reference counting",
];

fn setup(dir: &Path, visual: &str) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir.join("inbox")).unwrap();
    let config = dir.join("horos.toml");
    std::fs::write(
        &config,
        format!(
            "[ingest]\ninbox = \"inbox\"\nembeddings_url = \"http://127.0.0.1:9\"\n\
             embeddings_model = \"m\"\n{visual}"
        ),
    )
    .unwrap();
    assert_eq!(
        json(&cli(&config, &["--json", "docs"])),
        serde_json::json!([])
    );
    (config, dir.join("ingest/ingest.db"))
}

/// Two documents with PAGES each, their images embedded by `embedder`.
fn store_pages(rt: &tokio::runtime::Runtime, db: &Path, embedder: &PoolingEmbedder) {
    let vectors: Vec<MultiVector> = PAGES
        .iter()
        .map(|t| {
            rt.block_on(embedder.embed_image(Arc::new(png_with_words(t))))
                .unwrap()
        })
        .collect();
    let queue = squeueha::Queue::open(db).unwrap();
    queue
        .transaction(|tx| {
            let c = &mut *tx;
            for sha in ["a", "b"] {
                let (doc, _) = store::insert_document(c, sha, sha, format!("/inbox/{sha}.pdf"))?;
                for (i, (text, mv)) in PAGES.iter().zip(&vectors).enumerate() {
                    let page_no = i as u32 + 1;
                    let page = PageImage {
                        doc_id: doc.id,
                        page_no,
                        width: 1,
                        height: 1,
                        image_bytes: 1,
                        image_path: "x",
                        tiles: 1,
                    };
                    store::insert_page(c, &page)?;
                    let reading = Reading {
                        text: text.to_string(),
                        ..Reading::default()
                    };
                    store::store_page_text(c, doc.id, page_no, &reading, "test", &[])?;
                    store::store_page_vectors(c, doc.id, page_no, mv, embedder.name())?;
                }
            }
            Ok::<_, store::StoreError>(())
        })
        .unwrap();
}

#[test]
fn a_question_finds_its_page_by_maxsim_and_the_fallback_refuses_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt
        .block_on(FakeServer::start(FakeConfig {
            model: "colpali-fake".into(),
            embedding_dim: 32,
            ..FakeConfig::default()
        }))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (config, db) = setup(
        dir.path(),
        &format!(
            "visual_url = \"{}\"\nvisual_model = \"colpali-fake\"\n",
            server.url()
        ),
    );
    let embedder = PoolingEmbedder::new(&server.url(), "colpali-fake").unwrap();
    store_pages(&rt, &db, &embedder);

    let q = "which table lists the marshalling types of unique pointers";
    let hits = json(&cli(&config, &["--json", "search", "--mode", "visual", q]));
    let pages: Vec<(i64, i64)> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["document"].as_i64().unwrap(), h["page"].as_i64().unwrap()))
        .collect();
    assert_eq!(pages.len(), 5, "{hits}");
    let mut best = pages[..2].to_vec();
    best.sort();
    assert_eq!(best, [(1, 2), (2, 2)], "{hits}");
    let asked: serde_json::Value =
        serde_json::from_str(&server.requests().last().unwrap().body).unwrap();
    assert_eq!(asked["input"], q);
    assert_eq!(asked["task"], "token_embed");

    let only = json(&cli(
        &config,
        &[
            "--json", "search", "--mode", "visual", "--doc", "2", "--k", "1", q,
        ],
    ));
    assert_eq!(
        only,
        serde_json::json!([{"document": 2, "page": 2,
        "score": only[0]["score"], "snippet": PAGES[1]}])
    );
    // Full text stays the default mode.
    let fts = json(&cli(&config, &["--json", "search", "reference counting"]));
    assert_eq!(fts.as_array().unwrap().len(), 2);
    // Every mode filters by document.
    let one = json(&cli(
        &config,
        &["--json", "search", "--doc", "1", "reference counting"],
    ));
    let docs: Vec<i64> = one
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["document"].as_i64().unwrap())
        .collect();
    assert_eq!(docs, [1], "{one}");
    // Hybrid: the pages the question's words and the page images agree on come first.
    let fused = json(&cli(&config, &["--json", "search", "--mode", "hybrid", q]));
    assert!(!fused.as_array().unwrap().is_empty(), "{fused}");

    // The pixel-patch fallback: a clear error, no ranking of pixels.
    let other = tempfile::tempdir().unwrap();
    let (fallback, _) = setup(other.path(), "visual = \"pixel-patch-fallback\"\n");
    let out = cli(&fallback, &["search", "--mode", "visual", q]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("cannot embed a text question"), "{err}");
}
