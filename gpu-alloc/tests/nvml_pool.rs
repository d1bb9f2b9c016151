//! The model pool on a REAL GPU: NVML as the monitor, a SQLite ledger, and backends that are real
//! CUDA processes (PyTorch holding a given amount of device memory and answering `/health`).
//! Shows what the simulated fleet cannot: the measured VRAM of a load is what the driver
//! reports, an eviction really gives the memory back before the next load starts, and memory
//! held by a process outside the pool closes the VRAM gate.
//!
//! Needs NVML and `python3` with a CUDA-enabled PyTorch; skips with a message elsewhere, fails
//! instead with HOROS_REQUIRE_NVML=1.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use horos_gpu_alloc::estimate::{EstimateSource, ModelFacts};
use horos_gpu_alloc::ledger::VramLedger;
use horos_gpu_alloc::monitor::GpuMonitor;
use horos_gpu_alloc::monitor::nvml::NvmlMonitor;
use horos_gpu_alloc::pool::{
    Backend, BackendError, BackendFactory, ModelPool, ModelSpec, PoolConfig, PoolError, SlotState,
};
use serde_json::json;

/// Allocates `MB` MiB on the GPU, touches it, then serves `GET /health` on `PORT`.
const HOLDER: &str = r#"
import http.server, sys, torch
mb, port = int(sys.argv[1]), int(sys.argv[2])
x = torch.ones(mb << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("content-length", "2"); self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a): pass
srv = http.server.HTTPServer(("127.0.0.1", port), H)
print("ready", flush=True)
srv.serve_forever()
"#;

/// The real-GPU pool test cannot run here because of `why`.
fn skip_or_fail(why: &str) {
    horos_testkit::skip_or_fail(
        "HOROS_REQUIRE_NVML",
        &format!("the real-GPU pool test cannot run: {why}"),
    );
}

