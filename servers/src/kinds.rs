//! The backend registry: the inference servers a model can name by kind instead of writing
//! its command. Each kind knows its executable, how to start it for a model's weights (the
//! command, with `{port}`, `{model}` and `{tp}` expanded at each start like any command), what
//! the health check's one-token inference asks, and the request paths it serves.
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
}

/// A kind of inference server.
#[derive(Debug, Clone, Copy)]
pub struct BackendKind {
    /// Its name in a configuration (`backend = "llama-server"`).
    pub name: &'static str,
    /// The executable when the model names none.
    pub binary: &'static str,
    /// Its command for one model.
    pub command: fn(&KindArgs<'_>) -> Vec<String>,
    /// The request paths it serves.
    pub paths: &'static [&'static str],
    /// Files it runs (name, text), to write to [`KindArgs::dir`].
    pub files: &'static [(&'static str, &'static str)],
}

impl BackendKind {
    /// What the health check's one-token inference asks of a model in `role`; `None`: no
    /// inference, `/health` only (an image server answers neither chats nor embeddings).
    pub fn probe(&self, role: ModelRole) -> Option<InferenceKind> {
        match role {
            ModelRole::Generate => Some(InferenceKind::Chat),
            ModelRole::Embed => Some(InferenceKind::Embedding),
            ModelRole::Image => None,
        }
    }
}

/// The image worker's source (`servers/py/diffusers_worker.py`).
pub const DIFFUSERS_WORKER: &str = include_str!("../py/diffusers_worker.py");

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

/// Every kind.
pub const KINDS: &[BackendKind] = &[
    BackendKind {
        name: "llama-server",
        binary: "llama-server",
        command: llama_server,
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
        binary: "vllm",
        command: vllm,
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
        binary: "python3",
        command: diffusers,
        paths: &["/v1/images/generations"],
        files: &[("diffusers_worker.py", DIFFUSERS_WORKER)],
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

    #[test]
    fn kinds_build_their_commands() {
        let k = kind("llama-server").unwrap();
        let c = (k.command)(&KindArgs {
            binary: "/opt/llama-server",
            weights: "/m/q.gguf",
            role: ModelRole::Embed,
            dir: "",
        });
        assert_eq!(c[..3], ["/opt/llama-server", "-m", "/m/q.gguf"]);
        assert!(c.contains(&"{port}".to_owned()) && c.contains(&"--embeddings".to_owned()));
        assert_eq!(k.probe(ModelRole::Embed), Some(InferenceKind::Embedding));
        let c = (kind("vllm").unwrap().command)(&KindArgs {
            binary: "vllm",
            weights: "Qwen/Qwen2.5-7B-Instruct",
            role: ModelRole::Generate,
            dir: "",
        });
        assert_eq!(c[..3], ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]);
        let k = kind("diffusers").unwrap();
        let c = (k.command)(&KindArgs {
            binary: "/venv/bin/python",
            weights: "/models/tiny-sd",
            role: ModelRole::Image,
            dir: "/run/kinds/diffusers/",
        });
        assert_eq!(
            c[..2],
            [
                "/venv/bin/python",
                "/run/kinds/diffusers/diffusers_worker.py"
            ]
        );
        assert_eq!(k.probe(ModelRole::Image), None);
        assert!(k.files[0].1.contains("/v1/images/generations"));
        assert!(kind("tgi").is_none());
        assert_eq!(kind_names(), ["llama-server", "vllm", "diffusers"]);
    }
}
