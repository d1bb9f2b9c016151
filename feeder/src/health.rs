//! The feeder's parts of the deep health check ([`HealthCheck`]): its loop still turns
//! ([`FeederHealth`]), and the database still takes a write ([`DatabaseWrites`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use horos_server_control::{HealthCheck, Unhealthy};
use squeueha::AsyncQueue;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// When the feeder last moved: its loop turned, or a request it sent was answered. Cheap to
/// clone; 0 until it runs.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat(Arc<AtomicU64>);

impl Heartbeat {
    /// It moved now.
    pub fn beat(&self) {
        self.0.store(now_ms(), Ordering::Relaxed);
    }

    /// How long ago it last moved (`None`: never).
    pub fn since(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            at => Some(Duration::from_millis(now_ms().saturating_sub(at))),
        }
    }
}

/// The feeder as a part of the deep health check: unhealthy when it has not moved (its loop
/// turns at least every `idle_poll_ms` while idle, and every answer to a request it sent counts)
/// for longer than `stall_after`, or never started.
#[derive(Debug, Clone)]
pub struct FeederHealth {
    beat: Heartbeat,
    stall_after: Duration,
}

impl FeederHealth {
    /// Over `beat` ([`Feeder::heartbeat`](crate::Feeder::heartbeat)): stalled past
    /// `stall_after` (longer than a request may take).
    pub fn new(beat: Heartbeat, stall_after: Duration) -> Self {
        Self { beat, stall_after }
    }
}

#[async_trait]
impl HealthCheck for FeederHealth {
    fn part(&self) -> String {
        "feeder".to_owned()
    }

    async fn check(&self) -> Result<(), Unhealthy> {
        match self.beat.since() {
            None => Err(Unhealthy("the feeder has not started".into())),
            Some(d) if d > self.stall_after => Err(Unhealthy(format!(
                "the feeder has not moved for {} s (no turn of its loop, no answer)",
                d.as_secs()
            ))),
            Some(_) => Ok(()),
        }
    }
}

/// The queue's database as a part of the deep health check: it takes a write (one row of
/// `horos_feeder_health` written through the queue's own writer, so a writer wedged behind a
/// lock, a read-only file, a full disk or a database that does not answer shows).
#[derive(Debug, Clone)]
pub struct DatabaseWrites(pub AsyncQueue);

#[async_trait]
impl HealthCheck for DatabaseWrites {
    fn part(&self) -> String {
        "database".to_owned()
    }

    async fn check(&self) -> Result<(), Unhealthy> {
        let at = now_ms() as i64;
        self.0
            .transaction(move |tx| {
                crate::sink::MIGRATIONS.apply_in_tx(tx)?;
                tx.execute(
                    "INSERT INTO horos_feeder_health (id, written_at) VALUES (1, ?1)
                     ON CONFLICT (id) DO UPDATE SET written_at = excluded.written_at",
                    squeueha::params![at],
                )
                .map(drop)
            })
            .await
            .map_err(|e: squeueha::Error| Unhealthy(format!("the database refuses a write: {e}")))
    }
}

/// The file system that holds the queue's database, as a part of the deep health check:
/// unhealthy when less than `min_free_mb` is free there. A database on a full disk may still
/// take a small write into the space its journal already holds (the soak's disk-full phase
/// showed it: [`DatabaseWrites`] stayed green while the usage records and heartbeats failed),
/// so the free space is read, not inferred.
#[derive(Debug, Clone)]
pub struct DiskSpace {
    dir: std::path::PathBuf,
    min_free_mb: u64,
}

impl DiskSpace {
    /// The file system of `dir` (the database's directory), unhealthy under `min_free_mb`.
    pub fn new(dir: impl Into<std::path::PathBuf>, min_free_mb: u64) -> Self {
        Self {
            dir: dir.into(),
            min_free_mb,
        }
    }

