//! Coordinator overhead: the same chat requests sent straight to a fake upstream and through
//! the coordinator, at 1, 64 and 256 concurrent clients; added p50/p99 latency and the
//! throughput ratio. Then the control plane's latency (`/metrics`, `/status`,
//! `/api/v1/config`) while 256 clients saturate the data plane (`--control-only`: only this
//! part), the status page as `horos-ref run` fills it: four GPUs with an hour of history each
//! (3,600 samples per GPU, charted) and a section of 32 lanes.
//!
//! ```text
//! cargo run --release -p horos-coordinator --example bench_overhead [-- --quick] [-- --upstream-ms N]
//!     [-- --split UPSTREAM_CPUS:COORDINATOR_CPUS [--bare-proxy]]
//! ```
//!
//! By default everything runs in one process: client, coordinator and upstream share the cores,
//! so at high concurrency the coordinator's CPU competes with the upstream's (a real upstream does
//! its work on a GPU). `--split 0-3:4-7` runs the upstream and the coordinator as child processes
//! pinned (`taskset`) to those CPUs, as in a deployment where neither takes the other's cores;
//! pin the load generator itself with `taskset -c 8-15 ...`. The control-plane part runs only in
//! the default mode.

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

fn client() -> HttpClient {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .build(c)
}

const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"How far is the moon?"}],"max_tokens":16,"x_client_id":"bench","x_priority":3}"#;

async fn one(c: &HttpClient, url: &str, body: &'static str) -> Result<Duration, BoxError> {
    let t = Instant::now();
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(body.as_bytes())))?;
    let resp = c.request(req).await?;
    assert!(resp.status().is_success(), "{}", resp.status());
    resp.into_body().collect().await?;
    Ok(t.elapsed())
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Run {
    p50: Duration,
    p99: Duration,
    rps: f64,
}

