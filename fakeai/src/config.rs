//! Server configuration and fault specifications, with a command-line form shared by the
//! `horos-fakeai` binary and [`crate::FakeProcess`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A fault the server injects into a request.
///
/// Every fault has a textual form (its [`fmt::Display`] / [`FromStr`] forms agree), used by the
/// `--fault` command-line option, by the `x-fakeai-fault` request header and by the
/// `x_fakeai_fault` request body field:
///
/// | text            | behaviour |
/// |-----------------|-----------|
/// | `none`          | answer normally |
/// | `status:CODE`   | answer with HTTP status `CODE` and an OpenAI-style error body |
/// | `ratelimit:S`   | answer 429 with `Retry-After: S` (seconds) |
/// | `drop:N`        | streaming: send `N` chunks, then close the connection mid-body; non-streaming: send the headers and part of the body, then close |
/// | `stall:N`       | like `drop:N`, but the connection then stays open and silent (an upstream stalled mid-answer) |
/// | `reset`         | close the connection without answering |
/// | `malformed`     | answer 200 with a body (or SSE event) that is not valid JSON |
/// | `hang`          | never answer (the request holds its slot until the client gives up) |
/// | `crash`         | the server crashes (see [`CrashAction`]) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Answer normally.
    #[default]
    None,
    /// Answer with this HTTP status code and an error body.
    Status(u16),
    /// Answer 429 Too Many Requests with `Retry-After` set to this many seconds.
    RateLimited(u32),
    /// Close the connection after this many stream chunks (or mid-body when not streaming).
    DropMidStream(usize),
    /// Send this many stream chunks (half the body when not streaming), then nothing more while
    /// keeping the connection open: an upstream stalled mid-answer.
    StallMidStream(usize),
    /// Close the connection before sending any response.
    Reset,
    /// Answer 200 with malformed JSON.
    MalformedJson,
    /// Never answer.
    Hang,
    /// Crash the server.
    Crash,
}

/// An invalid configuration value or fault specification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl FromStr for Fault {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        let number = |what: &str| -> Result<u64, ConfigError> {
            arg.ok_or_else(|| ConfigError(format!("fault `{s}` needs a number: {what}")))?
                .trim()
                .parse::<u64>()
                .map_err(|_| ConfigError(format!("fault `{s}`: {what} is not a number")))
        };
        match kind {
            "none" | "" => Ok(Fault::None),
            "status" => {
                let code = number("the HTTP status")?;
                if !(100..=999).contains(&code) {
                    return Err(ConfigError(format!("fault `{s}`: status out of range")));
                }
                Ok(Fault::Status(code as u16))
            }
            "ratelimit" => {
                let secs = u32::try_from(number("the Retry-After seconds")?)
                    .map_err(|_| ConfigError(format!("fault `{s}`: Retry-After out of range")))?;
                Ok(Fault::RateLimited(secs))
            }
            "drop" => Ok(Fault::DropMidStream(number("the chunk count")? as usize)),
            "stall" => Ok(Fault::StallMidStream(number("the chunk count")? as usize)),
            "reset" => Ok(Fault::Reset),
            "malformed" => Ok(Fault::MalformedJson),
            "hang" => Ok(Fault::Hang),
            "crash" => Ok(Fault::Crash),
            _ => Err(ConfigError(format!(
                "unknown fault `{s}` (expected none, status:CODE, ratelimit:S, drop:N, stall:N, reset, malformed, hang or crash)"
            ))),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::None => f.write_str("none"),
            Fault::Status(code) => write!(f, "status:{code}"),
            Fault::RateLimited(secs) => write!(f, "ratelimit:{secs}"),
            Fault::DropMidStream(n) => write!(f, "drop:{n}"),
            Fault::StallMidStream(n) => write!(f, "stall:{n}"),
            Fault::Reset => f.write_str("reset"),
            Fault::MalformedJson => f.write_str("malformed"),
            Fault::Hang => f.write_str("hang"),
            Fault::Crash => f.write_str("crash"),
        }
    }
}

