//! The ingest store on SQLite and on PostgreSQL, in one run: pages recorded as the pipeline's
//! stages record them (one transaction per stage and page: rendered, read, text stored with its
//! chunks, text vectors, visual vectors), then typed full-text questions and document reads
//! through the queue's read pool. PostgreSQL runs twice, with the caller's statements prepared
//! once per connection (`caller_statement_cache`, the default) and prepared on every call (0).
//!
//! ```text
//! export $(scripts/setup_postgres.sh | tail -n1 | sed 's/^export //')
//! cargo run --release -p ingest-pipeline --features postgres --example bench_store_backends -- 400 400
//! ```
//! Arguments: pages (default 400), questions (default 400). Needs `HOROS_PG_URL`; a schema of
//! its own is created and dropped.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use ingest_pipeline::chunk::{ChunkConfig, chunk_text};
use ingest_pipeline::maxsim::MultiVector;
use ingest_pipeline::store::{self, EmbedStep, PageImage, Reads};
use ingest_pipeline::vision::Reading;
use squeueha::{Config, Queue};

const WORDS: [&str; 16] = [
    "walrus", "quartz", "ledger", "saffron", "glacier", "zephyr", "obsidian", "harbor", "lantern",
    "meadow", "copper", "falcon", "orchid", "pillar", "summit", "thistle",
];

/// Page `p`'s text: 200 words drawn from the list by a simple sequence.
fn text(p: usize) -> String {
    (0..200)
        .map(|i| WORDS[(p * 7 + i * i * 3 + i) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

/// Records `pages` pages of one document, one transaction per stage and page; pages a second.
fn record(q: &Queue, pages: usize) -> f64 {
    let doc = q
        .transaction(|tx| store::insert_document(tx, "bench", "bench", "/bench.pdf"))
        .unwrap()
        .0
        .id;
    q.transaction(|tx| store::set_page_count(tx, doc, pages as u32))
        .unwrap();
    let start = Instant::now();
    for p in 1..=pages as u32 {
        let t = text(p as usize);
        let img = PageImage {
            doc_id: doc,
            page_no: p,
            width: 1240,
            height: 1754,
            image_bytes: 100_000,
            image_path: "page.png",
            tiles: 1,
        };
        let reading = Reading {
            text: t.clone(),
            ..Reading::default()
        };
        q.transaction(|tx| store::insert_page(tx, &img)).unwrap();
        q.transaction(|tx| store::record_page_reading(tx, doc, p, &reading))
            .unwrap();
        let chunks = chunk_text(&t, &ChunkConfig::default());
        q.transaction(|tx| store::store_page_text(tx, doc, p, &reading, "bench", &chunks))
            .unwrap();
        q.transaction(|tx| {
            let ids: Vec<i64> = store::page_chunks(tx, doc, p)?
                .iter()
                .map(|c| c.0)
                .collect();
            let vectors: Vec<Vec<f32>> = ids.iter().map(|i| vec![*i as f32; 384]).collect();
            store::store_chunk_vectors(tx, &ids, &vectors, "m")?;
            store::finish_step(tx, doc, p, EmbedStep::Text)
        })
        .unwrap();
        let mv = MultiVector {
            dim: 128,
            data: vec![0.5; 128 * 64],
        };
        q.transaction(|tx| {
            store::store_page_vectors(tx, doc, p, &mv, "v")?;
            store::finish_step(tx, doc, p, EmbedStep::Visual)
        })
        .unwrap();
    }
    pages as f64 / start.elapsed().as_secs_f64()
}

/// Asks `questions` typed questions and reads the document as often; questions a second.
fn ask(q: &Queue, questions: usize) -> f64 {
    let mut reads = Reads(q.clone());
    let start = Instant::now();
    for i in 0..questions {
        let question = format!("{} {}", WORDS[i % 16], WORDS[(i * 5 + 3) % 16]);
        let hits = store::search_user_text(&mut reads, &question, 5).unwrap();
        assert!(!hits.is_empty());
        assert!(store::document(&mut reads, 1).unwrap().is_some());
    }
    questions as f64 / start.elapsed().as_secs_f64()
}

fn open(target: &str, cache: usize) -> Queue {
    let cfg = Config {
        caller_statement_cache: cache,
        ..Config::default()
    };
    let q = Queue::open_with(target, cfg).unwrap();
    q.transaction(store::migrate_in).unwrap();
    q
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let pages = args.first().copied().unwrap_or(400);
    let questions = args.get(1).copied().unwrap_or(400);
    let base = std::env::var("HOROS_PG_URL").expect("HOROS_PG_URL (scripts/setup_postgres.sh)");
    let mut admin = squeueha::pg::Client::connect(&base, squeueha::pg::NoTls).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let mut runs: Vec<(String, f64, f64)> = Vec::new();
    let sqlite = dir.path().join("store.db");
    let targets = [
        ("SQLite file".to_owned(), sqlite.display().to_string(), 256),
        (
            "PostgreSQL, statements cached".to_owned(),
            String::new(),
            256,
        ),
        (
            "PostgreSQL, prepared every call".to_owned(),
            String::new(),
            0,
        ),
    ];
    for (i, (name, target, cache)) in targets.into_iter().enumerate() {
        let schema = format!("bench_store_{}_{i}", std::process::id());
        let target = if target.is_empty() {
            admin
                .batch_execute(&format!(
                    "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
                ))
                .unwrap();
            format!("{base}{sep}options=-c%20search_path%3D{schema}")
        } else {
            target
        };
        let q = open(&target, cache);
        let recorded = record(&q, pages);
        let asked = ask(&q, questions);
        println!("{name:32} {recorded:8.1} pages/s recorded   {asked:8.1} questions/s");
        runs.push((name, recorded, asked));
        drop(q);
        let _ = admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    }
    let (_, r0, a0) = runs[0];
    let (_, r1, a1) = runs[1];
    let (_, r2, a2) = runs[2];
    println!(
        "PostgreSQL cached / SQLite: {:.2}x recording, {:.2}x questions",
        r1 / r0,
        a1 / a0
    );
    println!(
        "PostgreSQL cached / prepared every call: {:.2}x recording, {:.2}x questions",
        r1 / r2,
        a1 / a2
    );
}
