//! Learned cold-load times: a moving average per model of the loads this coordinator
//! started, and the loads in progress, to estimate when a cold model will be ready. With a
//! state file the averages are kept there (`coord_swap_costs`, kind `load`): a restarted
//! coordinator starts from what it measured, the configured `load_s` only a prior before the
//! first measurement.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

#[derive(Debug, Default)]
struct Entry {
    avg_s: Option<f64>,
    loads: u64,
    loading_since: Option<Instant>,
    /// Measured since the state file last got it.
    unsaved: bool,
}

/// A model's learned load time as the state file keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedLoad {
    /// The model.
    pub model: String,
    /// The moving average of its measured loads, seconds.
    pub avg_s: f64,
    /// Loads measured.
    pub loads: u64,
}

/// One model's figures, for the status page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadFigures {
    /// Moving average of measured loads, seconds (`None` before the first).
    pub avg_s: Option<f64>,
    /// Loads measured.
    pub loads: u64,
    /// Seconds the load in progress has run, if any.
    pub loading_for_s: Option<f64>,
}

/// Estimates of load times (data plane only).
#[derive(Debug)]
pub struct LoadClock {
    default_s: f64,
    per_model: BTreeMap<String, f64>,
    alpha: f64,
    state: Mutex<HashMap<String, Entry>>,
}

impl LoadClock {
    /// A clock with a default estimate, per-model defaults and the weight of the newest
    /// measurement.
    pub fn new(default_s: f64, per_model: BTreeMap<String, f64>, alpha: f64) -> Self {
        Self {
            default_s: default_s.max(0.0),
            per_model,
            alpha: alpha.clamp(0.01, 1.0),
            state: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Expected full load time of `model`.
    #[cfg(test)]
    pub fn expected(&self, model: &str) -> Duration {
        let avg = self.lock().get(model).and_then(|e| e.avg_s);
        crate::clock::secs(avg.unwrap_or_else(|| self.default_of(model)))
    }

    fn default_of(&self, model: &str) -> f64 {
        self.per_model
            .get(model)
            .copied()
            .unwrap_or(self.default_s)
            .max(0.0)
    }

    /// Time until `model` is expected ready if a load started now or is in progress (never
    /// less than one second while a load is due: a load's end is not instant), `full_s` in
    /// place of the learned load time where given (a model asleep: the upstream's measured
    /// wake time).
    pub fn eta(&self, model: &str, full_s: Option<f64>) -> Duration {
        let st = self.lock();
        let e = st.get(model);
        let full = full_s
            .filter(|s| s.is_finite() && *s >= 0.0)
            .or_else(|| e.and_then(|e| e.avg_s))
            .unwrap_or_else(|| self.default_of(model));
        let done = e
            .and_then(|e| e.loading_since)
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        crate::clock::secs((full - done).max(1.0))
    }

    /// Marks a load of `model` started; `false` when one is already in progress (its
    /// starter measures it).
    pub fn begin(&self, model: &str) -> bool {
        let mut st = self.lock();
        let e = st.entry(model.to_owned()).or_default();
        if e.loading_since.is_some() {
            return false;
        }
        e.loading_since = Some(Instant::now());
        true
    }

    /// Ends the load begun by [`LoadClock::begin`]; a successful one updates the average.
    /// Returns its duration.
    pub fn finish(&self, model: &str, ok: bool) -> Option<Duration> {
        let mut st = self.lock();
        let e = st.get_mut(model)?;
        let took = e.loading_since.take()?.elapsed();
        if ok {
            let s = took.as_secs_f64();
            e.avg_s = Some(match e.avg_s {
                Some(a) => a + self.alpha * (s - a),
                None => s,
            });
            e.loads += 1;
            e.unsaved = true;
        }
        Some(took)
    }

    /// Starts from what an earlier run learnt (the state file's figures); a model measured in
    /// this run already keeps its own.
    pub fn seed(&self, learned: impl IntoIterator<Item = LearnedLoad>) {
        let mut st = self.lock();
        for l in learned {
            let e = st.entry(l.model).or_default();
            if e.loads == 0 && l.avg_s.is_finite() && l.avg_s >= 0.0 {
                e.avg_s = Some(l.avg_s);
                e.loads = l.loads;
            }
        }
    }

    /// The figures measured since the last call (to be saved), marked saved.
    pub fn take_unsaved(&self) -> Vec<LearnedLoad> {
        let mut st = self.lock();
        st.iter_mut()
            .filter(|(_, e)| e.unsaved)
            .filter_map(|(m, e)| {
                e.unsaved = false;
                Some(LearnedLoad {
                    model: m.clone(),
                    avg_s: e.avg_s?,
                    loads: e.loads,
                })
            })
            .collect()
    }

    /// Marks `learned` unsaved again (their write failed).
    pub fn unsave(&self, learned: &[LearnedLoad]) {
        let mut st = self.lock();
        for l in learned {
            if let Some(e) = st.get_mut(&l.model) {
                e.unsaved = true;
            }
        }
    }

    /// A guard for the load of `model` begun by [`LoadClock::begin`]: dropped without
    /// [`LoadEnd::finish`] (a panic, a cancelled future), it ends the load as failed, or the model
    /// would stay "loading" for good and its loads would never be measured again.
    pub(crate) fn ending<'a>(&'a self, model: &'a str) -> LoadEnd<'a> {
        LoadEnd {
            clock: self,
            model,
            done: false,
        }
    }

    /// Figures of every model seen.
    pub fn figures(&self) -> BTreeMap<String, LoadFigures> {
        self.lock()
            .iter()
            .map(|(m, e)| {
                (
                    m.clone(),
                    LoadFigures {
                        avg_s: e.avg_s,
                        loads: e.loads,
                        loading_for_s: e.loading_since.map(|t| t.elapsed().as_secs_f64()),
                    },
                )
            })
            .collect()
    }
}

/// See [`LoadClock::ending`].
pub(crate) struct LoadEnd<'a> {
    clock: &'a LoadClock,
    model: &'a str,
    done: bool,
}

impl LoadEnd<'_> {
    /// [`LoadClock::finish`].
    pub fn finish(mut self, ok: bool) -> Option<Duration> {
        self.done = true;
        self.clock.finish(self.model, ok)
    }
}

