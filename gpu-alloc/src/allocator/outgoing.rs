//! What becomes of the mode a GPU leaves: put to sleep (level 1 or 2) or stopped, chosen by
//! what each costs now and to bring the mode back, and by what it holds (host RAM).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::costs::{SwapCosts, SwapKind};
use super::tick::Asleep;
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

/// What became of a mode a GPU left: put to sleep or stopped, why, and the level-1 sleepers
/// demoted to level 2 to make room for it in host RAM, as (GPU, mode), oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Retired {
    /// The choice and its reason.
    pub choice: OutgoingChoice,
    /// Level-1 sleepers demoted to level 2.
    pub evicted: Vec<(u32, String)>,
}

/// The servers asleep on a fleet, and the host RAM their level-1 weights hold: never more than
/// the budget, the oldest level-1 sleepers demoted to level 2 to make room. The simulator and
/// the executor's replay share it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sleepers {
    budget_mb: u64,
    used_mb: u64,
    peak_mb: u64,
    evictions: usize,
    /// (GPU, mode) → (level, since, host MB held).
    asleep: BTreeMap<(u32, String), (SleepLevel, f64, u64)>,
}

impl Sleepers {
    /// No sleeper, `budget_mb` of host RAM for level-1 sleepers.
    pub fn new(budget_mb: u64) -> Self {
        Self {
            budget_mb,
            ..Self::default()
        }
    }

    /// `mode` leaves GPU `gpu` at `now`: put to sleep or stopped as [`choose_outgoing`]
    /// decides, evicting the oldest level-1 sleepers when host RAM lacks room.
    pub fn retire(
        &mut self,
        catalogue: &Catalogue,
        costs: &SwapCosts,
        mode: &str,
        gpu: u32,
        now: f64,
    ) -> Retired {
        // Evicting every level-1 sleeper would free all the budget.
        let choice = choose_outgoing(catalogue, costs, mode, gpu, true, self.budget_mb);
        let mut evicted = Vec::new();
        let Outgoing::Sleep(level) = choice.choice else {
            return Retired { choice, evicted };
        };
        let mut held = 0;
        if level == SleepLevel::One {
            held = catalogue.get(mode).map_or(0, |m| m.host_mb());
            while self.used_mb + held > self.budget_mb {
                let oldest = self
                    .asleep
                    .iter()
                    .filter(|(_, (l, _, _))| *l == SleepLevel::One)
                    .min_by(|a, b| a.1.1.total_cmp(&b.1.1))
                    .map(|(k, _)| k.clone());
                let Some(key) = oldest else { break };
                if let Some(e) = self.asleep.get_mut(&key) {
                    self.used_mb = self.used_mb.saturating_sub(e.2);
                    *e = (SleepLevel::Two, e.1, 0);
                }
                self.evictions += 1;
                evicted.push(key);
            }
            self.used_mb += held;
            self.peak_mb = self.peak_mb.max(self.used_mb);
        }
        self.asleep
            .insert((gpu, mode.to_owned()), (level, now, held));
        Retired { choice, evicted }
    }

    /// `mode` comes up on GPU `gpu`: the level it wakes from, if it slept there (its host RAM
    /// freed).
    pub fn wake(&mut self, mode: &str, gpu: u32) -> Option<SleepLevel> {
        let (level, _, held) = self.asleep.remove(&(gpu, mode.to_owned()))?;
        self.used_mb = self.used_mb.saturating_sub(held);
        Some(level)
    }

    /// The level `mode` sleeps at on GPU `gpu`, if it sleeps there.
    pub fn level(&self, mode: &str, gpu: u32) -> Option<SleepLevel> {
        self.asleep.get(&(gpu, mode.to_owned())).map(|e| e.0)
    }

    /// Host RAM level-1 sleepers hold now, MB.
    pub fn used_mb(&self) -> u64 {
        self.used_mb
    }

    /// Host RAM level-1 sleepers may hold, MB.
    pub fn budget_mb(&self) -> u64 {
        self.budget_mb
    }

    /// Changes the budget (what a shared [`HostRam`](crate::host_ram::HostRam) leaves these
    /// sleepers now): the next [`Sleepers::retire`] keeps within it.
    pub fn set_budget_mb(&mut self, budget_mb: u64) {
        self.budget_mb = budget_mb;
    }

    /// The modes asleep on GPU `gpu`.
    pub fn on(&self, gpu: u32) -> Vec<Asleep> {
        self.asleep
            .range((gpu, String::new())..)
            .take_while(|((g, _), _)| *g == gpu)
            .map(|((_, mode), (level, _, _))| Asleep {
                mode: mode.clone(),
                level: *level,
            })
            .collect()
    }

    /// Level-1 sleepers demoted to level 2 so far.
    pub fn evictions(&self) -> usize {
        self.evictions
    }

    /// Most host RAM level-1 sleepers held at once, MB.
    pub fn peak_mb(&self) -> u64 {
        self.peak_mb
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

#[cfg(test)]
mod sleepers_tests {
    use super::*;
    use crate::catalogue::{ModeSpec, SleepSpec};

    fn catalogue() -> Catalogue {
        let mode = |name: &str| ModeSpec {
            name: name.into(),
            vram_mb: 10_000,
            swap_in_s: 100.0,
            sleep: SleepSpec {
                can_sleep: true,
                ..SleepSpec::default()
            },
            ..ModeSpec::default()
        };
        Catalogue {
            modes: vec![mode("a"), mode("b"), mode("c")],
            initial: vec!["a".into(), "b".into()],
        }
    }

    #[test]
    fn host_ram_never_exceeds_the_budget_and_the_oldest_level_one_sleeper_goes_first() {
        let cat = catalogue();
        let costs = SwapCosts::new();
        let mut s = Sleepers::new(25_000);
        let a = s.retire(&cat, &costs, "a", 0, 1.0);
        let b = s.retire(&cat, &costs, "b", 1, 2.0);
        assert!(a.evicted.is_empty() && b.evicted.is_empty());
        let c = s.retire(&cat, &costs, "c", 0, 3.0);
        assert_eq!(c.choice.choice, Outgoing::Sleep(SleepLevel::One));
        assert_eq!(c.evicted, vec![(0, "a".to_owned())]);
        assert_eq!((s.evictions(), s.peak_mb()), (1, 20_000));
        assert_eq!(s.on(0).len(), 2);
        assert_eq!(s.wake("a", 0), Some(SleepLevel::Two));
        assert_eq!(s.wake("b", 1), Some(SleepLevel::One));
        assert_eq!(s.wake("b", 1), None);
        assert_eq!(s.on(1), Vec::new());
        // A mode bigger than the whole budget sleeps at level 2 and evicts nobody.
        let mut small = Sleepers::new(5_000);
        let p = small.retire(&cat, &costs, "a", 0, 0.0);
        assert_eq!(
            (p.choice.choice, p.evicted.len()),
            (Outgoing::Sleep(SleepLevel::Two), 0)
        );
        assert_eq!(small.peak_mb(), 0);
    }
}
