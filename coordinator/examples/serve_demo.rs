//! A coordinator over a simulated GPU and fake model servers, to try by hand:
//!
//! ```text
//! cargo run -p horos-coordinator --example serve_demo -- [--port 8210] [--seconds 600]
//! curl -s localhost:8210/v1/chat/completions -H 'content-type: application/json' -d '{"model":"qwen3-8b","messages":[{"role":"user","content":"hi"}]}'
//! curl -s localhost:8210/v1/chat/completions -H 'content-type: application/json' -d '{"model":"qwen3-32b","x_timeout_s":1,"messages":[{"role":"user","content":"hi"}]}'   # 503 + Retry-After
//! open http://127.0.0.1:8210/status
//! ```
//!
//! Each model "loads" in its `load_ms` (the 32B one in 8 s), takes its VRAM on one simulated
//! 24 GB GPU, then serves through an in-process fake OpenAI server. The process stops by
//! itself after `--seconds`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use horos_coordinator::{Coordinator, CoordinatorConfig, TaskSpec};
use horos_fakeai::{FakeConfig, FakeServer};
use horos_gpu_alloc::estimate::ModelFacts;
use horos_gpu_alloc::monitor::MonitorGauges;
use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
use horos_gpu_alloc::pool::PoolUpstream;
use horos_gpu_alloc::pool::{
    Backend, BackendError, BackendFactory, Category, ModelPool, ModelSpec, PoolConfig,
};
use serde_json::{Value, json};

struct Factory(Arc<SimFleet>);

struct FakeBackend {
    fleet: Arc<SimFleet>,
    id: String,
    load: Duration,
    mb: u64,
    server: Mutex<Option<FakeServer>>,
}

impl BackendFactory for Factory {
    fn create(
        &self,
        model_id: &str,
        settings: &serde_json::Value,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        let get = |k: &str| settings.get(k).and_then(Value::as_u64).unwrap_or(0);
        Ok(Arc::new(FakeBackend {
            fleet: Arc::clone(&self.0),
            id: model_id.to_owned(),
            load: Duration::from_millis(get("load_ms")),
            mb: get("mb"),
            server: Mutex::new(None),
        }))
    }
}

#[async_trait]
impl Backend for FakeBackend {
    async fn start(&self, _port: u16, gpus: &[u32], _s: &Value) -> Result<(), BackendError> {
        // Memory first, as a real server takes it while it loads its weights.
        for g in gpus {
            self.fleet
                .load(*g, &self.id, self.mb / gpus.len().max(1) as u64, None)
                .map_err(BackendError::other)?;
        }
        tokio::time::sleep(self.load).await;
        let s = FakeServer::start(FakeConfig {
            model: self.id.clone(),
            latency: Duration::from_millis(30),
            ..FakeConfig::default()
        })
        .await
        .map_err(BackendError::other)?;
        *self.server.lock().map_err(BackendError::other)? = Some(s);
        Ok(())
    }
    async fn stop(&self) -> Result<(), BackendError> {
        self.server.lock().map_err(BackendError::other)?.take();
        self.fleet.unload_everywhere(&self.id);
        Ok(())
    }
    async fn health(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn endpoint(&self) -> Option<String> {
        // A poisoned lock means the server is gone: no endpoint.
        self.server.lock().ok()?.as_ref().map(FakeServer::url)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let port = u16::try_from(arg("--port", 8210))?;
    let seconds = arg("--seconds", 600);

    let fleet = Arc::new(SimFleet::new(1, 24_000));
    let pool = ModelPool::new(
        PoolConfig {
            reclaim_delay_ms: 200,
            ..PoolConfig::default()
        },
        Arc::new(Factory(Arc::clone(&fleet))),
        Arc::clone(&fleet) as _,
        None,
    );
    let model = |id: &str, category, mb: u64, load_ms: u64| ModelSpec {
        id: id.into(),
        category,
        facts: ModelFacts {
            name: id.into(),
            explicit_mb: Some(mb),
            ..ModelFacts::default()
        },
        settings: json!({"mb": mb, "load_ms": load_ms}),
        ..ModelSpec::default()
    };
    let upstream = PoolUpstream::new(
        pool,
        [
            model("qwen3-32b", Category::Llm, 19_000, 8_000),
            model("qwen3-8b", Category::Llm, 6_000, 2_000),
            model("bge-m3", Category::Embedding, 2_500, 500),
        ],
    );
    let dir = tempfile::tempdir()?;
    let mut cfg = CoordinatorConfig {
        bind: ([127, 0, 0, 1], port).into(),
        state_path: Some(dir.path().join("coordinator.db")),
        default_load_s: 10.0,
        per_model_concurrency: 4,
        ..CoordinatorConfig::default()
    };
    cfg.tasks.insert(
        "classify".into(),
        TaskSpec {
            models: vec!["qwen3-32b".into(), "qwen3-8b".into()],
            ..TaskSpec::default()
        },
    );
    let c = Coordinator::builder(cfg, Arc::new(upstream))
        .gpu_gauges(Arc::new(MonitorGauges(fleet)))
        .bind()
        .await?;
    println!(
        "coordinator on {} (status page: {}/status); stops in {seconds} s",
        c.url(),
        c.url()
    );
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    c.shutdown(Duration::from_secs(5)).await;
    Ok(())
}
