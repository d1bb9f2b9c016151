//! A server run as a local process: its own process group, output to a log file, a pidfile,
//! SIGTERM then SIGKILL on stop, SIGKILL on drop.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use crate::sleep::SleepApi;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::ServerError;
use crate::pidfile::{self, PidRecord};
use crate::probe::{Probe, ProbeConfig};
use crate::server::{ExitInfo, Lifecycle, ManagedServer, RunState};
use crate::template::Vars;

/// How to run a server process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessConfig {
    /// The name (log and pidfile names, messages).
    pub name: String,
    /// Program and arguments, e.g. `["vllm", "serve", "{model}", "--port", "{port}"]`; the
    /// placeholders of [`Vars`] are expanded.
    pub command: Vec<String>,
    /// Extra environment (values expanded too).
    pub env: BTreeMap<String, String>,
    /// Working directory (default: inherited).
    pub cwd: Option<PathBuf>,
    /// The host the URL uses (`127.0.0.1`); the command decides what the server binds.
    pub host: String,
    /// The port the server listens on.
    pub port: u16,
    /// GPUs, passed as `CUDA_VISIBLE_DEVICES` when not empty.
    pub gpus: Vec<u32>,
    /// MB of the model on each of `gpus`, for `{tensor_split}` (empty: equal shares).
    pub tensor_split: Vec<u64>,
    /// The model id, for `{model}` (default: the name).
    pub model: Option<String>,
    /// stdout and stderr go here, appended (default: `$TMPDIR/horos-server-NAME.log`).
    pub log_path: Option<PathBuf>,
    /// Pidfile (default: none). With one, a start first ends a server an earlier run left.
    pub pidfile: Option<PathBuf>,
    /// Longest wait for `/health` after a start, s (600: large models load for minutes).
    pub start_timeout_s: u64,
    /// Grace between SIGTERM and SIGKILL, s (10).
    pub stop_timeout_s: u64,
    /// Health probe settings.
    pub probe: ProbeConfig,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        Self {
            name: "server".to_owned(),
            command: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            host: "127.0.0.1".to_owned(),
            port: 8000,
            gpus: Vec::new(),
            tensor_split: Vec::new(),
            model: None,
            log_path: None,
            pidfile: None,
            start_timeout_s: 600,
            stop_timeout_s: 10,
            probe: ProbeConfig::default(),
        }
    }
}

/// The child and where its output starts in the log.
#[derive(Debug)]
struct Running {
    child: Child,
    log_offset: u64,
}

/// A server process. See the crate documentation for an example.
#[derive(Debug)]
pub struct ProcessServer {
    config: ProcessConfig,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    url: String,
    log_path: PathBuf,
    probe: Probe,
    lifecycle: Lifecycle,
    /// A std mutex, only ever held for a `try_wait` or a `take`, never across an `.await`.
    running: Mutex<Option<Running>>,
    /// The process group of the last child, to clean up after a crash of its leader.
    last_pgid: Mutex<Option<i32>>,
}

