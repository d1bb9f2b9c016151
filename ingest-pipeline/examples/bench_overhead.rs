//! Pipeline overhead per page, OCR and inference excluded: queues (enqueue, claim, ack), fan-in,
//! SQLite writes (pages, FTS5, chunks, vectors), file I/O and task hand-offs across the five
//! stages. The reader and embedders answer at once (fixed text of 300 words, one 384-value text
//! vector per chunk, 16 visual vectors);
//! pages are small (100 × 100 pt) so rendering is negligible (its time is measured and shown).
//! Run: `cargo run --release -p ingest-pipeline --example bench_overhead [-- PAGES]`

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ingest_pipeline::embed::{EmbedError, TextEmbedder, VisualEmbedder};
use ingest_pipeline::maxsim::MultiVector;
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig};
use ingest_pipeline::render::{RenderConfig, encode_png, render_pages};
use ingest_pipeline::vision::{Reading, VisionError, VisionReader};

struct InstantReader(String);

impl VisionReader for InstantReader {
    fn name(&self) -> &str {
        "instant"
    }
    async fn read(&self, _png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        Ok(Reading {
            text: self.0.clone(),
            ..Reading::default()
        })
    }
}

struct InstantText;

impl TextEmbedder for InstantText {
    fn name(&self) -> &str {
        "instant"
    }
    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|_| vec![0.05; 384]).collect())
    }
}

struct InstantVisual;

impl VisualEmbedder for InstantVisual {
    fn name(&self) -> &str {
        "instant"
    }
    async fn embed_image(&self, _png: Arc<Vec<u8>>) -> Result<MultiVector, EmbedError> {
        Ok(MultiVector {
            dim: 128,
            data: vec![0.088; 16 * 128],
        })
    }
}

/// User + system CPU seconds of this process (Linux /proc; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn pdf(pages: usize) -> Vec<u8> {
    let mut out: Vec<u8> = b"%PDF-1.4\n".to_vec();
    let mut offsets = vec![0usize; 3 + 2 * pages + 1];
    let mut put = |out: &mut Vec<u8>, n: usize, body: String| {
        offsets[n] = out.len();
        out.extend_from_slice(format!("{n} 0 obj\n{body}\nendobj\n").as_bytes());
    };
    put(&mut out, 1, "<< /Type /Catalog /Pages 2 0 R >>".into());
    let kids: Vec<String> = (0..pages).map(|i| format!("{} 0 R", 4 + 2 * i)).collect();
    put(
        &mut out,
        2,
        format!(
            "<< /Type /Pages /Kids [{}] /Count {pages} >>",
            kids.join(" ")
        ),
    );
    put(
        &mut out,
        3,
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".into(),
    );
    for i in 0..pages {
        let page = 4 + 2 * i;
        put(
            &mut out,
            page,
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 100 100] /Resources << /Font << /F1 3 0 R >> >> /Contents {} 0 R >>",
                page + 1
            ),
        );
        let content = format!("BT /F1 12 Tf 10 50 Td (Page {}) Tj ET", i + 1);
        put(
            &mut out,
            page + 1,
            format!(
                "<< /Length {} >>\nstream\n{content}\nendstream",
                content.len()
            ),
        );
    }
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", offsets.len()).as_bytes());
    for o in &offsets[1..] {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            offsets.len()
        )
        .as_bytes(),
    );
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let pages: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return eprintln!("{e}"),
    };
    let data = pdf(pages);
    let path = dir.path().join("bench.pdf");
    if let Err(e) = std::fs::write(&path, &data) {
        return eprintln!("{e}");
    }
    // Rendering + PNG alone, for reference.
    let t = Instant::now();
    let r = render_pages(data, &RenderConfig::default(), 1, |p| {
        std::hint::black_box(encode_png(&p.image).map(|v| v.len()).unwrap_or(0));
        ControlFlow::Continue(())
    });
    let render_ms = t.elapsed().as_secs_f64() * 1000.0 / pages as f64;
    if let Err(e) = r {
        return eprintln!("{e}");
    }
    let text: String = (0..300).map(|i| format!("word{} ", i % 97)).collect();
    let mut cfg = PipelineConfig::new(dir.path());
    cfg.visibility = Duration::from_secs(60);
    if let Some(ms) = std::env::var("BENCH_LINGER_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        cfg.claim_linger = Duration::from_millis(ms);
    }
    let pipeline = match Pipeline::open(cfg, InstantReader(text), InstantText, InstantVisual) {
        Ok(p) => p,
        Err(e) => return eprintln!("{e}"),
    };
    let running = pipeline.start();
    let cpu0 = cpu_seconds();
    let t = Instant::now();
    let doc = match pipeline.submit(&path).await {
        Ok(s) => s.document().id,
        Err(e) => return eprintln!("{e}"),
    };
    let done = pipeline.wait_for(doc, Duration::from_secs(3600)).await;
    let wall = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    running.shutdown().await;
    if let Err(e) = done {
        return eprintln!("{e}");
    }
    let Ok(report) = pipeline.report(doc) else {
        return eprintln!("no report");
    };
    println!(
        "process CPU time (user + sys):             {:.3} ms/page",
        cpu * 1000.0 / pages as f64 - render_ms
    );
    let stage_ms: f64 = report
        .stages
        .iter()
        .map(|s| s.seconds - s.inference_seconds)
        .sum::<f64>()
        * 1000.0
        / pages as f64;
    let infer_ms = report.inference_seconds * 1000.0 / pages as f64;
    println!(
        "{pages} pages of 100x100 pt at 150 dpi, 2 runtime threads, default workers (2/8/4/2/2)"
    );
    println!("render + PNG alone:                       {render_ms:.3} ms/page");
    println!(
        "end to end wall time:                     {:.3} ms/page",
        wall * 1000.0 / pages as f64
    );
    println!(
        "wall time minus render + PNG:             {:.3} ms/page",
        wall * 1000.0 / pages as f64 - render_ms
    );
    println!(
        "job time summed over the 5 stages:        {stage_ms:.3} ms/page (inference excluded: {infer_ms:.3} ms/page)"
    );
    for s in &report.stages {
        println!(
            "  {:16} {:5} jobs {:8.3} ms/job",
            s.stage,
            s.jobs,
            (s.seconds - s.inference_seconds) * 1000.0 / s.jobs as f64
        );
    }
}
