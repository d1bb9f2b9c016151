//! Search latency of every mode at scale, through `hybrid::search` (what the CLI, `/v1/search`
//! and the MCP tool call): full text (FTS5), text vectors (chunk embeddings, cosine through the
//! in-memory `TextVectorIndex`), visual MaxSim (the int8 index kept in memory, and loaded per question as a one-shot
//! CLI does), and hybrid (the three fused), p50/p99 over the same questions in one run.
//!
//! Run: `cargo run --release -p ingest-pipeline --example bench_search_modes -- PAGES
//! VISUAL_VECTORS QUESTIONS THREADS` (default `10000 700 40 2`: 10,000 pages, ColQwen2-shaped
//! visual vectors, 700 × 128 per page; MiniLM-shaped chunk vectors, 384 dims; about 3 chunks a
//! page). The store is written to a temporary directory under `BENCH_DIR` (default `.`), about
//! 2.8 GB at the default shape.
//!
//! Synthetic data: page text drawn from a 5,000-word vocabulary with a Zipf-like law (so FTS
//! posting lists are realistic: a few very common words, many rare ones); vectors are concepts
//! plus noise (see `bench_visual.rs`), and the embedders answer questions with a noisy copy of a
//! target page's vectors, in process (no network in the timings).

use std::sync::Arc;
use std::time::Instant;

use ingest_pipeline::chunk::{ChunkConfig, chunk_text};
use ingest_pipeline::embed::{EmbedError, TextEmbedder, VisualEmbedder};
use ingest_pipeline::hybrid::{self, Mode, Query, SearchError};
use ingest_pipeline::maxsim::MultiVector;
use ingest_pipeline::store::{self, PageImage, TextVectorIndex, VisualIndexCache};
use ingest_pipeline::vision::Reading;

const TEXT_DIM: usize = 384;
const VISUAL_DIM: usize = 128;
const VOCABULARY: usize = 5_000;
const WORDS_PER_PAGE: usize = 250;
const PAGES_PER_DOC: usize = 50;
/// Questions asked with the visual index loaded per question (as a one-shot CLI does).
const UNCACHED_QUESTIONS: usize = 5;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn unit(&mut self) -> f64 {
        self.next() as f64 / (1u64 << 31) as f64
    }
    fn uniform(&mut self) -> f32 {
        self.unit() as f32 - 0.5
    }
    /// A word index, Zipf-like: P(rank r) ∝ 1/r.
    fn word(&mut self) -> usize {
        let h = (VOCABULARY as f64).ln();
        ((self.unit() * h).exp() as usize).clamp(1, VOCABULARY) - 1
    }
}

fn word(i: usize) -> String {
    // Pronounceable, distinct, tokenised as one word by FTS5.
    const SYL: [&str; 16] = [
        "ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "va", "ze", "bo", "du", "fe", "gi", "ho",
        "ju",
    ];
    let mut s = String::new();
    let mut n = i + 16;
    while n > 0 {
        s.push_str(SYL[n % 16]);
        n /= 16;
    }
    s
}

fn normalise(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
}

fn noisy(rng: &mut Rng, base: &[f32], noise: f32) -> Vec<f32> {
    let mut v: Vec<f32> = base.iter().map(|c| c + noise * rng.uniform()).collect();
    normalise(&mut v);
    v
}

/// Answers every question with the vectors set for it (the benchmark sets them per question).
struct Scripted {
    text: std::sync::Mutex<Vec<f32>>,
    visual: std::sync::Mutex<Option<MultiVector>>,
}

impl TextEmbedder for Scripted {
    fn name(&self) -> &str {
        "bench-text"
    }
    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let v = self
            .text
            .lock()
            .map_err(|_| EmbedError::Shape("poisoned".into()))?;
        Ok(texts.iter().map(|_| v.clone()).collect())
    }
}