impl ProcessServer {
    /// A server for `config` (not started: call [`ManagedServer::start`]).
    pub fn new(config: ProcessConfig) -> Result<ProcessServer, ServerError> {
        let vars = Vars {
            port: config.port,
            host_port: config.port,
            gpus: config.gpus.clone(),
            name: config.name.clone(),
            model: config.model.clone().unwrap_or_else(|| config.name.clone()),
            tensor_split: config.tensor_split.clone(),
        };
        let argv = vars.expand_all(&config.command);
        if argv.first().is_none_or(|p| p.is_empty()) {
            return Err(ServerError::Config(format!(
                "{}: the command is empty",
                config.name
            )));
        }
        if config.port == 0 {
            return Err(ServerError::Config(format!(
                "{}: port 0 (the URL must be known before the start: pick a port)",
                config.name
            )));
        }
        let mut env: Vec<(String, String)> = config
            .env
            .iter()
            .map(|(k, v)| (k.clone(), vars.expand(v)))
            .collect();
        if !config.gpus.is_empty() && !config.env.contains_key("CUDA_VISIBLE_DEVICES") {
            env.push(("CUDA_VISIBLE_DEVICES".to_owned(), vars.gpu_list()));
        }
        let url = format!("http://{}:{}", config.host, config.port);
        let probe = Probe::new(&url, config.probe.clone().for_command(&config.command))?;
        let log_path = config.log_path.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("horos-server-{}.log", sanitize(&config.name)))
        });
        Ok(ProcessServer {
            argv,
            env,
            url,
            log_path,
            probe,
            lifecycle: Lifecycle::default(),
            running: Mutex::new(None),
            last_pgid: Mutex::new(None),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ProcessConfig {
        &self.config
    }

    /// The expanded argv.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The running child's pid.
    pub fn pid(&self) -> Option<u32> {
        self.running
            .lock()
            .ok()
            .and_then(|r| r.as_ref().map(|r| r.child.id()))
    }

    /// The last `max_bytes` of this start's output (for error messages and status pages).
    pub async fn log_tail(&self, max_bytes: u64) -> String {
        let offset = self
            .running
            .lock()
            .ok()
            .and_then(|r| r.as_ref().map(|r| r.log_offset))
            .unwrap_or(0);
        let path = self.log_path.clone();
        tokio::task::spawn_blocking(move || read_tail(&path, offset, max_bytes))
            .await
            .unwrap_or_default()
    }

    fn spawn(&self) -> Result<(), ServerError> {
        if let Some(dir) = self.log_path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)?;
        writeln!(
            log,
            "=== horos-servers: starting {}: {:?}",
            self.config.name, self.argv
        )?;
        let log_offset = log.seek(SeekFrom::End(0))?;
        let (program, args) = self
            .argv
            .split_first()
            .ok_or_else(|| ServerError::Config("empty command".into()))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            // Its own process group: a stop reaches the engine's worker processes too, and a
            // Ctrl-C in our terminal does not reach the server behind our back.
            .process_group(0);
        if let Some(dir) = &self.config.cwd {
            cmd.current_dir(dir);
        }
        let child = cmd.spawn().map_err(|source| ServerError::Spawn {
            command: program.clone(),
            source,
        })?;
        let pid = child.id() as i32;
        if let Some(path) = &self.config.pidfile {
            let record = PidRecord {
                pid,
                argv: self.argv.clone(),
            };
            if let Err(e) = pidfile::write(path, &record) {
                tracing::warn!(server = %self.config.name, error = %e, "cannot write the pidfile");
            }
        }
        if let Ok(mut g) = self.last_pgid.lock() {
            *g = Some(pid);
        }
        if let Ok(mut r) = self.running.lock() {
            *r = Some(Running { child, log_offset });
        }
        tracing::info!(server = %self.config.name, pid, log = %self.log_path.display(), "started");
        Ok(())
    }

    /// Ends the current child: SIGTERM to its group, the grace period, SIGKILL, reap.
    async fn kill_current(&self) {
        let taken = self.running.lock().ok().and_then(|mut r| r.take());
        let pgid = self.last_pgid.lock().ok().and_then(|mut g| g.take());
        let grace = Duration::from_secs(self.config.stop_timeout_s);
        // The pidfile is ours to remove only when we had a child: otherwise it may describe an
        // earlier run's leftover that the start is about to end.
        let owned = taken.is_some() || pgid.is_some();
        if let Some(Running { mut child, .. }) = taken {
            let pid = child.id() as i32;
            if matches!(child.try_wait(), Ok(None)) {
                pidfile::signal_pgid(pid, libc::SIGTERM);
                let deadline = tokio::time::Instant::now() + grace;
                // The leader turns zombie (not reaped yet, so its pid cannot be reused) when it
                // exits: then the group id is still safe to signal.
                while pidfile::is_alive(pid) && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                pidfile::signal_pgid(pid, libc::SIGKILL);
            } else {
                // The leader crashed (and a state check reaped it): its workers may still hold
                // the GPU. (A pid reused as a group id this soon is very unlikely.)
                pidfile::signal_pgid(pid, libc::SIGKILL);
            }
            let _ = tokio::task::spawn_blocking(move || child.wait()).await;
        } else if let Some(pgid) = pgid {
            // No child but a group: as above.
            pidfile::signal_pgid(pgid, libc::SIGKILL);
        }
        if owned && let Some(path) = &self.config.pidfile {
            pidfile::remove(path);
        }
    }

    async fn start_locked(&self) -> Result<(), ServerError> {
        self.kill_current().await;
        if let Some(path) = self.config.pidfile.clone() {
            let grace = Duration::from_secs(self.config.stop_timeout_s);
            let ended = tokio::task::spawn_blocking(move || pidfile::kill_leftover(&path, grace))
                .await
                .ok()
                .flatten();
            if let Some(pid) = ended {
                tracing::warn!(server = %self.config.name, pid, "ended a leftover server");
            }
        }
        // A server that just ended may take a moment to release its port.
        let mut tries = 0;
        while port_busy(&self.config.host, self.config.port) {
            tries += 1;
            if tries > 20 {
                return Err(ServerError::PortBusy(self.config.port));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.spawn()?;
        self.lifecycle.bump();
        let waited = Duration::from_secs(self.config.start_timeout_s);
        let deadline = tokio::time::Instant::now() + waited;
        let mut pause = Duration::from_millis(50);
        loop {
            if let RunState::Exited(mut info) = self.state().await {
                info.detail = self.log_tail(2048).await;
                self.kill_current().await;
                return Err(ServerError::NotRunning(format!(
                    "{} exited at start-up: {info}",
                    self.config.name
                )));
            }
            let last = match self.probe.health().await {
                Ok(()) => return Ok(()),
                Err(e) => e.to_string(),
            };
            if tokio::time::Instant::now() >= deadline {
                self.kill_current().await;
                return Err(ServerError::StartTimeout { waited, last });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }
}

#[async_trait]
impl ManagedServer for ProcessServer {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn url(&self) -> String {
        self.url.clone()
    }

    fn probe(&self) -> &Probe {
        &self.probe
    }

    fn generation(&self) -> u64 {
        self.lifecycle.generation()
    }

    /// From its command, a sleep or a wake given its start time-out.
    fn sleep_api(&self) -> Option<SleepApi> {
        SleepApi::for_command(
            &self.argv,
            Duration::from_secs(self.config.start_timeout_s.max(1)),
        )
    }

    async fn start(&self) -> Result<(), ServerError> {
        let _guard = self.lifecycle.lock.lock().await;
        self.start_locked().await
    }

    async fn stop(&self) -> Result<(), ServerError> {
        let _guard = self.lifecycle.lock.lock().await;
        self.kill_current().await;
        tracing::info!(server = %self.config.name, "stopped");
        Ok(())
    }

    /// As the default, with the last lines of the server's output when it exited.
    async fn check(&self) -> Result<(), ServerError> {
        let state = match self.state().await {
            RunState::Exited(mut info) => {
                info.detail = self.log_tail(1024).await;
                RunState::Exited(info)
            }
            other => other,
        };
        if let Some(e) = state.not_running_error(&self.config.name) {
            return Err(e);
        }
        self.probe.check().await
    }

    async fn state(&self) -> RunState {
        let Ok(mut slot) = self.running.lock() else {
            return RunState::NotStarted;
        };
        match slot.as_mut().map(|r| r.child.try_wait()) {
            None => RunState::NotStarted,
            Some(Ok(None)) => RunState::Running,
            Some(Ok(Some(status))) => RunState::Exited(exit_info(status)),
            Some(Err(e)) => RunState::Unknown(format!("cannot wait for the process: {e}")),
        }
    }
}

impl Drop for ProcessServer {
    fn drop(&mut self) {
        let taken = self.running.get_mut().ok().and_then(|r| r.take());
        if let Some(Running { mut child, .. }) = taken {
            if matches!(child.try_wait(), Ok(None)) {
                pidfile::signal_pgid(child.id() as i32, libc::SIGKILL);
            }
            let _ = child.wait();
            if let Some(path) = &self.config.pidfile {
                pidfile::remove(path);
            }
        }
    }
}

fn exit_info(status: ExitStatus) -> ExitInfo {
    ExitInfo {
        code: status.code().map(i64::from),
        signal: status.signal(),
        oom_killed: false,
        detail: String::new(),
    }
}

/// Whether something listens on `host:port` already (a bind fails).
fn port_busy(host: &str, port: u16) -> bool {
    std::net::TcpListener::bind((host, port)).is_err()
}

/// The last `max_bytes` of `path` from `offset` on, cut to whole lines.
fn read_tail(path: &Path, offset: u64, max_bytes: u64) -> String {
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = offset.max(len.saturating_sub(max_bytes));
    if f.seek(SeekFrom::Start(from)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.take(max_bytes).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let text = if from > offset {
        text.split_once('\n').map_or(&*text, |(_, rest)| rest)
    } else {
        &text
    };
    text.trim().to_owned()
}

/// A name usable in file and container names.
pub(crate) fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_command_is_a_config_error() {
        let e = ProcessServer::new(ProcessConfig::default()).unwrap_err();
        assert!(matches!(e, ServerError::Config(_)), "{e}");
        let zero = ProcessConfig {
            command: vec!["srv".into()],
            port: 0,
            ..ProcessConfig::default()
        };
        assert!(matches!(
            ProcessServer::new(zero),
            Err(ServerError::Config(_))
        ));
    }

    #[test]
    fn expands_and_sets_gpus() {
        let s = ProcessServer::new(ProcessConfig {
            name: "think".into(),
            command: vec![
                "srv".into(),
                "--port".into(),
                "{port}".into(),
                "{model}".into(),
            ],
            port: 8123,
            gpus: vec![1, 3],
            ..ProcessConfig::default()
        })
        .unwrap();
        assert_eq!(s.argv(), ["srv", "--port", "8123", "think"]);
        assert!(
            s.env
                .contains(&("CUDA_VISIBLE_DEVICES".into(), "1,3".into()))
        );
        assert_eq!(s.url(), "http://127.0.0.1:8123");
    }

    #[test]
    fn tail_reads_whole_lines_after_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, "old\nline one\nline two\n").unwrap();
        assert_eq!(read_tail(&p, 4, 1000), "line one\nline two");
        assert_eq!(read_tail(&p, 0, 10), "line two");
        assert_eq!(read_tail(&dir.path().join("none"), 0, 10), "");
    }
}
