//! Visual (late-interaction) search at scale: latency p50/p99 and pages/s of MaxSim over the int8
//! index, with and without exact reranking from half floats, against exact `f32` MaxSim on the
//! same run, and recall@10 of each against exact MaxSim.
//!
//! Run: `cargo run --release -p ingest-pipeline --example bench_visual -- PAGES VECTORS QUERY_VECTORS
//! QUERIES THREADS [exact|no-exact]` (default `10000 700 32 40 2 exact`: ColQwen2-shaped pages, 700
//! vectors of 128 values; `no-exact` skips the `f32` copy, for shapes too large to hold twice).
//! A 7th argument `store` also writes the pages to a SQLite store (in a temporary directory)
//! and times what `store::search_visual` does per question: load the int8 rows, scan, rerank
//! from the half floats.
//!
//! Synthetic but structured data: 4,096 "concept" directions; each page vector is a concept plus
//! noise, normalised; a query is noisy concepts of one target page (its top pages are then
//! graded, with near ties, like a real model's). Pure random vectors would make every page score
//! alike and recall meaningless.

use std::time::Instant;

use ingest_pipeline::maxsim::{MultiVector, MultiVectorIndex};
use ingest_pipeline::maxsim_int8::Int8Index;
use ingest_pipeline::quant::{from_f16_bytes, to_f16_bytes};
use ingest_pipeline::store;

const DIM: usize = 128;
const CONCEPTS: usize = 4096;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn uniform(&mut self) -> f32 {
        (self.next() as f32 / (1u64 << 31) as f32) - 0.5
    }
}

fn normalise(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
}

