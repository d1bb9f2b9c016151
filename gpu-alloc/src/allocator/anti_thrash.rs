//! Anti-thrash rules beside the dwell time and the hysteresis: the minimum resident time per
//! mode, and serving the resident class first (the A B A A C case).

use super::tick::{GpuView, Reason};
use super::{Allocator, ClassLoad, remaining_busy};

impl Allocator {
    /// Minimum time GPU `g` stays in its mode before another switch.
    pub(super) fn min_resident_s(&self, g: &GpuView) -> f64 {
        g.mode
            .as_deref()
            .map_or(self.cfg.min_dwell_s, |m| self.cfg.min_resident_s(m))
    }

    /// Anti-thrash: GPU `g`, the only one of class `a`, holds jobs of `a` queued. Serving one
    /// more batch of them before switching to `b` delays `b`'s queued jobs by that batch;
    /// switching now makes `a`'s jobs wait for the swap, `b`'s batch and the swap back. The
    /// switch waits when the first costs less job-seconds of waiting and `b`'s oldest job
    /// still starts within its bound.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn serve_resident_first(
        &self,
        g: &GpuView,
        loads: &[ClassLoad],
        gpus: &[usize],
        a: Option<usize>,
        b: usize,
        swap_s: f64,
        back_s: f64,
    ) -> Option<Reason> {
        let a = a?;
        let (ca, cb) = (&loads[a], &loads[b]);
        if !self.cfg.serve_resident_first
            || gpus[a] != 1
            || ca.pending_jobs == 0
            || cb.pending_jobs == 0
            || g.in_transition()
        {
            return None;
        }
        let batch_a = self
            .catalogue
            .get(&ca.name)
            .map_or(16, |m| m.batch_size)
            .max(1);
        let serve_a = self.batch_estimate_s(&ca.name, ca.pending_jobs) + self.cfg.batch_overhead_s;
        let kept = cb.pending_jobs as f64 * serve_a;
        let switched = ca.pending_jobs.min(batch_a) as f64
            * (swap_s + self.batch_estimate_s(&cb.name, cb.pending_jobs) + back_s);
        let starts_b = cb.oldest_wait_s + remaining_busy(g) + serve_a + swap_s;
        let in_bound = starts_b + self.cfg.starvation_margin_s + self.cfg.tick_s
            <= self.cfg.max_wait_s(&cb.name);
        (kept < switched && in_bound).then(|| Reason::ServeResidentFirst {
            class: ca.name.clone(),
            pending_jobs: ca.pending_jobs,
            wanted: cb.name.clone(),
            wait_if_kept_s: kept,
            wait_if_switched_s: switched,
        })
    }
}
