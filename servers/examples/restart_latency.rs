//! Prints how long llama-server takes to come back after a crash, as a process and as a
//! container: start → healthy, then kill → supervisor notices → restarted → healthy, a few
//! rounds. Needs `$HOROS_LLAMA_SERVER` / `$HOROS_SMOLLM2_GGUF` (scripts/setup_llama.sh) for the
//! process, and a Docker engine with `horos/llama-server:local` (scripts/build_llama_image.sh)
//! for the container; what is missing is skipped.
//!
//! `cargo run -p horos-servers --example restart_latency [ROUNDS]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use horos_servers::{
    DockerConfig, DockerServer, ManagedServer, ProbeConfig, ProcessConfig, ProcessServer,
    ServerState, Supervisor, SupervisorConfig,
};

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn llama_args(model: &str) -> Vec<String> {
    let mut a: Vec<String> = vec!["-m".into(), model.into()];
    a.extend(
        [
            "--port", "{port}", "-t", "1", "-np", "1", "-c", "1024", "--alias", "smollm2",
        ]
        .map(String::from),
    );
    a
}

fn supervisor_config() -> SupervisorConfig {
    SupervisorConfig {
        interval_ms: 500,
        failure_threshold: 2,
        backoff_initial_ms: 100,
        backoff_max_ms: 1000,
        reset_after_ms: 1000,
    }
}

fn probe() -> ProbeConfig {
    ProbeConfig {
        inference_every: 1,
        inference_timeout_ms: 30_000,
        ..ProbeConfig::default()
    }
}

/// Kills the server with `kill`, waits until the supervisor has restarted it; the time taken.
async fn round<S: ManagedServer + ?Sized>(
    server: &S,
    supervisor: &Supervisor,
    kill: impl FnOnce(),
) -> Option<Duration> {
    let before = supervisor.status().restarts;
    let t = Instant::now();
    kill();
    while t.elapsed() < Duration::from_secs(120) {
        let s = supervisor.status();
        if s.restarts > before && s.state == ServerState::Healthy {
            server.probe().check_full().await.ok()?;
            return Some(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

fn report(what: &str, start: Duration, rounds: &[Duration]) {
    let mut sorted = rounds.to_vec();
    sorted.sort();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
    println!(
        "{what}: start→healthy {:.2} s; kill→restarted→healthy median {:.2} s over {} rounds (min {:.2}, max {:.2}); supervisor interval 0.5 s, first back-off 0.1 s",
        start.as_secs_f64(),
        median.as_secs_f64(),
        rounds.len(),
        sorted.first().copied().unwrap_or_default().as_secs_f64(),
        sorted.last().copied().unwrap_or_default().as_secs_f64(),
    );
}

async fn process(rounds: usize) -> Result<(), Box<dyn std::error::Error>> {
    let (Ok(bin), Ok(model)) = (
        std::env::var("HOROS_LLAMA_SERVER"),
        std::env::var("HOROS_SMOLLM2_GGUF"),
    ) else {
        println!("process: skipped (HOROS_LLAMA_SERVER / HOROS_SMOLLM2_GGUF not set)");
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let mut command = vec![bin];
    command.extend(llama_args(&model));
    let server = Arc::new(ProcessServer::new(ProcessConfig {
        name: "latency".into(),
        command,
        port: free_port()?,
        log_path: Some(dir.path().join("llama.log")),
        start_timeout_s: 120,
        probe: probe(),
        ..ProcessConfig::default()
    })?);
    let t = Instant::now();
    server.start().await?;
    let start = t.elapsed();
    let supervisor = Supervisor::spawn(server.clone(), supervisor_config());
    let mut times = Vec::new();
    for _ in 0..rounds {
        let Some(pid) = server.pid() else { break };
        // SAFETY: kill(2) on our own child.
        let kill = move || unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        };
        match round(&*server, &supervisor, kill).await {
            Some(d) => times.push(d),
            None => println!("process: a round did not recover"),
        }
        tokio::time::sleep(Duration::from_millis(1100)).await; // past reset_after
    }
    supervisor.shutdown().await;
    server.stop().await?;
    report("process", start, &times);
    Ok(())
}

async fn docker(rounds: usize) -> Result<(), Box<dyn std::error::Error>> {
    let docker = match horos_servers::connect_docker(None).await {
        Ok(d) if d.ping().await.is_ok() => d,
        _ => {
            println!("docker: skipped (no engine answers)");
            return Ok(());
        }
    };
    if docker
        .inspect_image("horos/llama-server:local")
        .await
        .is_err()
    {
        println!("docker: skipped (no horos/llama-server:local; run scripts/build_llama_image.sh)");
        return Ok(());
    }
    let mut cmd = llama_args("/models/model.gguf");
    cmd.extend(["--host".to_owned(), "0.0.0.0".to_owned()]);
    let server = Arc::new(DockerServer::new(
        docker,
        DockerConfig {
            name: "latency".into(),
            image: "horos/llama-server:local".into(),
            cmd,
            container_port: 8080,
            host_port: free_port()?,
            owner: format!("example-{}", std::process::id()),
            start_timeout_s: 120,
            probe: probe(),
            ..DockerConfig::default()
        },
    )?);
    let t = Instant::now();
    server.start().await?;
    let start = t.elapsed();
    let supervisor = Supervisor::spawn(server.clone(), supervisor_config());
    let mut times = Vec::new();
    for _ in 0..rounds {
        let name = server.container_name().to_owned();
        let kill = move || {
            let _ = std::process::Command::new("docker")
                .args(["kill", &name])
                .output();
        };
        match round(&*server, &supervisor, kill).await {
            Some(d) => times.push(d),
            None => println!("docker: a round did not recover"),
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    supervisor.shutdown().await;
    server.stop().await?;
    report("docker", start, &times);
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    process(rounds).await?;
    docker(rounds).await?;
    Ok(())
}
