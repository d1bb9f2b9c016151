//! The seams between a mode executor and the work it weighs that waits outside a queue.

/// Work for a lane that waits outside its queue.
pub trait Demand: Send + Sync {
    /// Requests waiting now, and how long the oldest has waited, seconds.
    fn waiting(&self) -> (usize, f64);
}

/// How long a lane should stay served from now.
pub trait KeepWarm: Send + Sync {
    /// Seconds it should stay served (0: the allocator decides alone).
    fn warm_for_s(&self) -> f64;
}