impl VisualEmbedder for Scripted {
    fn name(&self) -> &str {
        "bench-visual"
    }
    async fn embed_image(&self, _png: Arc<Vec<u8>>) -> Result<MultiVector, EmbedError> {
        Err(EmbedError::Shape("not used".into()))
    }
    async fn embed_query(&self, _text: String) -> Result<MultiVector, EmbedError> {
        self.visual
            .lock()
            .map_err(|_| EmbedError::Shape("poisoned".into()))?
            .clone()
            .ok_or_else(|| EmbedError::Shape("no question set".into()))
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (pages, per_page, questions, threads) =
        (num(0, 10_000), num(1, 700), num(2, 40), num(3, 2));
    let dir = tempfile::tempdir_in(std::env::var_os("BENCH_DIR").unwrap_or_else(|| ".".into()))?;
    let db = dir.path().join("store.db");
    let mut conn = rusqlite::Connection::open(&db)?;
    store::migrate(&conn)?;
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL")?;

    let mut rng = Rng(7);
    let mut text_concepts = Vec::new();
    for _ in 0..512 {
        let mut c: Vec<f32> = (0..TEXT_DIM).map(|_| rng.uniform()).collect();
        normalise(&mut c);
        text_concepts.push(c);
    }
    let mut visual_concepts = Vec::new();
    for _ in 0..4096 {
        let mut c: Vec<f32> = (0..VISUAL_DIM).map(|_| rng.uniform()).collect();
        normalise(&mut c);
        visual_concepts.push(c);
    }
    let chunking = ChunkConfig {
        size: 128,
        overlap: 30,
    };
    let built = Instant::now();
    let mut page_words: Vec<Vec<usize>> = Vec::with_capacity(pages);
    let mut page_text_concept = Vec::with_capacity(pages);
    let mut page_visual: Vec<Vec<usize>> = Vec::with_capacity(pages);
    let mut keys = Vec::with_capacity(pages);
    let mut chunks_stored = 0usize;
    conn.execute_batch("BEGIN")?;
    for p in 0..pages {
        let (doc_no, page_no) = (p / PAGES_PER_DOC, (p % PAGES_PER_DOC) as u32 + 1);
        if page_no == 1 {
            let sha = format!("bench-{doc_no}");
            store::insert_document(&mut conn, &sha, &sha, format!("/bench/{sha}.pdf"))?;
        }
        let doc_id = conn.query_row(
            "SELECT id FROM ip_documents WHERE sha256 = ?1",
            [format!("bench-{doc_no}")],
            |r| r.get::<_, i64>(0),
        )?;
        keys.push((doc_id, page_no));
        store::insert_page(
            &mut conn,
            &PageImage {
                doc_id,
                page_no,
                width: 1275,
                height: 1650,
                image_bytes: 0,
                image_path: "",
                tiles: 1,
            },
        )?;
        let words: Vec<usize> = (0..WORDS_PER_PAGE).map(|_| rng.word()).collect();
        let text = words.iter().map(|&w| word(w)).collect::<Vec<_>>().join(" ");
        let reading = Reading {
            text: text.clone(),
            ..Reading::default()
        };
        let chunks = chunk_text(&text, &chunking);
        store::store_page_text(&mut conn, doc_id, page_no, &reading, "bench", &chunks)?;
        let concept = (rng.next() as usize) % text_concepts.len();
        let ids: Vec<i64> = store::page_chunks(&mut conn, doc_id, page_no)?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let vectors: Vec<Vec<f32>> = ids
            .iter()
            .map(|_| noisy(&mut rng, &text_concepts[concept], 2.0))
            .collect();
        store::store_chunk_vectors(&mut conn, &ids, &vectors, "bench-text")?;
        chunks_stored += ids.len();
        let topics: Vec<usize> = (0..64)
            .map(|_| (rng.next() as usize) % visual_concepts.len())
            .collect();
        let mut data = Vec::with_capacity(per_page * VISUAL_DIM);
        for i in 0..per_page {
            data.extend(noisy(
                &mut rng,
                &visual_concepts[topics[i % topics.len()]],
                0.6,
            ));
        }
        let mv = MultiVector {
            dim: VISUAL_DIM,
            data,
        };
        store::store_page_vectors(&mut conn, doc_id, page_no, &mv, "bench-visual")?;
        page_words.push(words);
        page_text_concept.push(concept);
        page_visual.push(topics);
        if p % 1000 == 999 {
            conn.execute_batch("COMMIT; BEGIN")?;
        }
    }
    conn.execute_batch("COMMIT")?;
    let size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0);
    println!(
        "store: {pages} pages, {chunks_stored} chunks of {TEXT_DIM} dims, {per_page} visual \
         vectors of {VISUAL_DIM} a page; {:.2} GB; written in {:.0} s",
        size as f64 / 1e9,
        built.elapsed().as_secs_f64()
    );

