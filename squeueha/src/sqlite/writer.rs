//! This process's one writing connection, with group commit.
//!
//! Writers of one process queue on one connection (SQLite lets one connection write at a time
//! anyway, and a mutex hands the lock over without the busy handler's coarse sleeps). With several
//! threads writing, each used to pay a whole commit: the WAL frames of every page it touched, written
//! again by the next writer that touched the same pages (a claim and the ack of the same rows).
//!
//! Group commit: a writer that finds a transaction already open when it gets the connection runs
//! its operation inside that transaction, in a `SAVEPOINT` of its own, so a failing operation rolls
//! back only itself. When it is done and other threads are waiting for the connection, it leaves the
//! transaction open for them and waits; the last one (nobody waiting, or the group full) commits,
//! once, for everybody. Each caller runs its own operation on its own thread (no closure crosses
//! threads, a panic stays with its caller) and returns only once the commit holding its operation
//! succeeded: durability is what it was, one commit per call.
//!
//! If the group's transaction is lost (its COMMIT fails, or SQLite rolls it back on an I/O error),
//! every member whose work was in it runs its operation again, alone: each caller gets its own
//! outcome, never a neighbour's error.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use rusqlite::Connection;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::sqlite::{IdBlock, with_busy_retry};

/// The writing connection and the block of job ids this process reserved, with the group
/// transaction that may be open on it.
pub(crate) struct Writer {
    pub(crate) conn: Connection,
    pub(crate) ids: IdBlock,
    /// Some while a group transaction is open (between its first member's `BEGIN IMMEDIATE` and the
    /// COMMIT that ends it).
    group: Option<Arc<Group>>,
    /// Operations run in the open group, failed ones included.
    members: usize,
    /// Group transactions committed (tests check who shared a commit).
    #[cfg(test)]
    commits: usize,
}

/// The outcome of one group transaction, awaited by its members.
#[derive(Default)]
struct Group {
    /// `Some(true)` committed, `Some(false)` rolled back.
    outcome: Mutex<Option<bool>>,
    done: Condvar,
}

impl Group {
    fn finish(&self, committed: bool) {
        *self.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(committed);
        self.done.notify_all();
    }

