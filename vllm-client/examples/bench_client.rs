//! Client overhead benchmark: N chat requests at 1, 64 and 256 concurrent, through
//! `horos_vllm_client::Client` and through plain hyper loops, all against a local server that
//! answers at once with a fixed chat completion. Prints latency p50/p99, requests/s and the CPU
//! time per request of each, and the client's cost ratios.
//!
//! The baseline, "plain+serde", is the chat call written by hand on hyper and serde_json: the
//! request serialized with `serde_json::to_vec` per call, the answer parsed into a
//! `serde_json::Value`. Two more plain loops tell where the cost goes: "bytes-only" sends a
//! pre-serialized body and never reads the answer (HTTP alone: the client's ratio to it is what the
//! JSON of a chat call costs on top of HTTP), and "plain+json" does exactly the client's own JSON
//! work (`ChatRequest::to_json`, `ChatResponse::from_json`), so that the client's ratio to it is
//! what the client's machinery costs (permit, timer, request building, error checks).
//!
//! `cargo run --release -p horos-vllm-client --example bench_client [-- REQUESTS [ROUNDS]]`
//! (defaults: 20000 requests per run, 5 rounds alternating the loops; on a shared, noisy
//! machine the best round of each is reported, since interference only ever adds time).
//!
//! `--server-cpus CPUS` runs the answer server as a child process pinned (`taskset`) to CPUS, as a
//! real inference server is a process of its own: the CPU figures are then the client side's alone
//! (the loops, the client or plain hyper, and the runtime), not diluted by the server's work nor
//! inflated by the two sharing one runtime's workers. Pin the benchmark itself to the other CPUs:
//! `taskset -c 0 bench_client --server-cpus 1` on two cores.
//!
//! `-- REQUESTS ROUNDS LOOP [CONC]` runs one loop alone (`client`, `plain+serde`, `bytes-only` or
//! `plain+json`, at CONC concurrent, default 1), for an instruction count per request under
//! `valgrind --tool=callgrind`: run it with two request counts and divide the difference.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use horos_vllm_client::{ChatMessage, ChatRequest, ChatResponse, Client, ClientConfig};
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

const ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21},"system_fingerprint":"bench"}"#;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type CallFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), BoxError>> + Send>>;

/// A server that reads the request body and answers a fixed chat completion.
async fn start_server() -> Result<SocketAddr, BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<hyper::body::Incoming>| async move {
                    let _ = req.into_body().collect().await;
                    let mut r = Response::new(Full::new(Bytes::from_static(ANSWER.as_bytes())));
                    r.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, Infallible>(r)
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(addr)
}

#[derive(Clone, Copy)]
struct RunResult {
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    /// Process CPU time (user + system: client, server and runtime together) per request.
    cpu_us: f64,
}

/// CPU time used by this process so far.
fn process_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `rusage` into the pointer given, which is valid and large enough.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return Duration::ZERO;
    }
    // SAFETY: initialized by the successful call above (and zeroed before).
    let usage = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn summarize(mut lat: Vec<Duration>, wall: Duration, cpu: Duration) -> RunResult {
    lat.sort_unstable();
    let pct = |p: f64| {
        let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
        lat[i].as_secs_f64() * 1e6
    };
    RunResult {
        rps: lat.len() as f64 / wall.as_secs_f64(),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        cpu_us: cpu.as_secs_f64() * 1e6 / lat.len() as f64,
    }
}

/// Runs `total` calls of `one` with `conc` workers; returns per-call latencies and the wall time.
async fn drive<F, Fut>(total: usize, conc: usize, one: F) -> Result<RunResult, BoxError>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), BoxError>> + Send,
{
    let one = Arc::new(one);
    let next = Arc::new(AtomicUsize::new(0));
    let cpu_start = process_cpu();
    let start = Instant::now();
    let workers: Vec<_> = (0..conc)
        .map(|_| {
            let one = one.clone();
            let next = next.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(total / conc + 1);
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    let t = Instant::now();
                    one().await?;
                    lat.push(t.elapsed());
                }
                Ok::<_, BoxError>(lat)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(total);
    for w in workers {
        all.extend(w.await??);
    }
    let wall = start.elapsed();
    Ok(summarize(
        all,
        wall,
        process_cpu().saturating_sub(cpu_start),
    ))
}

/// The best round: highest throughput (and, separately, lowest CPU per request).
fn best(v: &[RunResult]) -> RunResult {
    let mut b = v[0];
    for r in &v[1..] {
        if r.rps > b.rps {
            b = RunResult {
                cpu_us: b.cpu_us,
                ..*r
            };
        }
        b.cpu_us = b.cpu_us.min(r.cpu_us);
    }
    b
}

/// A child of `--server-cpus`: prints its URL, serves until its stdin closes (the parent exited).
async fn serve_until_stdin_closes() -> Result<(), BoxError> {
    let addr = start_server().await?;
    println!("http://{addr}");
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    })
    .await?;
    Ok(())
}

