//! Learned cold-load times: a moving average per model of the loads this coordinator
//! started, and the loads in progress, to estimate when a cold model will be ready.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

#[derive(Debug, Default)]
struct Entry {
    avg_s: Option<f64>,
    loads: u64,
    loading_since: Option<Instant>,
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
    /// less than one second while a load is due: a load's end is not instant).
    pub fn eta(&self, model: &str) -> Duration {
        let st = self.lock();
        let e = st.get(model);
        let full = e
            .and_then(|e| e.avg_s)
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
        }
        Some(took)
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
        assert!(c.eta("m") <= Duration::from_secs(30));
        let took = c.finish("m", true).unwrap();
        assert!(c.expected("m") == took);
        assert!(c.finish("m", true).is_none());
        assert_eq!(c.figures()["m"].loads, 1);
        assert_eq!(c.eta("m"), Duration::from_secs(1));
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