    fn wait(&self) -> bool {
        let mut outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(committed) = *outcome {
                return committed;
            }
            outcome = self
                .done
                .wait(outcome)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Writer {
    pub(crate) fn new(conn: Connection) -> Self {
        Writer {
            conn,
            ids: IdBlock::default(),
            group: None,
            members: 0,
            #[cfg(test)]
            commits: 0,
        }
    }

    fn exec(&self, sql: &str) -> Result<()> {
        self.conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    }

    /// Commits the open group. On failure the group is rolled back and its members told so.
    fn commit(&mut self) -> Result<()> {
        let Some(group) = self.group.take() else {
            return Ok(());
        };
        // SQLite rolls a transaction back by itself on some errors (disk full, I/O); a member that
        // swallowed such an error ran later statements in autocommit. Never report that as committed.
        let done = if self.conn.is_autocommit() {
            Err(Error::TransactionAborted)
        } else {
            self.exec("COMMIT")
        };
        match done {
            Ok(()) => {
                #[cfg(test)]
                {
                    self.commits += 1;
                }
                self.ids.committed();
                group.finish(true);
                Ok(())
            }
            Err(e) => {
                self.group = Some(group);
                self.abort();
                Err(e)
            }
        }
    }

    /// Rolls the open group back; its members run their operations again.
    fn abort(&mut self) {
        if !self.conn.is_autocommit() {
            // Best effort: if even ROLLBACK fails the connection is broken and SQLite rolls back
            // when it closes.
            let _ = self.exec("ROLLBACK");
        }
        self.ids.rolled_back();
        if let Some(group) = self.group.take() {
            group.finish(false);
        }
    }

    /// Ends the open group so the caller can use the connection outside it: commits it (a failure
    /// is the members' to see: they run again).
    pub(crate) fn flush(&mut self) {
        let _ = self.commit();
    }
}

/// The writer behind its mutex, with the count of threads waiting for it.
pub(crate) struct WriterSlot {
    writer: Mutex<Writer>,
    /// Threads waiting for (or about to take) the mutex: a member that sees one leaves the group's
    /// transaction open for it instead of committing.
    waiting: AtomicUsize,
    /// Most operations in one group (bounds the first member's wait).
    max_group: usize,
    /// Operations in the last group committed.
    last_group: AtomicUsize,
}

/// What one attempt at running an operation came to.
enum Attempt<T> {
    /// Committed (or failed on its own).
    Done(T),
    /// The group's transaction was lost with the operation in it: run it again, alone.
    Lost,
}

impl WriterSlot {
    /// `max_group` 1 turns group commit off: every operation commits on its own.
    pub(crate) fn new(conn: Connection, max_group: usize) -> Self {
        WriterSlot {
            writer: Mutex::new(Writer::new(conn)),
            waiting: AtomicUsize::new(0),
            max_group: max_group.max(1),
            last_group: AtomicUsize::new(1),
        }
    }

    /// Group transactions committed so far.
    #[cfg(test)]
    pub(crate) fn commits(&self) -> usize {
        self.writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .commits
    }

    /// Threads waiting for the connection.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    fn lock(&self) -> MutexGuard<'_, Writer> {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let locked = self.writer.lock();
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        match locked {
            Ok(guard) => guard,
            Err(poisoned) => {
                // A panic while the connection was held outside an operation (operations' panics
                // are caught): whatever transaction was open is suspect, and an id block reserved
                // in it may not be ours. Roll back and forget the block rather than ever hand out
                // an id twice.
                let mut guard = poisoned.into_inner();
                guard.abort();
                guard.ids = IdBlock::default();
                self.writer.clear_poison();
                guard
            }
        }
    }

    /// The connection with no group transaction open on it, for work that manages its own
    /// transaction (`Queue::transaction`) or runs outside one (housekeeping).
    pub(crate) fn exclusive(&self) -> MutexGuard<'_, Writer> {
        let mut guard = self.lock();
        guard.flush();
        guard
    }

    /// Whether a member should leave the transaction open for a waiting thread.
    fn hand_off(&self, w: &Writer, solo: bool) -> bool {
        !solo && w.members < self.max_group && self.waiting.load(Ordering::Acquire) > 0
    }

    /// Runs `f` in a group transaction (see the module's documentation) and returns once the commit
    /// holding it succeeded; retried with `cfg`'s backoff while the database is busy. `f` may run
    /// more than once, always against a state without its earlier runs.
    pub(crate) fn write<T>(
        &self,
        cfg: &Config,
        mut f: impl FnMut(&Connection, &mut IdBlock) -> Result<T>,
    ) -> Result<T> {
        let mut solo = false;
        with_busy_retry(cfg, || {
            loop {
                match self.run(&mut f, solo)? {
                    Attempt::Done(value) => return Ok(value),
                    // The group it ran in was lost: again, alone, so the outcome is its own.
                    Attempt::Lost => solo = true,
                }
            }
        })
    }