/// What a crash does: the request body contains the crash marker, or the fault is [`Fault::Crash`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashAction {
    /// The whole process aborts at once (`std::process::abort`): every connection is closed by the
    /// kernel, like a real inference server dying on a poison pill. The default of the binary.
    ExitProcess,
    /// The in-process server stops: the listener closes (new connections are refused) and every open
    /// connection is dropped mid-request. The default of [`crate::FakeServer::start`], which must not
    /// kill the test process that hosts it.
    StopServer,
}

/// How the server answers chat and completion requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Answer with the prompt: the text of the last user message (chat) or the prompt (completions).
    Echo,
    /// Answer with this text.
    Fixed(String),
}

/// vLLM's sleep mode, scripted: `POST /sleep?level=1|2`, `POST /wake_up`, `GET /is_sleeping`
/// (served only when [`SleepScript::enabled`], as vLLM serves them only with
/// `--enable-sleep-mode` and `VLLM_SERVER_DEV_MODE=1`). While asleep, the inference endpoints
/// answer 503 (vLLM serves nothing that needs the weights while it sleeps); `/health`,
/// `/v1/models` and `/metrics` still answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SleepScript {
    /// Serve the sleep API (`--enable-sleep-mode`). Off: those paths answer 404.
    pub enabled: bool,
    /// Delay before `/sleep` answers; the server is asleep once it has answered.
    pub sleep_latency: Duration,
    /// Delay before `/wake_up` answers when the server sleeps at level 1.
    pub wake_latency_l1: Duration,
    /// Delay before `/wake_up` answers when the server sleeps at level 2.
    pub wake_latency_l2: Duration,
    /// The fault of every `/sleep` call: `none`, `status:CODE` (the server stays awake),
    /// `hang` (never answers, stays awake) or `reset`.
    pub sleep_fault: Fault,
    /// The fault of every `/wake_up` call of a sleeping server: `none`, `status:CODE` (it stays
    /// asleep), `hang` or `reset`.
    pub wake_fault: Fault,
    /// llama-server's `--sleep-idle-seconds` (`--sleep-idle-ms`): asleep once no inference
    /// request has run for this long, woken by the next one (after the level-2 wake latency),
    /// `GET /props` saying `is_sleeping`. Independent of [`SleepScript::enabled`].
    pub idle_sleep: Option<Duration>,
}

impl SleepScript {
    /// Whether `fault` is one a sleep or wake call can have.
    fn accepts(fault: Fault) -> bool {
        matches!(
            fault,
            Fault::None | Fault::Status(_) | Fault::Hang | Fault::Reset
        )
    }
}

/// The server's behaviour.
#[derive(Debug, Clone)]
pub struct FakeConfig {
    /// Port to listen on (127.0.0.1); 0 picks a free one.
    pub port: u16,
    /// The model name served (`/v1/models`) and reported in answers.
    pub model: String,
    /// Requests processed at the same time; the others wait (reported as waiting in `/metrics`).
    pub slots: usize,
    /// Delay before the response headers of an inference request (after a slot is taken).
    pub latency: Duration,
    /// Delay between two stream chunks.
    pub chunk_latency: Duration,
    /// The answer's text.
    pub reply: Reply,
    /// The fault injected into inference requests (chat, completions, embeddings).
    pub fault: Fault,
    /// Apply `fault` to the first this-many inference requests only, then answer normally
    /// (`None`: to all of them).
    pub fault_count: Option<u64>,
    /// A request whose body contains this string crashes the server.
    pub crash_marker: Option<String>,
    /// What a crash does.
    pub crash_action: CrashAction,
    /// Dimension of the (deterministic) embedding vectors: one per input (`/v1/embeddings`) or
    /// one per token (`/pooling`).
    pub embedding_dim: usize,
    /// Largest request body accepted (bigger ones get 413).
    pub max_body_bytes: usize,
    /// vLLM's sleep mode (off by default: the sleep paths answer 404).
    pub sleep: SleepScript,
    /// How long the server process waits before it listens (a model's load time; the
    /// in-process [`crate::FakeServer`] does not wait).
    pub startup_delay: Duration,
}

