//! `[coordinator.pool]`: gpu-alloc's model pool behind the coordinator, its servers started by
//! horos-servers as processes or containers. Only wiring: the monitor and the ledger as the
//! pool's settings decide them (gpu-alloc's `PoolSettings::monitor` and `open_ledger`), the
//! process and container templates, each model's spec and the request paths its server serves.

use std::path::Path;
use std::sync::Arc;

use horos_gpu_alloc::cost_store::CostStore;
use horos_gpu_alloc::host_ram::HostRam;
use horos_gpu_alloc::monitor::GpuMonitor;
use horos_gpu_alloc::pool::PoolUpstream;
use horos_gpu_alloc::pool::{Category, ModelPool};
use horos_servers::ModelRole;
use horos_servers::{
    DockerBackendFactory, DockerConfig, PoolBackendFactory, ProcessBackendFactory, ProcessConfig,
    connect_docker, remove_managed,
};

use crate::config::PoolSection;

/// How the pool's containers run.
#[derive(Debug, Clone)]
pub struct Containers {
    /// Their owner label: the containers of this owner an earlier run left are removed when the
    /// pool is built (a lane's containers have another owner).
    pub owner: String,
    /// Whether the GPUs the pool picks are requested as devices (false where they are
    /// simulated, or a budget: no driver to ask).
    pub request_gpus: bool,
}

/// The pool as the coordinator's upstream. `gpus`: `[gpus]`' monitor (NVML, or its simulated
/// fleet) where there is one, the same object the sampler reads; without it the section's
/// `memory_mb` is a budget the ledger accounts over `gpus` GPUs (the servers' memory is not
/// measured). The Docker engine is connected only when a model runs in a container. Models
/// asleep at level 1 hold their weights within `host_ram`; the swaps measured are kept in the
/// ledger's file (beside the lanes').
pub async fn build(
    section: &PoolSection,
    gpus: Option<Arc<dyn GpuMonitor>>,
    ledger: &Path,
    run_dir: &Path,
    containers: Containers,
    host_ram: Arc<HostRam>,
    swaps: Option<Arc<horos_modes::SwapMetrics>>,
) -> Result<PoolUpstream, String> {
    let costs =
        CostStore::open(ledger).map_err(|e| format!("swap costs in {}: {e}", ledger.display()))?;
    let monitor = section.monitor(gpus).map_err(|e| e.to_string())?;
    let ledger = section
        .open_ledger(ledger, monitor.as_ref())
        .map_err(|e| e.to_string())?;
    let dir = run_dir.join("pool");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // The files of the backend kinds the models name (a worker script), beside their logs.
    let kind_dir = dir.join("kinds");
    for kind in section.models.iter().filter_map(|m| m.server.kind()) {
        std::fs::create_dir_all(&kind_dir)
            .map_err(|e| format!("cannot create {}: {e}", kind_dir.display()))?;
        for (name, text) in kind.files {
            let path = kind_dir.join(name);
            std::fs::write(&path, text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
    }
    let factory = PoolBackendFactory {
        process: ProcessBackendFactory {
            template: ProcessConfig {
                start_timeout_s: section.start_timeout_s,
                ..ProcessConfig::default()
            },
            run_dir: Some(dir),
        },
        docker: docker_factory(section, &containers).await?,
    };
    let pool = ModelPool::new(
        section.settings.clone(),
        Arc::new(factory),
        monitor,
        Some(Arc::new(ledger)),
    )
    .with_host_ram(host_ram)
    .with_cost_store(Arc::new(costs))
    .map_err(|e| e.to_string())?;
    // Its swaps on /metrics and the status page beside the lanes'.
    let pool = match swaps {
        Some(s) => s.watch_pool(pool),
        None => pool,
    };
    let kind_dir = kind_dir.display().to_string();
    let specs = section.models.iter().map(|m| {
        m.spec(
            m.server
                .backend_settings(role(m.category), m.weights.as_deref(), &kind_dir),
        )
    });
    let upstream = PoolUpstream::new(pool, specs);
    for m in &section.models {
        if let Some(paths) = m.server.paths() {
            upstream.declare_paths(&m.name, paths);
        }
    }
    Ok(upstream)
}

/// The containers' factory, when a model runs in one: the engine connected, the containers an
/// earlier run of this owner left removed.
async fn docker_factory(
    section: &PoolSection,
    containers: &Containers,
) -> Result<Option<DockerBackendFactory>, String> {
    let Some(first) = section.models.iter().find(|m| m.server.docker.is_some()) else {
        return Ok(None);
    };
    let docker = connect_docker(None).await.map_err(|e| {
        format!(
            "coordinator.pool.model `{}` runs in a container, but no Docker engine answers: {e}",
            first.name
        )
    })?;
    let removed = remove_managed(&docker, &containers.owner, None)
        .await
        .map_err(|e| format!("removing the pool's leftover containers: {e}"))?;
    if !removed.is_empty() {
        tracing::info!(?removed, "removed pooled containers an earlier run left");
    }
    Ok(Some(DockerBackendFactory {
        docker,
        template: DockerConfig {
            owner: containers.owner.clone(),
            request_gpus: containers.request_gpus,
            start_timeout_s: section.start_timeout_s,
            ..DockerConfig::default()
        },
    }))
}

/// What a model's server does, from its category (its flags and its health check).
fn role(category: Category) -> ModelRole {
    match category {
        Category::Embedding => ModelRole::Embed,
        Category::Diffusion => ModelRole::Image,
        Category::Speech => ModelRole::Speech,
        _ => ModelRole::Generate,
    }
}
