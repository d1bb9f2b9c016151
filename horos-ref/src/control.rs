//! A server the binary runs itself: a local process started from the lane's `command`.

use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use horos_feeder::ServerControl;
use horos_vllm_client::Client;

/// Starts `command`, restarts it after a crash (SIGKILL, then start again), checks `/health`.
/// Dropping it kills the server.
pub struct ProcessControl {
    command: Vec<String>,
    client: Client,
    wait: Duration,
    child: Mutex<Option<Child>>,
}

impl ProcessControl {
    /// A control for `command` (not started yet: call `restart`).
    pub fn new(command: Vec<String>, client: Client, wait: Duration) -> Self {
        ProcessControl {
            command,
            client,
            wait,
            child: Mutex::new(None),
        }
    }

    fn take(&self) -> Option<Child> {
        self.child.lock().ok().and_then(|mut c| c.take())
    }

    fn spawn(&self) -> std::io::Result<()> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty command"))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()?;
        if let Ok(mut slot) = self.child.lock() {
            *slot = Some(child);
        }
        Ok(())
    }
}

fn kill(child: Option<Child>) {
    if let Some(mut c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[async_trait::async_trait]
impl ServerControl for ProcessControl {
    async fn restart(&self) -> Result<(), String> {
        let old = self.take();
        tokio::task::spawn_blocking(move || kill(old))
            .await
            .map_err(|e| e.to_string())?;
        self.spawn()
            .map_err(|e| format!("cannot run {:?}: {e}", self.command))?;
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            if self.client.health().await.is_ok() {
                return Ok(());
            }
            let exited = self
                .child
                .lock()
                .ok()
                .and_then(|mut c| c.as_mut().map(|c| c.try_wait()))
                .and_then(|r| r.ok())
                .flatten();
            if let Some(status) = exited {
                return Err(format!("the server exited at start-up ({status})"));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("no answer on /health after {:?}", self.wait));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn healthy(&self) -> bool {
        let running = self
            .child
            .lock()
            .ok()
            .and_then(|mut c| c.as_mut().map(|c| matches!(c.try_wait(), Ok(None))))
            .unwrap_or(false);
        running && self.client.health().await.is_ok()
    }
}

impl Drop for ProcessControl {
    fn drop(&mut self) {
        kill(self.take());
    }
}
