//! The backend registry: the inference servers a model can name by kind instead of writing
//! its command. Each kind knows how it runs ([`Launch`]: a process of a command it builds for a
//! model's weights, with `{port}`, `{model}` and `{tp}` expanded at each start like any command;
//! or a container of the model's own image), its health check ([`Health`]: the path that answers
//! once it serves, and what the one-token inference asks), and the request paths it serves (the
//! coordinator refuses a request for a path its model does not serve before loading it).
//!
//! Adding a kind is one function that builds its command and one line in [`KINDS`]; a kind
//! that runs a script of its own ships it in [`BackendKind::files`], which the caller writes to
//! a directory ([`KindArgs::dir`]) before the first start.

use crate::probe::InferenceKind;

/// What a kind's command is built from.
#[derive(Debug, Clone, Copy)]
pub struct KindArgs<'a> {
    /// The executable (the kind's default, or the model's own).
    pub binary: &'a str,
    /// The weights: a file (GGUF) or a directory / hub name (vLLM).
    pub weights: &'a str,
    /// What the model does.
    pub role: ModelRole,
    /// Where the kind's [`BackendKind::files`] were written.
    pub dir: &'a str,
}

/// What a model does, which decides a server's flags and its health check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelRole {
    /// Chat and completions.
    Generate,
    /// Embeddings.
    Embed,
    /// Images (`/v1/images/generations`).
    Image,
    /// Speech (`/v1/audio/speech`).
    Speech,
}

/// How a kind's server runs.
#[derive(Debug, Clone, Copy)]
pub enum Launch {
    /// A process on the host.
    Process {
        /// The executable when the model names none.
        binary: &'static str,
        /// Its command for one model.
        command: fn(&KindArgs<'_>) -> Vec<String>,
    },
    /// A container of the image the model names (built locally, never pulled), running the
    /// model's own command; its port published on 127.0.0.1 only, its GPUs requested as
    /// devices.
    Container,
}

/// How a kind's servers are health-checked.
#[derive(Debug, Clone, Copy)]
pub struct Health {
    /// The path that answers 2xx once the server serves (a model may name another).
    pub path: &'static str,
    /// What the one-token inference asks of a model in a role; `None`: no inference, the path
    /// only.
    pub inference: fn(ModelRole) -> Option<InferenceKind>,
}

/// A kind of inference server.
#[derive(Debug, Clone, Copy)]
pub struct BackendKind {
    /// Its name in a configuration (`backend = "llama-server"`).
    pub name: &'static str,
    /// How it runs.
    pub launch: Launch,
    /// Its health check.
    pub health: Health,
    /// The request paths it serves (a model may declare its own instead); empty: not declared,
    /// every request is forwarded.
    pub paths: &'static [&'static str],
    /// Files it runs (name, text), to write to [`KindArgs::dir`].
    pub files: &'static [(&'static str, &'static str)],
}

impl BackendKind {
    /// What the health check's one-token inference asks of a model in `role`; `None`: no
    /// inference, the health path only (an image server answers neither chats nor embeddings).
    pub fn probe(&self, role: ModelRole) -> Option<InferenceKind> {
        (self.health.inference)(role)
    }
}

/// The inference an OpenAI server answers for a model's role: a chat for a generating model, an
/// embedding for an embedding model, none for an image or speech model (also the health check
/// of a model that names no kind).
pub fn by_role(role: ModelRole) -> Option<InferenceKind> {
    match role {
        ModelRole::Generate => Some(InferenceKind::Chat),
        ModelRole::Embed => Some(InferenceKind::Embedding),
        ModelRole::Image | ModelRole::Speech => None,
    }
}

/// No inference whatever the role: a server that answers neither chats nor embeddings.
fn health_only(_: ModelRole) -> Option<InferenceKind> {
    None
}

/// `GET /health`, then the inference of the model's role.
const HEALTH: Health = Health {
    path: "/health",
    inference: by_role,
};

/// The image worker's source (`servers/py/diffusers_worker.py`).
pub const DIFFUSERS_WORKER: &str = include_str!("../py/diffusers_worker.py");

/// The HTTP plumbing both Python workers import (`servers/py/worker_http.py`), written beside
/// them.
pub const WORKER_HTTP: &str = include_str!("../py/worker_http.py");

/// The speech worker's source (`servers/py/tts_worker.py`).
pub const TTS_WORKER: &str = include_str!("../py/tts_worker.py");

