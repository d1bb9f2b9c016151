//! Cross-process wake-up for a queue file on one machine: every open handle binds a Unix
//! datagram socket in a directory beside the database (`jobs.db.wake/`), and a producer that
//! committed work sends the queue's name to the others' sockets, so a consumer waiting in another
//! process wakes at once instead of at its next poll. A datagram is only a hint: one that is lost
//! (a full socket buffer, a handle that opened a moment ago) leaves the consumer to its poll
//! interval, never loses work. Where a socket cannot be bound (a path over the platform's limit,
//! a read-only directory, not Unix), the handle polls as before.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The directory of `db`'s wake-up sockets.
pub(crate) fn dir_of(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".wake");
    PathBuf::from(name)
}

/// How long a producer trusts its list of peers before reading the directory again.
const PEERS_FRESH: Duration = Duration::from_millis(100);
/// The longest queue name announced (a queue with a longer name is left to polling).
const MAX_NAME: usize = 512;

#[cfg(unix)]
mod imp {
    use std::io::ErrorKind;
    use std::os::unix::net::UnixDatagram;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::{Duration, Instant};

    use super::{MAX_NAME, PEERS_FRESH};

    static NEXT: AtomicU64 = AtomicU64::new(0);

    /// One handle's sockets: an unbound one that sends to the others, and the bound one, read by
    /// the handle's thread, that hears them.
    pub(crate) struct Wake {
        dir: PathBuf,
        path: PathBuf,
        /// Non-blocking on an open file description of its own: the listener's blocking reads
        /// (a mode of the description, which a `try_clone` would share) cannot make it wait.
        sender: UnixDatagram,
        peers: Mutex<(Option<Instant>, Vec<PathBuf>)>,
    }

    impl Wake {
        /// Binds this handle's socket in `dir` and hears the others on a thread of its own,
        /// calling `heard` with each queue name until `heard` returns false.
        /// `None` where no socket can be bound (the handle then only polls).
        pub(crate) fn start(
            dir: &Path,
            heard: impl Fn(&str) -> bool + Send + 'static,
        ) -> Option<Arc<Wake>> {
            std::fs::create_dir_all(dir).ok()?;
            let name = format!(
                "{}-{}.sock",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            let path = dir.join(name);
            // A file left by a process that had this pid before (it crashed): ours now.
            let _ = std::fs::remove_file(&path);
            let listener = UnixDatagram::bind(&path).ok()?;
            let sender = UnixDatagram::unbound().ok()?;
            sender.set_nonblocking(true).ok()?;
            // Wakes at least every second to see whether the handle is gone.
            listener
                .set_read_timeout(Some(Duration::from_secs(1)))
                .ok()?;
            let wake = Arc::new(Wake {
                dir: dir.to_path_buf(),
                path,
                sender,
                peers: Mutex::new((None, Vec::new())),
            });
            let weak = Arc::downgrade(&wake);
            std::thread::Builder::new()
                .name("squeueha-wake".into())
                .spawn(move || {
                    let mut buf = [0u8; MAX_NAME];
                    loop {
                        match listener.recv(&mut buf) {
                            Ok(n) => {
                                if let Ok(queue) = std::str::from_utf8(&buf[..n])
                                    && !queue.is_empty()
                                    && !heard(queue)
                                {
                                    return;
                                }
                            }
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    ErrorKind::WouldBlock
                                        | ErrorKind::TimedOut
                                        | ErrorKind::Interrupted
                                ) => {}
                            Err(_) => return,
                        }
                        if weak.strong_count() == 0 {
                            return;
                        }
                    }
                })
                .ok()?;
            Some(wake)
        }

        /// Tells the other handles that `queue` has work. Never blocks: a peer whose buffer is
        /// full misses this hint; a socket whose process is gone is removed.
        pub(crate) fn announce(&self, queue: &str) {
            if queue.is_empty() || queue.len() > MAX_NAME {
                return;
            }
            for peer in self.peers() {
                match self.sender.send_to(queue.as_bytes(), &peer) {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                        // Nobody reads it any more: a process that died without cleaning up.
                        let _ = std::fs::remove_file(&peer);
                        self.forget_peers();
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => self.forget_peers(),
                    Err(_) => {}
                }
            }
        }

