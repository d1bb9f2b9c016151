//! A [`Proposal`] for this machine's GPUs rendered as a commented configuration file that runs
//! as written (`horos-ref init`'s file). Rendering only: what is proposed, and why, is the
//! proposal's ([`crate::proposal`]).
//!
//! The file's text comes from file names and the GPUs' own names, so nothing found is written
//! as it is: every value is a TOML string as `toml` writes it (quoted and escaped), and what a
//! comment shows is one line with its control characters escaped, so that no name can end a
//! comment or a string and add a key of its own. A path that is not UTF-8 cannot be a TOML
//! string: it is refused ([`RenderError::NotUtf8`]), never written approximately.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::proposal::{Proposal, ProposedLane, ProposedModel};

/// Where the GPUs of the file come from.
#[derive(Debug, Clone)]
pub enum Fleet {
    /// Read by NVML: each GPU's name and memory, MB.
    Nvml(Vec<(String, u64)>),
    /// Simulated, as `--gpus` gave them.
    Given(Vec<u64>),
    /// No GPU and no `--gpus`: two simulated GPUs of 4 GB stand in, as the demo's.
    Cpu,
}

/// The simulated GPUs of a machine without one (the demo's).
pub const CPU_GPUS_MB: [u64; 2] = [4000, 4000];

impl Fleet {
    /// The GPUs' sizes, MB.
    pub fn sizes(&self) -> Vec<u64> {
        match self {
            Fleet::Nvml(g) => g.iter().map(|(_, mb)| *mb).collect(),
            Fleet::Given(s) => s.clone(),
            Fleet::Cpu => CPU_GPUS_MB.to_vec(),
        }
    }
}

/// Why a proposal cannot be written as a configuration file.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum RenderError {
    /// A path the file would name is not UTF-8 (rename it, or leave it out of the models'
    /// directory).
    #[error("{path:?} is not UTF-8: a configuration file cannot name it (rename it)")]
    NotUtf8 {
        /// The path.
        path: PathBuf,
    },
}

/// A value as TOML writes it (strings quoted and escaped).
fn v(value: impl Into<toml::Value>) -> String {
    value.into().to_string()
}

/// `path` as a TOML string value, refused when it is not UTF-8.
fn path_value(path: &Path) -> Result<String, RenderError> {
    path.to_str().map(v).ok_or_else(|| RenderError::NotUtf8 {
        path: path.to_path_buf(),
    })
}

/// `text` as a comment may show it: on one line, its control characters (a newline, a tab,
/// a carriage return...) escaped as Rust writes them (`\n`).
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `path` as a comment shows it: quoted, on one line, bytes that are not UTF-8 as `\xNN`.
fn shown(path: &Path) -> String {
    format!("{path:?}")
}

fn list<S: AsRef<str>>(items: &[S]) -> String {
    let parts: Vec<String> = items.iter().map(|s| v(s.as_ref())).collect();
    format!("[{}]", parts.join(", "))
}