/// `total` requests from `conc` clients.
async fn run(url: &str, body: &'static str, conc: usize, total: usize) -> Result<Run, BoxError> {
    let c = client();
    // Warm the connection pool.
    let warm: Vec<_> = (0..conc)
        .map(|_| {
            let (c, u) = (c.clone(), url.to_owned());
            tokio::spawn(async move { one(&c, &u, body).await })
        })
        .collect();
    for w in warm {
        w.await??;
    }
    let per = total.div_ceil(conc);
    let start = Instant::now();
    let tasks: Vec<_> = (0..conc)
        .map(|_| {
            let (c, u) = (c.clone(), url.to_owned());
            tokio::spawn(async move {
                let mut v = Vec::with_capacity(per);
                for _ in 0..per {
                    v.push(one(&c, &u, body).await?);
                }
                Ok::<_, BoxError>(v)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(per * conc);
    for t in tasks {
        all.extend(t.await??);
    }
    let wall = start.elapsed();
    all.sort();
    Ok(Run {
        p50: pct(&all, 0.5),
        p99: pct(&all, 0.99),
        rps: all.len() as f64 / wall.as_secs_f64(),
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

async fn start_upstream(upstream_ms: u64) -> Result<FakeServer, BoxError> {
    Ok(FakeServer::start(FakeConfig {
        model: "m".into(),
        slots: 4096,
        latency: Duration::from_millis(upstream_ms),
        ..FakeConfig::default()
    })
    .await?)
}

async fn start_coordinator(upstream_url: String) -> Result<Coordinator, BoxError> {
    let cfg = CoordinatorConfig {
        max_in_flight: 4096,
        per_model_concurrency: 4096,
        ..CoordinatorConfig::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    Ok(Coordinator::start(
        cfg,
        Arc::new(StaticUpstream::new().with("m", upstream_url)),
        listener,
    )
    .await?)
}

/// A proxy with nothing but the forwarding: hyper server, the body read whole, hyper-util's
/// pooled client, the answer streamed back. Returns its URL.
async fn bare_proxy(upstream: String) -> Result<String, BoxError> {
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let c = client();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let _ = stream.set_nodelay(true);
            let (c, upstream) = (c.clone(), upstream.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let (c, upstream) = (c.clone(), upstream.clone());
                    async move {
                        let path = req.uri().path().to_owned();
                        let body = match req.into_body().collect().await {
                            Ok(b) => b.to_bytes(),
                            Err(e) => return Err(e.to_string()),
                        };
                        let fwd = http::Request::post(format!("{upstream}{path}"))
                            .header("content-type", "application/json")
                            .body(Full::new(body))
                            .map_err(|e| e.to_string())?;
                        c.request(fwd).await.map_err(|e| e.to_string())
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(url)
}

/// A child of `--split`: prints its URL, serves until its stdin closes (the parent exited).
async fn serve_until_stdin_closes(url: String) -> Result<(), BoxError> {
    println!("{url}");
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    })
    .await?;
    Ok(())
}

/// Starts this example again as `role`, pinned to `cpus`; returns the child and its URL.
fn spawn_pinned(cpus: &str, role: &[&str]) -> Result<(std::process::Child, String), BoxError> {
    use std::io::BufRead;
    let exe = std::env::current_exe()?;
    let mut child = std::process::Command::new("taskset")
        .arg("-c")
        .arg(cpus)
        .arg(exe)
        .args(role)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("child has no stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    let url = line.trim().to_owned();
    if !url.starts_with("http://") {
        return Err(format!("{role:?} did not start (printed {line:?})").into());
    }
    Ok((child, url))
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let upstream_ms: u64 = arg(&args, "--upstream-ms")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if args.iter().any(|a| a == "--serve-upstream") {
        let up = start_upstream(upstream_ms).await?;
        return serve_until_stdin_closes(up.url()).await;
    }
    if let Some(upstream_url) = arg(&args, "--serve-bare-proxy") {
        let url = bare_proxy(upstream_url.to_owned()).await?;
        return serve_until_stdin_closes(url).await;
    }
    if let Some(upstream_url) = arg(&args, "--serve-coordinator") {
        let coord = start_coordinator(upstream_url.to_owned()).await?;
        return serve_until_stdin_closes(coord.url()).await;
    }
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    if let Some(split) = arg(&args, "--split") {
        let (up_cpus, coord_cpus) = split
            .split_once(':')
            .ok_or("--split wants UPSTREAM_CPUS:COORDINATOR_CPUS, e.g. 0-3:4-7")?;
        let ms = upstream_ms.to_string();
        let (up_child, up_url) =
            spawn_pinned(up_cpus, &["--serve-upstream", "--upstream-ms", &ms])?;
        // `--bare-proxy`: in the coordinator's place, the least a proxy on the same HTTP stack
        // does (read the request, forward it, stream the answer back): the floor of its CPU.
        let role = if args.iter().any(|a| a == "--bare-proxy") {
            "--serve-bare-proxy"
        } else {
            "--serve-coordinator"
        };
        let (coord_child, coord_url) = spawn_pinned(coord_cpus, &[role, &up_url])?;
        let pids = Some((up_child.id(), coord_child.id()));
        let (_up, _coord) = (up_child, coord_child);
        println!(
            "coordinator overhead, upstream latency {upstream_ms} ms, split: upstream on CPUs \
             {up_cpus}, coordinator on CPUs {coord_cpus}, load generator on {cores} CPUs"
        );
        let direct = format!("{up_url}/v1/chat/completions");
        let via = format!("{coord_url}/v1/chat/completions");
        // The children see their stdin close when `_up` and `_coord` drop, and stop.
        return overhead_table(&direct, &via, quick, upstream_ms, pids).await;
    }
    let up = start_upstream(upstream_ms).await?;
    if args.iter().any(|a| a == "--control-only") {
        control_plane(&up, quick, 50, 8, "queue-bound").await?;
        control_plane(&up, quick, 0, 4096, "CPU-bound").await?;
        return Ok(());
    }
    let coord = start_coordinator(up.url()).await?;
    let direct = format!("{}/v1/chat/completions", up.url());
    let via = format!("{}/v1/chat/completions", coord.url());
    println!("coordinator overhead, upstream latency {upstream_ms} ms, {cores} cores");
    overhead_table(&direct, &via, quick, upstream_ms, None).await?;
    println!(
        "(upstream connections accepted during the overhead runs: {})",
        up.stats().connections
    );

    drop(coord);
    // Control plane under a saturated data plane, two ways: (a) queue-bound: 256 clients on a
    // model limited to 8 concurrent calls of 50 ms (~248 always queued); (b) CPU-bound: 256
    // clients, no limit, an upstream answering at once (the cores are the bottleneck).
    control_plane(&up, quick, 50, 8, "queue-bound").await?;
    control_plane(&up, quick, 0, 4096, "CPU-bound").await?;
    Ok(())
}

/// Four GPUs with an hour of one-second samples, as `[gpus]`' sampler keeps them.
struct HourOfGpus;

impl horos_coordinator::GpuGauges for HourOfGpus {
    fn read(&self) -> Vec<horos_coordinator::GpuGauge> {
        (0..4)
            .map(|index| horos_coordinator::GpuGauge {
                index,
                name: "bench GPU".into(),
                temperature_c: Some(70.0),
                memory_used_mb: 40_000,
                memory_total_mb: 80_000,
                utilization_pct: Some(90),
                alert_active: Some(false),
                alerts_total: Some(0),
                alert_threshold_c: Some(80.0),
            })
            .collect()
    }

    fn history(&self) -> Vec<horos_coordinator::HistoryPoint> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        (0..3600u64)
            .flat_map(|i| {
                (0..4u32).map(move |gpu| horos_coordinator::HistoryPoint {
                    at_ms: now - (3599 - i) * 1000,
                    gpu,
                    temperature_c: Some(60.0 + (i % 30) as f64),
                    memory_used_mb: 40_000 + i,
                    utilization_pct: Some((i % 100) as u32),
                    power_w: None,
                    alert: false,
                })
            })
            .collect()
    }
}

/// A section of 32 lanes, as horos-ref's.
struct ManyLanes;

impl horos_coordinator::StatusSection for ManyLanes {
    fn render_html(&self, out: &mut String) {
        out.push_str("<h2>Lanes</h2><table>");
        for i in 0..32 {
            out.push_str(&format!(
                "<tr><td>lane-{i}</td><td>{}</td><td>http://127.0.0.1:{}</td><td>open</td></tr>",
                i % 4,
                8000 + i
            ));
        }
        out.push_str("</table>");
    }
}

/// CPU seconds (user + system) a process has used so far, from `/proc/PID/stat`.
fn cpu_secs(pid: u32, tick: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is the first; utime and
    // stime are the 12th and 13th.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / tick)
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 on Linux).
fn clock_tick() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Direct vs through the coordinator at 1, 64 and 256 clients; prints one row per level. With
/// `pids` (split mode: upstream, coordinator), also the CPU each process spent per request:
/// the upstream's over the direct runs, the coordinator's over the runs through it.
async fn overhead_table(
    direct: &str,
    via: &str,
    quick: bool,
    upstream_ms: u64,
    pids: Option<(u32, u32)>,
) -> Result<(), BoxError> {
    let tick = clock_tick();
    let cpu = |pid: Option<u32>| pid.and_then(|p| cpu_secs(p, tick)).unwrap_or(0.0);
    let (up_pid, coord_pid) = (pids.map(|p| p.0), pids.map(|p| p.1));
    println!(
        "{:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "conc",
        "dir p50",
        "dir p99",
        "via p50",
        "via p99",
        "+p50 ms",
        "+p99 ms",
        "dir rps",
        "via rps",
        "ratio"
    );
    if pids.is_some() {
        println!(
            "      (CPU per request, µs: the coordinator's per proxied request / the upstream's per direct request)"
        );
    }
    for conc in [1usize, 64, 256] {
        let total = match (quick, upstream_ms > 0, conc) {
            (true, _, 1) => 500,
            (true, _, _) => 2000,
            // With a slow upstream, a client's requests are latency-bound: fewer suffice.
            (false, true, _) => (conc * 60).max(600),
            (false, false, 1) => 20_000,
            (false, false, _) => 60_000,
        };
        // Alternate direct / coordinator rounds so drifts in machine load hit both alike.
        let (mut d, mut v) = (Vec::new(), Vec::new());
        let (mut up_cpu, mut coord_cpu, mut n_direct, mut n_via) = (0.0, 0.0, 0usize, 0usize);
        for _ in 0..3 {
            let before = cpu(up_pid);
            d.push(run(direct, BODY, conc, total / 3).await?);
            up_cpu += cpu(up_pid) - before;
            n_direct += (total / 3).div_ceil(conc) * conc + conc;
            let before = cpu(coord_pid);
            v.push(run(via, BODY, conc, total / 3).await?);
            coord_cpu += cpu(coord_pid) - before;
            n_via += (total / 3).div_ceil(conc) * conc + conc;
        }
        let median = |mut x: Vec<f64>| {
            x.sort_by(f64::total_cmp);
            x[x.len() / 2]
        };
        let med = |runs: &[Run], f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
        let dp50 = med(&d, |r| ms(r.p50));
        let dp99 = med(&d, |r| ms(r.p99));
        let vp50 = med(&v, |r| ms(r.p50));
        let vp99 = med(&v, |r| ms(r.p99));
        let drps = med(&d, |r| r.rps);
        let vrps = med(&v, |r| r.rps);
        // The ratio of each round (its two halves ran back to back), median over rounds.
        let ratio = median(d.iter().zip(&v).map(|(d, v)| v.rps / d.rps).collect());
        println!(
            "{conc:>5} {dp50:>9.3} {dp99:>9.3} {vp50:>9.3} {vp99:>9.3} {:>9.3} {:>9.3} {drps:>9.0} {vrps:>9.0} {:>7.2}",
            vp50 - dp50,
            vp99 - dp99,
            ratio
        );
        if pids.is_some() {
            let per = |s: f64, n: usize| s * 1e6 / n.max(1) as f64;
            println!(
                "      CPU µs/request: coordinator {:.1}, upstream {:.1} ({:.2}x)",
                per(coord_cpu, n_via),
                per(up_cpu, n_direct),
                per(coord_cpu, n_via) / per(up_cpu, n_direct).max(1e-9)
            );
        }
    }
    Ok(())
}

async fn control_plane(
    up: &FakeServer,
    quick: bool,
    upstream_ms: u64,
    limit: usize,
    what: &str,
) -> Result<(), BoxError> {
    up.set_latency(Duration::from_millis(upstream_ms));
    let cfg = CoordinatorConfig {
        per_model_concurrency: limit,
        max_in_flight: 4096,
        ..CoordinatorConfig::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let coord = Coordinator::builder(cfg, Arc::new(StaticUpstream::new().with("m", up.url())))
        .control_listener(std::net::TcpListener::bind("127.0.0.1:0")?)
        .gpu_gauges(Arc::new(HourOfGpus))
        .status_section(Arc::new(ManyLanes))
        .start(listener)
        .await?;
    let dedicated = format!(
        "http://{}",
        coord.control_addr().ok_or("no control listener")?
    );
    let via = format!("{}/v1/chat/completions", coord.url());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let load: Vec<_> = (0..256)
        .map(|_| {
            let (c, u) = (client(), via.clone());
            let (stop, done) = (Arc::clone(&stop), Arc::clone(&done));
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    one(&c, &u, BODY).await?;
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok::<(), BoxError>(())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let c = client();
    let n = if quick { 100 } else { 300 };
    // The data plane's rate over one second, before the probes.
    let d0 = done.load(std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rps = (done.load(std::sync::atomic::Ordering::Relaxed) - d0) as f64;
    println!("control plane while the data plane is saturated ({what}):");
    // The probe runs on a thread and runtime of its own: measured from inside the saturated
    // runtime, it would time its own wait for a worker.
    let shared = coord.url();
    let probes = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let c = client();
            let mut out = Vec::new();
            for (port, base) in [("shared port", shared), ("own thread", dedicated)] {
                for path in ["/metrics", "/status", "/api/v1/config"] {
                    let url = format!("{base}{path}");
                    let mut lat = Vec::with_capacity(n);
                    for _ in 0..n {
                        let t = Instant::now();
                        let resp = c.get(url.parse()?).await?;
                        assert!(resp.status().is_success());
                        resp.into_body().collect().await?;
                        lat.push(t.elapsed());
                    }
                    lat.sort();
                    out.push((port, path, pct(&lat, 0.5), pct(&lat, 0.99)));
                }
            }
            Ok::<_, BoxError>(out)
        })
    });
    let probes = tokio::task::spawn_blocking(move || probes.join())
        .await?
        .map_err(|_| "probe thread panicked")??;
    for (port, path, p50, p99) in probes {
        println!(
            "  {port:<11} {path:<15} p50 {:.3} ms  p99 {:.3} ms  (n={n})",
            ms(p50),
            ms(p99)
        );
    }
    let m = c
        .get(format!("{}/metrics", coord.url()).parse()?)
        .await?
        .into_body()
        .collect()
        .await?
        .to_bytes();
    let text = String::from_utf8_lossy(&m);
    let waiting = text
        .lines()
        .find(|l| l.starts_with("horos_coordinator_queue_waiting{model=\"m\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or("?")
        .to_owned();
    println!("  (data plane meanwhile: {rps:.0} requests/s, {waiting} waiting for admission)");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in load {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    Ok(())
}
