//! The task registry: a task names a ladder of candidate models; resolving it picks one,
//! with the cloud-fallback guard applied and a reason for the status page.

use serde::{Deserialize, Serialize};

use crate::upstream::Readiness;

/// A task: a named ladder of candidate models, best first.
///
/// A request selects it with the body field `x_task` or the model name `task:NAME`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskSpec {
    /// Candidate models, best first (`models[0]` is the primary).
    pub models: Vec<String>,
    /// Always use the primary, even when it is cold and a fallback is warm (its quality is
    /// load-bearing, e.g. strict-JSON extraction).
    pub pin_primary: bool,
    /// Keep-alive after each call, seconds (a request's own `keep_alive` wins).
    pub keep_alive_s: Option<f64>,
    /// Time budget of a call, seconds (a request's own `x_timeout_s` wins).
    pub budget_s: Option<f64>,
    /// Priority of the task's requests (a request's own `x_priority` wins).
    pub priority: Option<i32>,
}

/// The model picked for a task, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The model.
    pub model: String,
    /// Why it was picked.
    pub reason: String,
}

/// The candidates a task may use now: the primary always; fallbacks without cloud models
/// (those `is_cloud` names) when the guard is off (so the list is never emptied by it).
pub fn candidates(
    task: &TaskSpec,
    allow_cloud: bool,
    is_cloud: impl Fn(&str) -> bool,
) -> Vec<&str> {
    task.models
        .iter()
        .enumerate()
        .filter(|(i, m)| *i == 0 || allow_cloud || !is_cloud(m))
        .map(|(_, m)| m.as_str())
        .collect()
}

/// Picks a model for `task` (cloud models are those `is_cloud` names): the primary when pinned
/// or warm, else the first warm fallback,
/// else the primary (a cold load). `readiness` tells a model's state.
pub fn resolve(
    name: &str,
    task: &TaskSpec,
    allow_cloud: bool,
    is_cloud: impl Fn(&str) -> bool,
    readiness: impl Fn(&str) -> Readiness,
) -> Option<Resolved> {
    let cands = candidates(task, allow_cloud, is_cloud);
    let primary = *cands.first()?;
    let pick = |model: &str, reason: String| {
        Some(Resolved {
            model: model.to_owned(),
            reason,
        })
    };
    if task.pin_primary {
        return pick(primary, format!("task {name}: primary {primary} pinned"));
    }
    let states: Vec<(&str, Readiness)> = cands.iter().map(|m| (*m, readiness(m))).collect();
    if states[0].1 == Readiness::Ready {
        return pick(primary, format!("task {name}: primary {primary} warm"));
    }
    if let Some((m, _)) = states.iter().skip(1).find(|(_, r)| *r == Readiness::Ready) {
        return pick(
            m,
            format!("task {name}: primary {primary} cold, warm fallback {m}"),
        );
    }
    if states[0].1 == Readiness::Unknown
        && let Some((m, _)) = states.iter().find(|(_, r)| *r != Readiness::Unknown)
    {
        return pick(
            m,
            format!("task {name}: primary {primary} unknown, first known {m} (cold)"),
        );
    }
    pick(
        primary,
        format!("task {name}: nothing warm, primary {primary} (cold load)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(models: &[&str], pin: bool) -> TaskSpec {
        TaskSpec {
            models: models.iter().map(|s| s.to_string()).collect(),
            pin_primary: pin,
            ..TaskSpec::default()
        }
    }

    #[test]
    fn warm_fallback_unless_pinned() {
        let warm = |m: &str| {
            if m == "small" {
                Readiness::Ready
            } else {
                Readiness::Cold
            }
        };
        let t = task(&["big", "small"], false);
        assert_eq!(
            resolve("t", &t, true, |_| false, warm).unwrap().model,
            "small"
        );
        let t = task(&["big", "small"], true);
        assert_eq!(
            resolve("t", &t, true, |_| false, warm).unwrap().model,
            "big"
        );
        let t = task(&["big", "other"], false);
        assert_eq!(
            resolve("t", &t, true, |_| false, warm).unwrap().model,
            "big"
        );
    }

    #[test]
    fn cloud_guard_strips_fallbacks_only() {
        let p = |m: &str| m.starts_with("claude:");
        let t = task(&["claude:sonnet", "local", "claude:haiku"], false);
        assert_eq!(candidates(&t, false, p), vec!["claude:sonnet", "local"]);
        assert_eq!(candidates(&t, true, p).len(), 3);
        let warm_haiku = |m: &str| {
            if m == "claude:haiku" {
                Readiness::Ready
            } else {
                Readiness::Cold
            }
        };
        let t = task(&["local", "claude:haiku"], false);
        assert_eq!(
            resolve("t", &t, false, p, warm_haiku).unwrap().model,
            "local"
        );
        assert_eq!(
            resolve("t", &t, true, p, warm_haiku).unwrap().model,
            "claude:haiku"
        );
    }
}