        fn peers(&self) -> Vec<PathBuf> {
            let mut p = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
            if p.0.is_none_or(|t| t.elapsed() > PEERS_FRESH) {
                p.1 = std::fs::read_dir(&self.dir)
                    .map(|entries| {
                        entries
                            .filter_map(|e| e.ok().map(|e| e.path()))
                            .filter(|path| {
                                *path != self.path && path.extension().is_some_and(|x| x == "sock")
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                p.0 = Some(Instant::now());
            }
            p.1.clone()
        }

        fn forget_peers(&self) {
            self.peers.lock().unwrap_or_else(PoisonError::into_inner).0 = None;
        }
    }

    impl Drop for Wake {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(not(unix))]
mod imp {
    use std::path::Path;
    use std::sync::Arc;

    /// No cross-process wake-up here: handles poll.
    pub(crate) struct Wake;

    impl Wake {
        pub(crate) fn start(
            _dir: &Path,
            _heard: impl Fn(&str) -> bool + Send + 'static,
        ) -> Option<Arc<Wake>> {
            None
        }

        pub(crate) fn announce(&self, _queue: &str) {}
    }
}

pub(crate) use imp::Wake;

#[cfg(test)]
#[cfg(unix)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_handle_hears_the_others_not_itself_and_dead_sockets_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let wake_dir = dir_of(&dir.path().join("jobs.db"));
        let (tx_a, rx_a) = mpsc::channel::<String>();
        let (tx_b, rx_b) = mpsc::channel::<String>();
        let a = Wake::start(&wake_dir, move |q| tx_a.send(q.to_owned()).is_ok()).unwrap();
        let b = Wake::start(&wake_dir, move |q| tx_b.send(q.to_owned()).is_ok()).unwrap();
        a.announce("ocr");
        assert_eq!(
            rx_b.recv_timeout(Duration::from_secs(5)).unwrap(),
            "ocr",
            "b hears a"
        );
        assert!(
            rx_a.recv_timeout(Duration::from_millis(100)).is_err(),
            "a does not hear itself"
        );
        b.announce(&"q".repeat(MAX_NAME + 1));
        assert!(
            rx_a.recv_timeout(Duration::from_millis(100)).is_err(),
            "a name too long for a datagram is left to polling"
        );
        b.announce("thumbnails");
        assert_eq!(
            rx_a.recv_timeout(Duration::from_secs(5)).unwrap(),
            "thumbnails"
        );
        // A socket nobody reads (its process died): removed by the next announce that meets it.
        let dead = wake_dir.join("999999-0.sock");
        drop(std::os::unix::net::UnixDatagram::bind(&dead).unwrap());
        std::thread::sleep(PEERS_FRESH * 2);
        a.announce("ocr");
        assert!(!dead.exists(), "the dead peer's socket is removed");
        assert_eq!(rx_b.recv_timeout(Duration::from_secs(5)).unwrap(), "ocr");
        // A handle dropped removes its own socket.
        let b_path = std::fs::read_dir(&wake_dir).unwrap().count();
        drop(b);
        assert_eq!(std::fs::read_dir(&wake_dir).unwrap().count(), b_path - 1);
    }

    #[test]
    fn announce_returns_while_a_peer_that_never_reads_has_a_full_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let wake_dir = dir_of(&dir.path().join("jobs.db"));
        let a = Wake::start(&wake_dir, |_| true).unwrap();
        // A live peer that never reads: its receive queue fills after net.unix.max_dgram_qlen
        // datagrams (10 by default), after which a blocking send would wait for it forever.
        let stuck = std::os::unix::net::UnixDatagram::bind(wake_dir.join("1-stuck.sock")).unwrap();
        let (done, returned) = mpsc::channel();
        std::thread::spawn(move || {
            for _ in 0..20_000 {
                a.announce("ocr");
            }
            let _ = done.send(());
        });
        assert!(
            returned.recv_timeout(Duration::from_secs(10)).is_ok(),
            "announce blocked on a peer whose buffer is full"
        );
        drop(stuck);
    }
}
