//! Ingest PDFs on the CPU and search them.
//!
//! ```text
//! cargo run -p ingest-pipeline --example ingest -- DB_DIR FILE.pdf... [--query TEXT]
//! ```
//! Reads pages with Tesseract (`scripts/setup_ocr.sh`). Text embeddings come from an
//! OpenAI-compatible server when `HOROS_EMBED_URL` is set (model name in `HOROS_EMBED_MODEL`,
//! default `minilm`; e.g. `scripts/start_llama.sh` serves MiniLM on http://127.0.0.1:18081),
//! else from the built-in hashing embedder. Running it twice on the same files does no work
//! the second time.

use std::time::Duration;

use ingest_pipeline::embed::{HashingEmbedder, PixelPatchFallback, TextEmbedder};
use ingest_pipeline::openai::OpenAiEmbedder;
use ingest_pipeline::pipeline::{Pipeline, PipelineConfig, Submission};
use ingest_pipeline::store;
use ingest_pipeline::vision::TesseractReader;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let query = args.iter().position(|a| a == "--query").map(|i| {
        let q = args.get(i + 1).cloned().unwrap_or_default();
        args.drain(i..(i + 2).min(args.len()));
        q
    });
    if args.len() < 2 {
        eprintln!("usage: ingest DB_DIR FILE.pdf... [--query TEXT]");
        std::process::exit(2);
    }
    let result = match std::env::var("HOROS_EMBED_URL") {
        Ok(url) => {
            let model = std::env::var("HOROS_EMBED_MODEL").unwrap_or_else(|_| "minilm".into());
            match OpenAiEmbedder::new(&url, &model) {
                Ok(e) => run(&args, query, e).await,
                Err(e) => Err(e.to_string()),
            }
        }
        Err(_) => run(&args, query, HashingEmbedder::default()).await,
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run<T: TextEmbedder + Clone>(
    args: &[String],
    query: Option<String>,
    text: T,
) -> Result<(), String> {
    let cfg = PipelineConfig::new(&args[0]);
    let pipeline = Pipeline::open(
        cfg,
        TesseractReader::default(),
        text.clone(),
        PixelPatchFallback::default(),
    )
    .map_err(|e| e.to_string())?;
    let running = pipeline.start();
    for file in &args[1..] {
        let sub = pipeline.submit(file).await.map_err(|e| e.to_string())?;
        let id = sub.document().id;
        if let Submission::Known(d) = &sub {
            println!(
                "{file}: already known (document {id}, {:?}): nothing to do",
                d.status
            );
            continue;
        }
        let doc = pipeline
            .wait_for(id, Duration::from_secs(3600))
            .await
            .map_err(|e| e.to_string())?;
        let report = pipeline.report(id).map_err(|e| e.to_string())?;
        println!(
            "{file}: {:?} {} pages, {} tiles, {} chunks, {} tables, {:.1} s wall, {:.1} s inference, cost {:.5}{}",
            doc.status,
            report.pages,
            report.tiles,
            report.chunks,
            report.tables,
            report.wall_seconds,
            report.inference_seconds,
            report.estimated_cost,
            doc.error.map(|e| format!(" ({e})")).unwrap_or_default()
        );
        for s in &report.stages {
            println!(
                "  {:16} {:4} jobs {:8.2} s ({:.2} s inference)",
                s.stage, s.jobs, s.seconds, s.inference_seconds
            );
        }
    }
    running.shutdown().await;
    if let Some(q) = query {
        let mut conn = pipeline.connection().map_err(|e| e.to_string())?;
        let words: Vec<String> = q
            .split_whitespace()
            .map(|w| format!("\"{}\"", w.replace('"', "")))
            .collect();
        for h in store::search_text(&mut conn, &words.join(" OR "), 3).map_err(|e| e.to_string())? {
            println!(
                "full-text  doc {} page {:3} score {:.3}  {}",
                h.doc_id,
                h.page_no,
                h.score,
                h.snippet.replace('\n', " ")
            );
        }
        let v = text
            .embed(vec![q.clone()])
            .await
            .map_err(|e| e.to_string())?;
        if let Some(v) = v.first() {
            for h in store::search_vectors(&mut conn, v, 3).map_err(|e| e.to_string())? {
                println!(
                    "vector     doc {} page {:3} score {:.3}  {}",
                    h.doc_id,
                    h.page_no,
                    h.score,
                    h.snippet.replace('\n', " ")
                );
            }
        }
    }
    Ok(())
}