    /// Runs `f` once, in the open group transaction or in a new one, and returns after the commit
    /// holding it. `solo`: commit any open group first and then run alone (a retry after a lost
    /// group; every error is then this operation's own). `f` may run again after `Lost` or a busy
    /// error, always against a state without its earlier run.
    fn run<T>(
        &self,
        f: &mut dyn FnMut(&Connection, &mut IdBlock) -> Result<T>,
        solo: bool,
    ) -> Result<Attempt<T>> {
        let mut w = self.lock();
        if solo {
            w.flush();
        }
        let first = w.group.is_none();
        if first {
            // A busy database (another process writing) goes back to the caller's retry loop.
            w.exec("BEGIN IMMEDIATE")?;
            w.group = Some(Arc::new(Group::default()));
            w.members = 0;
        } else if w.exec("SAVEPOINT squeueha_member").is_err() {
            w.abort();
            return Ok(Attempt::Lost);
        }
        let generation = w.ids.generation();
        let out = {
            let Writer { conn, ids, .. } = &mut *w;
            catch_unwind(AssertUnwindSafe(|| f(conn, ids)))
        };
        w.members += 1;
        match out {
            Ok(Ok(value)) => {
                if w.conn.is_autocommit() {
                    // SQLite rolled the whole transaction back under the operation.
                    w.abort();
                    return if first && w.members == 1 {
                        Err(Error::TransactionAborted)
                    } else {
                        Ok(Attempt::Lost)
                    };
                }
                if !first && w.exec("RELEASE squeueha_member").is_err() {
                    w.abort();
                    return Ok(Attempt::Lost);
                }
                if !solo
                    && !self.hand_off(&w, solo)
                    && w.members < self.last_group.load(Ordering::Relaxed)
                {
                    // The last group was larger: its other members were just woken and will
                    // likely write again at once, but on a busy machine they may not have been
                    // scheduled yet. Let them run first (they queue on the mutex we hold), so
                    // the group forms instead of this thread committing alone over and over.
                    std::thread::yield_now();
                }
                if self.hand_off(&w, solo)
                    && let Some(group) = w.group.clone()
                {
                    drop(w);
                    return Ok(if group.wait() {
                        Attempt::Done(value)
                    } else {
                        Attempt::Lost
                    });
                }
                let alone = w.members == 1;
                self.last_group.store(w.members, Ordering::Relaxed);
                match w.commit() {
                    Ok(()) => Ok(Attempt::Done(value)),
                    // Alone in its transaction, the failure is the operation's own.
                    Err(e) if alone || solo => Err(e),
                    Err(_) => Ok(Attempt::Lost),
                }
            }
            Ok(Err(e)) => {
                self.undo(&mut w, first, generation, solo);
                Err(e)
            }
            Err(panic) => {
                self.undo(&mut w, first, generation, solo);
                drop(w);
                resume_unwind(panic)
            }
        }
    }

