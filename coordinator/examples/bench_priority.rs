//! Scheduling under saturation, the reason a coordinator exists: an upstream with 4 slots that
//! answers in 100 ms, 64 low-priority clients keeping it saturated, and one high-priority client
//! sending a request a second. Prints the high-priority requests' wait before they reached the
//! upstream (their latency minus that of the same request on the idle system), and the
//! spread of the low-priority clients' throughput (none starved).
//!
//! ```text
//! cargo run --release -p horos-coordinator --example bench_priority [-- --seconds N]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use horos_coordinator::{Coordinator, CoordinatorConfig, StaticUpstream};
use horos_fakeai::{FakeConfig, FakeServer};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

type HttpClient = Client<HttpConnector, Full<Bytes>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

const SERVICE: Duration = Duration::from_millis(100);
const SLOTS: usize = 4;
const LOW_CLIENTS: usize = 64;

fn body(priority: i32, client: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"max_tokens":4,"x_priority":{priority},"x_client_id":"{client}","x_timeout_s":600}}"#
    ))
}

async fn one(c: &HttpClient, url: &str, body: Bytes) -> Result<Duration, BoxError> {
    let t = Instant::now();
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(body))?;
    let resp = c.request(req).await?;
    let ok = resp.status().is_success();
    resp.into_body().collect().await?;
    if !ok {
        return Err("a request failed".into());
    }
    Ok(t.elapsed())
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    let seconds: u64 = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let up = FakeServer::start(FakeConfig {
        slots: SLOTS,
        latency: SERVICE,
        ..FakeConfig::default()
    })
    .await?;
    // The coordinator sends the upstream what it can take: its queue, not the upstream's, orders
    // the waiting requests.
    let cfg = CoordinatorConfig {
        per_model_concurrency: SLOTS,
        ..CoordinatorConfig::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let coord = Coordinator::start(
        cfg,
        Arc::new(StaticUpstream::new().with("m", up.url())),
        listener,
    )
    .await?;
    let url = format!("{}/v1/chat/completions", coord.url());
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    let http: HttpClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .build(c);

    // A request's time when nothing waits: the upstream's 100 ms plus the hops. A loaded
    // request's wait before the upstream is its time beyond this.
    let hb = body(0, "high");
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(one(&http, &url, hb.clone()).await?);
    }
    idle.sort();
    let base = pct(&idle, 0.5);

    let end = Instant::now() + Duration::from_secs(seconds);
    let low: Vec<_> = (0..LOW_CLIENTS)
        .map(|i| {
            let (h, u) = (http.clone(), url.clone());
            tokio::spawn(async move {
                let b = body(9, &format!("low-{i}"));
                let mut n = 0u64;
                while Instant::now() < end {
                    one(&h, &u, b.clone()).await?;
                    n += 1;
                }
                Ok::<u64, BoxError>(n)
            })
        })
        .collect();
    // Let the low-priority clients fill the queue first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut waits = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while Instant::now() + Duration::from_secs(1) < end {
        tick.tick().await;
        let took = one(&http, &url, hb.clone()).await?;
        waits.push(took.saturating_sub(base));
    }
    let mut counts = Vec::new();
    for t in low {
        counts.push(t.await??);
    }
    waits.sort();
    counts.sort();
    let total: u64 = counts.iter().sum();
    println!(
        "upstream: {SLOTS} slots, {} ms per request; {LOW_CLIENTS} low-priority clients (closed loop), 1 high-priority request a second, {seconds} s",
        ms(SERVICE)
    );
    println!(
        "unloaded request: {:.1} ms (median of 20; subtracted from each loaded one)",
        ms(base)
    );
    println!(
        "high priority: {} requests; wait before the upstream p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (target p99 <= {} ms)",
        waits.len(),
        ms(pct(&waits, 0.5)),
        ms(pct(&waits, 0.99)),
        ms(*waits.last().unwrap_or(&Duration::ZERO)),
        ms(SERVICE)
    );
    println!(
        "low priority: {total} answers ({:.1}/s, the upstream's ceiling {:.1}/s); per client min {}, median {}, max {}",
        total as f64 / seconds as f64,
        SLOTS as f64 / SERVICE.as_secs_f64(),
        counts.first().copied().unwrap_or(0),
        counts.get(counts.len() / 2).copied().unwrap_or(0),
        counts.last().copied().unwrap_or(0),
    );
    coord.shutdown(Duration::from_secs(1)).await;
    Ok(())
}
