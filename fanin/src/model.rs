//! The fan-in vocabulary: parents, fragments, policies, results and progress.

use serde::{Deserialize, Serialize};
use squeueha::NewJob;

/// What a failed fragment does to its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// The first failed fragment fails the parent and cancels its pending fragments.
    FailFast,
    /// The parent completes when every fragment has finished, listing the failed ones.
    Partial,
}

impl FailurePolicy {
    pub(crate) fn code(self) -> i64 {
        match self {
            FailurePolicy::FailFast => 0,
            FailurePolicy::Partial => 1,
        }
    }

    pub(crate) fn from_code(code: i64) -> Self {
        if code == 1 {
            FailurePolicy::Partial
        } else {
            FailurePolicy::FailFast
        }
    }
}

/// Where a parent is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParentState {
    /// Fragments still outstanding.
    Pending,
    /// Every fragment done (under `Partial`, some may have failed: see `failed`).
    Completed,
    /// Failed (fail-fast policy, or a failed sub-parent).
    Failed,
}

impl ParentState {
    pub(crate) fn code(self) -> i64 {
        match self {
            ParentState::Pending => 0,
            ParentState::Completed => 1,
            ParentState::Failed => 2,
        }
    }

    pub(crate) fn from_code(code: i64) -> Self {
        match code {
            1 => ParentState::Completed,
            2 => ParentState::Failed,
            _ => ParentState::Pending,
        }
    }
}

/// One slot of a parent.
#[derive(Debug, Clone)]
pub enum FragmentSpec {
    /// A job enqueued on the parent's fragment queue together with the parent.
    Job(NewJob),
    /// A sub-parent created later with [`ParentSpec::child_of`] (pages of a document whose tiles are
    /// not known yet).
    Child,
}

/// The job enqueued, in the same transaction, when a parent finishes.
#[derive(Debug, Clone)]
pub struct NextStage {
    /// Queue of the next stage.
    pub queue: String,
    /// Free data carried into the [`Completion`] payload.
    pub data: serde_json::Value,
    /// Priority of the next-stage job, in squeueha's order (higher is claimed first).
    pub priority: i32,
}

/// The JSON payload of a next-stage job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// The parent that finished.
    pub parent_id: i64,
    /// `Completed` or `Failed`.
    pub state: ParentState,
    /// Indices of failed fragments (partial policy) or of the fragment that failed the parent.
    pub failed: Vec<u32>,
    /// The `data` given in [`NextStage`].
    pub data: serde_json::Value,
}

/// A parent to create.
#[derive(Debug, Clone)]
pub struct ParentSpec {
    pub(crate) label: String,
    pub(crate) fragment_queue: String,
    pub(crate) fragments: Vec<FragmentSpec>,
    pub(crate) policy: FailurePolicy,
    pub(crate) next: Option<NextStage>,
    pub(crate) child_of: Option<FragmentRef>,
}

impl ParentSpec {
    /// A parent whose fragments are jobs on `fragment_queue`. Default policy: fail fast.
    pub fn new(label: impl Into<String>, fragment_queue: impl Into<String>) -> Self {
        ParentSpec {
            label: label.into(),
            fragment_queue: fragment_queue.into(),
            fragments: Vec::new(),
            policy: FailurePolicy::FailFast,
            next: None,
            child_of: None,
        }
    }

    /// Adds fragment jobs, in fragment order.
    pub fn jobs(mut self, jobs: impl IntoIterator<Item = NewJob>) -> Self {
        self.fragments
            .extend(jobs.into_iter().map(FragmentSpec::Job));
        self
    }

    /// Adds one slot of any kind.
    pub fn fragment(mut self, fragment: FragmentSpec) -> Self {
        self.fragments.push(fragment);
        self
    }

    /// Adds `n` slots for sub-parents.
    pub fn children(mut self, n: usize) -> Self {
        self.fragments
            .extend(std::iter::repeat_n(FragmentSpec::Child, n));
        self
    }

    /// Sets the failure policy.
    pub fn policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Enqueues a job on `queue` when the parent finishes (same transaction as the last fragment).
    pub fn then(mut self, queue: impl Into<String>, data: serde_json::Value) -> Self {
        self.next = Some(NextStage {
            queue: queue.into(),
            data,
            priority: 0,
        });
        self
    }

    /// Makes this parent the sub-parent filling slot `slot` of a higher parent; its own completion
    /// (or failure) is recorded there, in the same transaction.
    pub fn child_of(mut self, slot: FragmentRef) -> Self {
        self.child_of = Some(slot);
        self
    }
}

/// A fragment slot: parent id and index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FragmentRef {
    /// The parent.
    pub parent: i64,
    /// Index within the parent, from 0.
    pub index: u32,
}

/// A fragment's result as reported by a worker.
#[derive(Debug, Clone)]
pub enum FragmentResult {
    /// Bytes stored in the database (large ones go to a file when a results directory is set).
    Bytes(Vec<u8>),
    /// A file the worker already wrote, relative to the results directory.
    File(String),
}

/// What a report did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Recorded; the parent still waits for other fragments.
    Recorded,
    /// Recorded, and it was the last one: the parent finished (and its next stage was enqueued).
    ParentFinished(ParentState),
    /// The fragment had already been reported: nothing changed (at-least-once delivery).
    Duplicate,
    /// The parent had already finished (failed fast): the report was dropped.
    ParentClosed,
}

/// A fragment's stored outcome, in fragment order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FragmentOutcome {
    /// Not finished.
    Pending,
    /// Done with this result.
    Done(Vec<u8>),
    /// A sub-parent, finished; fetch its results with its id.
    Child(i64),
    /// Failed with this error.
    Failed(String),
    /// Cancelled because the parent failed fast.
    Cancelled,
}

/// Counts of a parent's fragments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// The parent.
    pub parent: i64,
    /// Its label.
    pub label: String,
    /// Its state.
    pub state: ParentState,
    /// Fragments in all.
    pub total: u32,
    /// Done.
    pub done: u32,
    /// Failed.
    pub failed: u32,
    /// Cancelled (fail fast).
    pub cancelled: u32,
    /// Not finished yet.
    pub pending: u32,
}
