//! Reading fan-in rows inside a transaction: a fragment with its parent, a parent, progress; and
//! what the rows hold (the `state` and `kind` codes, a parent's row).

use squeueha::{QueueTx, Row, params};

use crate::error::{Error, Result};
use crate::model::{FailurePolicy, FragmentRef, ParentState, Progress};

/// The `state` of a fragment or a parent: pending, done, failed, cancelled.
pub(crate) const PENDING: i64 = 0;
pub(crate) const DONE: i64 = 1;
pub(crate) const FAILED: i64 = 2;
pub(crate) const CANCELLED: i64 = 3;
/// The `kind` of a fragment: a job, or a slot a child parent fills.
pub(crate) const KIND_JOB: i64 = 0;
pub(crate) const KIND_CHILD: i64 = 1;

/// A parent's row, as [`parent_row`] reads it.
pub(crate) struct ParentRow {
    pub(crate) state: i64,
    pub(crate) policy: FailurePolicy,
    pub(crate) total: u32,
    pub(crate) up: Option<FragmentRef>,
    pub(crate) next_queue: Option<String>,
    pub(crate) next_data: Option<String>,
    pub(crate) next_priority: i32,
}

pub(crate) fn fragment_of_job(tx: &mut QueueTx<'_>, job_id: i64) -> Result<Option<FragmentRef>> {
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
pub(crate) const PARENT_COLUMNS: &str =
    "state, policy, total, up_parent, up_index, next_queue, next_data, next_priority";

pub(crate) fn parent_row(r: &Row, first: usize) -> Result<ParentRow> {
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

pub(crate) fn load_parent(tx: &mut QueueTx<'_>, id: i64) -> Result<ParentRow> {
    let row = tx
        .query_opt(
            &format!("SELECT {PARENT_COLUMNS} FROM fanin_parents WHERE id = ?1"),
            params![id],
        )?
        .ok_or(Error::UnknownParent(id))?;
    parent_row(&row, 0)
}

pub(crate) fn check_index(slot: FragmentRef, total: u32) -> Result<()> {
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
pub(crate) struct FragmentRow {
    pub(crate) slot: FragmentRef,
    pub(crate) job_id: Option<i64>,
    pub(crate) kind: i64,
    pub(crate) state: i64,
    pub(crate) parent: ParentRow,
}

/// Fragment columns, then the parent's in `PARENT_COLUMNS` order (read by `parent_row(r, 5)`).
pub(crate) const FRAGMENT_SELECT: &str = "SELECT f.parent_id, f.idx, f.kind, f.state, f.job_id,
        p.state, p.policy, p.total, p.up_parent, p.up_index, p.next_queue, p.next_data,
        p.next_priority
     FROM fanin_fragments f JOIN fanin_parents p ON p.id = f.parent_id";

pub(crate) fn fragment_row(r: &Row) -> Result<FragmentRow> {
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

pub(crate) fn load_fragment_by_job(tx: &mut QueueTx<'_>, job_id: i64) -> Result<FragmentRow> {
    let row = tx
        .query_opt(
            &format!("{FRAGMENT_SELECT} WHERE f.job_id = ?1"),
            params![job_id],
        )?
        .ok_or(Error::NotAFragment(job_id))?;
    fragment_row(&row)
}

pub(crate) fn load_fragment(tx: &mut QueueTx<'_>, slot: FragmentRef) -> Result<FragmentRow> {
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

pub(crate) fn progress_of(tx: &mut QueueTx<'_>, parent: i64) -> Result<Progress> {
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