/// Starts this example again as the answer server, pinned to `cpus`; returns the child and its URL.
fn spawn_server(cpus: &str) -> Result<(std::process::Child, String), BoxError> {
    use std::io::BufRead;
    let mut child = std::process::Command::new("taskset")
        .arg("-c")
        .arg(cpus)
        .arg(std::env::current_exe()?)
        .arg("--serve")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("server child has no stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    let url = line.trim().to_owned();
    if !url.starts_with("http://") {
        return Err(format!("the server child did not start (printed {line:?})").into());
    }
    Ok((child, url))
}

fn main() -> Result<(), BoxError> {
    // As many workers as CPUs this process may run on (`taskset` narrows them), at least two.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?
        .block_on(bench())
}

async fn bench() -> Result<(), BoxError> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--serve") {
        return serve_until_stdin_closes().await;
    }
    let mut server_child = None;
    if let Some(i) = args.iter().position(|a| a == "--server-cpus") {
        let cpus = args
            .get(i + 1)
            .ok_or("--server-cpus wants a CPU list")?
            .clone();
        args.drain(i..i + 2);
        server_child = Some((spawn_server(&cpus)?, cpus));
    }
    let mut args = args.into_iter();
    let total: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20_000);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    if let Some(which) = args.next() {
        let conc: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1);
        let url = match &server_child {
            Some(((_, url), _)) => url.clone(),
            None => format!("http://{}", start_server().await?),
        };
        return one_loop(&url, &which, total, conc).await;
    }
    // The child sees its stdin close when `server_child` drops, and stops.
    let url = match &server_child {
        Some(((_, url), _)) => url.clone(),
        None => format!("http://{}", start_server().await?),
    };
    let request = bench_request();
    let body = Bytes::from(serde_json::to_vec(&request)?);
    let uri: hyper::Uri = format!("{url}/v1/chat/completions").parse()?;

    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    match &server_child {
        Some((_, server_cpus)) => println!(
            "{total} requests per run, best of {rounds} rounds; client side on {cpus} CPUs, the \
             server in its own process on CPUs {server_cpus} (CPU figures: the client side's only)"
        ),
        None => println!(
            "{total} requests per run, best of {rounds} rounds, {cpus} CPUs, the server in process \
             (CPU figures: client and server together)"
        ),
    }
    println!(
        "{:>5} | {:>35} | {:>35} | {:>31} | {:>15} | {:>15}",
        "conc",
        "client p50/p99 µs, req/s, CPU µs/req",
        "plain+serde p50/p99, req/s, CPU",
        "ratios: CPU  1/rps  p50  p99",
        "bytes-only CPU",
        "plain+json CPU"
    );
    for conc in [1usize, 64, 256] {
        let client = Client::with_config(
            ClientConfig::new(&url)
                .max_concurrency(conc)
                .total_timeout(Duration::from_secs(60)),
        )?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let plain: HyperClient<HttpConnector, Full<Bytes>> =
            HyperClient::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_max_idle_per_host(conc)
                .build(connector);

        let client_call = {
            let client = client.clone();
            let request = Arc::new(request.clone());
            // boxed like the plain loop's futures, so that both pay the same harness costs
            move || -> CallFuture {
                let client = client.clone();
                let request = request.clone();
                Box::pin(async move {
                    let r = client.chat(&request).await?;
                    std::hint::black_box(r);
                    Ok::<_, BoxError>(())
                })
            }
        };
        let serde_call = plain_loop(plain.clone(), uri.clone(), Work::Serde(request.clone()));
        let bytes_call = plain_loop(plain.clone(), uri.clone(), Work::Bytes(body.clone()));
        let json_call = plain_loop(
            plain.clone(),
            uri.clone(),
            Work::Typed(Arc::new(request.clone())),
        );
        // warm-up: connections opened, code paths hot
        drive(2_000.max(conc * 4), conc, client_call.clone()).await?;
        drive(2_000.max(conc * 4), conc, serde_call.clone()).await?;
        let mut c_runs = Vec::new();
        let mut s_runs = Vec::new();
        let mut b_runs = Vec::new();
        let mut j_runs = Vec::new();
        for _ in 0..rounds {
            c_runs.push(drive(total, conc, client_call.clone()).await?);
            s_runs.push(drive(total, conc, serde_call.clone()).await?);
            b_runs.push(drive(total, conc, bytes_call.clone()).await?);
            j_runs.push(drive(total, conc, json_call.clone()).await?);
        }
        let (c, p, b, j) = (best(&c_runs), best(&s_runs), best(&b_runs), best(&j_runs));
        println!(
            "{:>5} | {:>7.1} / {:>7.1}, {:>7.0}, {:>6.1} | {:>7.1} / {:>7.1}, {:>7.0}, {:>6.1} | {:>6.3}x {:>6.3}x {:>6.3}x {:>6.3}x | {:>6.1} {:>7.3}x | {:>6.1} {:>7.3}x",
            conc,
            c.p50_us,
            c.p99_us,
            c.rps,
            c.cpu_us,
            p.p50_us,
            p.p99_us,
            p.rps,
            p.cpu_us,
            c.cpu_us / p.cpu_us,
            p.rps / c.rps,
            c.p50_us / p.p50_us,
            c.p99_us / p.p99_us,
            b.cpu_us,
            c.cpu_us / b.cpu_us,
            j.cpu_us,
            c.cpu_us / j.cpu_us,
        );
    }
    println!(
        "ratios are client / plain+serde costs: CPU per request, 1 / throughput, p50 and p99 \
         latency (1.0 = no overhead; target <= 1.1). bytes-only: HTTP alone, the answer never \
         read (CPU µs/req, and the client's CPU ratio to it: what a chat call's JSON costs on top \
         of HTTP); plain+json: the client's own JSON work done by the plain loop (CPU µs/req, and \
         the client's CPU ratio to it: what the client's machinery costs)."
    );
    Ok(())
}

