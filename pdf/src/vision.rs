//! Visual reading of page images: the [`VisionReader`] trait, a CPU implementation running
//! Tesseract ([`TesseractReader`]), and the prompt and answer parsing used by the
//! OpenAI-compatible vision reader ([`VISION_PROMPT`], [`parse_vision_answer`]).

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use serde::Deserialize;

use crate::limits::{ChildLimits, killed_by_cpu_limit};
use crate::orientation;
pub use crate::reading::{ReadBy, Reading, VisionError, Word};
use crate::tiling::layout_words;

/// Reads text, tables and figures from a PNG image.
pub trait VisionReader: Send + Sync + 'static {
    /// A short name recorded with results (e.g. `tesseract`, the model name).
    fn name(&self) -> &str;
    /// The kind of reader, recorded with each page it reads (unless its [`Reading::read_by`]
    /// says otherwise). Default: a vision model.
    fn read_by(&self) -> ReadBy {
        ReadBy::VisionModel
    }
    /// Reads one PNG-encoded image.
    fn read(
        &self,
        png: Arc<Vec<u8>>,
    ) -> impl std::future::Future<Output = Result<Reading, VisionError>> + Send;
}

/// CPU reader running the `tesseract` command (Tesseract 4/5), one process per image, with
/// `OMP_THREAD_LIMIT=1` (on 2 cores that is 5× faster than letting OpenMP spread). Blocking
/// work runs on tokio's blocking pool.
#[derive(Debug, Clone)]
pub struct TesseractReader {
    program: String,
    lang: String,
    psm: Option<u8>,
    timeout: std::time::Duration,
    orientation: bool,
    orientation_timeout: std::time::Duration,
    /// The address-space limit of each run (`RLIMIT_AS`), bytes; `None`: none.
    memory_limit: Option<u64>,
}

/// The most a Tesseract run may write to its standard output (a page's TSV is some hundreds of
/// kilobytes); past it the run is killed and fails with [`VisionError::TesseractLimit`].
pub const MAX_TESSERACT_OUTPUT: usize = 16 << 20;

/// The default address-space limit of a Tesseract run: 2 GiB (a page at 300 dpi takes some
/// hundreds of megabytes; the limit is what keeps a hostile image from taking the machine).
pub const DEFAULT_TESSERACT_MEMORY: u64 = 2 << 30;

impl Default for TesseractReader {
    fn default() -> Self {
        Self {
            program: "tesseract".into(),
            lang: "eng".into(),
            psm: None,
            timeout: std::time::Duration::from_secs(120),
            orientation: true,
            orientation_timeout: std::time::Duration::from_secs(30),
            memory_limit: Some(DEFAULT_TESSERACT_MEMORY),
        }
    }
}

impl TesseractReader {
    /// A reader for language(s) `lang` (e.g. `eng`, `eng+fra`).
    pub fn new(lang: &str) -> Self {
        Self {
            lang: lang.into(),
            ..Self::default()
        }
    }

    /// Uses another program path instead of `tesseract` from `PATH`.
    pub fn with_program(mut self, program: &str) -> Self {
        self.program = program.into();
        self
    }

    /// Sets Tesseract's page segmentation mode (`--psm`).
    pub fn with_psm(mut self, psm: u8) -> Self {
        self.psm = Some(psm);
        self
    }

    /// Kills a Tesseract run after `timeout` (default 120 s); the job is then retried.
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether each image's orientation is detected first (`--psm 0`, needs Tesseract's
    /// `osd.traineddata`) and a page scanned sideways or upside down is read turned upright
    /// (default true; [`Reading::rotation`] records the turn). Costs one more, shorter,
    /// Tesseract run per image.
    pub fn with_orientation(mut self, detect: bool) -> Self {
        self.orientation = detect;
        self
    }

