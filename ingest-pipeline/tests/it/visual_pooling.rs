//! Visual search by a text question through the real pooling protocol, against `horos-fakeai` (a
//! real HTTP server on 127.0.0.1 whose `/pooling` answers one scripted vector per word): page
//! images become multi-vectors stored compactly in SQLite, a question ranks the page holding its
//! words first, a document filter holds, and the pixel-patch fallback refuses a question.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use horos_fakeai::{FakeConfig, FakeServer, Fault, IMAGE_WORDS_KEYWORD};
use ingest_pipeline::embed::{EmbedError, HashingEmbedder, PixelPatchFallback, VisualEmbedder};
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig};
use ingest_pipeline::pooling::PoolingEmbedder;
use ingest_pipeline::store::{self, DocStatus, PageImage};
use ingest_pipeline::vision::{Reading, TesseractReader};
use ingest_pipeline::visual_search::{VisualQuery, VisualSearchError, search_by_text};
use rusqlite::Connection;

fn crc32(bytes: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for b in bytes {
        c ^= u32::from(*b);
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// A small valid PNG carrying `words` in a `tEXt` chunk (what the fake model "sees").
fn page_png(words: &str) -> Vec<u8> {
    let img = image::GrayImage::from_pixel(8, 8, image::Luma([255]));
    let mut png = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let mut data = IMAGE_WORDS_KEYWORD.as_bytes().to_vec();
    data.push(0);
    data.extend_from_slice(words.as_bytes());
    let mut chunk = (data.len() as u32).to_be_bytes().to_vec();
    let mut typed = b"tEXt".to_vec();
    typed.extend_from_slice(&data);
    chunk.extend_from_slice(&typed);
    chunk.extend_from_slice(&crc32(&typed).to_be_bytes());
    // After the signature (8 bytes) and IHDR (25 bytes).
    png.splice(33..33, chunk);
    png
}

const PAGES: [&str; 5] = [
    "Introduction to the stub generator and its command line options",
    "Attribute table: bigarray, null_terminated, unique pointers and marshalling types",
    "COM interfaces, reference counting and the release method",
    "Error handling with exceptions raised by the generated stubs",
    "Index of keywords and further reading",
];

/// A store with two documents: document A holds PAGES, document B a copy of page 2.
async fn store_pages(embedder: &PoolingEmbedder, path: &std::path::Path) -> (i64, i64) {
    let mut conn = Connection::open(path).unwrap();
    store::migrate(&conn).unwrap();
    let (a, _) = store::insert_document(&mut conn, "a", "A", "/a.pdf").unwrap();
    let (b, _) = store::insert_document(&mut conn, "b", "B", "/b.pdf").unwrap();
    let pages = PAGES
        .iter()
        .enumerate()
        .map(|(i, t)| (a.id, i as u32 + 1, *t))
        .chain([(b.id, 1, PAGES[1])]);
    for (doc, page_no, text) in pages {
        let mv = embedder
            .embed_image(Arc::new(page_png(text)))
            .await
            .unwrap();
        let img = PageImage {
            doc_id: doc,
            page_no,
            width: 8,
            height: 8,
            image_bytes: 1,
            image_path: "x",
            tiles: 1,
        };
        store::insert_page(&mut conn, &img).unwrap();
        let reading = Reading {
            text: text.into(),
            ..Reading::default()
        };
        store::store_page_text(&mut conn, doc, page_no, &reading, "test", &[]).unwrap();
        store::store_page_vectors(&mut conn, doc, page_no, &mv, embedder.name()).unwrap();
    }
    (a.id, b.id)
}

fn query(text: &str, docs: Option<Vec<i64>>) -> VisualQuery {
    VisualQuery {
        text: text.into(),
        k: 3,
        docs,
        threads: 2,
        ..VisualQuery::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_question_ranks_the_page_holding_its_words_first() {
    let server = FakeServer::start(FakeConfig {
        model: "vidore/colpali-v1.3-hf".into(),
        embedding_dim: 32,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let embedder = PoolingEmbedder::new(&server.url(), "vidore/colpali-v1.3-hf").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let (a, b) = store_pages(&embedder, &db).await;

    // The requests had vLLM's shapes: an image message, then (below) a text input.
    let first: serde_json::Value = serde_json::from_str(&server.requests()[0].body).unwrap();
    assert_eq!(server.requests()[0].path, "/pooling");
    assert_eq!(first["task"], "token_embed");
    assert!(
        first["messages"][0]["content"][0]["image_url"]["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,")
    );

    // Stored compactly: half floats (2 bytes a value) and int8 codes with a scale per vector.
    let conn = Connection::open(&db).unwrap();
    let (encoding, count, f16_len, int8_len): (String, i64, i64, i64) = conn
        .query_row(
            "SELECT encoding, v.count, length(vectors), length(int8)
             FROM ip_page_vectors v JOIN ip_page_codes USING (doc_id, page_no)
             WHERE doc_id = ?1 AND page_no = 2",
            [a],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(encoding, "f16");
    assert_eq!(count, 10); // one vector per word of the page (`null_terminated` is two)
    assert_eq!(
        (f16_len, int8_len),
        (count * 32 * 2, count * 32 + count * 4)
    );

    let hits = search_by_text(
        Connection::open(&db).unwrap(),
        &embedder,
        query(
            "Which attribute table lists marshalling types and unique pointers?",
            None,
        ),
    )
    .await
    .unwrap();
    let keys: Vec<(i64, u32)> = hits.iter().map(|h| (h.doc_id, h.page_no)).collect();
    assert_eq!(hits.len(), 3);
    // The two copies of the attribute page tie for first, far above the rest.
    assert!(
        keys[..2].contains(&(a, 2)) && keys[..2].contains(&(b, 1)),
        "{keys:?}"
    );
    assert!(hits[1].score > hits[2].score + 1.0, "{hits:?}");
    assert!(hits[0].snippet.starts_with("Attribute table"));
    let last: serde_json::Value =
        serde_json::from_str(&server.requests().last().unwrap().body).unwrap();
    assert_eq!(
        last["input"],
        "Which attribute table lists marshalling types and unique pointers?"
    );

    // Only document B.
    let hits = search_by_text(
        Connection::open(&db).unwrap(),
        &embedder,
        query("reference counting of COM interfaces", Some(vec![b])),
    )
    .await
    .unwrap();
    assert!(hits.iter().all(|h| h.doc_id == b));
    let hits = search_by_text(
        Connection::open(&db).unwrap(),
        &embedder,
        query("reference counting of COM interfaces", Some(vec![a])),
    )
    .await
    .unwrap();
    assert_eq!((hits[0].doc_id, hits[0].page_no), (a, 3));

    // Another model's question finds none of these pages.
    let other = PoolingEmbedder::new(&server.url(), "another-model").unwrap();
    let none = search_by_text(Connection::open(&db).unwrap(), &other, query("COM", None))
        .await
        .unwrap();
    assert!(none.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pixel_fallback_and_bad_answers_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let conn = Connection::open(&db).unwrap();
    store::migrate(&conn).unwrap();
    let err = search_by_text(
        conn,
        &PixelPatchFallback::default(),
        query("any question", None),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, VisualSearchError::Embed(EmbedError::NoTextQuery(ref m)) if m == "patch-grid"),
        "{err}"
    );

    let server = FakeServer::start(FakeConfig {
        embedding_dim: 8,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let embedder = PoolingEmbedder::new(&server.url(), "fake-model").unwrap();
    server.set_fault(Fault::MalformedJson, Some(1));
    let e = embedder.embed_query("q".into()).await.unwrap_err();
    assert!(matches!(e, EmbedError::Backend { .. }), "{e}");
    server.set_fault(Fault::Status(503), Some(1));
    let e = embedder.embed_query("q".into()).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    server.set_fault(Fault::Status(400), Some(1));
    let e = embedder.embed_query("q".into()).await.unwrap_err();
    assert!(!e.is_retryable(), "{e}");
    // Text without a word: the server refuses it (400), no panic, no empty vectors stored.
    let e = embedder.embed_query("?!".into()).await.unwrap_err();
    assert!(!e.is_retryable(), "{e}");
    // After the faults: one vector per word of the question.
    let mv = embedder.embed_query("two words".into()).await.unwrap();
    assert_eq!((mv.dim, mv.len()), (8, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_pipeline_embeds_pages_through_the_pooling_api() {
    let Some(samples) = crate::common::samples() else {
        return;
    };
    if !crate::common::tesseract_available() {
        eprintln!("skipped: tesseract is not installed");
        return;
    }
    let server = FakeServer::start(FakeConfig {
        embedding_dim: 16,
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pipeline = Pipeline::open(
        PipelineConfig::new(dir.path()),
        TesseractReader::default(),
        HashingEmbedder::default(),
        PoolingEmbedder::new(&server.url(), "colqwen-fake").unwrap(),
    )
    .unwrap();
    let running = pipeline.start();
    let doc = crate::common::submit_and_wait(&pipeline, samples.join("excerpt.pdf")).await;
    let id = doc.id;
    running.shutdown().await;
    assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
    let mut conn = pipeline.connection().unwrap();
    assert_eq!(
        store::visual_models(&mut conn).unwrap(),
        [("colqwen-fake".to_owned(), 16, 4)]
    );
    let pooled = server
        .requests()
        .iter()
        .filter(|r| r.path == "/pooling")
        .count();
    assert_eq!(pooled, 4);
    let mv = store::page_vectors(&mut conn, id, 1).unwrap().unwrap();
    // A rendered page has no words chunk: the fake gives it 16 tokens of its bytes.
    assert_eq!((mv.dim, mv.len()), (16, 16));
}
