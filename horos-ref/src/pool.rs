//! `[coordinator.pool]`: gpu-alloc's model pool behind the coordinator, its servers started by
//! horos-servers as processes or containers. Only wiring: which monitor measures memory, the
//! shared ledger, the process and container templates, each model's spec and the request paths
//! its server serves.

use std::path::Path;
use std::sync::Arc;

use horos_gpu_alloc::estimate::ModelFacts;
use horos_gpu_alloc::ledger::VramLedger;
use horos_gpu_alloc::monitor::GpuMonitor;
use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
use horos_gpu_alloc::pool::PoolUpstream;
use horos_gpu_alloc::pool::{Category, ModelPool, ModelSpec};
use horos_servers::kinds::{self, KindArgs, Launch, ModelRole};
use horos_servers::{
    DockerBackendFactory, DockerConfig, PoolBackendFactory, ProcessBackendFactory, ProcessConfig,
    connect_docker, remove_managed,
};
use serde_json::{Value, json};

use crate::config::{PoolSection, PooledModelSection};

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
/// measured). The Docker engine is connected only when a model runs in a container.
pub async fn build(
    section: &PoolSection,
    gpus: Option<Arc<dyn GpuMonitor>>,
    ledger: &Path,
    run_dir: &Path,
    containers: Containers,
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
    for kind in section.models.iter().filter_map(PooledModelSection::kind) {
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
    );
    let kind_dir = kind_dir.display().to_string();
    let specs = section.models.iter().map(|m| ModelSpec {
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
        settings: settings(m, &kind_dir),
    });
    let upstream = PoolUpstream::new(pool, specs);
    for m in &section.models {
        if let Some(paths) = m.paths() {
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
    let Some(first) = section.models.iter().find(|m| m.docker.is_some()) else {
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

/// A model's backend settings: its command (its own, or its kind's for its weights) or its
/// container, its environment, and its health check (the kind's, the model's health path).
fn settings(m: &PooledModelSection, kind_dir: &str) -> Value {
    let role = match m.category {
        Category::Embedding => ModelRole::Embed,
        Category::Diffusion => ModelRole::Image,
        _ => ModelRole::Generate,
    };
    let kind = m.kind();
    // What the health check's inference asks (none: the health path only, e.g. an image
    // worker): the kind's, else what the model's role answers.
    let probe = kind.map_or_else(|| kinds::by_role(role), |k| k.probe(role));
    let mut settings = json!({
        "env": m.env,
        "probe_kind": probe.unwrap_or_default(),
        "probe_inference_every": if probe.is_none() { Some(0) } else { None },
        "health_path": m.health_path.as_deref().or(kind.map(|k| k.health.path)),
    });
    let server = match (kind.map(|k| k.launch), &m.docker) {
        (Some(Launch::Container), Some(d)) => {
            let mut env = d.env.clone();
            env.extend(m.env.clone());
            json!({
                "image": d.image,
                "args": d.cmd,
                "env": env,
                "container_port": d.container_port,
                "binds": d.binds,
                "memory_mb": d.memory_mb,
            })
        }
        // A backend kind of the registry builds the command the model did not write.
        (Some(Launch::Process { binary, command }), _) if m.command.is_empty() => {
            json!({"command": command(&KindArgs {
                binary: m.binary.as_deref().unwrap_or(binary),
                weights: &m
                    .weights
                    .as_deref()
                    .map(|w| w.display().to_string())
                    .unwrap_or_default(),
                role,
                dir: kind_dir,
            })})
        }
        _ => json!({"command": m.command}),
    };
    if let (Some(all), Value::Object(server)) = (settings.as_object_mut(), server) {
        all.extend(server);
    }
    settings
}

#[cfg(test)]
mod tests {
    use horos_servers::{BackendSettings, InferenceKind};

    use super::*;

    fn model(toml: &str) -> PooledModelSection {
        toml::from_str(&format!("name = \"m\"\n{toml}")).unwrap()
    }

    fn parsed(toml: &str) -> BackendSettings {
        BackendSettings::parse(&settings(&model(toml), "/run/kinds")).unwrap()
    }

    /// A container model's settings name its image (so the factory runs it as a container),
    /// its command, port, mounts and environment (the model's over the container's), and its
    /// own health path.
    #[test]
    fn a_container_models_settings_name_its_image_and_health_path() {
        let s = parsed(
            "health_path = \"/v1/models\"\nenv = { A = \"model\" }\n[docker]\nimage = \"mine:local\"\n\
             cmd = [\"--port\", \"{port}\"]\ncontainer_port = 9000\nbinds = [\"/m:/m:ro\"]\n\
             env = { A = \"container\", B = \"container\" }\n",
        );
        assert_eq!(s.image.as_deref(), Some("mine:local"));
        assert_eq!(s.command, None);
        assert_eq!(s.args, ["--port", "{port}"]);
        assert_eq!(s.container_port, Some(9000));
        assert_eq!(s.binds, ["/m:/m:ro"]);
        assert_eq!(
            (s.env["A"].as_str(), s.env["B"].as_str()),
            ("model", "container")
        );
        assert_eq!(s.health_path.as_deref(), Some("/v1/models"));
        assert_eq!(s.probe_kind, Some(InferenceKind::Chat));
    }

    /// A kind decides the health check: the image worker's is its health path alone, an
    /// embedding model of llama-server is asked for an embedding.
    #[test]
    fn the_kind_decides_the_health_check() {
        let s = parsed("backend = \"diffusers\"\nweights = \"/p\"\ncategory = \"diffusion\"\n");
        assert_eq!(s.probe_inference_every, Some(0));
        assert_eq!(s.health_path.as_deref(), Some("/health"));
        let command = s.command.unwrap();
        assert_eq!(command[1], "/run/kinds/diffusers_worker.py");
        assert_eq!(s.image, None);
        let s =
            parsed("backend = \"llama-server\"\nweights = \"/q.gguf\"\ncategory = \"embedding\"\n");
        assert_eq!(s.probe_kind, Some(InferenceKind::Embedding));
        assert_eq!(s.probe_inference_every, None);
        let s = parsed("command = [\"srv\", \"{port}\"]\n");
        assert_eq!(s.command.unwrap(), ["srv", "{port}"]);
        assert_eq!(s.health_path, None);
        assert_eq!(s.probe_kind, Some(InferenceKind::Chat));
        // A command of its own serving images is not asked for a chat either.
        let s = parsed("command = [\"srv\"]\ncategory = \"diffusion\"\n");
        assert_eq!(s.probe_inference_every, Some(0));
    }
}
