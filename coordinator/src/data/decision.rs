//! A decision and its reason, as the status page and `GET /api/v1/status` list them.

use serde::Serialize;

/// What was decided. The coordinator's own decisions have a variant each; other components
/// post theirs through [`DecisionLog`](crate::DecisionLog) under their own names
/// ([`DecisionAction::Other`]). Serialised as its name (`route`, `cold_reject`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DecisionAction {
    /// `x_task` resolved to a model of its ladder (`task`).
    Task,
    /// No place in the queue within the call's budget (`queue_timeout`).
    QueueTimeout,
    /// A cold model would not be ready within the budget: answered 503, load started
    /// (`cold_reject`).
    ColdReject,
    /// A model was loaded (`load`).
    Load,
    /// A load failed (`load_failed`).
    LoadFailed,
    /// No room to load a model: waiting for one to be released (`wait_vram`).
    WaitVram,
    /// An attempt failed before its first byte; the same model is tried again after a pause
    /// (`retry`).
    Retry,
    /// A model of a task's ladder could not answer; the request moved to the next rung
    /// (`fallback`).
    Fallback,
    /// A decision another component posted, under its own name.
    Other(String),
}

impl DecisionAction {
    const NAMED: [DecisionAction; 8] = [
        DecisionAction::Task,
        DecisionAction::QueueTimeout,
        DecisionAction::ColdReject,
        DecisionAction::Load,
        DecisionAction::LoadFailed,
        DecisionAction::WaitVram,
        DecisionAction::Retry,
        DecisionAction::Fallback,
    ];

    /// The action's name.
    pub fn as_str(&self) -> &str {
        match self {
            DecisionAction::Task => "task",
            DecisionAction::QueueTimeout => "queue_timeout",
            DecisionAction::ColdReject => "cold_reject",
            DecisionAction::Load => "load",
            DecisionAction::LoadFailed => "load_failed",
            DecisionAction::WaitVram => "wait_vram",
            DecisionAction::Retry => "retry",
            DecisionAction::Fallback => "fallback",
            DecisionAction::Other(name) => name,
        }
    }
}

impl From<&str> for DecisionAction {
    /// The coordinator's action of that name, else [`DecisionAction::Other`].
    fn from(name: &str) -> Self {
        DecisionAction::NAMED
            .into_iter()
            .find(|a| a.as_str() == name)
            .unwrap_or_else(|| DecisionAction::Other(name.to_owned()))
    }
}

impl std::fmt::Display for DecisionAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for DecisionAction {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A routing decision and its reason, for the status page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// When, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Request number (per process).
    pub request: u64,
    /// `x_client_id`, if given.
    pub client: Option<String>,
    /// Model concerned.
    pub model: String,
    /// What was decided.
    pub action: DecisionAction,
    /// Why.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_serialise_as_their_names_and_parse_back() {
        for a in DecisionAction::NAMED {
            assert_eq!(serde_json::json!(a), serde_json::json!(a.as_str()));
            assert_eq!(DecisionAction::from(a.as_str()), a);
        }
        let other = DecisionAction::from("switch");
        assert_eq!(other, DecisionAction::Other("switch".into()));
        assert_eq!(serde_json::json!(other), serde_json::json!("switch"));
        assert_eq!(DecisionAction::ColdReject.to_string(), "cold_reject");
    }
}
