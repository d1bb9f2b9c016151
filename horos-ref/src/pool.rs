//! `[coordinator.pool]`: gpu-alloc's model pool behind the coordinator, its servers started by
//! horos-servers. Only wiring: which monitor measures memory, the shared ledger, the process
//! template, and each model's spec.

use std::path::Path;
use std::sync::Arc;

use horos_coordinator::PoolUpstream;
use horos_gpu_alloc::estimate::ModelFacts;
use horos_gpu_alloc::ledger::VramLedger;
use horos_gpu_alloc::monitor::GpuMonitor;
use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
use horos_gpu_alloc::pool::{Category, ModelPool, ModelSpec};
use horos_servers::kinds::{self, KindArgs, ModelRole};
use horos_servers::{InferenceKind, ProcessBackendFactory, ProcessConfig};
use serde_json::json;

use crate::config::PoolSection;

/// The pool as the coordinator's upstream. `gpus`: `[gpus]`' monitor (NVML, or its simulated
/// fleet) where there is one, the same object the sampler reads; without it the section's
/// `memory_mb` is a budget the ledger accounts over `gpus` GPUs (the servers' memory is not
/// measured).
pub fn build(
    section: &PoolSection,
    gpus: Option<Arc<dyn GpuMonitor>>,
    ledger: &Path,
    run_dir: &Path,
) -> Result<PoolUpstream, String> {
    let monitor: Arc<dyn GpuMonitor> = match (gpus, section.memory_mb) {
        (Some(monitor), _) => monitor,
        (None, Some(mb)) => Arc::new(SimFleet::new(section.gpus, mb)),
        (None, None) => {
            return Err(
                "coordinator.pool: no GPU is read here (NVML unavailable, or [gpus] source = \
                 \"none\"); give memory_mb (the memory budget of the pool's servers)"
                    .into(),
            );
        }
    };
    let path = ledger;
    let ledger =
        VramLedger::open(path).map_err(|e| format!("VRAM ledger {}: {e}", path.display()))?;
    ledger
        .register_from(monitor.as_ref())
        .map_err(|e| format!("VRAM ledger {}: {e}", path.display()))?;
    if let Some(cap) = section.memory_mb {
        let samples = monitor.sample().map_err(|e| e.to_string())?;
        for s in samples {
            ledger
                .set_capacity(s.index, cap.min(s.memory_total_mb))
                .map_err(|e| format!("VRAM ledger {}: {e}", path.display()))?;
        }
    }
    let dir = run_dir.join("pool");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // The files of the backend kinds the models name (a worker script), beside their logs.
    let kind_dir = dir.join("kinds");
    for kind in section
        .models
        .iter()
        .filter_map(|m| m.backend.as_deref().and_then(kinds::kind))
    {
        std::fs::create_dir_all(&kind_dir)
            .map_err(|e| format!("cannot create {}: {e}", kind_dir.display()))?;
        for (name, text) in kind.files {
            let path = kind_dir.join(name);
            std::fs::write(&path, text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
    }
    let factory = ProcessBackendFactory {
        template: ProcessConfig {
            start_timeout_s: section.start_timeout_s,
            ..ProcessConfig::default()
        },
        run_dir: Some(dir),
    };
    let pool = ModelPool::new(
        section.settings.clone(),
        Arc::new(factory),
        monitor,
        Some(Arc::new(ledger)),
    );
    let kind_dir = kind_dir.display().to_string();
    let specs = section.models.iter().map(|m| {
        let role = match m.category {
            Category::Embedding => ModelRole::Embed,
            Category::Diffusion => ModelRole::Image,
            _ => ModelRole::Generate,
        };
        let kind = m.backend.as_deref().and_then(kinds::kind);
        // A backend kind of the registry builds the command the model did not write.
        let command = match kind {
            Some(kind) if m.command.is_empty() => (kind.command)(&KindArgs {
                binary: m.binary.as_deref().unwrap_or(kind.binary),
                weights: &m
                    .weights
                    .as_deref()
                    .map(|w| w.display().to_string())
                    .unwrap_or_default(),
                role,
                dir: &kind_dir,
            }),
            _ => m.command.clone(),
        };
        // What the health check's inference asks (none: /health only, e.g. an image worker).
        let probe = match kind {
            Some(kind) => kind.probe(role),
            None if role == ModelRole::Embed => Some(InferenceKind::Embedding),
            None => Some(InferenceKind::Chat),
        };
        ModelSpec {
            id: m.name.clone(),
            category: m.category,
            pin: m.pin,
            stay_warm_s: m.stay_warm_s,
            facts: ModelFacts {
                name: m.name.clone(),
                explicit_mb: m.vram_mb,
                metadata_mb: None,
                path: m.weights.clone(),
            },
            settings: json!({
                "command": command,
                "env": m.env,
                "probe_kind": probe.unwrap_or_default(),
                "probe_inference_every": if probe.is_none() { Some(0) } else { None },
            }),
        }
    });
    Ok(PoolUpstream::new(pool, specs))
}

/// Stops every server the pool started (at shutdown: none outlives the binary).
pub async fn unload_all(pool: &PoolUpstream) {
    for slot in pool.pool().slots() {
        if let Err(e) = pool.pool().unload(&slot.model).await {
            tracing::warn!(model = %slot.model, error = %e, "unloading at shutdown failed");
        }
    }
}
