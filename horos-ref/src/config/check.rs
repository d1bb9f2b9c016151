//! `horos-ref check`'s view of a loaded configuration: each section's problems on this machine,
//! from the crate that owns the section, and the VRAM plan across sections.

use horos_gpu_alloc::plan::plan_problems;
use horos_server_control::settings::{CheckScope, Problem, port_problem};

use super::Config;

impl Config {
    /// What is wrong with this configuration on this machine, as far as `scope` looks: ports
    /// taken, programs and model files missing (each section's own check), and the VRAM plan
    /// not fitting the GPUs.
    pub fn problems(&self, scope: CheckScope) -> Vec<Problem> {
        let mut problems = Vec::new();
        // Under the allocator, a lane has a server per GPU, the k-th at its port + k.
        let instances = self.allocator.as_ref().map_or(1, |a| a.gpus.len());
        for (i, l) in self.lanes.iter().enumerate() {
            problems.extend(l.problems(i, instances, scope));
        }
        if let Some(c) = &self.coordinator {
            problems.extend(c.settings.problems(scope));
            if scope.ports
                && let Some(addr) = c.control_bind
            {
                problems.extend(port_problem("coordinator.control_bind", addr));
            }
            if let Some(pool) = &c.pool {
                if scope.ports {
                    problems.extend(pool.port_problems());
                }
                if scope.files {
                    for (i, m) in pool.models.iter().enumerate() {
                        let at = format!("coordinator.pool.model[{i}]");
                        problems.extend(m.server.problems(&at, m.weights.as_deref()));
                    }
                }
            }
        }
        if let Some(ingest) = &self.ingest {
            problems.extend(ingest.problems(scope));
        }
        if let Some(a) = &self.allocator {
            problems.extend(a.settings.problems("allocator"));
        }
        problems.extend(self.port_clashes(instances));
        problems.extend(self.vram_problems());
        problems
    }

    /// Ports this configuration gives twice on 127.0.0.1: the coordinator's, each managed
    /// lane's servers' (one per GPU under the allocator), the pool's range. (Two lanes' ports
    /// are already refused when the file is read.)
    fn port_clashes(&self, instances: usize) -> Vec<Problem> {
        let mut taken: Vec<(u16, String)> = Vec::new();
        if let Some(c) = &self.coordinator {
            taken.push((c.settings.bind.port(), "coordinator.bind".to_owned()));
            if let Some(addr) = c.control_bind {
                taken.push((addr.port(), "coordinator.control_bind".to_owned()));
            }
        }
        for (i, l) in self.lanes.iter().enumerate() {
            let Some(port) = l.port().filter(|_| l.is_managed()) else {
                continue;
            };
            let slots = u16::try_from(instances.max(1)).unwrap_or(u16::MAX);
            for p in (0..slots).filter_map(|k| port.checked_add(k)) {
                taken.push((p, format!("lane[{i}].url")));
            }
        }
        let mut problems = Vec::new();
        let pool = self.coordinator.as_ref().and_then(|c| c.pool.as_ref());
        if let Some(p) = pool {
            let range = p.settings.port_min..=p.settings.port_max;
            for (port, key) in taken.iter().filter(|(port, _)| range.contains(port)) {
                problems.push(Problem::new(
                    "coordinator.pool.port_min",
                    format!("the pool's ports {range:?} include {port}, {key}'s"),
                    "move port_min / port_max past the other servers' ports",
                ));
            }
        }
        for (k, (port, key)) in taken.iter().enumerate() {
            if let Some((_, first)) = taken[..k].iter().find(|(p, _)| p == port) {
                problems.push(Problem::new(
                    key,
                    format!("port {port} is {first}'s too"),
                    "give each server a port of its own",
                ));
            }
        }
        problems
    }

    /// The lanes' servers and the pinned pooled models against the GPUs' sizes (simulated, or
    /// read by NVML now; where none is read, the pool's budget alone).
    fn vram_problems(&self) -> Vec<Problem> {
        let sizes = self.gpus.sizes_mb().unwrap_or_default();
        let mut demands = horos_modes::settings::lane_demands(&self.lanes, self.allocator.as_ref());
        let pool = self.coordinator.as_ref().and_then(|c| c.pool.as_ref());
        if let Some(p) = pool {
            demands.extend(p.pinned_demands());
        }
        if sizes.is_empty() {
            // No GPU: only the pool's budget (a CPU machine's RAM) can be weighed.
            demands.retain(|d| d.fit == horos_gpu_alloc::plan::Fit::Pool);
        }
        plan_problems(
            &sizes,
            pool.and_then(|p| p.memory_mb),
            pool.map_or(1, |p| p.gpus),
            &demands,
        )
    }
}
