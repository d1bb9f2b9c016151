//! Swap costs measured, not configured: the seconds a GPU is unavailable to load, wake, put
//! to sleep or stop a mode, per (mode, GPU, kind, level), as a moving average of what was
//! measured, with the catalogue's figures as the prior before the first measurement.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::catalogue::{Catalogue, SleepLevel};

/// What a GPU does to a mode's server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "level", rename_all = "snake_case")]
pub enum SwapKind {
    /// A cold start: unload what was there, load the weights, warm up (`swap_in_s`).
    Load,
    /// Wake a server asleep at this level.
    Wake(SleepLevel),
    /// Put the server to sleep at this level.
    Sleep(SleepLevel),
    /// Stop the server (its cost is part of the next load's `swap_in_s` by default: 0).
    Stop,
}

/// One measured swap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwapMeasurement {
    /// The mode.
    pub mode: String,
    /// The GPU.
    pub gpu: u32,
    /// What was done.
    pub kind: SwapKind,
    /// Seconds it took.
    pub seconds: f64,
}

/// Moving average of one (mode, GPU, kind)'s measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Average, seconds (exponential, weight [`SwapCosts::SMOOTHING`], the first measurement
    /// taken as is).
    pub mean_s: f64,
    /// Measurements taken.
    pub count: u64,
}

/// The cost of each swap: measured where measured, else the catalogue's figure (the prior).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SwapCosts {
    measured: BTreeMap<(String, u32, SwapKind), Measured>,
}

impl SwapMeasurement {
    /// `kind` done to `mode` on GPU `gpu` took `seconds`.
    pub fn new(mode: &str, gpu: u32, kind: SwapKind, seconds: f64) -> Self {
        Self {
            mode: mode.to_owned(),
            gpu,
            kind,
            seconds,
        }
    }
}

impl SwapCosts {
    /// Weight of a new measurement in the moving average.
    pub const SMOOTHING: f64 = 0.3;

    /// No measurement yet: every cost is the catalogue's.
    pub fn new() -> Self {
        Self::default()
    }

    /// The catalogue's figure for a swap (0 for an unknown mode).
    pub fn prior(catalogue: &Catalogue, mode: &str, kind: SwapKind) -> f64 {
        let Some(m) = catalogue.get(mode) else {
            return 0.0;
        };
        match kind {
            SwapKind::Load => m.swap_in_s,
            SwapKind::Wake(level) => m.wake_s(level),
            SwapKind::Sleep(_) => m.sleep_s(),
            SwapKind::Stop => 0.0,
        }
    }

    /// Records a measurement; a negative or non-finite one is ignored.
    pub fn record(&mut self, m: &SwapMeasurement) {
        if !(m.seconds >= 0.0 && m.seconds.is_finite()) {
            return;
        }
        self.measured
            .entry((m.mode.clone(), m.gpu, m.kind))
            .and_modify(|e| {
                e.mean_s += Self::SMOOTHING * (m.seconds - e.mean_s);
                e.count += 1;
            })
            .or_insert(Measured {
                mean_s: m.seconds,
                count: 1,
            });
    }

    /// Sets what was measured for this (mode, GPU, kind), as kept from an earlier run (a
    /// [`crate::cost_store::CostStore`]); replaces what was there.
    pub fn restore(&mut self, mode: &str, gpu: u32, kind: SwapKind, measured: Measured) {
        if measured.mean_s >= 0.0 && measured.mean_s.is_finite() && measured.count > 0 {
            self.measured.insert((mode.to_owned(), gpu, kind), measured);
        }
    }

