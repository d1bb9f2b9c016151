//! Child processes a test drives: [`run_limited`] (output in files, killed at a time limit), the
//! workspace's root ([`repo_root`]) and the Python of `scripts/setup_py_e2e.sh`
//! ([`py_e2e_python`]) that the official clients' tests run.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a finished process left.
#[derive(Debug, Clone)]
pub struct Ran {
    /// Exit code; `None`: killed at the time limit (or ended by a signal).
    pub code: Option<i32>,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

/// Runs `cmd` with its output in files (no pipe to drain), killed after `limit`. Blocking.
///
/// # Errors
///
/// When the process cannot be started or its output files cannot be written or read.
pub fn run_limited(mut cmd: Command, limit: Duration) -> std::io::Result<Ran> {
    let dir = std::env::temp_dir().join(format!(
        "horos-testkit-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    let (out, err) = (dir.join("out"), dir.join("err"));
    let ran = (|| {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out)?)
            .stderr(std::fs::File::create(&err)?)
            .spawn()?;
        let end = Instant::now() + limit;
        let code = loop {
            if let Some(s) = child.try_wait()? {
                break s.code();
            }
            if Instant::now() >= end {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Ok(Ran {
            code,
            stdout: std::fs::read_to_string(&out)?,
            stderr: std::fs::read_to_string(&err)?,
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    ran
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The workspace's root directory (where `scripts/` is).
pub fn repo_root() -> PathBuf {
    let kit = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    kit.parent()
        .map_or(kit.clone(), std::path::Path::to_path_buf)
}

/// A Python that can `import module`: `HOROS_PY_E2E_PYTHON`, else the venv that
/// `scripts/setup_py_e2e.sh` makes (idempotent and locked: a complete install is reused).
///
/// # Errors
///
/// Why there is none: the script failed, or that Python cannot import `module`.
pub fn py_e2e_python(module: &str) -> Result<PathBuf, String> {
    let py = match std::env::var("HOROS_PY_E2E_PYTHON") {
        Ok(p) => PathBuf::from(p),
        Err(_) => {
            let script = repo_root().join("scripts/setup_py_e2e.sh");
            let mut cmd = Command::new("bash");
            cmd.arg(&script);
            let ran = run_limited(cmd, Duration::from_secs(300))
                .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
            if ran.code != Some(0) {
                return Err(format!(
                    "{} failed ({:?}): {}",
                    script.display(),
                    ran.code,
                    ran.stderr.trim()
                ));
            }
            ran.stdout
                .lines()
                .last()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(PathBuf::from)
                .ok_or_else(|| format!("{} printed no python path", script.display()))?
        }
    };
    let mut cmd = Command::new(&py);
    cmd.args(["-c", &format!("import {module}")]);
    match run_limited(cmd, Duration::from_secs(60)) {
        Ok(r) if r.code == Some(0) => Ok(py),
        Ok(r) => Err(format!(
            "{} cannot import {module}: {}",
            py.display(),
            r.stderr.trim().lines().last().unwrap_or_default()
        )),
        Err(e) => Err(format!("cannot run {}: {e}", py.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_exit_code_come_back_and_a_hang_is_killed() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let r = run_limited(cmd, Duration::from_secs(10)).expect("sh runs");
        assert_eq!(
            (r.code, r.stdout.trim(), r.stderr.trim()),
            (Some(3), "out", "err")
        );
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let started = Instant::now();
        let r = run_limited(cmd, Duration::from_millis(200)).expect("sleep runs");
        assert_eq!(r.code, None);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(repo_root().join("scripts/setup_py_e2e.sh").is_file());
    }
}
