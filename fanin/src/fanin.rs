//! The fan-in engine. Every public call is one squeueha transaction: the fragment's record, the ack
//! of its job, the parent's completion, the next stage's enqueue and the report to a higher parent
//! commit together or not at all.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use squeueha::{Job, Lease, NewJob, Queue, QueueTx, Row, now_ms, params};

use crate::error::{Error, Result};
use crate::model::{
    Completion, FailurePolicy, FragmentOutcome, FragmentRef, FragmentResult, FragmentSpec,
    ParentSpec, ParentState, Progress, Recorded,
};
use crate::paths::confine;
use crate::schema;

const PENDING: i64 = 0;
const DONE: i64 = 1;
const FAILED: i64 = 2;
const CANCELLED: i64 = 3;
const KIND_JOB: i64 = 0;
const KIND_CHILD: i64 = 1;

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

/// A fragment result ready to be written: inline bytes or a confined file path.
enum Stored {
    Inline(Vec<u8>),
    File {
        rel: String,
        created: Option<PathBuf>,
    },
    Child,
    Failed(String),
}

/// A fragment as stored: state, child id, inline result, result file, error.
type StoredRow = (
    i64,
    Option<i64>,
    Option<Vec<u8>>,
    Option<String>,
    Option<String>,
);

struct ParentRow {
    state: i64,
    policy: FailurePolicy,
    total: u32,
    up: Option<FragmentRef>,
    next_queue: Option<String>,
    next_data: Option<String>,
    next_priority: i32,
}

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

fn fragment_of_job(tx: &mut QueueTx<'_>, job_id: i64) -> Result<Option<FragmentRef>> {
    match tx.query_opt(
        "SELECT parent_id, idx FROM fanin_fragments WHERE job_id = ?1",
        params![job_id],
    )? {
        Some(r) => Ok(Some(FragmentRef {
            parent: r.get(0)?,
            index: r.get(1)?,
        })),
        None => Ok(None),
    }
}

/// The parent columns, in the order `parent_row` reads them from `first` on.
const PARENT_COLUMNS: &str =
    "state, policy, total, up_parent, up_index, next_queue, next_data, next_priority";

fn parent_row(r: &Row, first: usize) -> Result<ParentRow> {
    let up_parent: Option<i64> = r.get(first + 3)?;
    let up_index: Option<u32> = r.get(first + 4)?;
    Ok(ParentRow {
        state: r.get(first)?,
        policy: FailurePolicy::from_code(r.get(first + 1)?),
        total: r.get(first + 2)?,
        up: up_parent
            .zip(up_index)
            .map(|(parent, index)| FragmentRef { parent, index }),
        next_queue: r.get(first + 5)?,
        next_data: r.get(first + 6)?,
        next_priority: r.get::<Option<i32>>(first + 7)?.unwrap_or(0),
    })
}

fn load_parent(tx: &mut QueueTx<'_>, id: i64) -> Result<ParentRow> {
    let row = tx
        .query_opt(
            &format!("SELECT {PARENT_COLUMNS} FROM fanin_parents WHERE id = ?1"),
            params![id],
        )?
        .ok_or(Error::UnknownParent(id))?;
    parent_row(&row, 0)
}

fn check_index(slot: FragmentRef, total: u32) -> Result<()> {
    if slot.index >= total {
        return Err(Error::IndexOutOfRange {
            parent: slot.parent,
            index: slot.index,
            total,
        });
    }
    Ok(())
}

/// A fragment slot joined with its parent: everything a report needs, read with one query.
struct FragmentRow {
    slot: FragmentRef,
    job_id: Option<i64>,
    kind: i64,
    state: i64,
    parent: ParentRow,
}

/// Fragment columns, then the parent's in `PARENT_COLUMNS` order (read by `parent_row(r, 5)`).
const FRAGMENT_SELECT: &str = "SELECT f.parent_id, f.idx, f.kind, f.state, f.job_id,
        p.state, p.policy, p.total, p.up_parent, p.up_index, p.next_queue, p.next_data,
        p.next_priority
     FROM fanin_fragments f JOIN fanin_parents p ON p.id = f.parent_id";

fn fragment_row(r: &Row) -> Result<FragmentRow> {
    Ok(FragmentRow {
        slot: FragmentRef {
            parent: r.get(0)?,
            index: r.get(1)?,
        },
        kind: r.get(2)?,
        state: r.get(3)?,
        job_id: r.get(4)?,
        parent: parent_row(r, 5)?,
    })
}

fn load_fragment_by_job(tx: &mut QueueTx<'_>, job_id: i64) -> Result<FragmentRow> {
    let row = tx
        .query_opt(
            &format!("{FRAGMENT_SELECT} WHERE f.job_id = ?1"),
            params![job_id],
        )?
        .ok_or(Error::NotAFragment(job_id))?;
    fragment_row(&row)
}

