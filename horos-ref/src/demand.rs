//! Work for a lane that waits outside its queue, as the allocator counts it, added up: requests
//! the coordinator holds for a parked lane's model, and the ingest pipeline's pages and chunks
//! waiting for the lane that reads or embeds them (ingest-pipeline's `backlog::StageBacklog`).

use std::sync::Arc;

use horos_modes::Demand;

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

/// Adds `more` to what `demand` already counts.
pub fn add(demand: &mut Option<Arc<dyn Demand>>, more: Arc<dyn Demand>) {
    *demand = Some(match demand.take() {
        None => more,
        Some(first) => Arc::new(Demands(vec![first, more])),
    });
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
        let mut d: Option<Arc<dyn Demand>> = None;
        add(&mut d, Arc::new(Fixed(2, 5.0)));
        add(&mut d, Arc::new(Fixed(3, 1.0)));
        assert_eq!(d.unwrap().waiting(), (5, 5.0));
    }
}
