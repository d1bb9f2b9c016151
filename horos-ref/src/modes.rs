//! `[allocator]`: which of the managed lanes each GPU serves, carried out by `horos-modes`;
//! this module only reports its decisions to the coordinator's decision log and modes board.

use std::sync::Arc;

use horos_coordinator::{DecisionAction, DecisionLog, ModeBoard, ModeState};
pub use horos_modes::{Instance, ModeLane, ModesConfig};
use horos_modes::{LaneState, ModeAction};
use horos_modes::{ModesError, QueueBacklog};
use squeueha::Queue;
use tokio::task::JoinHandle;

/// Where the allocator reports: the coordinator's decision log and modes board, when it runs.
#[derive(Clone, Default)]
pub struct Report {
    /// Decisions with their reasons.
    pub log: Option<DecisionLog>,
    /// What each GPU serves.
    pub board: Option<ModeBoard>,
    /// The lane instances asleep (the status page's lanes, `ps`).
    pub asleep: Option<horos_ops::status::Asleep>,
    /// The plan as carried out, for the GPU view's auditor.
    pub plan: Option<horos_gpu_alloc::view::PlanBook>,
}

impl horos_modes::Reporter for Report {
    fn decision(&self, gpu: u32, action: ModeAction, reason: &str) {
        if let Some(l) = &self.log {
            let action = DecisionAction::Other(action.as_str().to_owned());
            l.record(&format!("gpu{gpu}"), action, reason.to_owned());
        }
    }

    fn asleep(&self, asleep: &[(u32, String, horos_gpu_alloc::catalogue::SleepLevel)]) {
        if let Some(a) = &self.asleep {
            a.set(asleep.iter().map(|(g, q, l)| (*g, q.clone(), l.number())));
        }
    }

    fn mode(&self, gpu: u32, mode: &str, state: &LaneState) {
        if let Some(p) = &self.plan {
            let to = match state {
                LaneState::SwitchingTo(lane) => Some(lane.as_str()),
                _ => None,
            };
            p.set(gpu, mode, to);
        }
        if let Some(b) = &self.board {
            let state = match state {
                LaneState::Serving => ModeState::Serving,
                LaneState::Down => ModeState::Down,
                LaneState::SwitchingTo(lane) => ModeState::SwitchingTo(lane.clone()),
                LaneState::Restarting => ModeState::Other(state.to_string()),
            };
            b.set(gpu, mode, state);
        }
    }
}

/// The allocator loop over `lanes`, whose backlogs are their queues, its swaps counted in
/// `swaps` (see [`horos_modes::spawn_with_metrics`]).
pub fn spawn(
    config: ModesConfig,
    lanes: Vec<ModeLane>,
    initial: Vec<usize>,
    queue: Queue,
    report: Report,
    swaps: Arc<horos_modes::SwapMetrics>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<JoinHandle<()>, ModesError> {
    let backlog = Arc::new(QueueBacklog(queue));
    horos_modes::spawn_with_metrics(
        config,
        lanes,
        initial,
        backlog,
        Arc::new(report),
        swaps,
        stop,
    )
}
