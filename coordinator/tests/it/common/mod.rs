//! Test fixtures: an HTTP client, fakeai upstreams, and a gpu-alloc backend factory whose
//! backends are in-process fake servers (with a simulated load time and VRAM use).

#![allow(dead_code, clippy::unwrap_used)] // test support: a failed fixture step is a failed test

pub mod py;

use std::collections::HashMap;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use horos_coordinator::{Coordinator, CoordinatorConfig, UpstreamPool};
use horos_fakeai::{FakeConfig, FakeServer};
use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
use horos_gpu_alloc::pool::PoolUpstream;
use horos_gpu_alloc::pool::{
    Backend, BackendError, BackendFactory, ModelPool, ModelSpec, PoolConfig,
};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::net::TcpListener;

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub fn http() -> HttpClient {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub async fn call(
    method: Method,
    url: &str,
    body: Option<Vec<u8>>,
    headers: &[(&str, &str)],
) -> Answer {
    let mut b = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    if body.is_some() {
        b = b.header("content-type", "application/json");
    }
    let req = b
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let resp = http().request(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body,
    }
}

pub async fn post(url: &str, v: &Value) -> Answer {
    call(Method::POST, url, Some(serde_json::to_vec(v).unwrap()), &[]).await
}

pub async fn get(url: &str) -> Answer {
    call(Method::GET, url, None, &[]).await
}

/// The first message's text of each request `up` received, in the order it received them.
pub fn contents_in_order(up: &horos_fakeai::FakeServer) -> Vec<String> {
    up.requests()
        .iter()
        .map(|r| {
            let v: Value = serde_json::from_str(&r.body).unwrap_or_default();
            v["messages"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

pub fn chat(model: &str, text: &str) -> Value {
    serde_json::json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

pub async fn start(cfg: CoordinatorConfig, up: Arc<dyn UpstreamPool>) -> Coordinator {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    Coordinator::start(cfg, up, l).await.unwrap()
}

/// Quiet, fast test settings.
pub fn config() -> CoordinatorConfig {
    CoordinatorConfig {
        snapshot_interval_ms: 50,
        maintain_interval_ms: 100,
        ..CoordinatorConfig::default()
    }
}

/// Polls `f` until it is true (at most ~20 s).
pub async fn wait_until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..400 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The value of a metric line (exact name with labels).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.trim().parse().ok()))
}

/// Backends that are in-process fake servers: a load sleeps `load_ms` (the model's setting,
/// else the factory's), takes `mb` of the simulated fleet, then serves, each answer after
/// `latency_ms` (the model's setting, else at once).
pub struct FakeFactory {
    pub fleet: Arc<SimFleet>,
    pub load: Duration,
    pub mb: u64,
    pub servers: Arc<Mutex<HashMap<String, Arc<FakeServer>>>>,
}

impl FakeFactory {
    pub fn new(fleet: Arc<SimFleet>, load: Duration, mb: u64) -> Self {
        Self {
            fleet,
            load,
            mb,
            servers: Arc::default(),
        }
    }
}

struct FakeBackend {
    fleet: Arc<SimFleet>,
    model: String,
    load: Duration,
    latency: Duration,
    mb: u64,
    server: Mutex<Option<Arc<FakeServer>>>,
    servers: Arc<Mutex<HashMap<String, Arc<FakeServer>>>>,
}

impl BackendFactory for FakeFactory {
    fn create(
        &self,
        model_id: &str,
        settings: &serde_json::Value,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        let load = settings
            .get("load_ms")
            .and_then(Value::as_u64)
            .map_or(self.load, Duration::from_millis);
        let latency = settings
            .get("latency_ms")
            .and_then(Value::as_u64)
            .map_or(Duration::ZERO, Duration::from_millis);
        Ok(Arc::new(FakeBackend {
            fleet: Arc::clone(&self.fleet),
            model: model_id.to_owned(),
            load,
            latency,
            mb: self.mb,
            server: Mutex::new(None),
            servers: Arc::clone(&self.servers),
        }))
    }
}

#[async_trait]
impl Backend for FakeBackend {
    async fn start(&self, _port: u16, gpus: &[u32], _s: &Value) -> Result<(), BackendError> {
        tokio::time::sleep(self.load).await;
        let gpu = *gpus
            .first()
            .ok_or_else(|| BackendError::Other("no GPU".into()))?;
        self.fleet
            .load(gpu, &self.model, self.mb, None)
            .map_err(BackendError::other)?;
        // Port 0: the pool's port may be taken by another test; the endpoint tells the truth.
        let server = FakeServer::start(FakeConfig {
            model: self.model.clone(),
            latency: self.latency,
            ..FakeConfig::default()
        })
        .await
        .map_err(BackendError::other)?;
        let server = Arc::new(server);
        self.servers
            .lock()
            .unwrap()
            .insert(self.model.clone(), Arc::clone(&server));
        *self.server.lock().unwrap() = Some(server);
        Ok(())
    }

    async fn stop(&self) -> Result<(), BackendError> {
        if let Some(s) = self.server.lock().unwrap().take() {
            s.stop();
        }
        self.fleet.unload_everywhere(&self.model);
        Ok(())
    }

    async fn health(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn endpoint(&self) -> Option<String> {
        self.server.lock().unwrap().as_ref().map(|s| s.url())
    }
}

/// A pool of `models` on one simulated GPU of `gpu_mb`, each model taking `mb`.
pub fn pool(
    models: &[&str],
    load: Duration,
    gpu_mb: u64,
    mb: u64,
) -> (PoolUpstream, Arc<FakeFactory>) {
    let fleet = Arc::new(SimFleet::new(1, gpu_mb));
    let factory = Arc::new(FakeFactory::new(Arc::clone(&fleet), load, mb));
    let pool = ModelPool::new(
        PoolConfig {
            reclaim_delay_ms: 10,
            margin_mb: 0,
            ..PoolConfig::default()
        },
        Arc::clone(&factory) as Arc<dyn BackendFactory>,
        fleet,
        None,
    );
    let specs = models.iter().map(|m| ModelSpec {
        id: (*m).to_owned(),
        facts: horos_gpu_alloc::estimate::ModelFacts {
            name: (*m).to_owned(),
            explicit_mb: Some(mb),
            ..Default::default()
        },
        ..ModelSpec::default()
    });
    (PoolUpstream::new(pool, specs), factory)
}

pub use horos_testkit::run_limited;