fn load_fragment(tx: &mut QueueTx<'_>, slot: FragmentRef) -> Result<FragmentRow> {
    let row = tx.query_opt(
        &format!("{FRAGMENT_SELECT} WHERE f.parent_id = ?1 AND f.idx = ?2"),
        params![slot.parent, slot.index],
    )?;
    match row {
        Some(row) => fragment_row(&row),
        // Tell an unknown parent from an index out of range (the error path only).
        None => {
            let parent = load_parent(tx, slot.parent)?;
            check_index(slot, parent.total)?;
            Err(Error::UnknownParent(slot.parent))
        }
    }
}

/// Records a batch of job results. Fast path per fragment: one `UPDATE … WHERE job_id = ? AND
/// state = pending RETURNING` (a pending fragment always has a pending parent: failing fast cancels
/// the rest, completing leaves none). Counters move once per parent per batch; the "last?" test is
/// that counter row, whatever N is.
fn complete_jobs(tx: &mut QueueTx<'_>, prepared: &[(i64, Lease, Stored)]) -> Result<Vec<Recorded>> {
    // The jobs' work is over whatever happens to each report: take them off the queue with one
    // statement. Stale leases mean another delivery holds the job; its report is the duplicate.
    let leases: Vec<Lease> = prepared.iter().map(|(_, lease, _)| *lease).collect();
    let _ = tx.ack_batch(&leases)?;
    let mut out = vec![Recorded::Recorded; prepared.len()];
    // (parent, fragments recorded in this batch, index in `out` of the last of them)
    let mut per_parent: Vec<(i64, u32, usize)> = Vec::new();
    // Inline results of the whole batch in one statement (UPDATE … FROM VALUES); a job listed twice
    // is updated once, and its second listing falls to the slow path as a duplicate.
    let mut fast: HashMap<i64, i64> = HashMap::new();
    let inline: Vec<(i64, &Vec<u8>)> = prepared
        .iter()
        .filter_map(|(job_id, _, stored)| match stored {
            Stored::Inline(bytes) => Some((*job_id, bytes)),
            _ => None,
        })
        .collect();
    // PostgreSQL types a VALUES list from its first row: the casts say what the columns are.
    let row_sql = if tx.backend() == "postgres" {
        |k: usize| {
            format!(
                "(CAST(?{} AS BIGINT), CAST(?{} AS BYTEA))",
                2 * k + 1,
                2 * k + 2
            )
        }
    } else {
        |k: usize| format!("(?{}, ?{})", 2 * k + 1, 2 * k + 2)
    };
    for chunk in inline.chunks(200) {
        let values = (0..chunk.len()).map(row_sql).collect::<Vec<_>>().join(",");
        let mut bind = Vec::with_capacity(chunk.len() * 2);
        for (job_id, bytes) in chunk {
            bind.push(squeueha::Value::Integer(*job_id));
            bind.push(squeueha::Value::Blob((*bytes).clone()));
        }
        let rows = tx.query(
            &format!(
                "UPDATE fanin_fragments SET state = 1, result = v.column2
                 FROM (VALUES {values}) AS v
                 WHERE fanin_fragments.job_id = v.column1 AND fanin_fragments.state = 0
                 RETURNING fanin_fragments.job_id, fanin_fragments.parent_id"
            ),
            &bind,
        )?;
        for row in rows {
            fast.insert(row.get(0)?, row.get(1)?);
        }
    }
    for (i, (job_id, _, stored)) in prepared.iter().enumerate() {
        let updated: Option<i64> = match stored {
            Stored::Inline(_) => fast.remove(job_id),
            Stored::File { rel, .. } => tx
                .query_opt(
                    "UPDATE fanin_fragments SET state = 1, result_path = ?2
                     WHERE job_id = ?1 AND state = 0 RETURNING parent_id",
                    params![*job_id, rel],
                )?
                .map(|r| r.get(0))
                .transpose()?,
            Stored::Child | Stored::Failed(_) => None,
        };
        match updated {
            Some(parent) => match per_parent.iter_mut().find(|(p, _, _)| *p == parent) {
                Some(entry) => {
                    entry.1 += 1;
                    entry.2 = i;
                }
                None => per_parent.push((parent, 1, i)),
            },
            // Slow path: classify (not a fragment, duplicate, closed parent) without changing anything.
            None => {
                let row = load_fragment_by_job(tx, *job_id)?;
                out[i] = record_row(tx, row, stored)?;
            }
        }
    }
    // Parents in id order: two batches that share parents lock their rows in the same order (on
    // PostgreSQL, where batches commit side by side, the other order could deadlock).
    per_parent.sort_unstable_by_key(|(parent, _, _)| *parent);
    for (parent_id, n, last) in per_parent {
        // Counter, completion test and state change in one statement; RETURNING brings what the
        // completion needs, so a finishing parent costs no extra read.
        let r = tx
            .query_opt(
                &format!(
                    "UPDATE fanin_parents SET done = done + ?2,
                     state = CASE WHEN done + ?2 + failed + cancelled = total THEN 1 ELSE state END,
                     finished_at = CASE WHEN done + ?2 + failed + cancelled = total THEN ?3
                                   ELSE finished_at END
                 WHERE id = ?1
                 RETURNING done, failed, cancelled, {PARENT_COLUMNS}"
                ),
                params![parent_id, n, now_ms()],
            )?
            .ok_or(Error::UnknownParent(parent_id))?;
        let (done, failed, cancelled): (u32, u32, u32) = (r.get(0)?, r.get(1)?, r.get(2)?);
        let parent = parent_row(&r, 3)?;
        if done + failed + cancelled == parent.total {
            finished(tx, parent_id, &parent, ParentState::Completed, failed > 0)?;
            out[last] = Recorded::ParentFinished(ParentState::Completed);
        }
    }
    Ok(out)
}