    /// MB free there for an unprivileged writer, or why it could not be read.
    fn free_mb(&self) -> Result<u64, String> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(self.dir.as_os_str().as_bytes())
            .map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
        // SAFETY: a NUL-terminated path and a buffer of the struct statvfs fills.
        let rc = unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) };
        if rc != 0 {
            return Err(format!(
                "{}: {}",
                self.dir.display(),
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: statvfs returned 0, so it filled the struct.
        let st = unsafe { st.assume_init() };
        // Their widths differ by target (u32 on 32-bit Linux).
        #[allow(clippy::unnecessary_cast)]
        let (blocks, size) = (st.f_bavail as u64, st.f_frsize as u64);
        Ok(blocks.saturating_mul(size) / (1024 * 1024))
    }
}

#[async_trait]
impl HealthCheck for DiskSpace {
    fn part(&self) -> String {
        "disk".to_owned()
    }

    async fn check(&self) -> Result<(), Unhealthy> {
        let free = self.free_mb().map_err(Unhealthy)?;
        if free < self.min_free_mb {
            return Err(Unhealthy(format!(
                "{} MB free where the database is ({}), under {} MB",
                free,
                self.dir.display(),
                self.min_free_mb
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_feeder_that_stops_moving_is_reported_once_past_its_stall_time() {
        let beat = Heartbeat::default();
        let h = FeederHealth::new(beat.clone(), Duration::from_millis(100));
        assert!(h.check().await.unwrap_err().0.contains("not started"));
        beat.beat();
        assert!(h.check().await.is_ok());
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(h.check().await.unwrap_err().0.contains("has not moved"));
        beat.beat();
        assert!(h.check().await.is_ok());
    }

    #[tokio::test]
    async fn a_database_locked_by_another_writer_refuses_the_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.db");
        let q = AsyncQueue::open(&path, squeueha::Config::default())
            .await
            .unwrap();
        let h = DatabaseWrites(q);
        assert!(h.check().await.is_ok());
        // Wedged on purpose: another process's exclusive lock.
        let other = rusqlite::Connection::open(&path).unwrap();
        other.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(30), h.check()).await;
        assert!(
            !matches!(answer, Ok(Ok(()))),
            "a write went through another writer's exclusive lock"
        );
        other.execute_batch("COMMIT").unwrap();
        assert!(h.check().await.is_ok());
    }

    /// A full disk: the queue's database on a 2 MB tmpfs filled with a ballast file. Needs
    /// root (mount); skipped with a message elsewhere.
    #[tokio::test]
    async fn a_database_on_a_full_disk_refuses_the_write() {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("small");
        std::fs::create_dir(&mnt).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
            .arg(&mnt)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!(
                "SKIP a_database_on_a_full_disk_refuses_the_write: no tmpfs mount (not root)"
            );
            return;
        }
        let outcome = async {
            let q = AsyncQueue::open(mnt.join("jobs.db"), squeueha::Config::default())
                .await
                .unwrap();
            let h = DatabaseWrites(q);
            let disk = DiskSpace::new(&mnt, 1);
            assert!(h.check().await.is_ok());
            assert!(disk.check().await.is_ok());
            // The disk filled by something else.
            let _ = std::process::Command::new("dd")
                .args(["if=/dev/zero", "bs=64k", "count=64"])
                .arg(format!("of={}", mnt.join("ballast").display()))
                .status();
            let full = tokio::time::timeout(Duration::from_secs(30), h.check()).await;
            let full_ok = matches!(full, Ok(Ok(())));
            let disk_full = disk.check().await;
            std::fs::remove_file(mnt.join("ballast")).unwrap();
            let after = h.check().await;
            (full_ok, after, disk_full, disk.check().await)
        }
        .await;
        let _ = std::process::Command::new("umount").arg(&mnt).status();
        assert!(!outcome.0, "a write went through on a full disk");
        assert!(outcome.1.is_ok(), "{:?}", outcome.1);
        let why = outcome.2.unwrap_err().0;
        assert!(why.contains("0 MB free"), "{why}");
        assert!(outcome.3.is_ok(), "{:?}", outcome.3);
    }
}
