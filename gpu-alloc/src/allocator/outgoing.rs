//! What becomes of the mode a GPU leaves: put to sleep (level 1 or 2) or stopped, chosen by
//! what each costs now and to bring the mode back, and by what it holds (host RAM).

use serde::{Deserialize, Serialize};

use super::costs::{SwapCosts, SwapKind};
use crate::catalogue::{Catalogue, SleepLevel};

/// The fate of the outgoing mode's server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outgoing", content = "level", rename_all = "snake_case")]
pub enum Outgoing {
    /// Put to sleep at this level.
    Sleep(SleepLevel),
    /// Stopped: a later switch back is a cold load.
    Stop,
}

/// Why the outgoing mode's server was stopped or put to sleep at that level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum OutgoingReason {
    /// Sleep is off, or the mode's server kind cannot sleep.
    CannotSleep,
    /// The option with the least seconds now plus seconds to bring it back.
    Cheapest {
        /// Seconds it costs now (sleep or stop).
        now_s: f64,
        /// Seconds to bring the mode back (wake or load).
        back_s: f64,
        /// Level 1 was not possible: the mode's weights do not fit the host RAM left, even
        /// with every level-1 sleeper evicted.
        host_full: bool,
    },
}

/// The choice and its reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutgoingChoice {
    /// What is done.
    pub choice: Outgoing,
    /// Why.
    pub reason: OutgoingReason,
}

/// Chooses the fate of `mode` leaving GPU `gpu`. `sleep` says whether sleep is on;
/// `host_room_mb` is the host RAM level 1 could use (free plus what evicting every level-1
/// sleeper would free).
pub fn choose_outgoing(
    catalogue: &Catalogue,
    costs: &SwapCosts,
    mode: &str,
    gpu: u32,
    sleep: bool,
    host_room_mb: u64,
) -> OutgoingChoice {
    let Some(spec) = catalogue.get(mode).filter(|m| sleep && m.can_sleep()) else {
        return OutgoingChoice {
            choice: Outgoing::Stop,
            reason: OutgoingReason::CannotSleep,
        };
    };
    let cost = |kind| costs.cost_s(catalogue, mode, gpu, kind);
    let host_full = spec.host_mb() > host_room_mb;
    let mut options = vec![(Outgoing::Stop, cost(SwapKind::Stop), cost(SwapKind::Load))];
    for level in [SleepLevel::One, SleepLevel::Two] {
        if level == SleepLevel::One && host_full {
            continue;
        }
        options.push((
            Outgoing::Sleep(level),
            cost(SwapKind::Sleep(level)),
            cost(SwapKind::Wake(level)),
        ));
    }
    // Ties go to the deeper keep (level 1 before level 2 before stop): listed last wins.
    let best = options
        .into_iter()
        .rev()
        .min_by(|x, y| (x.1 + x.2).total_cmp(&(y.1 + y.2)));
    match best {
        Some((choice, now_s, back_s)) => OutgoingChoice {
            choice,
            reason: OutgoingReason::Cheapest {
                now_s,
                back_s,
                host_full,
            },
        },
        None => OutgoingChoice {
            choice: Outgoing::Stop,
            reason: OutgoingReason::CannotSleep,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_one_when_host_ram_allows_else_level_two_and_never_for_a_server_that_cannot() {
        let cat = Catalogue::default();
        let costs = SwapCosts::new();
        let c = choose_outgoing(&cat, &costs, "think", 0, true, 100_000);
        assert_eq!(c.choice, Outgoing::Sleep(SleepLevel::One));
        let c = choose_outgoing(&cat, &costs, "think", 0, true, 1000);
        assert_eq!(c.choice, Outgoing::Sleep(SleepLevel::Two));
        assert!(matches!(
            c.reason,
            OutgoingReason::Cheapest {
                host_full: true,
                ..
            }
        ));
        let c = choose_outgoing(&cat, &costs, "embed", 0, true, 100_000);
        assert_eq!(c.choice, Outgoing::Stop);
        let c = choose_outgoing(&cat, &costs, "think", 0, false, 100_000);
        assert_eq!(c.choice, Outgoing::Stop);
    }

    #[test]
    fn a_measured_slow_wake_makes_stopping_the_cheaper_choice() {
        let cat = Catalogue::default();
        let mut costs = SwapCosts::new();
        for level in [SleepLevel::One, SleepLevel::Two] {
            costs.record(&super::super::costs::SwapMeasurement {
                mode: "fast".into(),
                gpu: 2,
                kind: SwapKind::Wake(level),
                seconds: 90.0,
            });
        }
        let c = choose_outgoing(&cat, &costs, "fast", 2, true, 100_000);
        assert_eq!(c.choice, Outgoing::Stop, "{c:?}");
    }
}
