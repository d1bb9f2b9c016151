//! Work for a lane that waits outside its queue, added up: requests a gateway holds for a parked
//! lane's model, and an ingest pipeline's pages and chunks waiting for the lane that reads or
//! embeds them. The allocator weighs the sum with the lane's queue.

use std::sync::Arc;

use horos_server_control::Demand;

use crate::ModeLane;

/// Several sources of work for one lane, added up (the oldest wait is the oldest of all).
pub struct Demands(pub Vec<Arc<dyn Demand>>);

impl Demand for Demands {
    fn waiting(&self) -> (usize, f64) {
        self.0.iter().fold((0, 0.0), |(n, oldest), d| {
            let (m, wait) = d.waiting();
            (n + m, f64::max(oldest, wait))
        })
    }
}

impl ModeLane {
    /// Adds `more` to the work this lane's [`ModeLane::demand`] already counts.
    pub fn add_demand(&mut self, more: Arc<dyn Demand>) {
        self.demand = Some(match self.demand.take() {
            None => more,
            Some(first) => Arc::new(Demands(vec![first, more])),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(usize, f64);

    impl Demand for Fixed {
        fn waiting(&self) -> (usize, f64) {
            (self.0, self.1)
        }
    }

    #[test]
    fn sources_add_up() {
        let mut lane = ModeLane {
            queue: "q".into(),
            instances: Vec::new(),
            swap_in_s: 1.0,
            job_s: 1.0,
            batch_size: 1,
            demand: None,
            keep_warm: None,
            sleep: horos_gpu_alloc::catalogue::SleepSpec::default(),
        };
        lane.add_demand(Arc::new(Fixed(2, 5.0)));
        assert_eq!(lane.demand.as_ref().map(|d| d.waiting()), Some((2, 5.0)));
        lane.add_demand(Arc::new(Fixed(3, 1.0)));
        assert_eq!(lane.demand.map(|d| d.waiting()), Some((5, 5.0)));
    }
}