fn strings(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

/// llama-server: one GGUF file, served under the model's name, all layers on the GPUs it is
/// given.
fn llama_server(a: &KindArgs<'_>) -> Vec<String> {
    let mut c = strings(&[
        a.binary,
        "-m",
        a.weights,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--alias",
        "{model}",
        "-ngl",
        "999",
    ]);
    if a.role == ModelRole::Embed {
        c.push("--embeddings".into());
    }
    c
}

/// vLLM's OpenAI server: a model directory or hub name, split over the GPUs it is given.
fn vllm(a: &KindArgs<'_>) -> Vec<String> {
    let mut c = strings(&[
        a.binary,
        "serve",
        a.weights,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--served-model-name",
        "{model}",
        "--tensor-parallel-size",
        "{tp}",
    ]);
    if a.role == ModelRole::Embed {
        // vLLM 0.10 and later choose pooling with `--runner` (`--task` is gone).
        c.extend(strings(&["--runner", "pooling"]));
    }
    c
}

/// The diffusers worker (a Python process serving `/v1/images/generations`): `weights` is a
/// text-to-image pipeline directory (the tests' is the tiny one with random weights that
/// `scripts/make_tiny_diffusers.py` builds). The executable is a Python with torch and diffusers.
fn diffusers(a: &KindArgs<'_>) -> Vec<String> {
    let script = format!("{}/diffusers_worker.py", a.dir.trim_end_matches('/'));
    strings(&[
        a.binary,
        &script,
        "--port",
        "{port}",
        "--model",
        "{model}",
        "--pipeline",
        a.weights,
    ])
}

/// The speech worker (a Python process serving `/v1/audio/speech` with espeak-ng, standard
/// library only): `weights` is its default voice (an espeak-ng voice such as `en-us`, used when a
/// request names none). The executable is a Python 3.
fn tts(a: &KindArgs<'_>) -> Vec<String> {
    let script = format!("{}/tts_worker.py", a.dir.trim_end_matches('/'));
    strings(&[
        a.binary, &script, "--port", "{port}", "--model", "{model}", "--voice", a.weights,
    ])
}

/// Every kind.
pub const KINDS: &[BackendKind] = &[
    BackendKind {
        name: "llama-server",
        launch: Launch::Process {
            binary: "llama-server",
            command: llama_server,
        },
        health: HEALTH,
        paths: &[
            "/v1/chat/completions",
            "/v1/completions",
            "/completion",
            "/v1/embeddings",
            "/v1/rerank",
        ],
        files: &[],
    },
    BackendKind {
        name: "vllm",
        launch: Launch::Process {
            binary: "vllm",
            command: vllm,
        },
        health: HEALTH,
        paths: &[
            "/v1/chat/completions",
            "/v1/completions",
            "/v1/embeddings",
            "/v1/rerank",
            "/pooling",
        ],
        files: &[],
    },
    BackendKind {
        name: "diffusers",
        launch: Launch::Process {
            binary: "python3",
            command: diffusers,
        },
        health: Health {
            path: "/health",
            inference: health_only,
        },
        paths: &["/v1/images/generations"],
        files: &[
            ("diffusers_worker.py", DIFFUSERS_WORKER),
            ("worker_http.py", WORKER_HTTP),
        ],
    },
    BackendKind {
        name: "tts",
        launch: Launch::Process {
            binary: "python3",
            command: tts,
        },
        health: Health {
            path: "/health",
            inference: health_only,
        },
        paths: &["/v1/audio/speech"],
        files: &[
            ("tts_worker.py", TTS_WORKER),
            ("worker_http.py", WORKER_HTTP),
        ],
    },
    // A container of the user's own: its paths are whatever its image serves (llama-server's
    // `/completion` as much as the OpenAI routes), so none are declared unless the model's
    // `paths` says; health-checked as an OpenAI server unless told otherwise.
    BackendKind {
        name: "docker",
        launch: Launch::Container,
        health: HEALTH,
        paths: &[],
        files: &[],
    },
];

/// The kind named `name`.
pub fn kind(name: &str) -> Option<&'static BackendKind> {
    KINDS.iter().find(|k| k.name == name)
}