    /// Gives up on orientation detection after `timeout` (default 30 s, at most the reading's
    /// timeout): the image is then read as it is.
    pub fn with_orientation_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.orientation_timeout = timeout;
        self
    }

    /// Limits each run's address space to `bytes` (`RLIMIT_AS`; default
    /// [`DEFAULT_TESSERACT_MEMORY`]; `None`: no limit). Each run is also limited to its
    /// timeout in CPU seconds (`RLIMIT_CPU`) and to [`MAX_TESSERACT_OUTPUT`] of output. A run
    /// past a limit fails alone: the process that started it is untouched.
    pub fn with_memory_limit(mut self, bytes: Option<u64>) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// Checks that the program runs (`tesseract --version`).
    pub fn check(&self) -> Result<String, VisionError> {
        let out = Command::new(&self.program)
            .arg("--version")
            .env("OMP_THREAD_LIMIT", "1")
            .output()
            .map_err(|e| self.spawn_error(e))?;
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        Ok(text.lines().next().unwrap_or_default().to_string())
    }

    fn spawn_error(&self, e: std::io::Error) -> VisionError {
        if e.kind() == std::io::ErrorKind::NotFound {
            VisionError::TesseractMissing(format!("{}: {e}", self.program))
        } else {
            VisionError::Io(e)
        }
    }

    /// Reads a PNG synchronously (what [`VisionReader::read`] runs on the blocking pool): its
    /// orientation first (unless turned off), then its text, upright.
    pub fn read_blocking(&self, png: &[u8]) -> Result<Reading, VisionError> {
        let started = Instant::now();
        let rotation = if self.orientation {
            self.detect_rotation(png)?
        } else {
            0
        };
        let turned;
        let upright = if rotation == 0 {
            png
        } else {
            turned = orientation::rotate_png(png, rotation)?;
            &turned
        };
        let mut args = vec![
            "stdin".to_owned(),
            "stdout".into(),
            "-l".into(),
            self.lang.clone(),
        ];
        if let Some(psm) = self.psm {
            args.extend(["--psm".into(), psm.to_string()]);
        }
        args.push("tsv".into());
        let out = self.run(&args, upright, self.timeout)?;
        let tsv = String::from_utf8_lossy(&out);
        let (text, words) = parse_tesseract_tsv(&tsv);
        Ok(Reading {
            text,
            words: Some(words),
            tables: Vec::new(),
            figures: Vec::new(),
            inference_seconds: started.elapsed().as_secs_f64(),
            read_by: Some(ReadBy::Tesseract),
            rotation,
            layout: None,
        })
    }

    /// Degrees (clockwise) that turn the image upright, by Tesseract's orientation detection
    /// (`--psm 0`); 0 when it is upright, has too little text to tell (Tesseract then fails),
    /// is not sure, or does not answer within the orientation timeout. A missing program is
    /// still an error.
    pub fn detect_rotation(&self, png: &[u8]) -> Result<u16, VisionError> {
        let args = ["stdin", "stdout", "--psm", "0"].map(String::from);
        match self.run(&args, png, self.orientation_timeout.min(self.timeout)) {
            Ok(out) => Ok(orientation::parse_osd(&String::from_utf8_lossy(&out))
                .filter(|o| o.confidence >= orientation::MIN_CONFIDENCE)
                .map_or(0, |o| o.rotate)),
            Err(e @ VisionError::TesseractMissing(_)) => Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "no orientation: read as it is");
                Ok(0)
            }
        }
    }

    /// Runs the program with `args`, `input` on its standard input, killed after `timeout`;
    /// its standard output.
    fn run(
        &self,
        args: &[String],
        input: &[u8],
        timeout: std::time::Duration,
    ) -> Result<Vec<u8>, VisionError> {
        let started = Instant::now();
        let mut cmd = Command::new(&self.program);
        cmd.args(args)
            .env("OMP_THREAD_LIMIT", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        ChildLimits {
            memory_bytes: self.memory_limit,
            cpu_seconds: Some(timeout.as_secs().saturating_add(1)),
            no_network: true,
        }
        .apply(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| self.spawn_error(e))?;
        // Pipes are drained on their own threads so that a large output cannot block the child;
        // at most `limit` bytes are kept (one more says it answered too much).
        fn drain<R: std::io::Read + Send + 'static>(
            pipe: Option<R>,
            limit: usize,
        ) -> std::thread::JoinHandle<Vec<u8>> {
            std::thread::spawn(move || {
                use std::io::Read as _;
                let mut buf = Vec::new();
                if let Some(p) = pipe {
                    let _ = p.take(limit as u64 + 1).read_to_end(&mut buf);
                }
                buf
            })
        }
        let mut stdout = Some(drain(child.stdout.take(), MAX_TESSERACT_OUTPUT));
        // Its output once its drain has ended (the child closed it, or said too much).
        let mut drained: Option<Vec<u8>> = None;
        let stderr = drain(child.stderr.take(), 64 * 1024);
        // Written on its own thread too: a child that never reads its input must still be
        // bound by the timeout (a PNG is larger than a pipe's buffer).
        let stdin = child.stdin.take().map(|mut pipe| {
            let input = input.to_vec();
            std::thread::spawn(move || {
                let written = pipe.write_all(&input);
                drop(pipe); // end of input
                written
            })
        });
        let deadline = started + timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                // Its output ended before it did: taken now, and if it said more than any
                // reading, it is stopped (its drain stopped reading).
                Ok(None) if stdout.as_ref().is_some_and(|h| h.is_finished()) => {
                    let out = stdout
                        .take()
                        .map(|h| h.join().unwrap_or_default())
                        .unwrap_or_default();
                    if out.len() > MAX_TESSERACT_OUTPUT {
                        let _ = child.kill();
                        let _ = child.wait();
                        return Err(VisionError::TesseractLimit { what: "output" });
                    }
                    drained = Some(out);
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                waited => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(match waited {
                        Err(e) => VisionError::Io(e),
                        _ => VisionError::TesseractTimeout(timeout),
                    });
                }
            }
        };
        let input_written = stdin.map_or(Ok(()), |t| {
            t.join()
                .unwrap_or_else(|_| Err(std::io::Error::other("stdin writer panicked")))
        });
        let out_stdout = match (drained, stdout) {
            (Some(out), _) => out,
            (None, Some(h)) => h.join().unwrap_or_default(),
            (None, None) => Vec::new(),
        };
        let out_stderr = stderr.join().unwrap_or_default();
        if out_stdout.len() > MAX_TESSERACT_OUTPUT {
            return Err(VisionError::TesseractLimit { what: "output" });
        }
        if killed_by_cpu_limit(&status) {
            return Err(VisionError::TesseractLimit { what: "cpu" });
        }
        // It exited before reading its whole input: whatever it printed is not a reading of
        // this image.
        if let (true, Err(e)) = (status.success(), &input_written) {
            return Err(VisionError::TesseractFailed {
                status: status.to_string(),
                stderr: format!("exited before reading its input: {e}"),
            });
        }
        if !status.success() {
            return Err(VisionError::TesseractFailed {
                status: status.to_string(),
                stderr: String::from_utf8_lossy(&out_stderr)
                    .chars()
                    .take(2000)
                    .collect(),
            });
        }
        Ok(out_stdout)
    }
}

