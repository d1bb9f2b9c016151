//! The two CPU inference servers of the demo (llama-server: SmolLM2 for chat, MiniLM for
//! embeddings), each a supervised process with a pidfile and a log file in the demo directory.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use horos_servers::{
    InferenceKind, ManagedServer, ProbeConfig, ProcessConfig, ProcessServer, Supervisor,
    SupervisorConfig,
};

use super::tools::Llama;

/// One running server and its supervisor.
#[derive(Debug)]
pub struct Running {
    /// The model alias it serves (`smollm2`, `minilm`).
    pub model: &'static str,
    /// The process.
    pub server: Arc<ProcessServer>,
    /// Keeps it up (restarts after a crash or a hang).
    pub supervisor: Supervisor,
}

impl Running {
    /// Stops the supervisor first (so it does not restart what is being stopped), then the
    /// server (SIGTERM, grace, SIGKILL; pidfile removed).
    pub async fn stop(self) -> Result<(), String> {
        self.supervisor.shutdown().await;
        self.server
            .stop()
            .await
            .map_err(|e| format!("{}: {e}", self.model))
    }
}

/// What one server is: name, model alias, GGUF, its own flags and how to probe it.
struct Spec<'a> {
    name: &'static str,
    model: &'static str,
    gguf: &'a Path,
    flags: &'static [&'static str],
    probe: InferenceKind,
}

/// A free loopback port (bound then released: another process could take it in between, in
/// which case the start fails with the port named in the server's log).
pub fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

fn config(llama: &Llama, spec: &Spec<'_>, run_dir: &Path) -> Result<ProcessConfig, String> {
    let mut command: Vec<String> = vec![
        llama.server.display().to_string(),
        "-m".into(),
        spec.gguf.display().to_string(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        "{port}".into(),
        "--alias".into(),
        spec.model.into(),
        // One thread each: the machine this targets has 2 cores, and Tesseract needs them too.
        "-t".into(),
        "1".into(),
        "--metrics".into(),
    ];
    command.extend(spec.flags.iter().map(|s| (*s).to_owned()));
    Ok(ProcessConfig {
        name: spec.name.into(),
        command,
        port: free_port()?,
        model: Some(spec.model.into()),
        log_path: Some(run_dir.join(format!("{}.log", spec.name))),
        pidfile: Some(run_dir.join(format!("{}.pid", spec.name))),
        start_timeout_s: 180,
        stop_timeout_s: 5,
        probe: ProbeConfig {
            kind: spec.probe,
            model: Some(spec.model.into()),
            // The probe queues behind real work on a busy CPU (ingestion embeds in batches).
            inference_timeout_ms: 60_000,
            ..ProbeConfig::default()
        },
        ..ProcessConfig::default()
    })
}

/// Starts chat and embeddings at the same time on free loopback ports; returns once both
/// answer `/health` and a first check, with the seconds each took.
pub async fn start(llama: &Llama, run_dir: &Path) -> Result<Vec<(Running, f64)>, String> {
    std::fs::create_dir_all(run_dir).map_err(|e| format!("{}: {e}", run_dir.display()))?;
    let specs = [
        Spec {
            name: "llama-chat",
            model: "smollm2",
            gguf: &llama.smollm2,
            // 4 parallel slots of 1,024 tokens each.
            flags: &["-np", "4", "-c", "4096"],
            probe: InferenceKind::Chat,
        },
        Spec {
            name: "llama-embed",
            model: "minilm",
            gguf: &llama.minilm,
            // A batch as large as the context: an embedding input is never split.
            flags: &[
                "--embeddings",
                "-np",
                "4",
                "-c",
                "2048",
                "-b",
                "2048",
                "-ub",
                "2048",
            ],
            probe: InferenceKind::Embedding,
        },
    ];
    let mut servers = Vec::new();
    for spec in &specs {
        let server = ProcessServer::new(config(llama, spec, run_dir)?)
            .map_err(|e| format!("{}: {e}", spec.name))?;
        servers.push((spec.model, Arc::new(server)));
    }
    let starts = servers.iter().map(|(model, server)| {
        let (model, server) = (*model, Arc::clone(server));
        async move {
            let t0 = Instant::now();
            server.start().await?;
            server.check().await?;
            Ok::<_, horos_servers::ServerError>((model, t0.elapsed().as_secs_f64()))
        }
    });
    let results = futures_join_all(starts).await;
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for ((model, server), result) in servers.into_iter().zip(results) {
        match result.and_then(|r| r.map_err(|e| e.to_string())) {
            Ok((_, secs)) => {
                let supervisor = Supervisor::spawn(
                    server.clone(),
                    SupervisorConfig {
                        interval_ms: 5_000,
                        failure_threshold: 3,
                        ..SupervisorConfig::default()
                    },
                );
                out.push((
                    Running {
                        model,
                        server,
                        supervisor,
                    },
                    secs,
                ));
            }
            Err(e) => {
                errors.push(format!(
                    "{model} did not start: {e} (log: {})",
                    server
                        .config()
                        .log_path
                        .as_deref()
                        .unwrap_or(Path::new("?"))
                        .display()
                ));
                let _ = server.stop().await;
            }
        }
    }
    if !errors.is_empty() {
        for (r, _) in out {
            let _ = r.stop().await;
        }
        return Err(errors.join("; "));
    }
    Ok(out)
}

/// Runs the futures concurrently and returns their outputs in order (no extra dependency for a
/// two-element join).
async fn futures_join_all<F: std::future::Future + Send + 'static>(
    futs: impl Iterator<Item = F>,
) -> Vec<Result<F::Output, String>>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.map_err(|e| e.to_string()));
    }
    out
}
