//! Deleting a parent with its fragments and their results (the data it was made for is gone).

use std::path::PathBuf;

use squeueha::{QueueTx, params};

use crate::error::Result;
use crate::fanin::FanIn;
use crate::paths::confine;

impl FanIn {
    /// Deletes parent `parent`, its fragments with their results, and its child parents, in the
    /// caller's transaction. Fragment jobs not yet claimed are cancelled; a claimed one's report
    /// then finds no fragment ([`Error::NotAFragment`](crate::Error::NotAFragment)). Returns the
    /// result files the fragments named (the caller removes those it owns once the transaction
    /// committed); an unknown parent deletes nothing.
    ///
    /// Delete a top-level parent: a child deleted alone leaves its parent's slot pending.
    pub fn delete_parent_in(&self, tx: &mut QueueTx<'_>, parent: i64) -> Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        let mut parents = vec![parent];
        while let Some(p) = parents.pop() {
            let fragments = tx
                .query(
                    "SELECT job_id, child_id, result_path FROM fanin_fragments WHERE parent_id = ?1",
                    params![p],
                )?
                .iter()
                .map(|r| {
                    Ok((
                        r.get::<Option<i64>>(0)?,
                        r.get::<Option<i64>>(1)?,
                        r.get::<Option<String>>(2)?,
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            for (job, child, path) in fragments {
                if let Some(job) = job {
                    tx.cancel(job)?;
                }
                parents.extend(child);
                if let (Some(rel), Some(root)) = (path, &self.cfg.results_dir) {
                    files.push(confine(root, &rel)?);
                }
            }
            tx.execute(
                "DELETE FROM fanin_fragments WHERE parent_id = ?1",
                params![p],
            )?;
            tx.execute("DELETE FROM fanin_parents WHERE id = ?1", params![p])?;
        }
        Ok(files)
    }
}
