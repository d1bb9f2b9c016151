//! MaxSim search throughput: 2,000 pages × 1,030 vectors × 128 dims (ColQwen2-sized), a query of
//! 32 vectors, on 1 and 2 threads. Run: `cargo run --release -p ingest-pipeline --example bench_maxsim`
//! (arguments: pages vectors_per_page query_vectors repeats).

use std::time::Instant;

use ingest_pipeline::maxsim::{MultiVector, MultiVectorIndex};

fn lcg(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
}

fn normalised(seed: &mut u64, n: usize, dim: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..n * dim).map(|_| lcg(seed)).collect();
    for row in v.chunks_exact_mut(dim) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let pages = args.first().copied().unwrap_or(2000);
    let per_page = args.get(1).copied().unwrap_or(1030);
    let nq = args.get(2).copied().unwrap_or(32);
    let repeats = args.get(3).copied().unwrap_or(5);
    let dim = 128;
    let mut seed = 42;
    let mut index = MultiVectorIndex::with_capacity(dim, pages, per_page);
    let page = normalised(&mut seed, per_page, dim);
    for p in 0..pages {
        // Distinct pages without 1 GB of generator time: rotate a base page and perturb one row.
        let mut v = page.clone();
        v.rotate_left((p * 7 % per_page) * dim);
        v[p % (per_page * dim)] += 0.5;
        if index.push(p, &v).is_err() {
            eprintln!("bad dimension");
            return;
        }
    }
    let query = MultiVector {
        dim,
        data: normalised(&mut seed, nq, dim),
    };
    println!(
        "index: {pages} pages x {per_page} vectors x {dim} dims = {:.2} GB f32; query {nq} vectors",
        (pages * per_page * dim * 4) as f64 / 1e9
    );
    println!("avx2+fma: {}", cfg!(target_arch = "x86_64") && std_detect());
    for threads in [1usize, 2] {
        let mut rates = Vec::new();
        for _ in 0..repeats {
            let t = Instant::now();
            let hits = index.search(&query, 10, threads).unwrap_or_default();
            let secs = t.elapsed().as_secs_f64();
            std::hint::black_box(hits);
            rates.push(pages as f64 / secs);
        }
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        let flops = median * (per_page * nq * dim * 2) as f64 / 1e9;
        println!(
            "threads {threads}: {median:.0} pages/s (median of {repeats}; best {:.0}), {flops:.1} GFLOP/s",
            rates[rates.len() - 1]
        );
    }
}

#[cfg(target_arch = "x86_64")]
fn std_detect() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(not(target_arch = "x86_64"))]
fn std_detect() -> bool {
    false
}
