//! The scalable visual index (`visual_index::CentroidIndex`) at 10k / 100k / 1M pages: build time,
//! memory per page, latency p50/p99 of a question (centroid stages + exact MaxSim rerank of the
//! candidates read from disk), and recall@10 against exact MaxSim over every page's full
//! vectors (the answer of a full scan), and against exact MaxSim over the pooled vectors.
//!
//! Run: `BENCH_DIR=/tmp cargo run --release -p ingest-pipeline --example bench_visual_index --
//! PAGES VECTORS QUERY_VECTORS QUERIES THREADS POOL [CENTROIDS] [PROBES,SHORTLIST,CANDIDATES]
//! [no-recall]` (e.g. `100000 700 32 20 2 3`). The pooled vectors of every page are written as
//! half floats to a file under `BENCH_DIR` (what the store keeps); the rerank reads its
//! candidates from it, as the store's rerank reads its rows. `no-recall` skips the exact scans.
//!
//! Data as in `bench_visual`: 4,096 "concept" directions; a page covers 64, each of its vectors a
//! concept plus noise; a question is 32 noisy concepts of one target page. Each page is made from
//! its own seed, so the exact scans regenerate the pages rather than hold them.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use ingest_pipeline::maxsim::{MultiVector, PreparedQuery};
use ingest_pipeline::quant::{f16_bytes_into, from_f16_bytes, to_f16_bytes};
use ingest_pipeline::visual_index::{
    CentroidIndex, CentroidSettings, auto_centroids, pool_tokens, training_sample,
};

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

fn noisy(rng: &mut Rng, concept: &[f32], noise: f32, out: &mut Vec<f32>) {
    let start = out.len();
    out.extend(concept.iter().map(|c| c + noise * rng.uniform()));
    normalise(&mut out[start..]);
}