/// The kinds' names, for an error message.
pub fn kind_names() -> Vec<&'static str> {
    KINDS.iter().map(|k| k.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command a process kind builds.
    fn command(name: &str, args: KindArgs<'_>) -> Vec<String> {
        match kind(name).unwrap().launch {
            Launch::Process { command, .. } => command(&args),
            Launch::Container => panic!("{name} is not a process kind"),
        }
    }

    #[test]
    fn kinds_build_their_commands() {
        let c = command(
            "llama-server",
            KindArgs {
                binary: "/opt/llama-server",
                weights: "/m/q.gguf",
                role: ModelRole::Embed,
                dir: "",
            },
        );
        assert_eq!(c[..3], ["/opt/llama-server", "-m", "/m/q.gguf"]);
        assert!(c.contains(&"{port}".to_owned()) && c.contains(&"--embeddings".to_owned()));
        let c = command(
            "vllm",
            KindArgs {
                binary: "vllm",
                weights: "Qwen/Qwen2.5-7B-Instruct",
                role: ModelRole::Generate,
                dir: "",
            },
        );
        assert_eq!(c[..3], ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]);
        let c = command(
            "diffusers",
            KindArgs {
                binary: "/venv/bin/python",
                weights: "/models/tiny-sd",
                role: ModelRole::Image,
                dir: "/run/kinds/diffusers/",
            },
        );
        assert_eq!(
            c[..2],
            [
                "/venv/bin/python",
                "/run/kinds/diffusers/diffusers_worker.py"
            ]
        );
        assert!(
            kind("diffusers").unwrap().files[0]
                .1
                .contains("/v1/images/generations")
        );
        let c = command(
            "tts",
            KindArgs {
                binary: "python3",
                weights: "en-us",
                role: ModelRole::Speech,
                dir: "/run/kinds/",
            },
        );
        assert_eq!(
            c,
            [
                "python3",
                "/run/kinds/tts_worker.py",
                "--port",
                "{port}",
                "--model",
                "{model}",
                "--voice",
                "en-us"
            ]
        );
        let worker = kind("tts").unwrap().files[0];
        assert_eq!(worker.0, "tts_worker.py");
        assert!(worker.1.contains("/v1/audio/speech") && worker.1.contains("espeak-ng"));
        assert!(matches!(kind("docker").unwrap().launch, Launch::Container));
        assert!(matches!(
            kind("vllm").unwrap().launch,
            Launch::Process { binary: "vllm", .. }
        ));
        assert!(kind("tgi").is_none());
        assert_eq!(
            kind_names(),
            ["llama-server", "vllm", "diffusers", "tts", "docker"]
        );
    }

    /// Each kind decides its health check: the image worker is never asked for an inference,
    /// whatever the model's role; the OpenAI servers are asked what the role answers.
    #[test]
    fn each_kind_decides_its_health_check() {
        let llama = kind("llama-server").unwrap();
        assert_eq!(
            llama.probe(ModelRole::Embed),
            Some(InferenceKind::Embedding)
        );
        assert_eq!(llama.probe(ModelRole::Generate), Some(InferenceKind::Chat));
        let diffusers = kind("diffusers").unwrap();
        assert_eq!(diffusers.probe(ModelRole::Image), None);
        assert_eq!(diffusers.probe(ModelRole::Generate), None);
        assert_eq!(kind("docker").unwrap().probe(ModelRole::Image), None);
        let tts = kind("tts").unwrap();
        assert_eq!(tts.probe(ModelRole::Speech), None);
        assert_eq!(tts.probe(ModelRole::Generate), None);
        assert_eq!(tts.health.path, "/health");
        assert_eq!(by_role(ModelRole::Speech), None);
        for k in KINDS {
            assert!(k.health.path.starts_with('/'), "{}", k.name);
        }
    }

    /// The paths a kind serves: an image worker no chat, a chat server no image.
    #[test]
    fn kinds_declare_the_paths_they_serve() {
        let serves = |name: &str, path: &str| kind(name).unwrap().paths.contains(&path);
        assert!(serves("diffusers", "/v1/images/generations"));
        assert!(!serves("diffusers", "/v1/chat/completions"));
        assert!(serves("llama-server", "/completion"));
        assert!(!serves("llama-server", "/v1/images/generations"));
        assert!(!serves("vllm", "/v1/images/generations"));
        assert_eq!(kind("tts").unwrap().paths, ["/v1/audio/speech"]);
        assert!(!serves("tts", "/v1/chat/completions"));
        assert!(!serves("llama-server", "/v1/audio/speech"));
        // A container of the user's own declares nothing: every request is forwarded.
        assert!(kind("docker").unwrap().paths.is_empty());
    }
}
