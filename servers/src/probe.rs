//! The health probe: `/health` (or the server's own health path), plus a tiny inference every N
//! checks so that an engine that still answers `/health` but never generates (a hung scheduler, a
//! wedged GPU) is reported unhealthy.
//!
//! A server that sleeps (llama-server's `--sleep-idle-seconds`: the model unloaded after idle
//! seconds, reloaded by the next request; vLLM's sleep mode) is neither woken nor kept awake by
//! the probe: each check asks whether it sleeps ([`Probe::sleeping`]: llama-server's `/props`,
//! vLLM's `/is_sleeping`); a server asleep gets no tiny inference (it would wake it), nor does
//! one started to sleep when idle ([`ProbeConfig::idle_sleep`]: it would start its idle time
//! again), whose hung generation shows in the requests' own time-outs instead.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use horos_vllm_client::{
    ChatMessage, ChatRequest, Client, ClientConfig, CompletionRequest, EmbeddingRequest,
};
use serde::{Deserialize, Serialize};

use crate::error::ServerError;

/// Which tiny request the inference probe sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InferenceKind {
    /// `/v1/chat/completions` with `max_tokens = 1` (instruct and vision models).
    #[default]
    Chat,
    /// `/v1/completions` with `max_tokens = 1` (base models without a chat template).
    Completion,
    /// `/v1/embeddings` of one short text (embedding servers, which refuse generation).
    Embedding,
}

/// Probe settings (every key defaulted, unknown keys refused, so a configuration file's section
/// can be this type as it is).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProbeConfig {
    /// The path that answers 2xx once the server serves (`/health`, what vLLM, llama-server and
    /// the image worker answer; a server of the user's own may have another).
    pub health_path: String,
    /// Time-out of one `/health` call, ms (5000).
    pub health_timeout_ms: u64,
    /// Send the tiny inference on every N-th check, the first check included (6; 1: every
    /// check; 0: never, `/health` only).
    pub inference_every: u32,
    /// Time-out of the tiny inference, ms (10 000). On a saturated server the probe queues behind
    /// real work: keep it well above a request's queueing time (see the README).
    pub inference_timeout_ms: u64,
    /// The request kind.
    pub kind: InferenceKind,
    /// The model name to send; `None`: the first id of `/v1/models` (asked once).
    pub model: Option<String>,
    /// The prompt (`"hi"`).
    pub prompt: String,
    /// The server was started to sleep when idle (llama-server's `--sleep-idle-seconds`,
    /// vLLM's `--enable-sleep-mode`; set from the command by [`ProbeConfig::for_command`]): the
    /// tiny inference, which would keep it awake, is never sent. Any other server gets it
    /// unless it says it sleeps now.
    pub idle_sleep: bool,
}

impl ProbeConfig {
    /// These settings for a server started with `argv`: [`ProbeConfig::idle_sleep`] when the
    /// command asks the server to sleep when idle.
    pub fn for_command(mut self, argv: &[String]) -> Self {
        if argv
            .iter()
            .any(|a| a.starts_with("--sleep-idle-seconds") || a == "--enable-sleep-mode")
        {
            self.idle_sleep = true;
        }
        self
    }
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            health_path: "/health".to_owned(),
            health_timeout_ms: 5000,
            inference_every: 6,
            inference_timeout_ms: 10_000,
            kind: InferenceKind::Chat,
            model: None,
            prompt: "hi".to_owned(),
            idle_sleep: false,
        }
    }
}

/// Health checks of one server. Cheap to share (`&self` everywhere); it counts its checks to
/// know when the next inference is due.
#[derive(Debug)]
pub struct Probe {
    health: Client,
    inference: Client,
    config: ProbeConfig,
    checks: AtomicU64,
    /// The model name found in `/v1/models` (a std mutex, never held across an `.await`).
    model: Mutex<Option<String>>,
    /// Where the server says whether it sleeps, once found; `Some(None)`: it does not say.
    sleep_path: Mutex<Option<Option<&'static str>>>,
    /// Due inferences left out because the server slept.
    slept: AtomicU64,
    /// What the server said at the last check: asleep.
    asleep: AtomicBool,
}

impl Probe {
    /// A probe of the server at `url` (`http://127.0.0.1:PORT`).
    pub fn new(url: &str, config: ProbeConfig) -> Result<Probe, ServerError> {
        // Its own client (own connection pool and concurrency limit): probes never wait behind
        // the feeder's calls on the client side.
        let health = Client::with_config(
            ClientConfig::new(url)
                .total_timeout(Duration::from_millis(config.health_timeout_ms.max(1)))
                .connect_timeout(Duration::from_millis(
                    config.health_timeout_ms.clamp(1, 5000),
                ))
                .max_concurrency(4)
                .health_path(config.health_path.clone()),
        )
        .map_err(|e| ServerError::Config(e.to_string()))?;
        let inference = health.with_timeouts(
            Duration::from_millis(config.inference_timeout_ms.max(1)),
            None,
        );
        Ok(Probe {
            health,
            inference,
            model: Mutex::new(config.model.clone()),
            config,
            checks: AtomicU64::new(0),
            sleep_path: Mutex::new(None),
            slept: AtomicU64::new(0),
            asleep: AtomicBool::new(false),
        })
    }

    /// Whether the server said it slept at the last [`Probe::check`] (or [`Probe::sleeping`]
    /// call); no request is made.
    pub fn asleep(&self) -> bool {
        self.asleep.load(Ordering::Relaxed)
    }

    /// Due inferences the probe left out because the server can sleep (one would wake it, or
    /// keep it awake).
    pub fn slept_checks(&self) -> u64 {
        self.slept.load(Ordering::Relaxed)
    }

