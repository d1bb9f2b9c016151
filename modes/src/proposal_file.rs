//! A [`Proposal`] for this machine's GPUs rendered as a commented configuration file that runs
//! as written (`horos-ref init`'s file). Rendering only: what is proposed, and why, is the
//! proposal's ([`crate::proposal`]).

use std::fmt::Write as _;

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

/// A value as TOML writes it (strings quoted and escaped).
fn v(value: impl Into<toml::Value>) -> String {
    value.into().to_string()
}

fn list<S: AsRef<str>>(items: &[S]) -> String {
    let parts: Vec<String> = items.iter().map(|s| v(s.as_ref())).collect();
    format!("[{}]", parts.join(", "))
}

/// The configuration file: `fleet`'s GPUs, `p`'s lanes and pool, the coordinator on
/// 127.0.0.1:`port`, the lane's servers after it, the pool's servers on the ten ports after
/// theirs.
pub fn render(fleet: &Fleet, p: &Proposal, port: u16) -> String {
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
        render_lane(&mut t, lane);
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
        render_pool(&mut t, p, port);
    }
    if !p.left_out.is_empty() {
        t.push_str("# Models found but left out:\n");
        for l in &p.left_out {
            let _ = writeln!(t, "#   {}: {}", l.path.display(), l.reason);
        }
    }
    t
}

fn gpus(t: &mut String, fleet: &Fleet) {
    let sizes: Vec<String> = fleet.sizes().iter().map(u64::to_string).collect();
    let why = match fleet {
        Fleet::Nvml(g) => {
            t.push_str("# The GPUs, read by NVML:\n");
            for (i, (name, mb)) in g.iter().enumerate() {
                let _ = writeln!(t, "#   GPU {i}: {name}, {mb} MB");
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

fn render_lane(t: &mut String, l: &ProposedLane) {
    let _ = write!(
        t,
        "# A lane: jobs submitted to the `{q}` queue (`horos-ref submit`, POST \
         /api/v1/lanes/jobs) are fed\n# in batches to the model below on a server this process \
         starts, health-checks and restarts\n# after a crash. The coordinator routes requests for \
         the model to the same server.\n[[lane]]\nqueue = {qv}\nurl = \
         \"http://127.0.0.1:{port}\"\nmodel = {mv}\nbatch_size = 4\nrequest_timeout_s = 300\n\
         start_wait_s = 180\n# Estimated from its GGUF header or safetensors headers: weights, \
         attention cache and\n# buffers ({w}).\nvram_mb = {mb}\n",
        q = l.queue,
        qv = v(l.queue.as_str()),
        mv = v(l.model.as_str()),
        port = l.port,
        w = l.weights.display(),
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
}

fn render_pool(t: &mut String, p: &Proposal, port: u16) {
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
        render_model(t, m);
    }
}

fn render_model(t: &mut String, m: &ProposedModel) {
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
        let _ = writeln!(t, "binary = {}", v(b.display().to_string()));
    }
    let _ = write!(
        t,
        "weights = {}\n# Estimated from its own files: weights, attention cache and buffers.\n\
         vram_mb = {}\n",
        v(m.weights.display().to_string()),
        m.vram_mb
    );
    if m.pin {
        t.push_str("# Loaded at start and kept: documents are embedded all day.\npin = true\n");
    }
    t.push('\n');
}