/// The configuration file: `fleet`'s GPUs, `p`'s lanes and pool, the coordinator on
/// 127.0.0.1:`port`, the lane's servers after it, the pool's servers on the ten ports after
/// theirs. A path that is not UTF-8 in a value is refused ([`RenderError::NotUtf8`]).
pub fn render(fleet: &Fleet, p: &Proposal, port: u16) -> Result<String, RenderError> {
    let mut t = String::new();
    let cpu = matches!(fleet, Fleet::Cpu);
    t.push_str(
        "# Written by `horos-ref init` for this machine. `horos-ref check` checks it without \
         starting\n# anything; `horos-ref --config FILE run` runs it. horos-ref/README.md \
         describes every key.\n\n",
    );
    t.push_str("# The queue, the coordinator's state and the lanes' jobs: one SQLite file beside this one.\ndatabase = \"horos.db\"\n\n");
    if cpu {
        t.push_str("[feeder]\n# A CPU: no pause between batches, a short idle poll.\ncooldown_s = 0\nidle_poll_ms = 200\n\n");
    }
    gpus(&mut t, fleet);
    for lane in &p.lanes {
        render_lane(&mut t, lane)?;
    }
    if let Some(initial) = &p.allocator {
        let gpus: Vec<String> = (0..initial.len()).map(|g| g.to_string()).collect();
        let _ = write!(
            t,
            "# The allocator: which mode each GPU serves, the lane or the model pool, weighing \
             each one's\n# waiting work against the cost of a switch.\n[allocator]\ngpus = [{}]\n\
             initial = {}\n\n[allocator.pool]\nswap_in_s = {}\n\n",
            gpus.join(", "),
            list(initial),
            if cpu { "5.0" } else { "30.0" },
        );
    }
    let _ = write!(
        t,
        "# The OpenAI-compatible endpoint on loopback: /v1/chat/completions, /v1/embeddings, \
         the status\n# page (/status), /metrics and the admin API (/api/v1/...).\n\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\n"
    );
    if cpu {
        t.push_str("# A CPU is slow: a request may wait a while for its turn.\ndefault_budget_s = 600.0\nupstream_timeout_s = 600.0\n");
    }
    t.push('\n');
    if !p.pool.is_empty() {
        render_pool(&mut t, p, port)?;
    }
    if !p.left_out.is_empty() {
        t.push_str("# Models found but left out:\n");
        for l in &p.left_out {
            let _ = writeln!(t, "#   {}: {}", shown(&l.path), one_line(&l.reason));
        }
    }
    Ok(t)
}

fn gpus(t: &mut String, fleet: &Fleet) {
    let sizes: Vec<String> = fleet.sizes().iter().map(u64::to_string).collect();
    let why = match fleet {
        Fleet::Nvml(g) => {
            t.push_str("# The GPUs, read by NVML:\n");
            for (i, (name, mb)) in g.iter().enumerate() {
                let _ = writeln!(t, "#   GPU {i}: {}, {mb} MB", one_line(name));
            }
            t.push_str("[gpus]\nsource = \"nvml\"\n\n");
            return;
        }
        Fleet::Given(_) => {
            "# Simulated GPUs (`--gpus`): their memory is accounted, nothing runs on a GPU. On a \
             machine\n# with NVIDIA GPUs, `source = \"nvml\"` reads the real ones.\n"
        }
        Fleet::Cpu => {
            "# No GPU here (NVML does not answer): two simulated GPUs of 4 GB stand in, as in the \
             demo;\n# the servers run on the CPU and book their memory on them.\n"
        }
    };
    let _ = write!(
        t,
        "{why}[gpus]\nsource = \"simulated\"\nsimulated_mb = [{}]\n\n",
        sizes.join(", ")
    );
}

fn render_lane(t: &mut String, l: &ProposedLane) -> Result<(), RenderError> {
    // The command names the weights: a path that is not UTF-8 would be there approximately.
    path_value(&l.weights)?;
    let _ = write!(
        t,
        "# A lane: jobs submitted to the `{q}` queue (`horos-ref submit`, POST \
         /api/v1/lanes/jobs) are fed\n# in batches to the model below on a server this process \
         starts, health-checks and restarts\n# after a crash. The coordinator routes requests for \
         the model to the same server.\n[[lane]]\nqueue = {qv}\nurl = \
         \"http://127.0.0.1:{port}\"\nmodel = {mv}\nbatch_size = 4\nrequest_timeout_s = 300\n\
         start_wait_s = 180\n# Estimated from its GGUF header or safetensors headers: weights, \
         attention cache and\n# buffers ({w}).\nvram_mb = {mb}\n",
        q = one_line(&l.queue),
        qv = v(l.queue.as_str()),
        mv = v(l.model.as_str()),
        port = l.port,
        w = shown(&l.weights),
        mb = l.vram_mb,
    );
    if !l.gpus.is_empty() {
        let g: Vec<String> = l.gpus.iter().map(u32::to_string).collect();
        let _ = writeln!(t, "gpus = [{}]", g.join(", "));
    }
    let _ = write!(
        t,
        "command = {}\n\n[lane.probe]\n# The probe may queue behind real work on a busy \
         server.\ninference_timeout_ms = 60000\n\n",
        list(&l.command)
    );
    Ok(())
}

