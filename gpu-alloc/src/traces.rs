//! Shipped job traces for the simulator and the deterministic RNG that generates them.
//!
//! Sizes follow the reference deployment of
//! [`Catalogue::default`](crate::catalogue::Catalogue) (four GPUs; Think ~60 tok/s, Fast
//! ~140 tok/s, Vision ~3 pages/s, Embed ~1000 docs/s): a think job is 800–2600 generated tokens
//! (~28 s of GPU time), a fast job 200–800 tokens (~3.6 s), a vision job one page
//! (0.33 s; pages of a document arrive together), an embed job one document of 500–3000
//! chunks (~1.75 s).

use crate::simulator::{Job, Trace};

/// xorshift64* — a small deterministic generator (no external RNG crate).
#[derive(Debug, Clone)]
pub struct XorShift64 {
    state: u64,
}

impl XorShift64 {
    /// A generator from a seed (0 is replaced by a fixed non-zero constant).
    pub fn new(seed: u64) -> Self {
        Self {
            state: if seed == 0 {
                0x9E37_79B9_7F4A_7C15
            } else {
                seed
            },
        }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Exponential with the given mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.next_f64()).ln()
    }
}

fn job(t: f64, class: &str, size: f64) -> Job {
    Job {
        arrival_s: t,
        class: class.to_owned(),
        size,
    }
}

/// Poisson arrivals of single jobs in `[start, end)`.
fn stream(
    rng: &mut XorShift64,
    out: &mut Vec<Job>,
    class: &str,
    mean_gap_s: f64,
    start: f64,
    end: f64,
    size: (f64, f64),
) {
    let mut t = start + rng.exp(mean_gap_s);
    while t < end {
        out.push(job(t, class, rng.uniform(size.0, size.1).round()));
        t += rng.exp(mean_gap_s);
    }
}

/// Poisson arrivals of documents whose pages all arrive at once.
fn documents(
    rng: &mut XorShift64,
    out: &mut Vec<Job>,
    mean_gap_s: f64,
    start: f64,
    end: f64,
    pages: (f64, f64),
) {
    let mut t = start + rng.exp(mean_gap_s);
    while t < end {
        let n = rng.uniform(pages.0, pages.1).round() as usize;
        out.extend((0..n).map(|_| job(t, "vision", 1.0)));
        t += rng.exp(mean_gap_s);
    }
}

const THINK: (f64, f64) = (800.0, 2600.0);
const FAST: (f64, f64) = (200.0, 800.0);
const EMBED: (f64, f64) = (500.0, 3000.0);
const HOURS3: f64 = 3.0 * 3600.0;

fn finish(name: &str, description: &str, mut jobs: Vec<Job>) -> Trace {
    jobs.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    Trace {
        name: name.to_owned(),
        description: description.to_owned(),
        jobs,
    }
}

/// Three hours of a steady, uneven mix: Think needs ~1.5 GPUs, Vision ~0.9, Fast ~0.3,
/// Embed ~0.15 (about 70 % of four GPUs, pauses included) — more think than one GPU can do.
pub fn steady_mix(seed: u64) -> Trace {
    let mut rng = XorShift64::new(seed);
    let mut jobs = Vec::new();
    stream(&mut rng, &mut jobs, "think", 19.7, 0.0, HOURS3, THINK);
    stream(&mut rng, &mut jobs, "fast", 14.0, 0.0, HOURS3, FAST);
    stream(&mut rng, &mut jobs, "embed", 15.8, 0.0, HOURS3, EMBED);
    documents(&mut rng, &mut jobs, 64.0, 0.0, HOURS3, (10.0, 110.0));
    finish(
        "steady-mix",
        "3 h steady mix: think ~1.5 GPU, vision ~0.9, fast ~0.3, embed ~0.15",
        jobs,
    )
}

/// Three hours of bursty vision: every 30 minutes 3–6 documents of 100–600 pages arrive
/// together; a trickle of think jobs (one every ~150 s) runs throughout.
pub fn bursty_vision(seed: u64) -> Trace {
    let mut rng = XorShift64::new(seed);
    let mut jobs = Vec::new();
    stream(&mut rng, &mut jobs, "think", 150.0, 0.0, HOURS3, THINK);
    let mut t = 60.0;
    while t < HOURS3 {
        let docs = rng.uniform(3.0, 7.0).floor() as usize;
        for _ in 0..docs {
            let at = t + rng.uniform(0.0, 60.0);
            let n = rng.uniform(100.0, 600.0).round() as usize;
            jobs.extend((0..n).map(|_| job(at, "vision", 1.0)));
        }
        t += 1800.0;
    }
    finish(
        "bursty-vision",
        "3 h: vision bursts (3-6 docs x 100-600 pages every 30 min) + think trickle",
        jobs,
    )
}

/// A phase change: 90 minutes think-heavy (think ~2.4 GPUs, vision ~0.4), then 90 minutes
/// vision-heavy (vision ~2.4, think ~0.3); fast ~0.3 and embed ~0.1 throughout.
pub fn phase_change(seed: u64) -> Trace {
    let mut rng = XorShift64::new(seed);
    let mut jobs = Vec::new();
    let half = HOURS3 / 2.0;
    stream(&mut rng, &mut jobs, "think", 12.3, 0.0, half, THINK);
    documents(&mut rng, &mut jobs, 144.0, 0.0, half, (10.0, 110.0));
    stream(&mut rng, &mut jobs, "think", 98.0, half, HOURS3, THINK);
    documents(&mut rng, &mut jobs, 24.0, half, HOURS3, (10.0, 110.0));
    stream(&mut rng, &mut jobs, "fast", 14.0, 0.0, HOURS3, FAST);
    stream(&mut rng, &mut jobs, "embed", 23.7, 0.0, HOURS3, EMBED);
    finish(
        "phase-change",
        "90 min think-heavy then 90 min vision-heavy; fast and embed throughout",
        jobs,
    )
}

/// The shipped traces, generated with fixed seeds.
pub fn shipped() -> Vec<Trace> {
    vec![
        steady_mix(0x5EED_0001),
        bursty_vision(0x5EED_0002),
        phase_change(0x5EED_0003),
    ]
}
