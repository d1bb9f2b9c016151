//! Recording fragments: a batch of job results, one slot, and what a finishing parent sets off
//! (the next stage, the report to a higher parent, the cancellation of pending work).

use std::collections::HashMap;
use std::path::PathBuf;

use squeueha::{Lease, NewJob, QueueTx, now_ms, params};

use crate::error::{Error, Result};
use crate::model::{Completion, FailurePolicy, FragmentRef, ParentState, Recorded};
use crate::rows::{
    CANCELLED, FragmentRow, KIND_CHILD, PARENT_COLUMNS, PENDING, ParentRow, load_fragment,
    load_fragment_by_job, load_parent, parent_row,
};

/// A fragment result ready to be written: inline bytes or a confined file path.
pub(crate) enum Stored {
    Inline(Vec<u8>),
    File {
        rel: String,
        created: Option<PathBuf>,
    },
    Child,
    Failed(String),
}

/// Records a batch of job results. Fast path per fragment: one `UPDATE … WHERE job_id = ? AND
/// state = pending RETURNING` (a pending fragment always has a pending parent: failing fast cancels
/// the rest, completing leaves none). Counters move once per parent per batch; the "last?" test is
/// that counter row, whatever N is.
pub(crate) fn complete_jobs(
    tx: &mut QueueTx<'_>,
    prepared: &[(i64, Lease, Stored)],
) -> Result<Vec<Recorded>> {
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
pub(crate) fn record_in(
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
