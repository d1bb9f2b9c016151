//! Putting a server to sleep on purpose and waking it: how each kind does it, found from the
//! command it was started with ([`SleepApi::for_command`]).
//!
//! - vLLM started with `--enable-sleep-mode` (and `VLLM_SERVER_DEV_MODE=1`, without which its
//!   sleep routes answer 404 and every sleep fails): `POST /sleep?level=N`, `POST /wake_up`,
//!   each confirmed by `GET /is_sleeping`.
//! - llama-server started with `--sleep-idle-seconds N` has no sleep request: it unloads its
//!   model after N idle seconds and reloads it at the next request. A sleep asked for waits
//!   until it has fallen asleep by itself (nothing reaches it meanwhile: its lane's gate is
//!   closed), whatever the level asked (it drops its weights: level 2's keep); a wake is one
//!   tiny request (the probe's inference). Started without the flag, it cannot sleep.

use std::time::Duration;

use horos_server_control::SleepLevel;

use crate::error::ServerError;
use crate::probe::Probe;

/// How often a sleep of llama-server asks whether it has fallen asleep.
const POLL: Duration = Duration::from_millis(100);

/// Which way a server sleeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepKind {
    /// vLLM's sleep mode: asked, at level 1 or 2.
    Vllm,
    /// llama-server's idle timer: asleep by itself after `idle` without a request.
    IdleTimer {
        /// Its `--sleep-idle-seconds`.
        idle: Duration,
    },
}

/// How a server sleeps on request, and how long a sleep or a wake may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SleepApi {
    kind: SleepKind,
    limit: Duration,
}

impl SleepApi {
    /// The way the server started with `argv` sleeps (`None`: it cannot), a sleep or a wake
    /// given `limit` (a start's time-out, say) before it is a failure.
    pub fn for_command(argv: &[String], limit: Duration) -> Option<SleepApi> {
        let kind = if argv.iter().any(|a| a == "--enable-sleep-mode") {
            SleepKind::Vllm
        } else {
            let at = argv
                .iter()
                .position(|a| a.starts_with("--sleep-idle-seconds"))?;
            let value = match argv[at].split_once('=') {
                Some((_, v)) => v,
                None => argv.get(at + 1)?.as_str(),
            };
            let idle = value.trim().parse::<f64>().ok().filter(|s| *s >= 0.0)?;
            SleepKind::IdleTimer {
                idle: Duration::try_from_secs_f64(idle).ok()?,
            }
        };
        Some(SleepApi { kind, limit })
    }

    /// Which way it sleeps.
    pub fn kind(&self) -> SleepKind {
        self.kind
    }

    /// Puts the server `probe` checks to sleep at `level`; `Ok` once it says it sleeps.
    pub async fn sleep(&self, probe: &Probe, level: SleepLevel) -> Result<(), ServerError> {
        match self.kind {
            SleepKind::Vllm => {
                let path = format!("/sleep?level={}", level.number());
                self.post(probe, &path).await?;
                confirm(probe, true, &path).await
            }
            SleepKind::IdleTimer { idle } => {
                let deadline = tokio::time::Instant::now() + idle + self.limit;
                loop {
                    match probe.sleeping().await {
                        Some(true) => return Ok(()),
                        None => {
                            return Err(ServerError::Unsupported(format!(
                                "{}: says nothing of sleep (/props has no is_sleeping: a \
                                 llama-server older than --sleep-idle-seconds?)",
                                probe.url()
                            )));
                        }
                        Some(false) if tokio::time::Instant::now() >= deadline => {
                            return Err(ServerError::Sleep(format!(
                                "{}: still awake {:?} after its idle time",
                                probe.url(),
                                self.limit
                            )));
                        }
                        Some(false) => tokio::time::sleep(POLL).await,
                    }
                }
            }
        }
    }

    /// Wakes the server `probe` checks; `Ok` once it says it is awake (at once when it was).
    pub async fn wake(&self, probe: &Probe) -> Result<(), ServerError> {
        match self.kind {
            SleepKind::Vllm => {
                self.post(probe, "/wake_up").await?;
                confirm(probe, false, "/wake_up").await
            }
            SleepKind::IdleTimer { .. } => {
                if probe.sleeping().await == Some(false) {
                    return Ok(());
                }
                probe
                    .inference()
                    .await
                    .map_err(|e| ServerError::Sleep(format!("a request to wake it: {e}")))?;
                confirm(probe, false, "a request").await
            }
        }
    }

    async fn post(&self, probe: &Probe, path: &str) -> Result<(), ServerError> {
        probe
            .client()
            .with_timeouts(self.limit, None)
            .post_bytes(path, &serde_json::json!({}))
            .await
            .map(drop)
            .map_err(|e| ServerError::Sleep(format!("POST {path}: {e}")))
    }
}

/// Whether the server now says it sleeps (`asleep`) or not, after `what`.
async fn confirm(probe: &Probe, asleep: bool, what: &str) -> Result<(), ServerError> {
    match probe.sleeping().await {
        Some(now) if now == asleep => Ok(()),
        Some(now) => Err(ServerError::Sleep(format!(
            "after {what} it says is_sleeping = {now}"
        ))),
        None => Err(ServerError::Sleep(format!(
            "after {what} it does not say whether it sleeps"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_command_says_how_a_server_sleeps() {
        let limit = Duration::from_secs(9);
        let kind = |a: &[&str]| SleepApi::for_command(&argv(a), limit).map(|s| s.kind());
        assert_eq!(
            kind(&["vllm", "serve", "m", "--enable-sleep-mode"]),
            Some(SleepKind::Vllm)
        );
        assert_eq!(
            kind(&["llama-server", "-m", "m.gguf", "--sleep-idle-seconds", "30"]),
            Some(SleepKind::IdleTimer {
                idle: Duration::from_secs(30)
            })
        );
        assert_eq!(
            kind(&["llama-server", "--sleep-idle-seconds=1.5"]),
            Some(SleepKind::IdleTimer {
                idle: Duration::from_millis(1500)
            })
        );
        assert_eq!(kind(&["llama-server", "-m", "m.gguf"]), None);
        assert_eq!(kind(&["vllm", "serve", "m"]), None);
        assert_eq!(kind(&["llama-server", "--sleep-idle-seconds"]), None);
        assert_eq!(kind(&["llama-server", "--sleep-idle-seconds", "-3"]), None);
    }
}