    /// Whether the server sleeps now: llama-server's `GET /props` (`is_sleeping`), else vLLM's
    /// `GET /is_sleeping`; `None` for a server that says neither (it never sleeps, as far as
    /// the probe can tell). Which one answers is learnt at the first call.
    pub async fn sleeping(&self) -> Option<bool> {
        let known = self.sleep_path.lock().ok().and_then(|p| *p);
        let paths: Vec<&'static str> = match known {
            Some(None) => return None,
            Some(Some(path)) => vec![path],
            None => vec!["/props", "/is_sleeping"],
        };
        let mut answered = true;
        for path in paths {
            let answer: Result<serde_json::Value, _> = self.health.get(path).await;
            if let Err(e) = &answer
                && !matches!(e, horos_vllm_client::Error::Status { .. })
            {
                // Not an answer (the connection, a time-out): ask again at the next check.
                answered = false;
            }
            if let Some(asleep) = answer.ok().and_then(|v| v["is_sleeping"].as_bool()) {
                self.asleep.store(asleep, Ordering::Relaxed);
                if let Ok(mut p) = self.sleep_path.lock() {
                    *p = Some(Some(path));
                }
                return Some(asleep);
            }
        }
        if known.is_none()
            && answered
            && let Ok(mut p) = self.sleep_path.lock()
        {
            *p = Some(None);
        }
        None
    }

    /// The client of its health calls (short time-outs: derive longer ones with
    /// `with_timeouts`).
    pub(crate) fn client(&self) -> &Client {
        &self.health
    }

    /// The settings.
    pub fn config(&self) -> &ProbeConfig {
        &self.config
    }

    /// The server's base URL.
    pub fn url(&self) -> &str {
        self.health.base_url()
    }

    /// Checks done so far by [`Probe::check`].
    pub fn checks(&self) -> u64 {
        self.checks.load(Ordering::Relaxed)
    }

    /// `GET /health` (or [`ProbeConfig::health_path`]).
    pub async fn health(&self) -> Result<(), ServerError> {
        self.health
            .health()
            .await
            .map_err(|e| ServerError::Unhealthy(e.to_string()))
    }

    /// `/health`, and the tiny inference when it is due (every
    /// [`ProbeConfig::inference_every`] checks, starting with the first).
    pub async fn check(&self) -> Result<(), ServerError> {
        self.health().await?;
        let n = self.checks.fetch_add(1, Ordering::Relaxed);
        // Asked at every check (a server that never says costs nothing after the first).
        let sleep = self.sleeping().await;
        if sleep != Some(true) {
            self.asleep.store(false, Ordering::Relaxed);
        }
        let every = u64::from(self.config.inference_every);
        if every > 0 && n.is_multiple_of(every) {
            // Asleep, an inference would wake it; started to sleep when idle, it would keep it
            // from falling asleep (its idle time starts again at every request).
            if sleep == Some(true) || (self.config.idle_sleep && sleep.is_some()) {
                self.slept.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            self.inference().await?;
        }
        Ok(())
    }

    /// `/health` and the tiny inference, whatever the count.
    pub async fn check_full(&self) -> Result<(), ServerError> {
        self.health().await?;
        self.checks.fetch_add(1, Ordering::Relaxed);
        self.inference().await
    }

    /// The tiny inference alone: one token (or one embedding) within the inference time-out.
    pub async fn inference(&self) -> Result<(), ServerError> {
        let model = self.model().await?;
        let hung = |e: horos_vllm_client::Error| ServerError::Hung(e.to_string());
        let prompt = self.config.prompt.clone();
        match self.config.kind {
            InferenceKind::Chat => {
                let req = ChatRequest::new(model, vec![ChatMessage::user(prompt)])
                    .max_tokens(1)
                    .temperature(0.0);
                self.inference.chat(&req).await.map_err(hung)?;
            }
            InferenceKind::Completion => {
                let mut req = CompletionRequest::new(model, prompt);
                req.max_tokens = Some(1);
                req.temperature = Some(0.0);
                self.inference.completion(&req).await.map_err(hung)?;
            }
            InferenceKind::Embedding => {
                let req = EmbeddingRequest::new(model, prompt);
                self.inference.embeddings(&req).await.map_err(hung)?;
            }
        }
        Ok(())
    }

    async fn model(&self) -> Result<String, ServerError> {
        if let Some(m) = self.model.lock().ok().and_then(|m| m.clone()) {
            return Ok(m);
        }
        let list = self
            .health
            .models()
            .await
            .map_err(|e| ServerError::Unhealthy(format!("/v1/models: {e}")))?;
        let id = list
            .data
            .first()
            .map(|m| m.id.clone())
            .ok_or_else(|| ServerError::Unhealthy("/v1/models lists no model".into()))?;
        if let Ok(mut m) = self.model.lock() {
            *m = Some(id.clone());
        }
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::ProbeConfig;

    #[test]
    fn only_a_server_started_to_sleep_when_idle_goes_without_the_inference() {
        let argv = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let plain = ProbeConfig::default().for_command(&argv(&["llama-server", "-m", "m.gguf"]));
        assert!(
            !plain.idle_sleep,
            "llama-server's /props says is_sleeping even without sleep"
        );
        for sleepy in [
            argv(&["llama-server", "--sleep-idle-seconds", "300"]),
            argv(&["llama-server", "--sleep-idle-seconds=300"]),
            argv(&["vllm", "serve", "m", "--enable-sleep-mode"]),
        ] {
            assert!(
                ProbeConfig::default().for_command(&sleepy).idle_sleep,
                "{sleepy:?}"
            );
        }
    }
}
