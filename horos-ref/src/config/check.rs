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
        for (i, l) in self.lanes.iter().enumerate() {
            // Under the allocator, a lane's server on its k-th GPU listens at port + k: the
            // first is checked.
            problems.extend(l.problems(i, scope));
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
        problems.extend(self.vram_problems());
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