fn torch_cuda() -> bool {
    Command::new("python3")
        .args([
            "-c",
            "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts a holder of `mb` MiB answering on `port` (None: no HTTP, just the memory); waits
/// until its memory is allocated.
fn spawn_holder(mb: u64, port: u16) -> Result<Child, String> {
    let mut child = Command::new("python3")
        .args(["-c", HOLDER, &mb.to_string(), &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().ok_or("no stdout")?)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("the CUDA holder did not start (printed {line:?})"));
    }
    Ok(child)
}

fn http_ok(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.0 200") || buf.starts_with("HTTP/1.1 200")
}

/// A model served by one CUDA process holding `settings.mb` MiB.
struct TorchBackend {
    child: Mutex<Option<(Child, u16)>>,
}

#[async_trait]
impl Backend for TorchBackend {
    async fn start(
        &self,
        port: u16,
        _gpus: &[u32],
        settings: &serde_json::Value,
    ) -> Result<(), BackendError> {
        let mb = settings["mb"]
            .as_u64()
            .ok_or_else(|| BackendError::Other("settings.mb missing".into()))?;
        let child = tokio::task::spawn_blocking(move || spawn_holder(mb, port))
            .await
            .map_err(BackendError::other)?
            .map_err(BackendError::Other)?;
        *self.child.lock().unwrap() = Some((child, port));
        Ok(())
    }

    async fn stop(&self) -> Result<(), BackendError> {
        let taken = self.child.lock().unwrap().take();
        if let Some((mut child, _)) = taken {
            tokio::task::spawn_blocking(move || {
                let _ = child.kill();
                let _ = child.wait();
            })
            .await
            .map_err(BackendError::other)?;
        }
        Ok(())
    }

    async fn health(&self) -> Result<(), BackendError> {
        let port = self.child.lock().unwrap().as_ref().map(|(_, p)| *p);
        let Some(port) = port else {
            return Err(BackendError::Other("not started".into()));
        };
        if tokio::task::spawn_blocking(move || http_ok(port))
            .await
            .unwrap_or(false)
        {
            Ok(())
        } else {
            Err(BackendError::Other("health check failed".into()))
        }
    }

    fn endpoint(&self) -> Option<String> {
        let port = self.child.lock().unwrap().as_ref().map(|(_, p)| *p)?;
        Some(format!("http://127.0.0.1:{port}"))
    }
}

impl Drop for TorchBackend {
    fn drop(&mut self) {
        if let Ok(mut g) = self.child.lock()
            && let Some((mut c, _)) = g.take()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

struct TorchFactory;

impl BackendFactory for TorchFactory {
    fn create(
        &self,
        _model_id: &str,
        _settings: &serde_json::Value,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        Ok(Arc::new(TorchBackend {
            child: Mutex::new(None),
        }))
    }
}

fn spec(id: &str, hold_mb: u64, estimate_mb: u64) -> ModelSpec {
    ModelSpec {
        id: id.into(),
        facts: ModelFacts {
            name: id.into(),
            explicit_mb: Some(estimate_mb),
            ..ModelFacts::default()
        },
        settings: json!({ "mb": hold_mb }),
        ..ModelSpec::default()
    }
}

fn holder_pids(m: &NvmlMonitor) -> Vec<u32> {
    m.sample().unwrap()[0]
        .processes
        .iter()
        .map(|p| p.pid)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_on_a_real_gpu_measures_evicts_and_sees_foreign_memory() {
    let monitor = match NvmlMonitor::new() {
        Ok(m) => Arc::new(m),
        Err(e) => return skip_or_fail(&format!("NVML is unavailable: {e}")),
    };
    if !torch_cuda() {
        return skip_or_fail("python3 with a CUDA-enabled torch is unavailable");
    }
    let gpu0 = monitor.sample().unwrap().remove(0);
    let total = gpu0.memory_total_mb;
    let idle_used = gpu0.memory_used_mb;
    eprintln!(
        "GPU 0: {} — {total} MB total, {idle_used} MB used at start",
        gpu0.name
    );
    // Three models of ~38 % of the card each: two fit, the third needs an eviction.
    let hold = total * 38 / 100;
    let estimate = hold + 1024; // + the CUDA context, until measured
    let dir = tempfile::tempdir().unwrap();
    let ledger = Arc::new(VramLedger::open(dir.path().join("ledger.db")).unwrap());
    ledger.register_from(monitor.as_ref()).unwrap();
    // The pool's ports: 11 that no other test of this process takes.
    let ports = horos_testkit::free_ports(11);
    let pool = ModelPool::new(
        PoolConfig {
            port_min: ports,
            port_max: ports + 10,
            reclaim_delay_ms: 300,
            ..PoolConfig::default()
        },
        Arc::new(TorchFactory),
        Arc::clone(&monitor) as Arc<dyn GpuMonitor>,
        Some(Arc::clone(&ledger)),
    );
    for id in ["a", "b", "c"] {
        pool.register(spec(id, hold, estimate));
    }

    // Loads, and the measured size is the driver's figure: the allocation plus a context.
    let t = Instant::now();
    let a = pool.get_or_load("a", 5).await.unwrap();
    eprintln!("load a: {:?}", t.elapsed());
    drop(a);
    let measured = pool.estimator().measured("a").expect("a load is measured");
    assert!(
        measured >= hold && measured <= hold + 2048,
        "measured {measured} MB for a {hold} MB allocation"
    );
    assert_eq!(
        pool.estimator()
            .estimate(&ModelFacts {
                name: "a".into(),
                explicit_mb: Some(estimate),
                ..ModelFacts::default()
            })
            .unwrap()
            .source,
        EstimateSource::Measured
    );
    let b = pool.get_or_load("b", 5).await.unwrap();
    drop(b);
    let pids_ab = holder_pids(&monitor);
    assert!(
        pids_ab.len() >= 2,
        "NVML lists the two holders: {pids_ab:?}"
    );

    // The third needs room: one idle, lower-priority model is stopped and its memory comes
    // back before c starts (otherwise c's own allocation would fail and the load error out).
    let t = Instant::now();
    let c = pool.get_or_load("c", 1).await.unwrap();
    eprintln!("evict + load c: {:?}", t.elapsed());
    drop(c);
    let states: Vec<_> = ["a", "b", "c"].iter().map(|m| pool.state(m)).collect();
    assert_eq!(
        states.iter().filter(|s| **s == SlotState::Ready).count(),
        2,
        "{states:?}"
    );
    assert_eq!(pool.state("c"), SlotState::Ready);
    let used_now = monitor.sample().unwrap()[0].memory_used_mb;
    assert!(
        used_now <= idle_used + 2 * (hold + 2048),
        "after the eviction {used_now} MB are used: the victim's memory was not given back"
    );
    assert_eq!(
        holder_pids(&monitor).len(),
        pids_ab.len(),
        "one holder replaced another"
    );
    assert_eq!(
        ledger.leases().unwrap().len(),
        2,
        "the victim's lease was released"
    );

    // Everything unloaded: the memory returns to where it started.
    for m in ["a", "b", "c"] {
        pool.unload(m).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let used_after = monitor.sample().unwrap()[0].memory_used_mb;
    assert!(
        used_after <= idle_used + 512,
        "{used_after} MB used after unloading all (was {idle_used})"
    );

    // A process outside the pool takes 70 % of the card: the ledger alone would admit a 38 %
    // model, the gate reads the driver's free memory and refuses with a typed error.
    let mut foreign = tokio::task::spawn_blocking(move || spawn_holder(total * 70 / 100, 18320))
        .await
        .unwrap()
        .unwrap();
    let refused = pool.get_or_load("a", 0).await;
    let _ = foreign.kill();
    let _ = foreign.wait();
    match refused {
        Err(PoolError::InsufficientVram {
            need_mb,
            available_mb,
            ..
        }) => {
            eprintln!("foreign process: refused, {need_mb} MB needed, {available_mb} MB free");
            assert!(available_mb < need_mb);
        }
        other => panic!("expected InsufficientVram, got {other:?}"),
    }
    assert!(
        ledger.leases().unwrap().is_empty(),
        "a refused load holds no lease"
    );

    // The foreign process gone, the same load succeeds.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let a = pool.get_or_load("a", 0).await.unwrap();
    drop(a);
    pool.unload("a").await.unwrap();
}
