//! Admission: who goes first and when there is room. The priority queue of waiting requests
//! under the concurrency limits ([`scheduler`]), the meaning of a priority ([`priority`]), the
//! wait for GPU room ([`room`]) and the learned cold-load times that decide whether a cold model
//! can be waited for ([`loadclock`]). Keys and callers' limits, checked before a request gets
//! here, are tenancy's (`crate::tenancy`).

pub(crate) mod loadclock;
pub(crate) mod priority;
pub(crate) mod room;
pub(crate) mod scheduler;

use std::sync::Arc;

use crate::admission::loadclock::LoadClock;
use crate::admission::room::RoomQueue;
use crate::admission::scheduler::{Permit, Scheduler};

/// The gateway's admission part: places under the concurrency limits, the wait for GPU room,
/// and how long a cold model takes to load.
pub(crate) struct Places {
    sched: Arc<Scheduler>,
    room: Arc<RoomQueue>,
    loads: Arc<LoadClock>,
}

impl Places {
    /// The scheduler, the room queue and the load clock a coordinator starts with.
    pub(crate) fn new(sched: Arc<Scheduler>, room: Arc<RoomQueue>, loads: Arc<LoadClock>) -> Self {
        Self { sched, room, loads }
    }

    /// Waits for a place for a request of `priority` on `model` (`warm`: the model is loaded).
    pub(crate) async fn admit(&self, model: &str, priority: i32, warm: bool) -> Permit {
        self.sched.admit(model, priority, warm).await
    }

    /// Requests waiting for GPU room, told when room is freed.
    pub(crate) fn room(&self) -> &Arc<RoomQueue> {
        &self.room
    }

    /// Cold-load times, learned and in progress.
    pub(crate) fn loads(&self) -> &LoadClock {
        &self.loads
    }
}
