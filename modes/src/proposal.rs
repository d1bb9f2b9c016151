//! A first configuration proposed from what this machine has (`horos-ref init`): its GPUs,
//! the models found in a directory ([`horos_gpu_alloc::discover`]) and the inference servers
//! found on it ([`horos_servers::discover`]). The rules, in order:
//!
//! 1. a model is served by a server that reads its format: a GGUF file by llama-server (the
//!    one found, else `llama-server` on `PATH`), a Hugging Face folder by vLLM where it is
//!    found; a model no server here reads is left out, with the reason;
//! 2. a model whose path, or its server's, is not UTF-8 is left out: a configuration file
//!    cannot name it;
//! 3. a model larger than all GPUs together is left out;
//! 4. the largest chat model that fits one GPU is a lane (`chat`) on its own server, fed in
//!    batches: the model that gets the most work;
//! 5. every other model goes to the model pool, loaded on demand; embedding models are pinned
//!    (documents are embedded all day) while they fit the pool together;
//! 6. with two GPUs or more, the allocator switches them between the lane and the pool (the
//!    lane starts on GPU 0, the pool on the others); with one, the lane keeps GPU 0 and the pool
//!    gets what the lane leaves of it.
//!
//! The proposal is data; [`crate::proposal_file`] renders it as a configuration file.

use std::path::PathBuf;

use horos_gpu_alloc::discover::{FoundModel, ModelFormat};
use horos_gpu_alloc::pool::Category;
use horos_servers::discover::FoundServer;
use horos_servers::kinds::{self, KindArgs, Launch, ModelRole};

/// The queue of the proposed lane.
pub const CHAT_QUEUE: &str = "chat";

/// A proposed configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The lanes (at most one: [`CHAT_QUEUE`]).
    pub lanes: Vec<ProposedLane>,
    /// The pool's models.
    pub pool: Vec<ProposedModel>,
    /// With two GPUs or more: the mode each GPU serves at start (a lane's queue or `pool`).
    pub allocator: Option<Vec<String>>,
    /// The pool's memory cap per GPU, MB (with one GPU: what the lane leaves).
    pub pool_memory_mb: Option<u64>,
    /// The models left out, with the reason.
    pub left_out: Vec<LeftOut>,
}

/// A proposed lane: a model on a server of its own.
#[derive(Debug, Clone, PartialEq)]
pub struct ProposedLane {
    /// Its queue.
    pub queue: String,
    /// The model's name (as served, and the coordinator's upstream name).
    pub model: String,
    /// Its server's port on 127.0.0.1.
    pub port: u16,
    /// Its server's command.
    pub command: Vec<String>,
    /// Its memory, MB.
    pub vram_mb: u64,
    /// Its GPUs (empty under the allocator).
    pub gpus: Vec<u32>,
    /// The weights it serves.
    pub weights: PathBuf,
}

/// A proposed pooled model.
#[derive(Debug, Clone, PartialEq)]
pub struct ProposedModel {
    /// Its name.
    pub name: String,
    /// Its server's kind (`llama-server`, `vllm`).
    pub backend: &'static str,
    /// The kind's executable when it is not on `PATH` under the kind's own name.
    pub binary: Option<PathBuf>,
    /// Its weights.
    pub weights: PathBuf,
    /// What it does.
    pub category: Category,
    /// Its memory, MB.
    pub vram_mb: u64,
    /// Loaded at start and kept.
    pub pin: bool,
}

/// A model the proposal leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct LeftOut {
    /// Its file or folder.
    pub path: PathBuf,
    /// Why.
    pub reason: String,
}

/// The server kind that reads `m`, with its executable where one was found (`None`: none of
/// that kind here, which leaves a folder out; a GGUF file still names `llama-server`).
fn server_for<'a>(
    m: &FoundModel,
    servers: &'a [FoundServer],
) -> Option<(&'static str, Option<&'a FoundServer>)> {
    let found = |kind: &str| servers.iter().find(|s| s.kind == kind);
    match m.format {
        ModelFormat::Gguf => Some(("llama-server", found("llama-server"))),
        ModelFormat::Safetensors => found("vllm").map(|s| ("vllm", Some(s))),
    }
}

/// The executable to write for `server`: a path unless it is the kind's own name on `PATH`.
fn binary_of(kind: &str, server: Option<&FoundServer>) -> Option<PathBuf> {
    let s = server?;
    let own = s.from_env.is_none() && s.path.file_name() == Some(kind.as_ref());
    (!own).then(|| s.path.clone())
}

