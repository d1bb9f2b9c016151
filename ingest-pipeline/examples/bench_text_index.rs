//! The text-vector leg at scale: the full scan of the store (`store::search_vectors`, what every
//! question cost before) against the in-memory `TextVectorIndex` (exact scan, and inverted lists
//! at several probe counts), p50/p99 latency of a question and recall@10 against the exact
//! ranking, at each size in one run; with the index's build time and memory.
//!
//! Run: `BENCH_DIR=/tmp cargo run --release -p ingest-pipeline --example bench_text_index --
//! SIZES QUESTIONS OLD_QUESTIONS` (default `30000,100000,1000000 100 5`): MiniLM-shaped chunk
//! vectors (384 dims), 3 chunks a page, written straight into a SQLite store under `BENCH_DIR`
//! (default `.`; about 1.6 GB at a million chunks).
//!
//! Synthetic vectors with the shape of text embeddings: 1,000 topics, 16 sub-topics each, a
//! chunk a noisy copy of a sub-topic (cosine about 0.7 to it, 0.4 to the other chunks of its
//! sub-topic, about 0 to other topics'); a question is a fresh chunk of a random sub-topic.

use std::time::Instant;

use ingest_pipeline::maxsim::f32s_to_le_bytes;
use ingest_pipeline::store::{self, IndexSettings, PageHit, TextVectorIndex};

const DIM: usize = 384;
const TOPICS: usize = 1_000;
const SUBTOPICS: usize = 16;
const CHUNKS_PER_PAGE: usize = 3;
const PAGES_PER_DOC: usize = 100;

/// A search as the benchmark times it.
type Search<'a> =
    dyn Fn(&mut rusqlite::Connection, &[f32]) -> Result<Vec<PageHit>, store::StoreError> + 'a;

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
        (self.next() as f64 / (1u64 << 31) as f64) as f32 - 0.5
    }
}

fn unit(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
}

/// `base` plus uniform noise whose length is about `ratio` of its own, at unit length.
fn noisy(rng: &mut Rng, base: &[f32], ratio: f32) -> Vec<f32> {
    // A uniform(-0.5, 0.5) component has variance 1/12: scale so the noise's norm is `ratio`.
    let scale = ratio / (DIM as f32 / 12.0).sqrt();
    let mut v: Vec<f32> = base.iter().map(|c| c + scale * rng.uniform()).collect();
    unit(&mut v);
    v
}

struct Topics(Vec<Vec<f32>>);