impl Default for FakeConfig {
    fn default() -> Self {
        Self {
            port: 0,
            model: "fake-model".to_owned(),
            slots: 8,
            latency: Duration::ZERO,
            chunk_latency: Duration::ZERO,
            reply: Reply::Echo,
            fault: Fault::None,
            fault_count: None,
            crash_marker: None,
            crash_action: CrashAction::StopServer,
            embedding_dim: 8,
            max_body_bytes: 16 * 1024 * 1024,
            sleep: SleepScript::default(),
            startup_delay: Duration::ZERO,
        }
    }
}

/// The command-line help of the `horos-fakeai` binary.
pub const USAGE: &str = "\
horos-fakeai: a scriptable fault-injection OpenAI-compatible server (127.0.0.1 only)

Prints `HOROS_FAKEAI_URL=http://127.0.0.1:PORT` on stdout once it listens.

Options:
  --port N              port (default 0: a free one)
  --model NAME          model name (default fake-model)
  --slots N             requests processed at once; the rest wait (default 8)
  --latency-ms N        delay before the response headers (default 0)
  --chunk-latency-ms N  delay between stream chunks (default 0)
  --reply echo|TEXT     answer with the prompt (default) or with TEXT
  --fault SPEC          none | status:CODE | ratelimit:S | drop:N | stall:N | reset | malformed | hang | crash
  --fault-count N       apply --fault to the first N inference requests only
  --crash-marker TEXT   a request body containing TEXT crashes the server
  --crash-action exit|stop  exit: abort the process (default for the binary); stop: stop serving
  --embedding-dim N     embedding dimension (default 8)
  --max-body-bytes N    request body limit (default 16 MiB)
  --enable-sleep-mode   serve vLLM's sleep API: POST /sleep?level=1|2, POST /wake_up,
                        GET /is_sleeping (inference answers 503 while asleep)
  --sleep-latency-ms N  delay of POST /sleep (default 0)
  --wake-l1-latency-ms N  delay of POST /wake_up from level 1 (default 0)
  --wake-l2-latency-ms N  delay of POST /wake_up from level 2 (default 0)
  --sleep-fault SPEC    none | status:CODE | hang | reset, for every POST /sleep
  --wake-fault SPEC     none | status:CODE | hang | reset, for every POST /wake_up while asleep
  --sleep-idle-ms N     llama-server's idle sleep: asleep after N ms without a request, woken
                        by the next one; GET /props says is_sleeping
  --startup-delay-ms N  wait N ms before listening (a model's load time; default 0)
  -h, --help            this help

Per request: the header `x-fakeai-fault: SPEC` or the body field `\"x_fakeai_fault\": \"SPEC\"`
overrides --fault, and `\"x_fakeai_latency_ms\": N` overrides --latency-ms.
";

impl FakeConfig {
    /// Parses command-line arguments (without the program name). `crash_action` defaults to
    /// [`CrashAction::ExitProcess`] here, since the arguments describe a server process.
    ///
    /// Returns `Ok(None)` when help was asked for.
    pub fn from_args<I, S>(args: I) -> Result<Option<Self>, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut cfg = FakeConfig {
            crash_action: CrashAction::ExitProcess,
            ..FakeConfig::default()
        };
        let mut args = args.into_iter().map(|a| a.as_ref().to_owned());
        while let Some(flag) = args.next() {
            if flag == "-h" || flag == "--help" {
                return Ok(None);
            }
            let (flag, inline) = match flag.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
                _ => (flag, None),
            };
            let mut value = || -> Result<String, ConfigError> {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| ConfigError(format!("{flag} needs a value")))
            };
            fn num<T: FromStr>(flag: &str, v: &str) -> Result<T, ConfigError> {
                v.parse()
                    .map_err(|_| ConfigError(format!("{flag}: `{v}` is not a valid number")))
            }
            match flag.as_str() {
                "--port" => cfg.port = num(&flag, &value()?)?,
                "--model" => cfg.model = value()?,
                "--slots" => {
                    cfg.slots = num(&flag, &value()?)?;
                    if cfg.slots == 0 {
                        return Err(ConfigError("--slots must be at least 1".into()));
                    }
                }
                "--latency-ms" => cfg.latency = Duration::from_millis(num(&flag, &value()?)?),
                "--chunk-latency-ms" => {
                    cfg.chunk_latency = Duration::from_millis(num(&flag, &value()?)?)
                }
                "--reply" => {
                    let v = value()?;
                    cfg.reply = if v == "echo" {
                        Reply::Echo
                    } else {
                        Reply::Fixed(v)
                    };
                }
                "--fault" => cfg.fault = value()?.parse()?,
                "--fault-count" => cfg.fault_count = Some(num(&flag, &value()?)?),
                "--crash-marker" => cfg.crash_marker = Some(value()?),
                "--crash-action" => {
                    cfg.crash_action = match value()?.as_str() {
                        "exit" => CrashAction::ExitProcess,
                        "stop" => CrashAction::StopServer,
                        other => {
                            return Err(ConfigError(format!(
                                "--crash-action: `{other}` (expected exit or stop)"
                            )));
                        }
                    }
                }
                "--embedding-dim" => cfg.embedding_dim = num(&flag, &value()?)?,
                "--max-body-bytes" => cfg.max_body_bytes = num(&flag, &value()?)?,
                "--enable-sleep-mode" => cfg.sleep.enabled = true,
                "--startup-delay-ms" => {
                    cfg.startup_delay = Duration::from_millis(num(&flag, &value()?)?)
                }
                "--sleep-idle-ms" => {
                    cfg.sleep.idle_sleep = Some(Duration::from_millis(num(&flag, &value()?)?))
                }
                "--sleep-latency-ms" => {
                    cfg.sleep.sleep_latency = Duration::from_millis(num(&flag, &value()?)?)
                }
                "--wake-l1-latency-ms" => {
                    cfg.sleep.wake_latency_l1 = Duration::from_millis(num(&flag, &value()?)?)
                }
                "--wake-l2-latency-ms" => {
                    cfg.sleep.wake_latency_l2 = Duration::from_millis(num(&flag, &value()?)?)
                }
                "--sleep-fault" | "--wake-fault" => {
                    let fault: Fault = value()?.parse()?;
                    if !SleepScript::accepts(fault) {
                        return Err(ConfigError(format!(
                            "{flag}: `{fault}` (expected none, status:CODE, hang or reset)"
                        )));
                    }
                    if flag == "--sleep-fault" {
                        cfg.sleep.sleep_fault = fault;
                    } else {
                        cfg.sleep.wake_fault = fault;
                    }
                }
                other => return Err(ConfigError(format!("unknown option `{other}`"))),
            }
        }
        Ok(Some(cfg))
    }

    /// The command-line arguments that [`FakeConfig::from_args`] turns back into this configuration.
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--port".to_owned(),
            self.port.to_string(),
            "--model".to_owned(),
            self.model.clone(),
            "--slots".to_owned(),
            self.slots.to_string(),
            "--latency-ms".to_owned(),
            self.latency.as_millis().to_string(),
            "--chunk-latency-ms".to_owned(),
            self.chunk_latency.as_millis().to_string(),
            "--reply".to_owned(),
            match &self.reply {
                Reply::Echo => "echo".to_owned(),
                Reply::Fixed(t) => t.clone(),
            },
            "--fault".to_owned(),
            self.fault.to_string(),
            "--crash-action".to_owned(),
            match self.crash_action {
                CrashAction::ExitProcess => "exit".to_owned(),
                CrashAction::StopServer => "stop".to_owned(),
            },
            "--embedding-dim".to_owned(),
            self.embedding_dim.to_string(),
            "--max-body-bytes".to_owned(),
            self.max_body_bytes.to_string(),
        ];
        if let Some(n) = self.fault_count {
            a.push("--fault-count".to_owned());
            a.push(n.to_string());
        }
        if let Some(m) = &self.crash_marker {
            a.push("--crash-marker".to_owned());
            a.push(m.clone());
        }
        let sleep = &self.sleep;
        if sleep.enabled {
            a.push("--enable-sleep-mode".to_owned());
        }
        for (flag, d) in [
            ("--sleep-latency-ms", sleep.sleep_latency),
            ("--wake-l1-latency-ms", sleep.wake_latency_l1),
            ("--wake-l2-latency-ms", sleep.wake_latency_l2),
        ] {
            a.push(flag.to_owned());
            a.push(d.as_millis().to_string());
        }
        a.push("--sleep-fault".to_owned());
        a.push(sleep.sleep_fault.to_string());
        a.push("--wake-fault".to_owned());
        a.push(sleep.wake_fault.to_string());
        if let Some(idle) = sleep.idle_sleep {
            a.push("--sleep-idle-ms".to_owned());
            a.push(idle.as_millis().to_string());
        }
        if !self.startup_delay.is_zero() {
            a.push("--startup-delay-ms".to_owned());
            a.push(self.startup_delay.as_millis().to_string());
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_text_round_trips() {
        for f in [
            Fault::None,
            Fault::Status(503),
            Fault::RateLimited(2),
            Fault::DropMidStream(3),
            Fault::StallMidStream(2),
            Fault::Reset,
            Fault::MalformedJson,
            Fault::Hang,
            Fault::Crash,
        ] {
            assert_eq!(f.to_string().parse::<Fault>().unwrap(), f);
        }
        assert!("status:abc".parse::<Fault>().is_err());
        assert!("status:42".parse::<Fault>().is_err());
        assert!("explode".parse::<Fault>().is_err());
    }

    #[test]
    fn args_round_trip() {
        let cfg = FakeConfig {
            port: 1234,
            model: "m".into(),
            slots: 3,
            latency: Duration::from_millis(15),
            chunk_latency: Duration::from_millis(2),
            reply: Reply::Fixed("hello there".into()),
            fault: Fault::Status(429),
            fault_count: Some(2),
            crash_marker: Some("POISON".into()),
            crash_action: CrashAction::StopServer,
            embedding_dim: 4,
            max_body_bytes: 1000,
            sleep: SleepScript {
                enabled: true,
                sleep_latency: Duration::from_millis(30),
                wake_latency_l1: Duration::from_millis(40),
                wake_latency_l2: Duration::from_millis(90),
                sleep_fault: Fault::Hang,
                wake_fault: Fault::Status(500),
                idle_sleep: Some(Duration::from_millis(700)),
            },
            startup_delay: Duration::from_millis(250),
        };
        let back = FakeConfig::from_args(cfg.to_args()).unwrap().unwrap();
        assert_eq!(back.port, 1234);
        assert_eq!(back.model, "m");
        assert_eq!(back.slots, 3);
        assert_eq!(back.latency, Duration::from_millis(15));
        assert_eq!(back.chunk_latency, Duration::from_millis(2));
        assert_eq!(back.reply, Reply::Fixed("hello there".into()));
        assert_eq!(back.fault, Fault::Status(429));
        assert_eq!(back.fault_count, Some(2));
        assert_eq!(back.crash_marker.as_deref(), Some("POISON"));
        assert_eq!(back.crash_action, CrashAction::StopServer);
        assert_eq!(back.embedding_dim, 4);
        assert_eq!(back.max_body_bytes, 1000);
        assert_eq!(back.sleep, cfg.sleep);
        assert_eq!(back.startup_delay, Duration::from_millis(250));
        let plain = FakeConfig::from_args(FakeConfig::default().to_args())
            .unwrap()
            .unwrap();
        assert_eq!(plain.sleep, SleepScript::default());
    }

    #[test]
    fn args_errors_and_help() {
        assert!(FakeConfig::from_args(["--help"]).unwrap().is_none());
        assert!(FakeConfig::from_args(["--slots", "0"]).is_err());
        assert!(FakeConfig::from_args(["--port"]).is_err());
        assert!(FakeConfig::from_args(["--bogus"]).is_err());
        assert!(FakeConfig::from_args(["--wake-fault", "drop:2"]).is_err());
        assert!(FakeConfig::from_args(["--sleep-fault", "crash"]).is_err());
        let cfg = FakeConfig::from_args(["--latency-ms=7"]).unwrap().unwrap();
        assert_eq!(cfg.latency, Duration::from_millis(7));
        assert_eq!(cfg.crash_action, CrashAction::ExitProcess);
    }
}