/// The weights of `m` and the executable of its `server` (of `kind`) as a configuration file
/// names them, or why it cannot (a path that is not UTF-8).
fn written<'a>(
    m: &'a FoundModel,
    kind: &'static str,
    server: Option<&'a FoundServer>,
) -> Result<(&'a str, &'a str), String> {
    let weights = m
        .path
        .to_str()
        .ok_or("its path is not UTF-8: a configuration file cannot name it")?;
    let binary = match server {
        None => kind,
        Some(s) => s.path.to_str().ok_or_else(|| {
            format!(
                "its server {:?} is not UTF-8: a configuration file cannot name it",
                s.path
            )
        })?,
    };
    Ok((weights, binary))
}

/// The lane's command: its kind's, for a generating model at `weights`, at `port`, limited to
/// the context the estimate counted.
fn lane_command(kind: &str, binary: &str, m: &FoundModel, weights: &str, port: u16) -> Vec<String> {
    let Some(Launch::Process { command, .. }) = kinds::kind(kind).map(|k| k.launch) else {
        return Vec::new();
    };
    let mut c: Vec<String> = command(&KindArgs {
        binary,
        weights,
        role: ModelRole::Generate,
        dir: "",
    })
    .into_iter()
    .map(|a| {
        a.replace("{port}", &port.to_string())
            .replace("{model}", &m.name)
            .replace("{tp}", "1")
    })
    .collect();
    if kind == "llama-server" {
        let ctx = horos_gpu_alloc::gguf::DEFAULT_CONTEXT.to_string();
        c.extend(["-c".to_owned(), ctx, "--metrics".to_owned()]);
    }
    c
}