impl Drop for LoadEnd<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.clock.finish(self.model, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_then_learned() {
        let c = LoadClock::new(30.0, BTreeMap::from([("big".to_owned(), 90.0)]), 0.5);
        assert_eq!(c.expected("m"), Duration::from_secs(30));
        assert_eq!(c.expected("big"), Duration::from_secs(90));
        assert!(c.begin("m"));
        assert!(!c.begin("m"));
        assert!(c.eta("m", None) <= Duration::from_secs(30));
        let took = c.finish("m", true).unwrap();
        assert!(c.expected("m") == took);
        assert!(c.finish("m", true).is_none());
        assert_eq!(c.figures()["m"].loads, 1);
        assert_eq!(c.eta("m", None), Duration::from_secs(1));
    }

    #[test]
    fn learned_figures_seed_a_new_clock_and_only_new_ones_are_saved() {
        let c = LoadClock::new(30.0, BTreeMap::new(), 0.5);
        assert!(c.take_unsaved().is_empty());
        c.seed([LearnedLoad {
            model: "m".into(),
            avg_s: 2.0,
            loads: 3,
        }]);
        assert_eq!(c.expected("m"), Duration::from_secs(2));
        assert_eq!(c.figures()["m"].loads, 3);
        assert!(c.take_unsaved().is_empty(), "a seed is not new");
        assert!(c.begin("n"));
        c.finish("n", true);
        let saved = c.take_unsaved();
        assert_eq!(saved.len(), 1);
        assert_eq!(saved[0].model, "n");
        assert!(c.take_unsaved().is_empty());
        c.unsave(&saved);
        assert_eq!(c.take_unsaved(), saved);
    }

    #[test]
    fn a_load_whose_future_is_dropped_ends_as_failed() {
        let c = LoadClock::new(30.0, BTreeMap::new(), 0.5);
        assert!(c.begin("m"));
        drop(c.ending("m")); // a panic or cancellation mid-load
        assert!(c.begin("m"), "the model stayed loading");
        assert!(c.ending("m").finish(true).is_some());
        assert_eq!(c.figures()["m"].loads, 1);
    }
}