fn render_pool(t: &mut String, p: &Proposal, port: u16) -> Result<(), RenderError> {
    // Ports of the pool's servers: the ten after the lane's servers (one per GPU under the
    // allocator, at the lane's port + k).
    let lane_ports = match (&p.allocator, p.lanes.is_empty()) {
        (_, true) => 0,
        (Some(initial), false) => initial.len(),
        (None, false) => 1,
    };
    let first = port.saturating_add(1 + u16::try_from(lane_ports).unwrap_or(0));
    let _ = write!(
        t,
        "# The model pool: models loaded on demand and evicted for more important ones.\n\
         [coordinator.pool]\nport_min = {first}\nport_max = {}\nstart_timeout_s = 300\n",
        first.saturating_add(9)
    );
    if let Some(mb) = p.pool_memory_mb {
        let _ = writeln!(t, "# What the lane leaves of its GPU.\nmemory_mb = {mb}");
    }
    t.push('\n');
    for m in &p.pool {
        render_model(t, m)?;
    }
    Ok(())
}

fn render_model(t: &mut String, m: &ProposedModel) -> Result<(), RenderError> {
    let category = serde_json::to_value(m.category)
        .ok()
        .and_then(|c| c.as_str().map(str::to_owned))
        .unwrap_or_else(|| "other".to_owned());
    let _ = write!(
        t,
        "[[coordinator.pool.model]]\nname = {}\ncategory = {}\nbackend = {}\n",
        v(m.name.as_str()),
        v(category.as_str()),
        v(m.backend),
    );
    if let Some(b) = &m.binary {
        let _ = writeln!(t, "binary = {}", path_value(b)?);
    }
    let _ = write!(
        t,
        "weights = {}\n# Estimated from its own files: weights, attention cache and buffers.\n\
         vram_mb = {}\n",
        path_value(&m.weights)?,
        m.vram_mb
    );
    if m.pin {
        t.push_str("# Loaded at start and kept: documents are embedded all day.\npin = true\n");
    }
    t.push('\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use horos_gpu_alloc::pool::Category;

    use super::*;
    use crate::proposal::LeftOut;

    /// A model path a crafted file name makes: a quote, a backslash, a newline and the key it
    /// would add, a tab.
    const CRAFTED: &str = "/m/a\"b\\c\napi_key = \"x\"\n\td.gguf";

    fn proposal(weights: &Path) -> Proposal {
        let w = weights.to_string_lossy().into_owned();
        Proposal {
            lanes: vec![ProposedLane {
                queue: "chat".into(),
                model: "chat".into(),
                port: 8081,
                command: vec!["llama-server".into(), "-m".into(), w],
                vram_mb: 1000,
                gpus: Vec::new(),
                weights: weights.to_path_buf(),
            }],
            pool: vec![ProposedModel {
                name: "embed".into(),
                backend: "llama-server",
                binary: Some(weights.to_path_buf()),
                weights: weights.to_path_buf(),
                category: Category::Embedding,
                vram_mb: 300,
                pin: true,
            }],
            allocator: Some(vec!["chat".into(), "pool".into()]),
            pool_memory_mb: None,
            left_out: vec![LeftOut {
                path: weights.to_path_buf(),
                reason: "because\napi_key = \"y\"".into(),
            }],
        }
    }

    /// Every key of `value`, at any depth, with its path (`coordinator.pool.model[0].name`).
    fn keys(at: &str, value: &toml::Value, out: &mut Vec<String>) {
        match value {
            toml::Value::Table(t) => {
                for (k, v) in t {
                    let path = if at.is_empty() {
                        k.clone()
                    } else {
                        format!("{at}.{k}")
                    };
                    out.push(path.clone());
                    keys(&path, v, out);
                }
            }
            toml::Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    keys(&format!("{at}[{i}]"), v, out);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn strings_toml_writes_read_back_as_they_were() {
        for s in [
            CRAFTED,
            "",
            "\n",
            "\nleading newline",
            "trailing backslash\\",
            "'''\"\"\"",
            "carriage\rreturn\r\n",
            "nul\u{0}del\u{7f}esc\u{1b}",
            "tab\tand ünïcode",
        ] {
            let text = format!("k = {}\n", v(s));
            let t: toml::Table = toml::from_str(&text).unwrap();
            assert_eq!(t.get("k").and_then(|k| k.as_str()), Some(s), "{text}");
            assert_eq!(t.len(), 1, "{text}");
        }
    }

    #[test]
    fn a_crafted_model_path_is_written_escaped_and_adds_no_key() {
        let crafted = Path::new(CRAFTED);
        let gpus = Fleet::Nvml(vec![("GPU\n[evil]\napi_key = \"z\"".into(), 24000)]);
        let text = render(&gpus, &proposal(crafted), 8080).unwrap();
        let file: toml::Value = toml::from_str(&text).unwrap();

        let lane = &file["lane"][0];
        assert_eq!(lane["command"][2].as_str(), Some(CRAFTED));
        let model = &file["coordinator"]["pool"]["model"][0];
        assert_eq!(model["weights"].as_str(), Some(CRAFTED));
        assert_eq!(model["binary"].as_str(), Some(CRAFTED));

        let mut found = Vec::new();
        keys("", &file, &mut found);
        assert!(
            !found
                .iter()
                .any(|k| k.contains("api_key") || k.contains("evil")),
            "{found:?}\n{text}"
        );
        let expected = [
            "database",
            "gpus",
            "gpus.source",
            "lane",
            "lane[0].queue",
            "lane[0].url",
            "lane[0].model",
            "lane[0].batch_size",
            "lane[0].request_timeout_s",
            "lane[0].start_wait_s",
            "lane[0].vram_mb",
            "lane[0].command",
            "lane[0].probe",
            "lane[0].probe.inference_timeout_ms",
            "allocator",
            "allocator.gpus",
            "allocator.initial",
            "allocator.pool",
            "allocator.pool.swap_in_s",
            "coordinator",
            "coordinator.bind",
            "coordinator.pool",
            "coordinator.pool.port_min",
            "coordinator.pool.port_max",
            "coordinator.pool.start_timeout_s",
            "coordinator.pool.model",
            "coordinator.pool.model[0].name",
            "coordinator.pool.model[0].category",
            "coordinator.pool.model[0].backend",
            "coordinator.pool.model[0].binary",
            "coordinator.pool.model[0].weights",
            "coordinator.pool.model[0].vram_mb",
            "coordinator.pool.model[0].pin",
        ];
        found.sort();
        let mut expected: Vec<String> = expected.iter().map(|k| (*k).to_owned()).collect();
        expected.sort();
        assert_eq!(found, expected, "{text}");
    }

    #[cfg(unix)]
    #[test]
    fn a_path_that_is_not_utf8_is_refused_by_name() {
        use std::os::unix::ffi::OsStrExt as _;
        let bad = Path::new(std::ffi::OsStr::from_bytes(b"/m/\xff.gguf"));
        let mut p = proposal(Path::new("/m/good.gguf"));
        p.pool[0].weights = bad.to_path_buf();
        assert_eq!(
            render(&Fleet::Cpu, &p, 8080),
            Err(RenderError::NotUtf8 {
                path: bad.to_path_buf()
            })
        );
        let mut p = proposal(bad);
        p.pool.clear();
        assert!(matches!(
            render(&Fleet::Cpu, &p, 8080),
            Err(RenderError::NotUtf8 { path }) if path == bad
        ));
        // Left out, it is only shown: in a comment, its bytes escaped.
        let mut p = proposal(Path::new("/m/good.gguf"));
        p.left_out[0].path = bad.to_path_buf();
        let text = render(&Fleet::Cpu, &p, 8080).unwrap();
        assert!(
            text.contains(r#"#   "/m/\xFF.gguf": because\napi_key"#),
            "{text}"
        );
        toml::from_str::<toml::Table>(&text).unwrap();
    }
}