    /// Every (mode, GPU, kind) measured, with its average and count.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32, SwapKind, Measured)> + '_ {
        self.measured
            .iter()
            .map(|((mode, gpu, kind), m)| (mode.as_str(), *gpu, *kind, *m))
    }

    /// What was measured for this (mode, GPU, kind), if anything.
    pub fn measured(&self, mode: &str, gpu: u32, kind: SwapKind) -> Option<Measured> {
        self.measured.get(&(mode.to_owned(), gpu, kind)).copied()
    }

    /// The cost to use: this GPU's measurement, else the mean of the other GPUs'
    /// measurements of the same mode and kind, else the catalogue's figure; an unmeasured
    /// wake's figure is kept in the order the levels impose on what was measured (a level-2
    /// wake reloads the weights a level-1 wake finds in host RAM: never the faster).
    pub fn cost_s(&self, catalogue: &Catalogue, mode: &str, gpu: u32, kind: SwapKind) -> f64 {
        if let Some(v) = self.known_s(mode, gpu, kind) {
            return v;
        }
        let prior = Self::prior(catalogue, mode, kind);
        match kind {
            SwapKind::Wake(SleepLevel::Two) => self
                .known_s(mode, gpu, SwapKind::Wake(SleepLevel::One))
                .map_or(prior, |l1| prior.max(l1)),
            SwapKind::Wake(SleepLevel::One) => self
                .known_s(mode, gpu, SwapKind::Wake(SleepLevel::Two))
                .map_or(prior, |l2| prior.min(l2)),
            _ => prior,
        }
    }

    /// This GPU's measurement, else the mean of the other GPUs' measurements.
    fn known_s(&self, mode: &str, gpu: u32, kind: SwapKind) -> Option<f64> {
        if let Some(m) = self.measured(mode, gpu, kind) {
            return Some(m.mean_s);
        }
        let (sum, n) = self
            .measured
            .iter()
            .filter(|((md, _, k), _)| md == mode && *k == kind)
            .fold((0.0, 0u64), |(s, n), (_, m)| (s + m.mean_s, n + 1));
        (n > 0).then(|| sum / n as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measurement(mode: &str, gpu: u32, kind: SwapKind, seconds: f64) -> SwapMeasurement {
        SwapMeasurement::new(mode, gpu, kind, seconds)
    }

    #[test]
    fn before_any_measurement_the_catalogue_figure_is_the_cost() {
        let cat = Catalogue::default();
        let c = SwapCosts::new();
        assert_eq!(c.cost_s(&cat, "think", 0, SwapKind::Load), 180.0);
        // Derived: 2 % of 180 s, 4 % of 180 s, 1 % of 180 s.
        assert!((c.cost_s(&cat, "think", 0, SwapKind::Wake(SleepLevel::One)) - 3.6).abs() < 1e-9);
        assert!((c.cost_s(&cat, "think", 0, SwapKind::Wake(SleepLevel::Two)) - 7.2).abs() < 1e-9);
        assert!((c.cost_s(&cat, "think", 0, SwapKind::Sleep(SleepLevel::One)) - 1.8).abs() < 1e-9);
        assert_eq!(c.cost_s(&cat, "think", 0, SwapKind::Stop), 0.0);
        assert_eq!(c.cost_s(&cat, "nope", 0, SwapKind::Load), 0.0);
        assert!(c.measured("think", 0, SwapKind::Load).is_none());
    }

    #[test]
    fn after_a_measurement_the_measured_figure_replaces_the_prior() {
        let cat = Catalogue::default();
        let mut c = SwapCosts::new();
        c.record(&measurement("think", 1, SwapKind::Load, 240.0));
        // This GPU: the measurement itself; another GPU: the mean of the measured GPUs.
        assert_eq!(c.cost_s(&cat, "think", 1, SwapKind::Load), 240.0);
        assert_eq!(c.cost_s(&cat, "think", 0, SwapKind::Load), 240.0);
        // Other kinds and modes keep their prior.
        assert!((c.cost_s(&cat, "think", 1, SwapKind::Wake(SleepLevel::One)) - 3.6).abs() < 1e-9);
        assert_eq!(c.cost_s(&cat, "vision", 1, SwapKind::Load), 70.0);
        c.record(&measurement("think", 1, SwapKind::Load, 140.0));
        let m = c.measured("think", 1, SwapKind::Load).unwrap();
        assert_eq!(m.count, 2);
        assert!((m.mean_s - (240.0 + 0.3 * (140.0 - 240.0))).abs() < 1e-9);
        c.record(&measurement("think", 0, SwapKind::Load, 100.0));
        assert_eq!(c.cost_s(&cat, "think", 0, SwapKind::Load), 100.0);
    }

    #[test]
    fn an_unmeasured_wake_keeps_the_levels_order_against_what_was_measured() {
        let cat = Catalogue::default();
        let mut c = SwapCosts::new();
        let (one, two) = (
            SwapKind::Wake(SleepLevel::One),
            SwapKind::Wake(SleepLevel::Two),
        );
        // Priors for think: level 1 3.6 s, level 2 7.2 s. A level-1 wake measured at 20 s:
        // level 2 is not assumed faster.
        c.record(&measurement("think", 0, one, 20.0));
        assert_eq!(c.cost_s(&cat, "think", 0, two), 20.0);
        // A level-2 wake measured at 2 s: level 1 is not assumed slower.
        let mut c = SwapCosts::new();
        c.record(&measurement("think", 0, two, 2.0));
        assert_eq!(c.cost_s(&cat, "think", 0, one), 2.0);
        // Measured both ways: each its own.
        c.record(&measurement("think", 0, one, 5.0));
        assert_eq!(c.cost_s(&cat, "think", 0, one), 5.0);
        assert_eq!(c.cost_s(&cat, "think", 0, two), 2.0);
    }

    #[test]
    fn a_nonsense_measurement_is_ignored() {
        let cat = Catalogue::default();
        let mut c = SwapCosts::new();
        c.record(&measurement("fast", 0, SwapKind::Load, f64::NAN));
        c.record(&measurement("fast", 0, SwapKind::Load, -1.0));
        assert_eq!(c.cost_s(&cat, "fast", 0, SwapKind::Load), 60.0);
    }
}