/// Page `p`: its 64 concepts and its vectors, from its own seed.
fn page(p: usize, per_page: usize, concepts: &[f32]) -> (Vec<usize>, Vec<f32>) {
    let mut rng = Rng(1_000_003 * (p as u64 + 1));
    let own: Vec<usize> = (0..64).map(|_| rng.next() as usize % CONCEPTS).collect();
    let mut out = Vec::with_capacity(per_page * DIM);
    for _ in 0..per_page {
        let c = own[rng.next() as usize % own.len()];
        noisy(&mut rng, &concepts[c * DIM..(c + 1) * DIM], 0.15, &mut out);
    }
    (own, out)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The best `k` of `scores` (page, score), best first.
fn top(scores: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_unstable_by(|a, b| scores[*b].total_cmp(&scores[*a]));
    idx.truncate(k);
    idx
}

fn recall(got: &[usize], want: &[usize]) -> f64 {
    got.iter().filter(|g| want.contains(g)).count() as f64 / want.len().max(1) as f64
}

/// Runs `work(range)` over `0..n` on `threads` threads, results in order.
fn parallel<T: Send>(
    n: usize,
    threads: usize,
    work: impl Fn(std::ops::Range<usize>) -> Vec<T> + Sync,
) -> Vec<T> {
    let per = n.div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .step_by(per)
            .map(|start| {
                let work = &work;
                s.spawn(move || work(start..(start + per).min(n)))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (pages, per_page, nq, queries, threads, factor) = (
        num(0, 10_000),
        num(1, 700),
        num(2, 32),
        num(3, 20),
        num(4, 2),
        num(5, 3),
    );
    // The codebook's size: as given, else what the store would choose for the collection.
    let stored = pages * per_page.div_ceil(factor.max(1));
    let settings = CentroidSettings {
        centroids: match num(6, 0) {
            0 => auto_centroids(stored),
            c => c,
        },
        ..CentroidSettings::default()
    };
    // Search settings to compare on the same index: `PROBES,SHORTLIST,CANDIDATES[;...]`.
    let searches: Vec<CentroidSettings> = args
        .get(7)
        .map_or("4,2000,64", String::as_str)
        .split(';')
        .filter_map(|one| {
            let v: Vec<usize> = one.split(',').filter_map(|x| x.parse().ok()).collect();
            match v[..] {
                [probes, shortlist, candidates] => Some(CentroidSettings {
                    probes,
                    shortlist,
                    candidates,
                    ..settings
                }),
                _ => None,
            }
        })
        .collect();
    let with_recall = !args.iter().any(|a| a == "no-recall");
    let dir = std::env::var_os("BENCH_DIR").unwrap_or_else(|| ".".into());
    let Ok(dir) = tempfile::tempdir_in(dir) else {
        eprintln!("cannot create a directory under BENCH_DIR");
        return;
    };
    let mut rng = Rng(42);
    let mut concepts = Vec::with_capacity(CONCEPTS * DIM);
    for _ in 0..CONCEPTS {
        let start = concepts.len();
        concepts.extend((0..DIM).map(|_| rng.uniform()));
        normalise(&mut concepts[start..]);
    }
    let concepts = &concepts;
    let pooled_of = |p: usize| pool_tokens(&page(p, per_page, concepts).1, DIM, factor, 2);

    // Training: the pooled vectors of the first pages (64 vectors a centroid, at least 100,000).
    let started = Instant::now();
    let sample_vectors = training_sample(settings.centroids);
    let sample_pages = (sample_vectors * factor.max(1) / per_page.max(1)).clamp(1, pages);
    let sample: Vec<f32> = parallel(sample_pages, threads, |r| {
        r.flat_map(pooled_of).collect::<Vec<f32>>()
    });
    let Ok(mut index) = CentroidIndex::<u32>::train(DIM, &sample, settings) else {
        eprintln!("cannot train");
        return;
    };
    let trained = started.elapsed().as_secs_f64();
    drop(sample);

    // Every page pooled, placed and written (in batches, placed on all threads).
    let path = dir.path().join("pooled.f16");
    let Ok(file) = std::fs::File::create(&path) else {
        eprintln!("cannot create {}", path.display());
        return;
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 22, file);
    let mut spans: Vec<(u64, u32)> = Vec::with_capacity(pages);
    let mut at = 0u64;
    let mut stored_vectors = 0usize;
    for batch in (0..pages).step_by(2_000) {
        let end = (batch + 2_000).min(pages);
        let index_ref = &index;
        let done: Vec<(Vec<u8>, Vec<u32>)> = parallel(end - batch, threads, |r| {
            r.map(|i| {
                let pooled = pooled_of(batch + i);
                let cells = index_ref.place_page(&pooled).unwrap_or_default();
                (to_f16_bytes(&pooled), cells)
            })
            .collect()
        });
        for (i, (bytes, cells)) in done.into_iter().enumerate() {
            if out.write_all(&bytes).is_err() {
                eprintln!("cannot write the pooled vectors");
                return;
            }
            stored_vectors += bytes.len() / 2 / DIM;
            spans.push((at, bytes.len() as u32));
            at += bytes.len() as u64;
            index.insert_placed((batch + i) as u32, cells);
        }
    }
    if out.flush().is_err() {
        eprintln!("cannot write the pooled vectors");
        return;
    }
    drop(out);
    let built = started.elapsed().as_secs_f64();
    let Ok(file) = std::fs::File::open(&path) else {
        return;
    };
    println!(
        "{pages} pages x {per_page} vectors x {DIM} dims, pooled by {factor} to {:.1} vectors a page; \
         {} centroids (trained in {trained:.1} s on {sample_pages} pages); built in {built:.1} s; \
         index {:.0} bytes a page in memory ({:.1} MB); pooled half floats {:.1} KB a page on disk \
         ({:.2} GB); {threads} threads",
        stored_vectors as f64 / pages as f64,
        index.centroid_count(),
        index.memory_bytes() as f64 / pages as f64,
        index.memory_bytes() as f64 / 1e6,
        at as f64 / pages as f64 / 1e3,
        at as f64 / 1e9,
    );

    // The questions.
    let qs: Vec<MultiVector> = (0..queries)
        .map(|qn| {
            let target = (qn * 7919 + 13) % pages;
            let own = page(target, per_page, concepts).0;
            let mut data = Vec::with_capacity(nq * DIM);
            for i in 0..nq {
                let c = own[(i * 5 + qn) % 64];
                noisy(&mut rng, &concepts[c * DIM..(c + 1) * DIM], 0.3, &mut data);
            }
            MultiVector { dim: DIM, data }
        })
        .collect();
    let read = |k: u32| -> Option<Vec<f32>> {
        let (off, len) = spans.get(k as usize)?;
        let mut buf = vec![0u8; *len as usize];
        file.read_exact_at(&mut buf, *off).ok()?;
        from_f16_bytes(&buf)
    };
    // What the store's rerank does: the row's bytes read, decoded into the buffer given.
    let mut bytes = Vec::new();
    let mut read_into = |k: u32, out: &mut Vec<f32>| -> bool {
        let Some((off, len)) = spans.get(k as usize) else {
            return false;
        };
        bytes.resize(*len as usize, 0);
        file.read_exact_at(&mut bytes, *off).is_ok() && f16_bytes_into(&bytes, out)
    };
    let mut runs: Vec<(CentroidSettings, Vec<Vec<usize>>)> = Vec::new();
    for search in &searches {
        index = index.with_settings(*search);
        let (mut secs, mut approx_secs, mut found) = (Vec::new(), Vec::new(), Vec::new());
        for q in &qs {
            let t = Instant::now();
            let _ = index.search_approximate(q, 10, threads);
            approx_secs.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let hits = index
                .search(q, 10, threads, &mut read_into)
                .unwrap_or_default();
            secs.push(t.elapsed().as_secs_f64());
            found.push(hits.iter().map(|h| h.key as usize).collect::<Vec<_>>());
        }
        secs.sort_by(f64::total_cmp);
        approx_secs.sort_by(f64::total_cmp);
        println!(
            "probes {} shortlist {} candidates {}: question p50 {:.1} ms  p99 {:.1} ms  \
             (centroid stages alone: p50 {:.1} ms)",
            search.probes,
            search.shortlist,
            search.candidates,
            percentile(&secs, 0.5) * 1e3,
            percentile(&secs, 0.99) * 1e3,
            percentile(&approx_secs, 0.5) * 1e3,
        );
        runs.push((*search, found));
    }
    if !with_recall {
        return;
    }
    // Exact MaxSim of every page for every question: full vectors (regenerated) and pooled ones
    // (read back).
    let t = Instant::now();
    let prepared: Vec<PreparedQuery<'_>> = qs
        .iter()
        .map(|q| PreparedQuery::new(&q.data, DIM))
        .collect();
    let scores: Vec<(Vec<f32>, Vec<f32>)> = parallel(pages, threads, |r| {
        let mut scratch = Vec::new();
        r.map(|p| {
            let full = page(p, per_page, concepts).1;
            let pooled = read(p as u32).unwrap_or_default();
            (
                prepared
                    .iter()
                    .map(|q| q.score(&full, &mut scratch))
                    .collect(),
                prepared
                    .iter()
                    .map(|q| q.score(&pooled, &mut scratch))
                    .collect(),
            )
        })
        .collect()
    });
    let n = qs.len().max(1) as f64;
    let want: Vec<(Vec<usize>, Vec<usize>)> = (0..qs.len())
        .map(|qi| {
            let full: Vec<f32> = scores.iter().map(|s| s.0[qi]).collect();
            let pooled: Vec<f32> = scores.iter().map(|s| s.1[qi]).collect();
            (top(&full, 10), top(&pooled, 10))
        })
        .collect();
    let pooled_vs_full: f64 = want.iter().map(|(f, p)| recall(p, f)).sum::<f64>() / n;
    println!(
        "exact scans {:.0} s; a full scan of the pooled vectors: recall@10 {pooled_vs_full:.3} \
         against exact MaxSim over the full vectors",
        t.elapsed().as_secs_f64()
    );
    for (search, found) in &runs {
        let (mut vs_full, mut vs_pooled) = (0.0, 0.0);
        for (got, (full, pooled)) in found.iter().zip(&want) {
            vs_full += recall(got, full);
            vs_pooled += recall(got, pooled);
        }
        println!(
            "probes {} shortlist {} candidates {}: recall@10 {:.3} against exact MaxSim over the \
             full vectors, {:.3} against exact MaxSim over the pooled vectors",
            search.probes,
            search.shortlist,
            search.candidates,
            vs_full / n,
            vs_pooled / n,
        );
    }
}