/// The benchmark's chat request.
fn bench_request() -> ChatRequest {
    ChatRequest::new(
        "bench",
        vec![
            ChatMessage::system("You are a helpful assistant."),
            ChatMessage::user("Say hello."),
        ],
    )
    .max_tokens(16)
}

/// Runs one loop alone, `rounds` times: for instruction counts.
async fn one_loop(url: &str, which: &str, total: usize, conc: usize) -> Result<(), BoxError> {
    let request = bench_request();
    let body = Bytes::from(serde_json::to_vec(&request)?);
    let uri: hyper::Uri = format!("{url}/v1/chat/completions").parse()?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let plain: HyperClient<HttpConnector, Full<Bytes>> = HyperClient::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_max_idle_per_host(conc)
        .build(connector);
    let client = Client::with_config(ClientConfig::new(url).max_concurrency(conc))?;
    let request = Arc::new(request);
    let call: Box<dyn Fn() -> CallFuture + Send + Sync> = match which {
        "client" => Box::new(move || -> CallFuture {
            let client = client.clone();
            let request = request.clone();
            Box::pin(async move {
                std::hint::black_box(client.chat(&request).await?);
                Ok::<_, BoxError>(())
            })
        }),
        "plain+serde" => Box::new(plain_loop(plain, uri, Work::Serde((*request).clone()))),
        "bytes-only" => Box::new(plain_loop(plain, uri, Work::Bytes(body))),
        "plain+json" => Box::new(plain_loop(plain, uri, Work::Typed(request))),
        other => return Err(format!("unknown loop `{other}`").into()),
    };
    let r = drive(total, conc, call).await?;
    println!(
        "{which} at {conc} concurrent, {total} requests: p50 {:.1} µs, {:.0} req/s, CPU {:.1} µs/req",
        r.p50_us, r.rps, r.cpu_us
    );
    Ok(())
}

/// What a plain loop does besides HTTP.
#[derive(Clone)]
enum Work {
    /// Sends this pre-serialized body, keeps the answer's bytes.
    Bytes(Bytes),
    /// The chat call written by hand: serializes the request per call with `serde_json::to_vec`,
    /// parses the answer into a `serde_json::Value`.
    Serde(ChatRequest),
    /// Encodes this request per call and decodes the answer into a `ChatResponse`, the way the
    /// client does (`ChatRequest::to_json`, `ChatResponse::from_json`).
    Typed(Arc<ChatRequest>),
}

/// A plain hyper loop: POST the body, collect the answer's bytes, and do `work` on them.
fn plain_loop(
    plain: HyperClient<HttpConnector, Full<Bytes>>,
    uri: hyper::Uri,
    work: Work,
) -> impl Fn() -> CallFuture + Clone + Send + Sync + 'static {
    move || -> CallFuture {
        let plain = plain.clone();
        let body = match &work {
            Work::Bytes(body) => Ok(body.clone()),
            Work::Serde(request) => serde_json::to_vec(request).map(Bytes::from),
            Work::Typed(request) => request.to_json().map(Bytes::from),
        };
        let body = match body {
            Ok(b) => b,
            Err(e) => return Box::pin(async move { Err(e.into()) }),
        };
        let work = work.clone();
        let req = Request::post(uri.clone())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body));
        Box::pin(async move {
            let resp = plain.request(req?).await?;
            if !resp.status().is_success() {
                return Err(format!("status {}", resp.status()).into());
            }
            let bytes = resp.into_body().collect().await?.to_bytes();
            match work {
                Work::Bytes(_) => {
                    std::hint::black_box(bytes);
                }
                Work::Serde(_) => {
                    let v: serde_json::Value = serde_json::from_slice(&bytes)?;
                    std::hint::black_box(v);
                }
                Work::Typed(_) => {
                    let r = ChatResponse::from_json(&bytes)?;
                    std::hint::black_box(r);
                }
            }
            Ok::<_, BoxError>(())
        })
    }
}