impl VisionReader for TesseractReader {
    fn name(&self) -> &str {
        "tesseract"
    }

    fn read_by(&self) -> ReadBy {
        ReadBy::Tesseract
    }

    async fn read(&self, png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.read_blocking(&png))
            .await
            .map_err(|e| VisionError::Task(e.to_string()))?
    }
}

/// Parses Tesseract's TSV output: the text (lines by block/paragraph/line, paragraphs separated
/// by a blank line) and the words with their boxes.
pub fn parse_tesseract_tsv(tsv: &str) -> (String, Vec<Word>) {
    let mut words = Vec::new();
    let mut text = String::new();
    let mut last_line: Option<(u32, u32, u32)> = None;
    let mut last_par: Option<(u32, u32)> = None;
    for line in tsv.lines().skip(1) {
        let f: Vec<&str> = line.splitn(12, '\t').collect();
        if f.len() < 12 || f[0] != "5" {
            continue;
        }
        let word = f[11].trim();
        if word.is_empty() {
            continue;
        }
        let n = |i: usize| f[i].parse::<u32>().unwrap_or(0);
        let key = (n(2), n(3), n(4));
        if last_line != Some(key) {
            if last_line.is_some() {
                text.push('\n');
                if last_par != Some((key.0, key.1)) {
                    text.push('\n');
                }
            }
            last_line = Some(key);
            last_par = Some((key.0, key.1));
        } else {
            text.push(' ');
        }
        text.push_str(word);
        words.push(Word {
            text: word.to_string(),
            x: n(6),
            y: n(7),
            w: n(8),
            h: n(9),
        });
    }
    (text, words)
}

/// The instruction sent with each page image to an OpenAI-compatible vision model
/// (Qwen2-VL style): the text, tables as structured data and figure descriptions, as JSON.
pub const VISION_PROMPT: &str = "Read this document page image. Answer with one JSON object and nothing else:\n\
{\"text\": \"all the text of the page in reading order, tables and figures excluded\",\n \
\"tables\": [{\"caption\": \"...\", \"header\": [\"...\"], \"rows\": [[\"...\"]]}],\n \
\"figures\": [\"one description per figure, chart or schematic, with the values it shows\"]}\n\
Transcribe exactly; do not summarise. Use empty lists when there is no table or figure.";

