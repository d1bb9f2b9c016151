//! `run`'s own log: what the binary writes to stderr is also appended to `RUN_DIR/run.log`
//! once `run` opens it, so that `horos-ref logs run` (the admin API) shows it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

static FILE: OnceLock<Mutex<File>> = OnceLock::new();

/// Appends the log to `path` from now on (its directory created).
pub fn open(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let _ = FILE.set(Mutex::new(file));
    Ok(())
}

/// The log's writer: stderr, and the file once opened.
pub struct Tee;

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(file) = FILE.get() {
            let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
            // A full disk must not stop the log on stderr.
            let _ = f.write_all(buf);
        }
        std::io::stderr().write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
