//! The server as its own process: the `horos-fakeai` binary, or a test binary re-executing itself.
//!
//! A crash ([`crate::CrashAction::ExitProcess`]) ends the whole process, so crash tests run the server
//! in a child process. Two ways:
//!
//! - [`FakeProcess::spawn_binary`] runs the `horos-fakeai` binary (in this crate's own tests its path is
//!   `env!("CARGO_BIN_EXE_horos-fakeai")`);
//! - [`FakeProcess::spawn_self`] re-executes the current test binary with `--exact TEST --nocapture`;
//!   the test calls [`run_child_if_requested`] first, which serves instead of testing in the child.
//!   This works from any crate, with no binary to build.

use std::io::{self, BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::config::{CrashAction, FakeConfig};

/// The arguments of a server process: a crash exits it.
fn process_args(config: &FakeConfig) -> Vec<String> {
    FakeConfig {
        crash_action: CrashAction::ExitProcess,
        ..config.clone()
    }
    .to_args()
}

/// The line prefix the server process prints on stdout once it listens, followed by its URL.
pub const URL_LINE_PREFIX: &str = "HOROS_FAKEAI_URL=";

/// The environment variable carrying the child's arguments (a JSON array) in [`FakeProcess::spawn_self`].
pub const CHILD_ENV: &str = "HOROS_FAKEAI_CHILD_ARGS";

/// With [`CHILD_ENV`]: a port (its value) on which [`run_child_if_requested`] also accepts
/// connections from every interface and forwards them to the server, which listens on 127.0.0.1
/// only. For a child run in a container, whose port Docker publishes; `{port}` in a server
/// manager's environment template names it.
pub const PUBLISH_ENV: &str = "HOROS_FAKEAI_PUBLISH_PORT";

/// How long to wait for a child to print its URL.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A fake server running in a child process. Dropping it kills the process (SIGKILL).
#[derive(Debug)]
pub struct FakeProcess {
    child: Child,
    url: String,
}

impl FakeProcess {
    /// Runs the `horos-fakeai` binary at `path` with `config` (as command-line arguments). In a child
    /// process a crash always ends the process ([`CrashAction::ExitProcess`], whatever
    /// `config.crash_action` says).
    pub fn spawn_binary(path: impl AsRef<Path>, config: &FakeConfig) -> io::Result<FakeProcess> {
        let mut cmd = Command::new(path.as_ref());
        cmd.args(process_args(config));
        Self::spawn_command(cmd)
    }

    /// Re-executes the current test binary to run only `test_name` (`--exact test_name --nocapture`),
    /// with [`CHILD_ENV`] set so that [`run_child_if_requested`], called first in that test, serves
    /// `config` instead of running the test. A crash ends the child process, as with
    /// [`FakeProcess::spawn_binary`].
    pub fn spawn_self(test_name: &str, config: &FakeConfig) -> io::Result<FakeProcess> {
        let exe = std::env::current_exe()?;
        let args = serde_json::to_string(&process_args(config)).map_err(io::Error::other)?;
        let mut cmd = Command::new(exe);
        cmd.args(["--exact", test_name, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, args);
        Self::spawn_command(cmd)
    }

    /// Runs `cmd`, which must print a [`URL_LINE_PREFIX`] line on stdout once it listens.
    pub fn spawn_command(mut cmd: Command) -> io::Result<FakeProcess> {
        cmd.stdout(Stdio::piped()).stdin(Stdio::null());
        let mut child = cmd.spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // (a test harness may print on the same line before it)
                if let Some(at) = line.find(URL_LINE_PREFIX)
                    && let Some(tx) = tx.take()
                {
                    let url = line[at + URL_LINE_PREFIX.len()..].trim();
                    let _ = tx.send(url.to_owned());
                }
                // Keep draining so that the child never blocks on a full pipe.
            }
        });
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(url) => Ok(FakeProcess { child, url }),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait()?;
                Err(io::Error::other(format!(
                    "the fake server process did not print its URL ({status})"
                )))
            }
        }
    }

    /// The server's base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited (and how), without waiting.
    pub fn try_exit_status(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Waits up to `timeout` for the process to exit; `None` if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait()? {
                return Ok(Some(s));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) -> io::Result<ExitStatus> {
        if let Some(s) = self.child.try_wait()? {
            return Ok(s);
        }
        self.child.kill()?;
        self.child.wait()
    }
}

impl Drop for FakeProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// Runs a fake server process: binds, prints `HOROS_FAKEAI_URL=<url>` on stdout, serves until the
/// server stops (a crash with [`crate::CrashAction::StopServer`]) or the process is killed.
pub fn serve_blocking(config: FakeConfig) -> io::Result<()> {
    serve_published(config, None)
}

/// [`serve_blocking`], also forwarding connections to `0.0.0.0:publish` (when given) to the
/// server.
fn serve_published(config: FakeConfig, publish: Option<u16>) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        tokio::time::sleep(config.startup_delay).await;
        let server = crate::FakeServer::start(config).await?;
        if let Some(port) = publish {
            let listener = tokio::net::TcpListener::bind(("0.0.0.0", port)).await?;
            tokio::spawn(forward(listener, server.addr()));
        }
        {
            use std::io::Write;
            let mut out = io::stdout().lock();
            writeln!(out, "\n{URL_LINE_PREFIX}{}", server.url())?;
            out.flush()?;
        }
        server.stopped().await;
        Ok(())
    })
}

/// Forwards every connection `listener` accepts to `target`, both ways, until either side
/// closes.
async fn forward(listener: tokio::net::TcpListener, target: std::net::SocketAddr) {
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            // Out of descriptors, say: the next accept may do better.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        tokio::spawn(async move {
            if let Ok(mut out) = tokio::net::TcpStream::connect(target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
            }
        });
    }
}

/// In a test re-executed by [`FakeProcess::spawn_self`] (the [`CHILD_ENV`] variable is set): serves
/// the fake server described by that variable and exits the process, never returning. Elsewhere:
/// returns at once. Call it first in a test that uses [`FakeProcess::spawn_self`]. With
/// [`PUBLISH_ENV`] set too, the server is also reached on that port of every interface (a
/// child in a container).
pub fn run_child_if_requested() {
    let Ok(args) = std::env::var(CHILD_ENV) else {
        return;
    };
    let publish = match std::env::var(PUBLISH_ENV).map(|p| p.parse::<u16>()) {
        Err(_) => None,
        Ok(Ok(port)) => Some(port),
        Ok(Err(e)) => {
            eprintln!("horos-fakeai child: {PUBLISH_ENV}: {e}");
            std::process::exit(2);
        }
    };
    let code = match serde_json::from_str::<Vec<String>>(&args)
        .map_err(|e| e.to_string())
        .and_then(|a| FakeConfig::from_args(a).map_err(|e| e.0))
    {
        Ok(Some(cfg)) => match serve_published(cfg, publish) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("horos-fakeai child: {e}");
                1
            }
        },
        Ok(None) => 2,
        Err(e) => {
            eprintln!("horos-fakeai child: bad arguments: {e}");
            2
        }
    };
    std::process::exit(code);
}