    let embedder = Scripted {
        text: std::sync::Mutex::new(Vec::new()),
        visual: std::sync::Mutex::new(None),
    };
    let cache = VisualIndexCache::new();
    let text_index = TextVectorIndex::new();
    let load = Instant::now();
    text_index.sync(&mut conn)?;
    println!(
        "text-vector index built in {:.2} s",
        load.elapsed().as_secs_f64()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    let open = || rusqlite::Connection::open(&db).map_err(|e| SearchError::Task(e.to_string()));
    let modes: [(&str, Mode, bool); 5] = [
        ("text (FTS5)", Mode::Text, true),
        ("vector (chunk index)", Mode::Vector, true),
        ("visual (index in memory)", Mode::Visual, true),
        ("visual (index loaded)", Mode::Visual, false),
        ("hybrid (3 fused)", Mode::Hybrid, true),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut found = vec![0usize; modes.len()];
    // Warm: the first visual question loads the index into the cache.
    let load = Instant::now();
    let _ = cache.index(&mut conn, "bench-visual", VISUAL_DIM)?;
    println!(
        "visual index loaded into memory in {:.2} s",
        load.elapsed().as_secs_f64()
    );
    for q in 0..questions {
        let target = (rng.next() as usize) % pages;
        // A question of 3 words of the target page, rare ones first (as a person would type).
        let mut words = page_words[target].clone();
        words.sort_unstable_by(|a, b| b.cmp(a));
        words.dedup();
        let text = words
            .iter()
            .take(3)
            .map(|&w| word(w))
            .collect::<Vec<_>>()
            .join(" ");
        *embedder.text.lock().map_err(|_| "poisoned")? =
            noisy(&mut rng, &text_concepts[page_text_concept[target]], 0.5);
        let mut qv = Vec::with_capacity(32 * VISUAL_DIM);
        for i in 0..32 {
            let t = page_visual[target][(i * 7 + q) % 64];
            qv.extend(noisy(&mut rng, &visual_concepts[t], 0.6));
        }
        *embedder.visual.lock().map_err(|_| "poisoned")? = Some(MultiVector {
            dim: VISUAL_DIM,
            data: qv,
        });
        let query = Query {
            text,
            k: 10,
            document: None,
            collections: Default::default(),
            threads,
        };
        for (m, (_, mode, cached)) in modes.iter().enumerate() {
            // Loading the index per question costs seconds at this size: a few samples say it.
            if !cached && q >= UNCACHED_QUESTIONS {
                continue;
            }
            let fresh = VisualIndexCache::new();
            let use_cache = if *cached { &cache } else { &fresh };
            let t = Instant::now();
            let hits = rt.block_on(hybrid::search(
                open,
                &embedder,
                &embedder,
                use_cache,
                &text_index,
                *mode,
                &query,
            ))?;
            times[m].push(t.elapsed().as_secs_f64());
            if hits.iter().any(|h| (h.doc_id, h.page_no) == keys[target]) {
                found[m] += 1;
            }
        }
    }
    println!(
        "{questions} questions, k = 10, {threads} threads; found: the target page in the top 10"
    );
    for (m, (name, _, _)) in modes.iter().enumerate() {
        let t = &mut times[m];
        t.sort_by(f64::total_cmp);
        println!(
            "{name:<26} p50 {:>8.1} ms  p99 {:>8.1} ms  found {}/{}",
            percentile(t, 0.5) * 1e3,
            percentile(t, 0.99) * 1e3,
            found[m],
            t.len()
        );
    }
    Ok(())
}
