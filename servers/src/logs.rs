//! The servers' log files as the seam's [`LogBook`]: each log a name, a kind and the file a
//! [`ProcessServer`](crate::ProcessServer) appends to (or the serving process writes). Reads
//! return whole lines, with the secrets the book knows replaced, so that a key a server
//! printed never reaches an admin API or a status page. The secrets are a shared
//! [`Redactions`]: one learnt while serving (a key a reload adds) is replaced in every read
//! after it.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use horos_server_control::{LogBook, LogChunk, LogEntry, LogError, LogKind, LogWindow};

/// Most bytes one read returns (a follower reads the rest on its next call).
const MAX_READ: u64 = 256 * 1024;

/// Most lines a tail returns.
pub const MAX_TAIL_LINES: usize = 10_000;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Secrets shorter than this are not looked for (they would match ordinary text).
const MIN_SECRET: usize = 6;

/// One log file.
#[derive(Debug, Clone)]
struct LogFile {
    name: String,
    kind: LogKind,
    path: PathBuf,
}

/// The secrets replaced with [`REDACTED`] in what a [`LogFiles`] reads, shared by its clones:
/// a secret added to any of them is replaced in every read after that.
#[derive(Clone, Default)]
pub struct Redactions {
    /// The longest first: a secret that contains another is replaced whole.
    secrets: Arc<RwLock<Vec<String>>>,
}

impl std::fmt::Debug for Redactions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The count only: a secret printed by a debug line is a secret in a log.
        f.debug_struct("Redactions")
            .field("secrets", &self.len())
            .finish()
    }
}