/// The proposal for GPUs of `gpus_mb` MB, `models` and `servers`; the lane's server listens on
/// `lane_port`.
pub fn propose(
    gpus_mb: &[u64],
    models: &[FoundModel],
    servers: &[FoundServer],
    lane_port: u16,
) -> Proposal {
    let total: u64 = gpus_mb.iter().sum();
    let largest_fit = gpus_mb.first().copied().unwrap_or(0);
    let mut left_out = Vec::new();
    let mut usable = Vec::new();
    for m in models {
        let Some((kind, server)) = server_for(m, servers) else {
            left_out.push(LeftOut {
                path: m.path.clone(),
                reason: "a Hugging Face folder needs vLLM, and no `vllm` is on PATH".into(),
            });
            continue;
        };
        match written(m, kind, server) {
            Err(reason) => left_out.push(LeftOut {
                path: m.path.clone(),
                reason,
            }),
            Ok(_) if m.vram_mb > total => left_out.push(LeftOut {
                path: m.path.clone(),
                reason: format!(
                    "it needs about {} MB, more than the GPUs' {total} MB together",
                    m.vram_mb
                ),
            }),
            Ok(paths) => usable.push((m, (kind, server), paths)),
        }
    }
    // The lane: the largest chat model that fits GPU 0 alone.
    let lane_at = usable
        .iter()
        .enumerate()
        .filter(|(_, (m, ..))| m.category == Category::Llm && m.vram_mb <= largest_fit)
        .max_by_key(|(_, (m, ..))| m.vram_mb)
        .map(|(i, _)| i);
    let mut lanes = Vec::new();
    if let Some(i) = lane_at {
        let (m, (kind, _), (weights, binary)) = usable.remove(i);
        lanes.push(ProposedLane {
            queue: CHAT_QUEUE.to_owned(),
            model: m.name.clone(),
            port: lane_port,
            command: lane_command(kind, binary, m, weights, lane_port),
            vram_mb: m.vram_mb,
            gpus: if gpus_mb.len() == 1 {
                vec![0]
            } else {
                Vec::new()
            },
            weights: m.path.clone(),
        });
    }
    let allocator = (gpus_mb.len() >= 2 && !lanes.is_empty()).then(|| {
        (0..gpus_mb.len())
            .map(|g| if g == 0 { CHAT_QUEUE } else { crate::POOL_MODE }.to_owned())
            .collect()
    });
    let pool_memory_mb = match (gpus_mb, lanes.first()) {
        ([one], Some(lane)) => Some(one.saturating_sub(lane.vram_mb).max(1)),
        _ => None,
    };
    // The pool's room for pinned models: the GPUs it starts with.
    let mut room: u64 = match (&allocator, pool_memory_mb) {
        (_, Some(mb)) => mb,
        (Some(_), None) => gpus_mb.iter().skip(1).sum(),
        (None, None) => total,
    };
    let pool = usable
        .into_iter()
        .map(|(m, (kind, server), _)| {
            let pin = m.category == Category::Embedding && m.vram_mb <= room;
            if pin {
                room -= m.vram_mb;
            }
            ProposedModel {
                name: m.name.clone(),
                backend: kind,
                binary: binary_of(kind, server),
                weights: m.path.clone(),
                category: m.category,
                vram_mb: m.vram_mb,
                pin,
            }
        })
        .collect();
    Proposal {
        lanes,
        pool,
        allocator,
        pool_memory_mb,
        left_out,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use horos_gpu_alloc::estimate::{Estimate, EstimateSource};

    use super::*;

    fn model(name: &str, format: ModelFormat, category: Category, mb: u64) -> FoundModel {
        FoundModel {
            name: name.into(),
            path: PathBuf::from(format!("/m/{name}")),
            format,
            category,
            architecture: String::new(),
            vram_mb: mb,
            estimate: Estimate {
                mb,
                source: EstimateSource::GgufHeader,
            },
        }
    }

    fn llama() -> Vec<FoundServer> {
        vec![FoundServer {
            kind: "llama-server",
            path: PathBuf::from("/opt/llama/llama-server"),
            from_env: Some("HOROS_LLAMA_SERVER"),
        }]
    }

    #[test]
    fn the_largest_chat_model_is_the_lane_and_embeddings_are_pinned_in_the_pool() {
        let models = [
            model("small", ModelFormat::Gguf, Category::Llm, 1000),
            model("big", ModelFormat::Gguf, Category::Llm, 3000),
            model("embed", ModelFormat::Gguf, Category::Embedding, 300),
            model("hf", ModelFormat::Safetensors, Category::Embedding, 300),
            model("huge", ModelFormat::Gguf, Category::Llm, 9000),
        ];
        let p = propose(&[4000, 4000], &models, &llama(), 8211);
        assert_eq!(p.lanes.len(), 1);
        let lane = &p.lanes[0];
        assert_eq!((lane.model.as_str(), lane.port), ("big", 8211));
        assert_eq!(
            lane.command[..3],
            ["/opt/llama/llama-server", "-m", "/m/big"]
        );
        assert!(lane.command.contains(&"8211".to_owned()));
        assert!(!lane.command.iter().any(|a| a.contains('{')));
        assert_eq!(p.allocator.as_deref().unwrap(), ["chat", "pool"]);
        let pool: Vec<(&str, bool)> = p.pool.iter().map(|m| (m.name.as_str(), m.pin)).collect();
        assert_eq!(pool, [("small", false), ("embed", true)]);
        assert_eq!(
            p.pool[0].binary.as_deref(),
            Some(std::path::Path::new("/opt/llama/llama-server"))
        );
        let out: Vec<&str> = p.left_out.iter().map(|l| l.reason.as_str()).collect();
        assert!(
            out[0].contains("vLLM") && out[1].contains("9000 MB"),
            "{out:?}"
        );
    }

    #[test]
    fn one_gpu_keeps_the_lane_and_gives_the_pool_the_rest() {
        let models = [
            model("chat", ModelFormat::Gguf, Category::Llm, 5000),
            model("embed", ModelFormat::Gguf, Category::Embedding, 300),
        ];
        let p = propose(&[24000], &models, &[], 9000);
        assert_eq!(p.lanes[0].gpus, [0]);
        assert_eq!(p.lanes[0].command[0], "llama-server");
        assert_eq!(p.allocator, None);
        assert_eq!(p.pool_memory_mb, Some(19000));
        assert!(p.pool[0].pin && p.pool[0].binary.is_none());
    }

    #[cfg(unix)]
    #[test]
    fn a_model_or_server_path_that_is_not_utf8_is_left_out() {
        use std::os::unix::ffi::OsStrExt as _;
        let bad = PathBuf::from(std::ffi::OsStr::from_bytes(b"/m/\xff.gguf"));
        let mut odd = model("odd", ModelFormat::Gguf, Category::Llm, 1000);
        odd.path = bad.clone();
        let models = [odd, model("chat", ModelFormat::Gguf, Category::Llm, 500)];
        let p = propose(&[24000], &models, &[], 9000);
        assert_eq!(p.lanes[0].model, "chat");
        assert!(p.pool.is_empty());
        assert_eq!(p.left_out[0].path, bad);
        assert!(
            p.left_out[0].reason.contains("not UTF-8"),
            "{:?}",
            p.left_out
        );

        let mut servers = llama();
        servers[0].path = PathBuf::from(std::ffi::OsStr::from_bytes(b"/opt/\xff/llama-server"));
        let p = propose(&[24000], &models[1..], &servers, 9000);
        assert!(p.lanes.is_empty() && p.pool.is_empty());
        assert!(
            p.left_out[0].reason.contains("its server"),
            "{:?}",
            p.left_out
        );
    }
}