/// Records one fragment of an explicit slot, acking `lease` first if given.
fn record_in(
    tx: &mut QueueTx<'_>,
    slot: FragmentRef,
    lease: Option<Lease>,
    stored: &Stored,
) -> Result<Recorded> {
    let row = load_fragment(tx, slot)?;
    if let Some(lease) = lease {
        if row.job_id != Some(lease.job_id) {
            return Err(Error::LeaseNotForSlot {
                job_id: lease.job_id,
                parent: slot.parent,
                index: slot.index,
            });
        }
        match tx.ack(lease) {
            Ok(()) | Err(squeueha::Error::StaleLease { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    record_row(tx, row, stored)
}

/// The heart of fan-in: record one fragment exactly once and finish the parent when it was the
/// last. The "last?" test is the counter row's RETURNING: one row whatever N is.
fn record_row(tx: &mut QueueTx<'_>, row: FragmentRow, stored: &Stored) -> Result<Recorded> {
    let FragmentRow {
        slot,
        kind,
        state,
        parent,
        ..
    } = row;
    let is_child_report = matches!(stored, Stored::Child);
    if is_child_report != (kind == KIND_CHILD) && !matches!(stored, Stored::Failed(_)) {
        return Err(Error::WrongFragmentKind {
            parent: slot.parent,
            index: slot.index,
            expected: if kind == KIND_CHILD {
                "sub-parent"
            } else {
                "job"
            },
        });
    }
    if state == CANCELLED || (state == PENDING && parent.state != PENDING) {
        return Ok(Recorded::ParentClosed);
    }
    if state != PENDING {
        return Ok(Recorded::Duplicate);
    }
    // `state = 0` in every update: on PostgreSQL another node may have recorded (or cancelled)
    // the slot since it was read; the row lock makes the second writer see that and count nothing.
    let (failed, changed) = match stored {
        Stored::Inline(bytes) => (
            false,
            tx.execute(
                "UPDATE fanin_fragments SET state = 1, result = ?3
                 WHERE parent_id = ?1 AND idx = ?2 AND state = 0",
                params![slot.parent, slot.index, bytes],
            )?,
        ),
        Stored::File { rel, .. } => (
            false,
            tx.execute(
                "UPDATE fanin_fragments SET state = 1, result_path = ?3
                 WHERE parent_id = ?1 AND idx = ?2 AND state = 0",
                params![slot.parent, slot.index, rel],
            )?,
        ),
        Stored::Child => (
            false,
            tx.execute(
                "UPDATE fanin_fragments SET state = 1 WHERE parent_id = ?1 AND idx = ?2 AND state = 0",
                params![slot.parent, slot.index],
            )?,
        ),
        Stored::Failed(error) => (
            true,
            tx.execute(
                "UPDATE fanin_fragments SET state = 2, error = ?3
                 WHERE parent_id = ?1 AND idx = ?2 AND state = 0",
                params![slot.parent, slot.index, error],
            )?,
        ),
    };
    if changed == 0 {
        let now = load_fragment(tx, slot)?;
        return Ok(if now.state == CANCELLED {
            Recorded::ParentClosed
        } else {
            Recorded::Duplicate
        });
    }
    let sql = if failed {
        "UPDATE fanin_parents SET failed = failed + 1 WHERE id = ?1 RETURNING done, failed, cancelled"
    } else {
        "UPDATE fanin_parents SET done = done + 1 WHERE id = ?1 RETURNING done, failed, cancelled"
    };
    let r = tx
        .query_opt(sql, params![slot.parent])?
        .ok_or(Error::UnknownParent(slot.parent))?;
    let (done, nfailed, cancelled): (u32, u32, u32) = (r.get(0)?, r.get(1)?, r.get(2)?);
    if failed && parent.policy == FailurePolicy::FailFast {
        cancel_pending(tx, slot.parent)?;
        finish(tx, slot.parent, &parent, ParentState::Failed, true)?;
        return Ok(Recorded::ParentFinished(ParentState::Failed));
    }
    if done + nfailed + cancelled == parent.total {
        finish(
            tx,
            slot.parent,
            &parent,
            ParentState::Completed,
            nfailed > 0,
        )?;
        return Ok(Recorded::ParentFinished(ParentState::Completed));
    }
    Ok(Recorded::Recorded)
}

fn cancel_pending(tx: &mut QueueTx<'_>, parent: i64) -> Result<()> {
    let pending = tx
        .query(
            "SELECT idx, job_id, child_id FROM fanin_fragments WHERE parent_id = ?1 AND state = 0",
            params![parent],
        )?
        .iter()
        .map(|r| {
            Ok((
                r.get::<u32>(0)?,
                r.get::<Option<i64>>(1)?,
                r.get::<Option<i64>>(2)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    for (_, job_id, _) in &pending {
        if let Some(job_id) = job_id {
            // In-flight jobs stay with their workers; their reports will find the slot cancelled.
            tx.cancel(*job_id)?;
        }
    }
    let n = tx.execute(
        "UPDATE fanin_fragments SET state = 3 WHERE parent_id = ?1 AND state = 0",
        params![parent],
    )?;
    tx.execute(
        "UPDATE fanin_parents SET cancelled = cancelled + ?2 WHERE id = ?1",
        params![parent, i64::try_from(n).unwrap_or(i64::MAX)],
    )?;
    // Pending sub-parents are cancelled with their own pending work.
    for (_, _, child) in pending {
        if let Some(child) = child {
            let row = load_parent(tx, child)?;
            if row.state == PENDING {
                cancel_pending(tx, child)?;
                tx.execute(
                    "UPDATE fanin_parents SET state = 2, finished_at = ?2 WHERE id = ?1",
                    params![child, now_ms()],
                )?;
            }
        }
    }
    Ok(())
}

fn finish(
    tx: &mut QueueTx<'_>,
    id: i64,
    parent: &ParentRow,
    state: ParentState,
    any_failed: bool,
) -> Result<()> {
    tx.execute(
        "UPDATE fanin_parents SET state = ?2, finished_at = ?3 WHERE id = ?1",
        params![id, state.code(), now_ms()],
    )?;
    finished(tx, id, parent, state, any_failed)
}

/// What follows a parent's finish (its state already written): the next-stage job and the report
/// to a higher parent, in the same transaction.
fn finished(
    tx: &mut QueueTx<'_>,
    id: i64,
    parent: &ParentRow,
    state: ParentState,
    any_failed: bool,
) -> Result<()> {
    if let Some(queue) = &parent.next_queue {
        let failed: Vec<u32> = if !any_failed {
            Vec::new()
        } else {
            tx.query(
                "SELECT idx FROM fanin_fragments WHERE parent_id = ?1 AND state = 2 ORDER BY idx",
                params![id],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect::<squeueha::Result<_>>()?
        };
        let data = match &parent.next_data {
            Some(text) => serde_json::from_str(text)?,
            None => serde_json::Value::Null,
        };
        let completion = Completion {
            parent_id: id,
            state,
            failed,
            data,
        };
        tx.enqueue(
            queue,
            NewJob::json(&completion)?.priority(parent.next_priority),
        )?;
    }
    if let Some(up) = parent.up {
        let report = match state {
            ParentState::Completed => Stored::Child,
            _ => Stored::Failed(format!("sub-parent {id} failed")),
        };
        record_in(tx, up, None, &report)?;
    }
    Ok(())
}

fn progress_of(tx: &mut QueueTx<'_>, parent: i64) -> Result<Progress> {
    let r = tx
        .query_opt(
            "SELECT label, state, total, done, failed, cancelled FROM fanin_parents WHERE id = ?1",
            params![parent],
        )?
        .ok_or(Error::UnknownParent(parent))?;
    let total: u32 = r.get(2)?;
    let done: u32 = r.get(3)?;
    let failed: u32 = r.get(4)?;
    let cancelled: u32 = r.get(5)?;
    Ok(Progress {
        parent,
        label: r.get(0)?,
        state: ParentState::from_code(r.get(1)?),
        total,
        done,
        failed,
        cancelled,
        pending: total.saturating_sub(done + failed + cancelled),
    })
}
