//! The fan-in engine. Every public call is one squeueha transaction: the fragment's record, the ack
//! of its job, the parent's completion, the next stage's enqueue and the report to a higher parent
//! commit together or not at all.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use squeueha::{Job, Lease, NewJob, Queue, QueueTx, now_ms, params};

use crate::error::{Error, Result};
use crate::model::{
    FragmentOutcome, FragmentRef, FragmentResult, FragmentSpec, ParentSpec, ParentState, Progress,
    Recorded,
};
use crate::paths::confine;
use crate::record::{Stored, complete_jobs, record_in};
use crate::rows::{
    CANCELLED, DONE, FAILED, KIND_CHILD, KIND_JOB, PENDING, check_index, fragment_of_job,
    load_parent, progress_of,
};
use crate::schema;

/// Fan-in settings.
#[derive(Debug, Clone)]
pub struct FanInConfig {
    /// Directory for result files. File results and large byte results live here; every path is
    /// confined to it.
    pub results_dir: Option<PathBuf>,
    /// Byte results larger than this go to a file when `results_dir` is set (default 256 KiB).
    pub inline_limit: usize,
}

impl Default for FanInConfig {
    fn default() -> Self {
        FanInConfig {
            results_dir: None,
            inline_limit: 256 * 1024,
        }
    }
}

/// Exactly-once fan-in on a squeueha database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct FanIn {
    queue: Queue,
    pub(crate) cfg: FanInConfig,
}

/// A fragment as stored: state, child id, inline result, result file, error.
type StoredRow = (
    i64,
    Option<i64>,
    Option<Vec<u8>>,
    Option<String>,
    Option<String>,
);