impl Topics {
    fn new(rng: &mut Rng) -> Self {
        let mut subs = Vec::with_capacity(TOPICS * SUBTOPICS);
        for _ in 0..TOPICS {
            let mut t: Vec<f32> = (0..DIM).map(|_| rng.uniform()).collect();
            unit(&mut t);
            for _ in 0..SUBTOPICS {
                subs.push(noisy(rng, &t, 0.8));
            }
        }
        Self(subs)
    }
    fn chunk(&self, rng: &mut Rng) -> Vec<f32> {
        let s = (rng.next() as usize) % self.0.len();
        noisy(rng, &self.0[s], 1.0)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn keys(hits: &[PageHit]) -> Vec<(i64, u32, String)> {
    hits.iter()
        .map(|h| (h.doc_id, h.page_no, h.snippet.clone()))
        .collect()
}

/// Writes `n` chunks with vectors into a new store.
fn build_store(
    dir: &std::path::Path,
    n: usize,
    topics: &Topics,
    rng: &mut Rng,
) -> Result<rusqlite::Connection, Box<dyn std::error::Error>> {
    let mut conn = rusqlite::Connection::open(dir.join(format!("store-{n}.db")))?;
    store::migrate(&conn)?;
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF")?;
    let per_doc = PAGES_PER_DOC * CHUNKS_PER_PAGE;
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO ip_chunks (doc_id, page_no, chunk_index, token_start, token_end, text,
                 model, dim, vector) VALUES (?1, ?2, ?3, 0, 128, ?4, 'bench', ?5, ?6)",
        )?;
        let mut doc_id = 0i64;
        for i in 0..n {
            if i % per_doc == 0 {
                tx.execute(
                    "INSERT INTO ip_documents (sha256, title, path, status, created_at)
                     VALUES (?1, ?1, '/bench.pdf', 'done', 0)",
                    [format!("bench-{i}")],
                )?;
                doc_id = tx.last_insert_rowid();
            }
            let page = ((i % per_doc) / CHUNKS_PER_PAGE) as i64 + 1;
            let v = topics.chunk(rng);
            insert.execute(rusqlite::params![
                doc_id,
                page,
                (i % CHUNKS_PER_PAGE) as i64,
                format!("chunk {i}"),
                DIM as i64,
                f32s_to_le_bytes(&v)
            ])?;
        }
    }
    tx.commit()?;
    Ok(conn)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sizes: Vec<usize> = args
        .first()
        .map_or("30000,100000,1000000", String::as_str)
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (questions, old_questions) = (num(1, 100), num(2, 5));
    let dir = tempfile::tempdir_in(std::env::var_os("BENCH_DIR").unwrap_or_else(|| ".".into()))?;
    let mut rng = Rng(11);
    let topics = Topics::new(&mut rng);
    println!("| chunks | search | p50 ms | p99 ms | recall@10 |");
    println!("|---:|---|---:|---:|---:|");
    for &n in &sizes {
        let t = Instant::now();
        let mut conn = build_store(dir.path(), n, &topics, &mut rng)?;
        eprintln!("{n}: store written in {:.1} s", t.elapsed().as_secs_f64());
        let qs: Vec<Vec<f32>> = (0..questions).map(|_| topics.chunk(&mut rng)).collect();

        let rss = rss_mb();
        let t = Instant::now();
        let index = TextVectorIndex::with_settings(IndexSettings {
            ivf_min: usize::MAX,
            probes: 1,
            scan_min: 0,
            threads: 1,
        });
        index.sync(&mut conn)?;
        let exact_build = t.elapsed().as_secs_f64();
        let exact_mb = rss_mb() - rss;
        let t = Instant::now();
        let ivf = TextVectorIndex::with_settings(IndexSettings {
            ivf_min: 0,
            probes: 1,
            scan_min: 0,
            threads: 2,
        });
        ivf.sync(&mut conn)?;
        let ivf_build = t.elapsed().as_secs_f64();
        let lists = ivf.lists().first().map_or(0, |l| l.1);
        eprintln!(
            "{n}: exact index built in {exact_build:.1} s (+{exact_mb:.0} MB RSS); \
             inverted lists ({lists}) built in {ivf_build:.1} s"
        );

        // The exact ranking each search is compared with.
        let truth: Vec<Vec<(i64, u32, String)>> = qs
            .iter()
            .map(|q| index.search(&mut conn, q, 10).map(|h| keys(&h)))
            .collect::<Result<_, _>>()?;
        let mut run = |name: String,
                       search: &Search,
                       count: usize|
         -> Result<(), Box<dyn std::error::Error>> {
            let mut times = Vec::new();
            let mut found = 0usize;
            for (q, want) in qs.iter().zip(&truth).take(count) {
                let t = Instant::now();
                let hits = search(&mut conn, q)?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
                found += keys(&hits).iter().filter(|h| want.contains(h)).count();
            }
            times.sort_by(f64::total_cmp);
            println!(
                "| {n} | {name} | {:.2} | {:.2} | {:.3} |",
                percentile(&times, 0.5),
                percentile(&times, 0.99),
                found as f64 / (10 * times.len()).max(1) as f64
            );
            Ok(())
        };
        run(
            "store full scan (before)".into(),
            &|c, q| store::search_vectors(c, q, 10),
            old_questions,
        )?;
        run(
            "index, exact, 1 thread".into(),
            &|c, q| index.search(c, q, 10),
            questions,
        )?;
        let two = index.with_threads(2);
        run(
            "index, exact, 2 threads".into(),
            &|c, q| two.search(c, q, 10),
            questions,
        )?;
        let default = IndexSettings::default();
        let p = ivf.with_scan(default.probes, default.scan_min);
        run(
            format!(
                "index, {lists} lists, the default scan ({} probes, at least {} rows), 2 threads",
                default.probes, default.scan_min
            ),
            &|c, q| p.search(c, q, 10),
            questions,
        )?;
        for probes in [8, 16, 32, 64, 128] {
            let p = ivf.with_scan(probes, 0);
            run(
                format!("index, {lists} lists, {probes} probes, 2 threads"),
                &|c, q| p.search(c, q, 10),
                questions,
            )?;
        }
        drop((index, ivf, two));
        drop(conn);
        let _ = std::fs::remove_file(dir.path().join(format!("store-{n}.db")));
    }
    Ok(())
}