/// Parses a vision model's answer to [`VISION_PROMPT`]. Tolerates code fences and text around
/// the JSON object; an answer without a JSON object is taken as plain text.
pub fn parse_vision_answer(answer: &str) -> Reading {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        text: String,
        #[serde(default)]
        tables: Vec<serde_json::Value>,
        #[serde(default)]
        figures: Vec<serde_json::Value>,
    }
    let start = answer.find('{');
    let end = answer.rfind('}');
    if let (Some(s), Some(e)) = (start, end)
        && s < e
        && let Ok(a) = serde_json::from_str::<Answer>(&answer[s..=e])
    {
        let figures = a
            .figures
            .into_iter()
            .map(|f| match f {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            })
            .collect();
        return Reading {
            text: a.text,
            words: None,
            tables: a.tables,
            figures,
            ..Reading::default()
        };
    }
    Reading {
        text: answer.trim().to_string(),
        ..Reading::default()
    }
}

/// Text of a set of words laid out in lines (re-exported helper for readers with boxes).
pub fn words_text(words: &[Word]) -> String {
    layout_words(words.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsv_parsing() {
        let tsv = "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext\n\
1\t1\t0\t0\t0\t0\t0\t0\t100\t100\t-1\t\n\
5\t1\t1\t1\t1\t1\t10\t20\t30\t10\t96\tHello\n\
5\t1\t1\t1\t1\t2\t45\t20\t30\t10\t96\tworld\n\
5\t1\t1\t1\t2\t1\t10\t40\t30\t10\t96\tnext\n\
5\t1\t2\t1\t1\t1\t10\t80\t30\t10\t96\tpara\n";
        let (text, words) = parse_tesseract_tsv(tsv);
        assert_eq!(text, "Hello world\nnext\n\npara");
        assert_eq!(words.len(), 4);
        assert_eq!(
            words[1],
            Word {
                text: "world".into(),
                x: 45,
                y: 20,
                w: 30,
                h: 10
            }
        );
    }

    #[test]
    fn answer_parsing() {
        let a = "```json\n{\"text\": \"Hi\", \"tables\": [{\"header\": [\"a\"], \"rows\": [[\"1\"]]}], \"figures\": [\"a bar chart\"]}\n```";
        let r = parse_vision_answer(a);
        assert_eq!(r.text, "Hi");
        assert_eq!(r.tables.len(), 1);
        assert_eq!(r.figures, vec!["a bar chart".to_string()]);
        let plain = parse_vision_answer("just text");
        assert_eq!(plain.text, "just text");
        assert!(plain.tables.is_empty());
    }

    /// The tests that write an executable and start processes, one at a time: a process forked
    /// by one test while another still holds its new script open for writing keeps that file
    /// open until it execs, and the other's exec of the script then fails with "Text file busy"
    /// (ETXTBSY).
    fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        static SPAWNING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        SPAWNING.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An executable `tesseract` in `dir` running the shell `body`.
    fn fake_tesseract(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
        let script = dir.join("tesseract");
        std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        script
    }

    #[test]
    fn hung_ocr_process_is_killed_after_the_timeout() {
        let _serial = one_at_a_time();
        let dir = tempfile::tempdir().unwrap();
        let script = fake_tesseract(dir.path(), "exec sleep 30");
        let r = TesseractReader::default()
            .with_program(script.to_str().unwrap())
            .with_timeout(std::time::Duration::from_millis(300));
        let err = r.read_blocking(b"png").unwrap_err();
        assert!(matches!(err, VisionError::TesseractTimeout(_)), "{err:?}");
        assert!(err.is_retryable());
    }

    #[test]
    fn an_ocr_process_that_never_reads_its_input_is_bound_by_the_timeout() {
        let _serial = one_at_a_time();
        let dir = tempfile::tempdir().unwrap();
        // Reads nothing, then exits 0: before, the write of a large image blocked until the
        // exit, past the timeout, and the empty output was taken for a reading.
        let script = fake_tesseract(dir.path(), "exec sleep 2");
        let r = TesseractReader::default()
            .with_program(script.to_str().unwrap())
            .with_timeout(std::time::Duration::from_millis(300));
        let err = r.read_blocking(&vec![0u8; 1 << 20]).unwrap_err();
        assert!(matches!(err, VisionError::TesseractTimeout(_)), "{err:?}");

        // Exits 0 at once without reading: an error, not an empty reading.
        fake_tesseract(dir.path(), "exit 0");
        let err = r.read_blocking(&vec![0u8; 1 << 20]).unwrap_err();
        assert!(
            matches!(err, VisionError::TesseractFailed { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn tesseract_runs_without_network_where_the_kernel_allows() {
        let _serial = one_at_a_time();
        let dir = tempfile::tempdir().unwrap();
        // Its reading is the number of interfaces it sees besides the loopback.
        let count = "tail -n +3 /proc/self/net/dev | grep -cv '^ *lo:'";
        let script = fake_tesseract(
            dir.path(),
            &format!(
                "cat >/dev/null; n=$({count}); printf 'level\\tpage_num\\tblock_num\\t\
                 par_num\\tline_num\\tword_num\\tleft\\ttop\\twidth\\theight\\tconf\\ttext\\n\
                 5\\t1\\t1\\t1\\t1\\t1\\t10\\t20\\t30\\t10\\t96\\tinterfaces%s\\n' \"$n\""
            ),
        );
        let r = TesseractReader::default()
            .with_program(script.to_str().unwrap())
            .with_orientation(false);
        let reading = r.read_blocking(b"png").unwrap();
        // What a child under the same limits sees here: none where the namespace is allowed.
        let mut probe = Command::new("sh");
        probe.args(["-c", count]);
        ChildLimits {
            memory_bytes: None,
            cpu_seconds: None,
            no_network: true,
        }
        .apply(&mut probe);
        let seen = String::from_utf8(probe.output().unwrap().stdout).unwrap();
        assert_eq!(reading.text, format!("interfaces{}", seen.trim()));
        println!("tesseract saw: {}", reading.text);
    }

    #[test]
    fn missing_tesseract_is_typed() {
        let _serial = one_at_a_time();
        let r = TesseractReader::default().with_program("/nonexistent/tesseract");
        assert!(matches!(
            r.read_blocking(b"x"),
            Err(VisionError::TesseractMissing(_))
        ));
        assert!(matches!(r.check(), Err(VisionError::TesseractMissing(_))));
    }

    #[test]
    fn an_ocr_process_past_its_limits_fails_alone_with_a_typed_reason() {
        let _serial = one_at_a_time();
        let dir = tempfile::tempdir().unwrap();
        // Answers without end: killed once it has said more than any reading.
        let script = fake_tesseract(dir.path(), "cat >/dev/null; exec yes walrus");
        let r = TesseractReader::default()
            .with_program(script.to_str().unwrap())
            .with_orientation(false);
        let before = horos_testkit::memory::rss_bytes().unwrap_or(0);
        let err = r.read_blocking(b"png").unwrap_err();
        assert!(
            matches!(err, VisionError::TesseractLimit { what: "output" }),
            "{err:?}"
        );
        assert!(!err.is_retryable());
        let grown = horos_testkit::memory::rss_bytes()
            .unwrap_or(0)
            .saturating_sub(before);
        assert!(grown < 64 << 20, "the reader kept {grown} bytes");

        // Spins: stopped by its CPU limit (the timeout's seconds), typed as such.
        fake_tesseract(dir.path(), "cat >/dev/null; while :; do :; done");
        let r = r.with_timeout(std::time::Duration::from_secs(1));
        let err = r.read_blocking(b"png").unwrap_err();
        assert!(
            matches!(
                err,
                VisionError::TesseractLimit { what: "cpu" } | VisionError::TesseractTimeout(_)
            ),
            "{err:?}"
        );

        // Asks for more memory than its address space allows: the allocation fails in the
        // child (dd's buffer of 512 MiB), which fails alone.
        fake_tesseract(
            dir.path(),
            "cat >/dev/null; exec dd if=/dev/zero of=/dev/null bs=512M count=1",
        );
        let r = TesseractReader::default()
            .with_program(script.to_str().unwrap())
            .with_orientation(false)
            .with_memory_limit(Some(256 << 20));
        let err = r.read_blocking(b"png").unwrap_err();
        match &err {
            VisionError::TesseractFailed { stderr, .. } => {
                assert!(stderr.contains("memory"), "{stderr}")
            }
            other => panic!("{other:?}"),
        }
        // The same program without the limit gets its buffer.
        let r = r.with_memory_limit(None);
        assert!(
            !matches!(
                r.read_blocking(b"png"),
                Err(VisionError::TesseractFailed { .. })
            ),
            "without a limit dd allocates and exits 0"
        );
    }
}