impl Redactions {
    /// None yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `secrets` (their values, trimmed; those shorter than 6 bytes are ignored: they
    /// would match ordinary text).
    pub fn add(&self, secrets: impl IntoIterator<Item = String>) {
        let new: Vec<String> = secrets
            .into_iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| s.len() >= MIN_SECRET)
            .collect();
        if new.is_empty() {
            return;
        }
        let mut all = self.secrets.write().unwrap_or_else(PoisonError::into_inner);
        all.extend(new);
        all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        all.dedup();
    }

    /// Its secrets, as they are now.
    fn values(&self) -> Vec<String> {
        self.secrets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many secrets it holds.
    pub fn len(&self) -> usize {
        self.secrets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `text` with each secret replaced with [`REDACTED`].
    pub fn redact(&self, text: String) -> String {
        let secrets = self.secrets.read().unwrap_or_else(PoisonError::into_inner);
        secrets.iter().fold(text, |t, s| {
            if t.contains(s.as_str()) {
                t.replace(s.as_str(), REDACTED)
            } else {
                t
            }
        })
    }
}

/// Log files by name (see the module's documentation). Its clones share their
/// [`Redactions`].
#[derive(Debug, Clone, Default)]
pub struct LogFiles {
    files: Vec<LogFile>,
    secrets: Redactions,
}

impl LogFiles {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the log `name` of `kind`, kept at `path` (a name already there keeps its first
    /// file).
    pub fn with(
        mut self,
        name: impl Into<String>,
        kind: LogKind,
        path: impl Into<PathBuf>,
    ) -> Self {
        let name = name.into();
        if !self.files.iter().any(|f| f.name == name) {
            self.files.push(LogFile {
                name,
                kind,
                path: path.into(),
            });
        }
        self
    }

    /// Replaces each of `secrets` (keys' values; those shorter than 6 bytes are ignored) with
    /// [`REDACTED`] in what is read.
    pub fn redacting(self, secrets: impl IntoIterator<Item = String>) -> Self {
        self.secrets.add(secrets);
        self
    }

    /// Replaces the secrets of `redactions` in what is read, now and as it learns more (the
    /// secrets given before are added to it).
    pub fn redacted_by(mut self, redactions: Redactions) -> Self {
        let known = std::mem::replace(&mut self.secrets, redactions).values();
        self.secrets.add(known);
        self
    }

    /// Whether it holds no log.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

impl LogBook for LogFiles {
    fn logs(&self) -> Vec<LogEntry> {
        self.files
            .iter()
            .map(|f| LogEntry {
                name: f.name.clone(),
                kind: f.kind,
                bytes: std::fs::metadata(&f.path).ok().map(|m| m.len()),
            })
            .collect()
    }

    fn read(&self, name: &str, window: LogWindow) -> Result<LogChunk, LogError> {
        let file = self
            .files
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| LogError::Unknown(name.to_owned()))?;
        let read = match window {
            LogWindow::Tail { lines } => tail(&file.path, lines.min(MAX_TAIL_LINES)),
            LogWindow::After { offset } => after(&file.path, offset),
        };
        let (text, next) = read.map_err(|source| LogError::Read {
            name: name.to_owned(),
            source,
        })?;
        Ok(LogChunk {
            name: name.to_owned(),
            text: self.secrets.redact(text),
            next,
        })
    }
}

/// The file, or `None` when it was not written yet.
fn open(path: &Path) -> std::io::Result<Option<(File, u64)>> {
    match File::open(path) {
        Ok(f) => {
            let len = f.metadata()?.len();
            Ok(Some((f, len)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Bytes `from..to` of `f`.
fn bytes(f: &mut File, from: u64, to: u64) -> std::io::Result<Vec<u8>> {
    f.seek(SeekFrom::Start(from))?;
    let mut buf = Vec::with_capacity(usize::try_from(to - from).unwrap_or(0));
    f.take(to - from).read_to_end(&mut buf)?;
    Ok(buf)
}

/// The last `lines` whole lines and the offset after them. Reads backwards from the last
/// newline in growing steps, at most [`MAX_READ`] bytes.
fn tail(path: &Path, lines: usize) -> std::io::Result<(String, u64)> {
    let Some((mut f, len)) = open(path)? else {
        return Ok((String::new(), 0));
    };
    let mut span = 4096u64;
    loop {
        let from = len.saturating_sub(span);
        let buf = bytes(&mut f, from, len)?;
        let Some(end) = buf.iter().rposition(|b| *b == b'\n').map(|i| i + 1) else {
            if from == 0 || span >= MAX_READ {
                // No whole line yet: nothing to show, follow from where the partial line starts.
                return Ok((String::new(), from));
            }
            span *= 4;
            continue;
        };
        let whole = &buf[..end];
        // A cut first line (the window did not reach its start) does not count.
        let starts = from == 0;
        let newlines: Vec<usize> = whole
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i)
            .collect();
        let complete = newlines.len() - usize::from(!starts);
        if complete >= lines || starts || span >= MAX_READ {
            let keep = lines.min(complete);
            let begin = if keep == newlines.len() {
                0
            } else {
                newlines[newlines.len() - keep - 1] + 1
            };
            let text = String::from_utf8_lossy(&whole[begin..]).into_owned();
            return Ok((text, from + end as u64));
        }
        span *= 4;
    }
}

/// The whole lines after `offset` (from the start when the file is shorter: it was cut), at
/// most [`MAX_READ`] bytes (a longer line is returned cut), and the offset after them.
fn after(path: &Path, offset: u64) -> std::io::Result<(String, u64)> {
    let Some((mut f, len)) = open(path)? else {
        return Ok((String::new(), 0));
    };
    let from = if offset > len { 0 } else { offset };
    let to = len.min(from + MAX_READ);
    let buf = bytes(&mut f, from, to)?;
    let end = match buf.iter().rposition(|b| *b == b'\n') {
        Some(i) => i + 1,
        None if buf.len() as u64 == MAX_READ => buf.len(),
        None => 0,
    };
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    Ok((text, from + end as u64))
}

/// Fragments of a variable's name that mark its value as a secret (upper case).
const SECRET_NAMES: [&str; 8] = [
    "KEY", "TOKEN", "SECRET", "PASS", "PWD", "AUTH", "CRED", "PRIVATE",
];

/// The shortest expanded value that is a secret without a secret's name.
const MIN_UNNAMED: usize = 8;

/// Whether `value`, read from the variable `name` for a configuration's `${name}`, is a secret
/// its servers' logs must never show: every value of a variable whose name looks secret
/// (`HF_TOKEN`, `LLAMA_API_KEY`, `PGPASSWORD`), and every other value of 8 bytes or more but a
/// path (`/models`, `./bin`, `~/llama`). A server's command line has no key naming its
/// arguments, so a secret's only mark may be where it is; paths are the exception, as the
/// servers print their model and binary paths on most lines and a path is not a credential.
pub fn is_secret(name: &str, value: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if SECRET_NAMES.iter().any(|s| upper.contains(s)) {
        return true;
    }
    value.len() >= MIN_UNNAMED && !is_path(value)
}

/// Whether `value` is written as a path (absolute, relative to `.` or `..`, or to `~`).
fn is_path(value: &str) -> bool {
    ["/", "./", "../", "~/"]
        .iter()
        .any(|start| value.starts_with(start))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn secret_names_and_long_values_are_secrets_and_paths_are_not() {
        for (name, value, secret) in [
            ("LLAMA_API_KEY", "short1", true),
            ("hf_token", "/starts/like/a/path", true),
            ("PGPASSWORD", "hunter22", true),
            ("UPSTREAM", "sk-0123456789", true),
            ("MODEL_NAME", "Qwen2.5-7B", true),
            ("MODELS", "/srv/models", false),
            ("BIN", "./llama-server", false),
            ("HOME_LLAMA", "~/llama.cpp/build/bin", false),
            ("PORT", "8080", false),
            ("GPU", "0", false),
        ] {
            assert_eq!(is_secret(name, value), secret, "{name}={value}");
        }
    }

    use std::io::Write;

    fn book(dir: &Path) -> LogFiles {
        LogFiles::new()
            .with("think-gpu0", LogKind::Lane, dir.join("think-gpu0.log"))
            .with("run", LogKind::Run, dir.join("run.log"))
            .redacting(["sk-secret-1".to_owned(), "x".to_owned()])
    }

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn a_tail_is_the_last_whole_lines_with_secrets_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let b = book(dir.path());
        let path = dir.path().join("think-gpu0.log");
        // Not written yet: listed, empty.
        assert_eq!(b.logs()[0].bytes, None);
        let c = b.read("think-gpu0", LogWindow::Tail { lines: 3 }).unwrap();
        assert_eq!((c.text.as_str(), c.next), ("", 0));

        let lines: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        append(&path, &lines);
        append(&path, "key sk-secret-1 used (x)\npartial");
        let c = b.read("think-gpu0", LogWindow::Tail { lines: 3 }).unwrap();
        assert_eq!(c.text, "line 4998\nline 4999\nkey [redacted] used (x)\n");
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(c.next, len - "partial".len() as u64);
        assert_eq!(b.logs()[0].bytes, Some(len));
        // More lines than the file holds: all of them.
        let all = b
            .read("think-gpu0", LogWindow::Tail { lines: 9000 })
            .unwrap();
        assert!(
            all.text.starts_with("line 0\nline 1\n"),
            "{}",
            &all.text[..20]
        );
        assert_eq!(all.text.lines().count(), 5001);
    }

    #[test]
    fn a_follower_reads_whole_lines_after_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let b = book(dir.path());
        let path = dir.path().join("run.log");
        append(&path, "one\ntw");
        let c = b.read("run", LogWindow::After { offset: 0 }).unwrap();
        assert_eq!((c.text.as_str(), c.next), ("one\n", 4));
        let c = b.read("run", LogWindow::After { offset: c.next }).unwrap();
        assert_eq!((c.text.as_str(), c.next), ("", 4));
        append(&path, "o\nthree\n");
        let c = b.read("run", LogWindow::After { offset: 4 }).unwrap();
        assert_eq!((c.text.as_str(), c.next), ("two\nthree\n", 14));
        // The file was cut: from its start again.
        std::fs::write(&path, "new\n").unwrap();
        let c = b.read("run", LogWindow::After { offset: 14 }).unwrap();
        assert_eq!((c.text.as_str(), c.next), ("new\n", 4));
    }

    #[test]
    fn only_known_names_are_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("other.log"), "private\n").unwrap();
        let b = book(dir.path());
        for name in ["other", "../other.log", "run/../other", ""] {
            let e = b.read(name, LogWindow::Tail { lines: 1 }).unwrap_err();
            assert!(matches!(e, LogError::Unknown(_)), "{name}: {e}");
        }
        let names: Vec<String> = b.logs().into_iter().map(|l| l.name).collect();
        assert_eq!(names, ["think-gpu0", "run"]);
    }

    #[test]
    fn a_secret_learnt_after_the_book_was_built_is_replaced_in_later_reads() {
        let dir = tempfile::tempdir().unwrap();
        let shared = Redactions::new();
        let b = book(dir.path()).redacted_by(shared.clone());
        // What the book was given before it shares the set is in the set.
        assert_eq!(shared.len(), 1);
        let path = dir.path().join("run.log");
        append(&path, "client key sk-added-by-reload used\n");
        let read = |b: &LogFiles| b.read("run", LogWindow::Tail { lines: 1 }).unwrap().text;
        assert_eq!(read(&b), "client key sk-added-by-reload used\n");
        // Learnt through another handle (a reload), after the book was handed out.
        shared.add(["  sk-added-by-reload\n".to_owned(), "short".to_owned()]);
        assert_eq!(read(&b), "client key [redacted] used\n");
        assert_eq!(read(&b.clone()), "client key [redacted] used\n");
        assert_eq!(shared.len(), 2);
        // Never printed by a debug line.
        let debug = format!("{b:?} {shared:?}");
        assert!(
            !debug.contains("sk-added") && !debug.contains("sk-secret"),
            "{debug}"
        );
    }

    #[test]
    fn a_secret_containing_another_is_replaced_whole() {
        let r = Redactions::new();
        r.add([
            "abcdef".to_owned(),
            "abcdef-ghijkl".to_owned(),
            "abcdef".to_owned(),
        ]);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r.redact("x abcdef-ghijkl y abcdef".to_owned()),
            "x [redacted] y [redacted]"
        );
    }
}
