//! Render + tile throughput at 150 dpi against hayro's own render + PNG, measured in the same run.
//! Run: `cargo run --release -p ingest-pipeline --example bench_render [-- PDF [DPI [REPEATS]]]`
//! (default PDF: the camlidl manual fetched by scripts/fetch_sample_pdfs.sh).
//!
//! - hayro: `hayro::render` (a fresh context per page) + `Pixmap::into_png`, as in hayro's example.
//! - pipeline: `render_pages` (one context reused) + RGB conversion + PNG (fast) + the tile grid,
//!   and, for "+ tiles", every 512×512 tile (120 px overlap) cropped and PNG-encoded as the
//!   read jobs of a tiled page do.

use std::ops::ControlFlow;
use std::time::Instant;

use hayro::hayro_interpret::InterpreterSettings;
use hayro::hayro_syntax::Pdf;
use hayro::vello_cpu::color::palette::css::WHITE;
use hayro::{PixmapSettings, RenderCache, RenderSettings, render};
use ingest_pipeline::render::{RenderConfig, encode_png, render_pages};
use ingest_pipeline::tiling::{TileConfig, cut_tiles, tile_grid};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let default = format!(
        "{}/.cache/horos-rs/sample-pdfs/manual.pdf",
        std::env::var("HOME").unwrap_or_else(|_| "/tmp".into())
    );
    let path = args.first().cloned().unwrap_or(default);
    let dpi: f32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(150.0);
    let repeats: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(3);
    let Ok(data) = std::fs::read(&path) else {
        eprintln!("cannot read {path}: run scripts/fetch_sample_pdfs.sh");
        std::process::exit(2);
    };
    let scale = dpi / 72.0;
    let mut best = [f64::MAX; 4];
    let mut pages = 0usize;
    for _ in 0..repeats {
        // hayro's own render + PNG.
        let t = Instant::now();
        let Ok(pdf) = Pdf::new(data.clone()) else {
            eprintln!("hayro cannot open {path}");
            std::process::exit(2);
        };
        let cache = RenderCache::new();
        let settings = InterpreterSettings::default();
        let pix = PixmapSettings {
            x_scale: scale,
            y_scale: scale,
            bg_color: WHITE,
        };
        let mut bytes = 0usize;
        for page in pdf.pages().iter() {
            let pm = render(page, &cache, &settings, &RenderSettings::default(), &pix);
            bytes += pm.into_png().map(|p| p.len()).unwrap_or(0);
        }
        pages = pdf.pages().len();
        best[0] = best[0].min(t.elapsed().as_secs_f64());
        std::hint::black_box(bytes);

        // Pipeline: render + PNG + tile grid (pages under the tiling threshold are not cut).
        for (slot, with_tiles) in [(1, false), (2, true)] {
            let t = Instant::now();
            let cfg = RenderConfig {
                dpi,
                ..RenderConfig::default()
            };
            let tiles_cfg = TileConfig::default();
            let mut bytes = 0usize;
            let r = render_pages(data.clone(), &cfg, 1, |p| {
                let png = encode_png(&p.image).unwrap_or_default();
                bytes += png.len();
                let grid = tile_grid(p.image.width(), p.image.height(), &tiles_cfg);
                if with_tiles {
                    bytes += cut_tiles(&p.image, &grid)
                        .map(|t| t.iter().map(Vec::len).sum())
                        .unwrap_or(0);
                }
                ControlFlow::Continue(())
            });
            if let Err(e) = r {
                eprintln!("{e}");
                std::process::exit(2);
            }
            best[slot] = best[slot].min(t.elapsed().as_secs_f64());
            std::hint::black_box(bytes);
        }
        // As the pipeline runs it: rendering on one thread, page PNG + tiles on another, with a
        // bounded hand-off of 2 pages (PipelineConfig::page_buffer).
        let t = Instant::now();
        let (tx, rx) = std::sync::mpsc::sync_channel::<image::RgbImage>(2);
        let encoder = std::thread::spawn(move || {
            let tiles_cfg = TileConfig::default();
            let mut bytes = 0usize;
            for img in rx {
                bytes += encode_png(&img).map(|p| p.len()).unwrap_or(0);
                let grid = tile_grid(img.width(), img.height(), &tiles_cfg);
                bytes += cut_tiles(&img, &grid)
                    .map(|t| t.iter().map(Vec::len).sum())
                    .unwrap_or(0);
            }
            bytes
        });
        let cfg = RenderConfig {
            dpi,
            ..RenderConfig::default()
        };
        let r = render_pages(data.clone(), &cfg, 1, |p| {
            if tx.send(p.image).is_err() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        drop(tx);
        let bytes = encoder.join().unwrap_or(0);
        if let Err(e) = r {
            eprintln!("{e}");
            std::process::exit(2);
        }
        best[3] = best[3].min(t.elapsed().as_secs_f64());
        std::hint::black_box(bytes);
    }
    let rate = |s: f64| pages as f64 / s;
    println!("{path}: {pages} pages at {dpi} dpi, best of {repeats}");
    println!(
        "hayro render + PNG:                {:7.1} pages/s",
        rate(best[0])
    );
    println!(
        "pipeline render + PNG + tile grid: {:7.1} pages/s  ({:+.1}% time vs hayro)",
        rate(best[1]),
        (best[1] / best[0] - 1.0) * 100.0
    );
    println!(
        "pipeline + every tile cut + PNG:   {:7.1} pages/s  ({:+.1}% time vs hayro)",
        rate(best[2]),
        (best[2] / best[0] - 1.0) * 100.0
    );
    println!(
        "  same, render and encoding threads: {:7.1} pages/s  ({:+.1}% time vs hayro)",
        rate(best[3]),
        (best[3] / best[0] - 1.0) * 100.0
    );
}