    /// Takes a failed operation out of the transaction, then lets the group go on without it.
    fn undo(&self, w: &mut Writer, first: bool, generation: u64, solo: bool) {
        if first || w.conn.is_autocommit() {
            // First in: nothing but this operation to roll back. Autocommit: SQLite already rolled
            // the whole transaction back; the other members run again.
            w.abort();
            return;
        }
        let undone = w
            .exec("ROLLBACK TO squeueha_member")
            .and_then(|()| w.exec("RELEASE squeueha_member"));
        if undone.is_err() {
            w.abort();
            return;
        }
        if w.ids.generation() != generation {
            // The block it reserved went with its savepoint.
            w.ids = IdBlock::default();
        }
        if !self.hand_off(w, solo) {
            w.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    //! The group protocol driven directly: one member holds the connection until the others queue
    //! behind it, so they deterministically share one transaction.
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::thread::JoinHandle;
    use std::time::Duration;

    use rusqlite::Connection;

    use super::WriterSlot;
    use crate::config::Config;
    use crate::error::{Error, Result};
    use crate::sqlite::{IdBlock, schema};

    fn slot(dir: &tempfile::TempDir) -> Arc<WriterSlot> {
        let mut conn = Connection::open(dir.path().join("w.db")).unwrap();
        conn.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))
            .unwrap();
        schema::migrate(&mut conn).unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER PRIMARY KEY)")
            .unwrap();
        Arc::new(WriterSlot::new(conn, 32))
    }

    /// Rows of `t`, read through a connection of its own (so only committed rows).
    fn committed_rows(dir: &tempfile::TempDir) -> Vec<i64> {
        let conn = Connection::open(dir.path().join("w.db")).unwrap();
        let mut stmt = conn.prepare("SELECT x FROM t ORDER BY x").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    }

    fn insert(conn: &Connection, x: i64) -> Result<()> {
        conn.execute("INSERT INTO t (x) VALUES (?1)", [x])?;
        Ok(())
    }

    /// Starts a member that inserts `x`, then holds the connection until `others` threads queue
    /// for it. Returns once the member is inside its operation.
    fn leader(slot: &Arc<WriterSlot>, x: i64, others: usize) -> JoinHandle<Result<()>> {
        let inside = Arc::new(AtomicBool::new(false));
        let handle = {
            let (slot, inside) = (slot.clone(), inside.clone());
            std::thread::spawn(move || {
                let cfg = Config::default();
                slot.write(&cfg, |conn, _| {
                    insert(conn, x)?;
                    // Only the first run waits: a run again after a lost group is alone.
                    if !inside.swap(true, Ordering::SeqCst) {
                        while slot.waiting.load(Ordering::SeqCst) < others {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    Ok(())
                })
            })
        };
        while !inside.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        handle
    }

    fn member<T: Send + 'static>(
        slot: &Arc<WriterSlot>,
        mut f: impl FnMut(&Connection, &mut IdBlock) -> Result<T> + Send + 'static,
    ) -> JoinHandle<Result<T>> {
        let slot = slot.clone();
        std::thread::spawn(move || slot.write(&Config::default(), &mut f))
    }

    #[test]
    fn members_share_one_commit_and_a_failing_or_panicking_member_rolls_back_alone() {
        let dir = tempfile::tempdir().unwrap();
        let slot = slot(&dir);
        let first = leader(&slot, 1, 3);
        let ok = member(&slot, |c, _| insert(c, 2));
        let failing = member(&slot, |c, _| -> Result<()> {
            insert(c, 3)?;
            Err(Error::InvalidArgument("refused after writing".into()))
        });
        let panicking = member(&slot, |c, _| -> Result<()> {
            insert(c, 4)?;
            panic!("a bug in one operation");
        });
        assert!(first.join().unwrap().is_ok());
        assert!(ok.join().unwrap().is_ok());
        assert!(matches!(
            failing.join().unwrap(),
            Err(Error::InvalidArgument(_))
        ));
        // The panic reaches its own caller, and only it.
        assert!(panicking.join().is_err());
        assert_eq!(committed_rows(&dir), vec![1, 2]);
        assert_eq!(slot.writer.lock().unwrap().commits, 1, "one shared commit");
        // Nothing poisoned: the connection goes on.
        member(&slot, |c, _| insert(c, 5)).join().unwrap().unwrap();
        assert_eq!(committed_rows(&dir), vec![1, 2, 5]);
    }

    #[test]
    fn a_lost_group_runs_each_member_again_alone() {
        let dir = tempfile::tempdir().unwrap();
        let slot = slot(&dir);
        let runs = Arc::new(AtomicUsize::new(0));
        let first = leader(&slot, 1, 1);
        let breaker = {
            let runs = runs.clone();
            member(&slot, move |c, _| {
                // The first run loses the whole transaction under the group (as SQLite does on
                // an I/O error); later runs behave.
                if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                    c.execute_batch("ROLLBACK")?;
                    return Ok(());
                }
                insert(c, 2)
            })
        };
        first.join().unwrap().unwrap();
        breaker.join().unwrap().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        // The first member's row was lost with the group and written again by its own retry.
        assert_eq!(committed_rows(&dir), vec![1, 2]);
    }

    #[test]
    fn an_id_block_reserved_in_a_rolled_back_savepoint_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let slot = slot(&dir);
        let cfg = Config::default();
        // Leaves 24 ids of the first block.
        slot.write(&cfg, |c, ids| ids.take(c, 1000)).unwrap();
        let first = leader(&slot, 1, 1);
        // Needs a new block, reserves it in its savepoint, then fails: the counter goes back.
        let failing = member(&slot, |c, ids| -> Result<()> {
            ids.take(c, 100)?;
            Err(Error::InvalidArgument("rolled back".into()))
        });
        first.join().unwrap().unwrap();
        assert!(failing.join().unwrap().is_err());
        let id = slot.write(&cfg, |c, ids| ids.take(c, 1)).unwrap();
        let counter: i64 = Connection::open(dir.path().join("w.db"))
            .unwrap()
            .query_row(
                "SELECT value FROM squeueha_meta WHERE key = 'next_job_id'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(
            id < counter,
            "id {id} handed out from a block the counter ({counter}) does not cover"
        );
    }
}
