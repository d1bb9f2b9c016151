//! Documents belong to someone (issue 46): two documents ingested into the collections `alpha`
//! and `beta`, searched through the gateway's searcher (the one `POST /v1/search` and `POST
//! /v1/answers` call) with one caller's collections. For every mode (full text, text vectors,
//! hybrid, an image as the question, a page as the question, an answer's passages), a caller of
//! `alpha` never gets a page of `beta`'s document, nor learns that it exists; a caller of
//! `beta` finds it.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use horos_server_control::{Collection, Collections, PassageQuery, SearchError, Searcher};
use ingest_pipeline::embed::{HashingEmbedder, PixelPatchFallback};
use ingest_pipeline::gateway::IngestSearcher;
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig};
use ingest_pipeline::store::{self, DocStatus};
use ingest_pipeline::vision::TesseractReader;
use serde_json::{Value, json};

fn only(name: &str) -> Collections {
    Collections::Only(vec![Collection::new(name).unwrap()])
}

/// The documents of the hits of a search answer.
fn docs(hits: &Value) -> Vec<i64> {
    hits.as_array()
        .unwrap()
        .iter()
        .map(|h| h["document"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_reads_only_its_collections_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = Pipeline::open(
        PipelineConfig::new(dir.path().join("work")),
        TesseractReader::default(),
        HashingEmbedder::default(),
        PixelPatchFallback::default(),
    )
    .unwrap();
    let running = pipeline.start();
    let mut ids = Vec::new();
    for (name, collection, lines) in [
        (
            "a.pdf",
            "alpha",
            ["Bakery invoices for the winter", "bread and cakes"],
        ),
        (
            "b.pdf",
            "beta",
            ["Merger plans of the zebra company", "secret terms"],
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, horos_testkit::pdf::text(&lines, 24)).unwrap();
        let submitted = pipeline
            .submit_to(&path, Collection::new(collection).unwrap())
            .await
            .unwrap();
        assert_eq!(submitted.document().collection.as_str(), collection);
        let doc = pipeline
            .wait_for(submitted.document().id, Duration::from_secs(120))
            .await
            .unwrap();
        assert_eq!(doc.status, DocStatus::Done, "{doc:?}");
        ids.push(doc.id);
    }
    running.shutdown().await;
    let (a, b) = (ids[0], ids[1]);
    let searcher = IngestSearcher(Arc::new(OnceLock::from(pipeline.clone())));
    let (alice, bob) = (only("alpha"), only("beta"));
    let search = |q: &'static str, options: Value, who: Collections| {
        let searcher = &searcher;
        async move { searcher.search(q, 10, &options, &who).await }
    };

    // Words only bob's document holds: alice finds nothing in any text mode, bob finds them,
    // and so does the operator (every collection).
    for mode in ["text", "vector", "hybrid"] {
        let mine = search("zebra merger", json!({"mode": mode}), alice.clone());
        assert!(!docs(&mine.await.unwrap()).contains(&b), "{mode}");
        let his = search("zebra merger", json!({"mode": mode}), bob.clone()).await;
        let his = docs(&his.unwrap());
        assert_eq!(his.first(), Some(&b), "{mode}: {his:?}");
        assert!(!his.contains(&a), "{mode}: {his:?}");
        let all = search("zebra merger", json!({"mode": mode}), Collections::All).await;
        assert!(docs(&all.unwrap()).contains(&b), "{mode}");
    }
    // Her own words she finds; a field of the options does not widen her collections, and
    // naming bob's document finds nothing, as an unknown one does.
    let hers = search("bakery invoices", json!({}), alice.clone()).await;
    assert_eq!(docs(&hers.unwrap()), [a]);
    let widened = search(
        "zebra",
        json!({"collections": ["beta"], "collection": "beta"}),
        alice.clone(),
    );
    assert_eq!(widened.await.unwrap(), json!([]));
    let named = search("zebra", json!({"document": b}), alice.clone()).await;
    assert_eq!(named.unwrap(), json!([]));

    // An image as the question: bob's page image finds his page for him, never for alice.
    let image = {
        let mut conn = pipeline.connection().unwrap();
        let info = store::page_info(&mut conn, b, 1).unwrap().unwrap();
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(info.image_path).unwrap())
    };
    let looks = search("", json!({"image": image}), bob.clone()).await;
    assert_eq!(docs(&looks.unwrap()).first(), Some(&b));
    let looks = search("", json!({"image": image}), alice.clone()).await;
    assert!(!docs(&looks.unwrap()).contains(&b));
    let both = search("zebra", json!({"image": image}), alice.clone()).await;
    assert!(!docs(&both.unwrap()).contains(&b));

    // A page as the question: bob's page is unknown to alice, with the very refusal a
    // document that does not exist gets; her own page she may start from.
    let like = |d: i64| json!({"like": {"document": d, "page": 1}});
    let refused = search("", like(b), alice.clone()).await.unwrap_err();
    let unknown = search("", like(b + 1000), alice.clone()).await.unwrap_err();
    let shape = |e: &SearchError, d: i64| match e {
        SearchError::Invalid(m) => m.replace(&d.to_string(), "D"),
        other => panic!("{other:?}"),
    };
    assert_eq!(shape(&refused, b), shape(&unknown, b + 1000));
    let his = search("", like(b), bob.clone()).await.unwrap();
    assert_eq!(docs(&his).first(), Some(&b));
    let mine = search("", like(a), alice.clone()).await.unwrap();
    assert_eq!(docs(&mine), [a]);

    // An answer's passages: from her collection only.
    let passages = |who: Collections| PassageQuery {
        question: "zebra merger secret terms".into(),
        k: 4,
        document: None,
        min_similarity: 0.0,
        max_chars: 500,
        images: 1,
        max_image_bytes: PassageQuery::DEFAULT_MAX_IMAGE_BYTES,
        collections: who,
    };
    let got = searcher.passages(&passages(alice.clone())).await.unwrap();
    assert!(got.iter().all(|p| p.document != b), "{got:?}");
    let got = searcher.passages(&passages(bob.clone())).await.unwrap();
    assert_eq!(got.first().map(|p| p.document), Some(b), "{got:?}");
    assert!(got[0].image.is_some());
    // A caller that reads no collection reads nothing at all.
    let none = Collections::Only(Vec::new());
    assert_eq!(
        search("zebra", json!({}), none.clone()).await.unwrap(),
        json!([])
    );
    assert!(searcher.passages(&passages(none)).await.unwrap().is_empty());
}