/// A noisy copy of a concept, normalised, appended to `out`.
fn noisy(rng: &mut Rng, concept: &[f32], noise: f32, out: &mut Vec<f32>) {
    let start = out.len();
    out.extend(concept.iter().map(|c| c + noise * rng.uniform()));
    normalise(&mut out[start..]);
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn recall(got: &[usize], want: &[usize]) -> f64 {
    got.iter().filter(|g| want.contains(g)).count() as f64 / want.len().max(1) as f64
}

struct Timing {
    name: &'static str,
    secs: Vec<f64>,
    recall: Vec<f64>,
}

impl Timing {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            secs: Vec::new(),
            recall: Vec::new(),
        }
    }
    fn report(&mut self, pages: usize, base_p50: Option<f64>) {
        if self.secs.is_empty() {
            return;
        }
        self.secs.sort_by(f64::total_cmp);
        let (p50, p99) = (percentile(&self.secs, 0.5), percentile(&self.secs, 0.99));
        let recall = if self.recall.is_empty() {
            "n/a".to_owned()
        } else {
            format!(
                "{:.3}",
                self.recall.iter().sum::<f64>() / self.recall.len() as f64
            )
        };
        let ratio = base_p50.map_or(String::new(), |b| format!(", {:.2}x exact f32", b / p50));
        println!(
            "{:<28} p50 {:>8.1} ms  p99 {:>8.1} ms  {:>8.0} pages/s  recall@10 {recall}{ratio}",
            self.name,
            p50 * 1e3,
            p99 * 1e3,
            pages as f64 / p50
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (pages, per_page, nq, queries, threads) = (
        num(0, 10_000),
        num(1, 700),
        num(2, 32),
        num(3, 40),
        num(4, 2),
    );
    let with_exact = args.get(5).map(String::as_str) != Some("no-exact");
    let with_store = args.get(6).map(String::as_str) == Some("store");
    let store_dir =
        tempfile::tempdir_in(std::env::var_os("BENCH_DIR").unwrap_or_else(|| ".".into()));
    let mut conn = match (&store_dir, with_store) {
        (Ok(d), true) => {
            let conn = rusqlite::Connection::open(d.path().join("store.db")).ok();
            if let Some(c) = &conn
                && (store::migrate(c).is_err() || c.execute_batch("BEGIN").is_err())
            {
                eprintln!("cannot create the store");
                return;
            }
            conn
        }
        _ => None,
    };
    let mut rng = Rng(42);
    let mut concepts = Vec::with_capacity(CONCEPTS * DIM);
    for _ in 0..CONCEPTS {
        let start = concepts.len();
        concepts.extend((0..DIM).map(|_| rng.uniform()));
        normalise(&mut concepts[start..]);
    }
    let concept = |i: usize| &concepts[i * DIM..(i + 1) * DIM];

    let built = Instant::now();
    let mut int8 = Int8Index::with_capacity(DIM, pages, per_page);
    let mut exact =
        MultiVectorIndex::with_capacity(DIM, if with_exact { pages } else { 0 }, per_page);
    let mut f16_pages: Vec<Vec<u8>> = Vec::with_capacity(if with_exact { pages } else { 0 });
    let mut page_concepts: Vec<Vec<usize>> = Vec::with_capacity(pages);
    let mut page = Vec::with_capacity(per_page * DIM);
    for p in 0..pages {
        page.clear();
        // A page covers ~64 concepts, each seen by several patches.
        let own: Vec<usize> = (0..64).map(|_| rng.next() as usize % CONCEPTS).collect();
        for _ in 0..per_page {
            let c = own[rng.next() as usize % own.len()];
            noisy(&mut rng, concept(c), 0.15, &mut page);
        }
        if int8.push(p, &page).is_err() {
            eprintln!("bad dimension");
            return;
        }
        if with_exact {
            let _ = exact.push(p, &page);
            f16_pages.push(to_f16_bytes(&page));
        }
        page_concepts.push(own);
        if let Some(c) = &mut conn {
            // One document per 100 pages.
            let doc = (p / 100) as i64 + 1;
            if p % 100 == 0 {
                let _ = store::insert_document(c, &format!("{doc}"), "bench", "/bench.pdf");
            }
            let mv = MultiVector {
                dim: DIM,
                data: page.clone(),
            };
            if store::store_page_vectors(c, doc, (p % 100) as u32 + 1, &mv, "bench").is_err() {
                eprintln!("cannot store page {p}");
                return;
            }
        }
    }
    if let Some(c) = &conn {
        let _ = c.execute_batch("COMMIT");
    }
    println!(
        "{pages} pages x {per_page} vectors x {DIM} dims, query {nq} vectors, {queries} queries, \
         {threads} threads; built in {:.1} s; int8 index {:.2} GB (f32 would be {:.2} GB)",
        built.elapsed().as_secs_f64(),
        int8.vector_bytes() as f64 / 1e9,
        (pages * per_page * DIM * 4) as f64 / 1e9
    );

    let mut t_exact = Timing::new("exact f32 MaxSim");
    let mut t_int8 = Timing::new("int8 MaxSim");
    let mut t_rerank = Timing::new("int8 + f16 rerank of 100");
    for qn in 0..queries {
        let target = (qn * 7919) % pages;
        let mut data = Vec::with_capacity(nq * DIM);
        for i in 0..nq {
            let c = page_concepts[target][(i * 5 + qn) % 64];
            noisy(&mut rng, concept(c), 0.3, &mut data);
        }
        let query = MultiVector { dim: DIM, data };
        let want: Option<Vec<usize>> = with_exact.then(|| {
            let t = Instant::now();
            let hits = exact.search(&query, 10, threads).unwrap_or_default();
            t_exact.secs.push(t.elapsed().as_secs_f64());
            hits.iter().map(|h| h.key).collect()
        });
        let t = Instant::now();
        let hits = int8.search(&query, 10, threads).unwrap_or_default();
        t_int8.secs.push(t.elapsed().as_secs_f64());
        let got: Vec<usize> = hits.iter().map(|h| h.key).collect();
        if let Some(want) = &want {
            t_int8.recall.push(recall(&got, want));
            let t = Instant::now();
            let hits = int8
                .search_reranked(&query, 10, 100, threads, |k| from_f16_bytes(&f16_pages[k]))
                .unwrap_or_default();
            t_rerank.secs.push(t.elapsed().as_secs_f64());
            let got: Vec<usize> = hits.iter().map(|h| h.key).collect();
            t_rerank.recall.push(recall(&got, want));
        }
    }
    t_exact.report(pages, None);
    let base = (!t_exact.secs.is_empty()).then(|| percentile(&t_exact.secs, 0.5));
    t_int8.report(pages, base);
    t_rerank.report(pages, base);
    if let (Some(c), Ok(d)) = (&mut conn, &store_dir) {
        store_timings(
            c,
            &d.path().join("store.db"),
            pages,
            &page_concepts,
            &concepts,
            threads,
        );
    }
}

/// What a question costs through the store: the int8 rows loaded from SQLite, then scanned and
/// reranked (`store::search_visual`, which loads the index for every call).
fn store_timings(
    conn: &mut rusqlite::Connection,
    path: &std::path::Path,
    pages: usize,
    page_concepts: &[Vec<usize>],
    concepts: &[f32],
    threads: usize,
) {
    let bytes = std::fs::metadata(path).map_or(0, |m| m.len());
    println!(
        "store: {:.2} GB on disk, {:.0} KB a page (f16 + int8 rows)",
        bytes as f64 / 1e9,
        bytes as f64 / pages as f64 / 1e3
    );
    let t = Instant::now();
    let loaded = store::load_int8_index(conn, "bench", DIM, None).map_or(0, |i| i.len());
    println!(
        "store: load_int8_index of {loaded} pages {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let mut rng = Rng(7);
    let mut secs = Vec::new();
    for qn in 0..5 {
        let mut data = Vec::new();
        for i in 0..32 {
            let c = page_concepts[(qn * 7919) % pages][i % 64];
            noisy(&mut rng, &concepts[c * DIM..(c + 1) * DIM], 0.3, &mut data);
        }
        let q = MultiVector { dim: DIM, data };
        let t = Instant::now();
        let _ = store::search_visual(conn, "bench", &q, 10, None, threads);
        secs.push(t.elapsed().as_secs_f64());
    }
    secs.sort_by(f64::total_cmp);
    println!(
        "store: search_visual (load + scan + rerank) p50 {:.2} s over 5 questions",
        percentile(&secs, 0.5)
    );
}