impl FanIn {
    /// Creates the fan-in tables in the queue's database if needed.
    pub fn open(queue: Queue, cfg: FanInConfig) -> Result<FanIn> {
        queue.transaction(schema::migrate)?;
        if let Some(dir) = &cfg.results_dir {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                path: dir.display().to_string(),
                source,
            })?;
        }
        Ok(FanIn { queue, cfg })
    }

    /// The queue underneath.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Creates a parent and enqueues its fragment jobs, atomically. Returns the parent id.
    pub fn create_parent(&self, spec: ParentSpec) -> Result<i64> {
        if spec.fragments.is_empty() {
            return Err(Error::NoFragments);
        }
        self.queue.transaction(|tx| create_in(tx, &spec))
    }

    /// Like [`create_parent`](Self::create_parent), inside a caller's transaction.
    pub fn create_parent_in(&self, tx: &mut QueueTx<'_>, spec: &ParentSpec) -> Result<i64> {
        if spec.fragments.is_empty() {
            return Err(Error::NoFragments);
        }
        create_in(tx, spec)
    }

    /// The fragment slot a job fills.
    pub fn fragment_of(&self, job_id: i64) -> Result<Option<FragmentRef>> {
        self.queue.transaction(|tx| fragment_of_job(tx, job_id))
    }

    /// Records a claimed fragment job's result and acks the job, in one transaction. A second report
    /// of the same fragment (a retry after a lost ack) changes nothing and returns `Duplicate`.
    pub fn complete(&self, job: &Job, result: FragmentResult) -> Result<Recorded> {
        let mut out = self.complete_batch(vec![(job, result)])?;
        out.pop().ok_or(Error::NotAFragment(job.id))
    }

    /// Records many fragment results in one transaction (one commit for a whole batch).
    pub fn complete_batch(&self, items: Vec<(&Job, FragmentResult)>) -> Result<Vec<Recorded>> {
        let mut prepared = Vec::with_capacity(items.len());
        for (job, result) in items {
            match self.store_result(job.id, result) {
                Ok(stored) => prepared.push((job.id, job.lease, stored)),
                Err(e) => {
                    // Files already written for earlier items would be orphans.
                    self.cleanup_files(&prepared, None);
                    return Err(e);
                }
            }
        }
        let outcome = self.queue.transaction(|tx| complete_jobs(tx, &prepared));
        self.cleanup_files(&prepared, outcome.as_ref().ok());
        outcome
    }

    /// Records a result for an explicit slot (optionally acking the lease of the job that produced
    /// it). Unknown parents and out-of-range indices are refused and change nothing.
    pub fn record(
        &self,
        slot: FragmentRef,
        lease: Option<Lease>,
        result: FragmentResult,
    ) -> Result<Recorded> {
        let stored = self.store_result(lease.map(|l| l.job_id).unwrap_or(0), result)?;
        let prepared = vec![(
            0,
            lease.unwrap_or(Lease {
                job_id: 0,
                token: 0,
            }),
            stored,
        )];
        let outcome = self
            .queue
            .transaction(|tx| Ok(vec![record_in(tx, slot, lease, &prepared[0].2)?]));
        self.cleanup_files(&prepared, outcome.as_ref().ok());
        outcome.map(|mut v| v.pop().unwrap_or(Recorded::Duplicate))
    }

    /// Records a permanent failure of a claimed fragment job: the job goes to the dead-letter table
    /// and the parent applies its failure policy, in one transaction.
    pub fn fail(&self, job: &Job, error: &str) -> Result<Recorded> {
        let stored = Stored::Failed(error.to_owned());
        self.queue.transaction(|tx| {
            let slot = fragment_of_job(tx, job.id)?.ok_or(Error::NotAFragment(job.id))?;
            match tx.bury(job.lease, error) {
                Ok(()) | Err(squeueha::Error::StaleLease { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            record_in(tx, slot, None, &stored)
        })
    }

    /// A failed attempt: retried (nack with backoff) while the job has attempts left, recorded as a
    /// fragment failure on its last attempt. Returns `None` when it will be retried.
    pub fn nack(&self, job: &Job, error: &str) -> Result<Option<Recorded>> {
        if job.is_last_attempt() {
            return self.fail(job, error).map(Some);
        }
        self.queue.nack(job.lease, error, None)?;
        Ok(None)
    }

    /// Records as failed every pending fragment whose job ended in the dead-letter table without a
    /// report (its worker kept crashing until the lease expiries used up its attempts). Returns how
    /// many were found.
    pub fn reconcile(&self) -> Result<usize> {
        self.queue.transaction(|tx| {
            let pending = tx
                .query(
                    "SELECT f.parent_id, f.idx, f.job_id FROM fanin_fragments f
                     JOIN fanin_parents p ON p.id = f.parent_id
                     WHERE p.state = 0 AND f.state = 0 AND f.job_id IS NOT NULL",
                    params![],
                )?
                .iter()
                .map(|r| Ok((r.get::<i64>(0)?, r.get::<u32>(1)?, r.get::<i64>(2)?)))
                .collect::<Result<Vec<_>>>()?;
            let mut found = 0;
            for (parent, index, job_id) in pending {
                if let Some(info) = tx.get(job_id)?
                    && info.state == squeueha::JobState::Dead
                {
                    let reason = info
                        .last_error
                        .unwrap_or_else(|| "dead-lettered".to_owned());
                    record_in(
                        tx,
                        FragmentRef { parent, index },
                        None,
                        &Stored::Failed(reason),
                    )?;
                    found += 1;
                }
            }
            Ok(found)
        })
    }

    /// Counts of a parent's fragments.
    pub fn progress(&self, parent: i64) -> Result<Progress> {
        self.queue.transaction(|tx| progress_of(tx, parent))
    }

    /// Parents in `state`, oldest first.
    pub fn parents(&self, state: ParentState, limit: usize) -> Result<Vec<Progress>> {
        self.queue.transaction(|tx| {
            let ids = tx
                .query(
                    "SELECT id FROM fanin_parents WHERE state = ?1 ORDER BY id LIMIT ?2",
                    params![state.code(), i64::try_from(limit).unwrap_or(i64::MAX)],
                )?
                .iter()
                .map(|r| r.get::<i64>(0))
                .collect::<squeueha::Result<Vec<_>>>()?;
            ids.into_iter().map(|id| progress_of(tx, id)).collect()
        })
    }

    /// Every fragment's outcome, in fragment order.
    pub fn results(&self, parent: i64) -> Result<Vec<FragmentOutcome>> {
        let rows: Vec<StoredRow> = self.queue.transaction(|tx| {
            load_parent(tx, parent)?;
            tx.query(
                "SELECT state, child_id, result, result_path, error FROM fanin_fragments
                     WHERE parent_id = ?1 ORDER BY idx",
                params![parent],
            )?
            .iter()
            .map(|r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            .collect::<Result<Vec<StoredRow>>>()
        })?;
        rows.into_iter()
            .map(|(state, child, blob, path, error)| {
                Ok(match state {
                    DONE => match (child, blob, path) {
                        (Some(child), _, _) => FragmentOutcome::Child(child),
                        (_, _, Some(rel)) => FragmentOutcome::Done(self.read_file(&rel)?),
                        (_, blob, _) => FragmentOutcome::Done(blob.unwrap_or_default()),
                    },
                    FAILED => FragmentOutcome::Failed(error.unwrap_or_default()),
                    CANCELLED => FragmentOutcome::Cancelled,
                    _ => FragmentOutcome::Pending,
                })
            })
            .collect()
    }

    fn read_file(&self, rel: &str) -> Result<Vec<u8>> {
        let root = self.cfg.results_dir.as_ref().ok_or(Error::NoResultsDir)?;
        let path = confine(root, rel)?;
        std::fs::read(&path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// Validates a result and, for large bytes, writes its file before the transaction (never while
    /// holding the write lock).
    fn store_result(&self, job_id: i64, result: FragmentResult) -> Result<Stored> {
        match result {
            FragmentResult::Bytes(bytes) => match &self.cfg.results_dir {
                Some(root) if bytes.len() > self.cfg.inline_limit => {
                    // Unique per process and call: two reports of one job (or explicit records
                    // without a job) never share a file, so cleaning one never removes the other.
                    static SEQ: AtomicU64 = AtomicU64::new(0);
                    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
                    let rel = format!(
                        "fanin/{job_id}-{}-{:x}-{seq}.bin",
                        std::process::id(),
                        now_ms()
                    );
                    let path = confine(root, &rel)?;
                    let io = |source| Error::Io {
                        path: path.display().to_string(),
                        source,
                    };
                    if let Some(dir) = path.parent() {
                        std::fs::create_dir_all(dir).map_err(io)?;
                    }
                    let mut file = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .map_err(io)?;
                    std::io::Write::write_all(&mut file, &bytes).map_err(io)?;
                    Ok(Stored::File {
                        rel,
                        created: Some(path),
                    })
                }
                _ => Ok(Stored::Inline(bytes)),
            },
            FragmentResult::File(rel) => {
                let root = self.cfg.results_dir.as_ref().ok_or(Error::NoResultsDir)?;
                let path = confine(root, &rel)?;
                std::fs::metadata(&path).map_err(|source| Error::Io {
                    path: path.display().to_string(),
                    source,
                })?;
                Ok(Stored::File { rel, created: None })
            }
        }
    }

    /// Removes files this call wrote that did not end up referenced (failed or duplicate reports).
    fn cleanup_files(&self, prepared: &[(i64, Lease, Stored)], outcome: Option<&Vec<Recorded>>) {
        for (i, (_, _, stored)) in prepared.iter().enumerate() {
            if let Stored::File {
                created: Some(path),
                ..
            } = stored
            {
                let kept = matches!(
                    outcome.and_then(|o| o.get(i)),
                    Some(Recorded::Recorded | Recorded::ParentFinished(_))
                );
                if !kept {
                    // Best effort: an orphan file wastes space but breaks nothing.
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
}

fn create_in(tx: &mut QueueTx<'_>, spec: &ParentSpec) -> Result<i64> {
    let now = now_ms();
    if let Some(up) = spec.child_of {
        let parent = load_parent(tx, up.parent)?;
        check_index(up, parent.total)?;
        let row = tx
            .query_opt(
                "SELECT kind, child_id, state FROM fanin_fragments WHERE parent_id = ?1 AND idx = ?2",
                params![up.parent, up.index],
            )?
            .ok_or(Error::UnknownParent(up.parent))?;
        let (kind, child, state): (i64, Option<i64>, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
        // A sub-parent under a finished parent would run all its work for nothing.
        if parent.state != PENDING || state != PENDING {
            return Err(Error::ParentClosed(up.parent));
        }
        if kind != KIND_CHILD || child.is_some() {
            return Err(Error::WrongFragmentKind {
                parent: up.parent,
                index: up.index,
                expected: "free sub-parent",
            });
        }
    }
    let total = u32::try_from(spec.fragments.len()).map_err(|_| Error::NoFragments)?;
    let (next_queue, next_data, next_priority) = match &spec.next {
        Some(n) => (Some(n.queue.clone()), Some(n.data.to_string()), n.priority),
        None => (None, None, 0),
    };
    let inserted = tx.query_opt(
        "INSERT INTO fanin_parents (label, state, policy, total, fragment_queue, up_parent, up_index,
                                    next_queue, next_data, next_priority, created_at)
         VALUES (?1, 0, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) RETURNING id",
        params![
            &spec.label,
            spec.policy.code(),
            total,
            &spec.fragment_queue,
            spec.child_of.map(|s| s.parent),
            spec.child_of.map(|s| s.index),
            next_queue,
            next_data,
            next_priority,
            now
        ],
    )?;
    let parent_id: i64 = inserted
        .ok_or(Error::Queue(squeueha::Error::TransactionAborted))?
        .get(0)?;
    let jobs: Vec<NewJob> = spec
        .fragments
        .iter()
        .filter_map(|f| match f {
            FragmentSpec::Job(j) => Some(j.clone()),
            FragmentSpec::Child => None,
        })
        .collect();
    let mut job_ids = tx.enqueue_batch(&spec.fragment_queue, &jobs)?.into_iter();
    for (idx, fragment) in spec.fragments.iter().enumerate() {
        let (kind, job_id) = match fragment {
            FragmentSpec::Job(_) => match job_ids.next() {
                Some(squeueha::Enqueued::New(id)) => (KIND_JOB, Some(id)),
                Some(squeueha::Enqueued::Duplicate(id)) => {
                    return Err(Error::DuplicateFragmentJob(id));
                }
                None => return Err(Error::NoFragments),
            },
            FragmentSpec::Child => (KIND_CHILD, None),
        };
        tx.execute(
            "INSERT INTO fanin_fragments (parent_id, idx, kind, state, job_id)
             VALUES (?1, ?2, ?3, 0, ?4)",
            params![
                parent_id,
                i64::try_from(idx).unwrap_or(i64::MAX),
                kind,
                job_id
            ],
        )?;
    }
    if let Some(up) = spec.child_of {
        tx.execute(
            "UPDATE fanin_fragments SET child_id = ?3 WHERE parent_id = ?1 AND idx = ?2",
            params![up.parent, up.index, parent_id],
        )?;
    }
    Ok(parent_id)
}
