//! The pipeline's side of one worker process: [`Worker::spawn`] starts it under its
//! [`WorkerLimits`] and checks its hello; each call writes a request and reads its reply within
//! the wall-clock limit. A worker that dies, is killed, passes a limit, does not answer in time
//! or speaks out of protocol is [`WorkerError::Broken`] with its typed reason, killed and
//! reaped; it answers nothing more.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::limits::{ChildLimits, killed_by_cpu_limit, signal};
use crate::render::{FailureReason, RenderConfig};
use crate::text_layer::TextLayer;

use super::protocol::{
    FailedKind, Frame, PROTOCOL_VERSION, PageFailed, ProtocolError, Reply, Request, bytes_header,
    message_frame, parse_header,
};

/// The program a worker runs, and its arguments (`horos-ref worker pdf`, or any binary that
/// calls [`serve`](super::serve) on its standard input and output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
}

impl WorkerCommand {
    /// `program` with no argument.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
        }
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }
}

/// The limits each worker runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerLimits {
    /// Its address space (`RLIMIT_AS`), bytes; `None`: none. Default 1 GiB.
    pub memory_bytes: Option<u64>,
    /// Its CPU seconds (`RLIMIT_CPU`): a worker serves one document, so this is per document.
    /// Default 3,600 (an hour: a 10,000-page document at a third of a second a page; the
    /// time per page is the tighter guard against a page that loops).
    pub cpu_seconds: u64,
    /// The wall-clock time of one request (opening the document, one page): past it the
    /// worker is killed ([`FailureReason::Timeout`]). Default 60 s.
    pub page_timeout: Duration,
    /// Whether it runs without network (a user and network namespace of its own, where the
    /// kernel allows an unprivileged process one). Default true.
    pub no_network: bool,
    /// The largest bytes frame read from it (a page's PNG). Default 272 MiB: the PNG of a
    /// page at the renderer's default pixel ceiling (64 Mpx) and more.
    pub max_reply_bytes: u64,
}

impl Default for WorkerLimits {
    fn default() -> Self {
        Self {
            memory_bytes: Some(1 << 30),
            cpu_seconds: 3600,
            page_timeout: Duration::from_secs(60),
            no_network: true,
            max_reply_bytes: 272 << 20,
        }
    }
}

impl WorkerLimits {
    /// The ceiling on a reply's bytes for pages of at most `max_page_pixels` pixels: 4 bytes a
    /// pixel (a PNG of RGB noise is a little above 3) and 16 MiB.
    pub fn reply_ceiling(max_page_pixels: u64) -> u64 {
        max_page_pixels.saturating_mul(4).saturating_add(16 << 20)
    }
}

/// Why a call to a worker failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The document's own failure (it cannot be opened, a page of it cannot be rendered): the
    /// worker goes on, the document fails.
    #[error("{0}")]
    Document(String),
    /// The image's own failure (not an image, too many pixels).
    #[error("{0}")]
    Image(String),
    /// The worker broke on this request: it died, was killed, passed a limit, did not answer in
    /// time, or spoke out of protocol. It is gone; `reason` says which, and is the failure of
    /// what it was reading.
    #[error("{reason}: the PDF worker {what}")]
    Broken {
        /// [`FailureReason::ResourceLimit`], [`FailureReason::Timeout`] or
        /// [`FailureReason::Crashed`].
        reason: FailureReason,
        /// What happened, in words (its exit, the tail of its error output).
        what: String,
        /// The protocol's error, when it spoke out of protocol.
        #[source]
        cause: Option<ProtocolError>,
    },
    /// The worker could not be started.
    #[error("the PDF worker could not be started ({program}): {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl WorkerError {
    /// The typed reason of a broken worker, `None` for another failure.
    pub fn reason(&self) -> Option<FailureReason> {
        match self {
            WorkerError::Broken { reason, .. } => Some(*reason),
            _ => None,
        }
    }
}

/// A page as a worker read it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerPage {
    /// Page number, from 1.
    pub page_no: u32,
    /// The document's pages.
    pub page_count: u32,
    /// Its size in pixels at the document's dpi.
    pub size: (u32, u32),
    /// Its PNG (empty: not rasterized, or failed).
    pub png: Vec<u8>,
    /// Its text layer, when read.
    pub text_layer: Option<TextLayer>,
    /// Why it failed alone, when it did.
    pub failure: Option<PageFailed>,
}

/// An image a worker decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedImage {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The image as an RGB PNG.
    pub png: Vec<u8>,
}

/// The most bytes of a worker's error output kept (its last ones), to tell why it died.
const STDERR_TAIL: usize = 8 << 10;

/// One worker process.
#[derive(Debug)]
pub struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<Vec<u8>>>,
    limits: WorkerLimits,
    network: Option<bool>,
    /// Set once it broke: it answers nothing more.
    broken: bool,
}

impl Worker {
    /// Starts `command` under `limits` and reads its hello (within the time of a page).
    pub async fn spawn(command: &WorkerCommand, limits: WorkerLimits) -> Result<Self, WorkerError> {
        let mut cmd = std::process::Command::new(&command.program);
        cmd.args(&command.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        ChildLimits {
            memory_bytes: limits.memory_bytes,
            cpu_seconds: Some(limits.cpu_seconds),
            no_network: limits.no_network,
        }
        .apply(&mut cmd);
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let spawn_error = |source| WorkerError::Spawn {
            program: command.program.display().to_string(),
            source,
        };
        let mut child = cmd.spawn().map_err(spawn_error)?;
        let missing = || spawn_error(std::io::Error::other("a pipe is missing"));
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        if let Some(pipe) = child.stderr.take() {
            tokio::spawn(keep_tail(pipe, stderr.clone()));
        }
        let mut worker = Worker {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            stderr,
            limits,
            network: None,
            broken: false,
        };
        match worker.exchange(None).await? {
            (
                Reply::Hello {
                    protocol: PROTOCOL_VERSION,
                    network,
                },
                _,
            ) => {
                worker.network = network;
                Ok(worker)
            }
            (other, _) => Err(worker
                .broke(ProtocolError::Unexpected(format!(
                    "{other:?} where the hello of protocol {PROTOCOL_VERSION} was due"
                )))
                .await),
        }
    }

    /// Whether the worker sees a network interface besides the loopback, as it said in its
    /// hello (`None`: it could not tell).
    pub fn network(&self) -> Option<bool> {
        self.network
    }

    /// Whether it broke (it answers nothing more).
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Its process id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Ends the worker and reaps it (it keeps nothing to be flushed: it is killed). Dropping
    /// it kills it too, and the runtime reaps it later.
    pub async fn end(&mut self) {
        self.broken = true;
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Opens the PDF `data` with `config`: its page count.
    pub async fn open(&mut self, data: &[u8], config: &RenderConfig) -> Result<u32, WorkerError> {
        match self
            .call(&Request::Open { config: *config }, Some(data))
            .await?
        {
            (Reply::Opened { pages }, _) => Ok(pages),
            other => Err(self.unexpected(other).await),
        }
    }

    /// Renders page `page` (from 1) of the open document.
    pub async fn render_page(&mut self, page: u32) -> Result<WorkerPage, WorkerError> {
        self.page(Request::RenderPage { page }).await
    }

    /// Reads page `page`'s text layer only.
    pub async fn text_layer(&mut self, page: u32) -> Result<WorkerPage, WorkerError> {
        self.page(Request::TextLayer { page }).await
    }

    async fn page(&mut self, request: Request) -> Result<WorkerPage, WorkerError> {
        match self.call(&request, None).await? {
            (Reply::Page { page }, png) => Ok(WorkerPage {
                page_no: page.page_no,
                page_count: page.page_count,
                size: (page.width, page.height),
                png: png.unwrap_or_default(),
                text_layer: page.text_layer,
                failure: page.failure,
            }),
            other => Err(self.unexpected(other).await),
        }
    }

    /// Decodes `image` if it declares at most `max_pixels` pixels: it as an RGB PNG.
    pub async fn decode_image(
        &mut self,
        image: &[u8],
        max_pixels: u64,
    ) -> Result<DecodedImage, WorkerError> {
        match self
            .call(&Request::DecodeImage { max_pixels }, Some(image))
            .await?
        {
            (Reply::Image { width, height }, Some(png)) => Ok(DecodedImage { width, height, png }),
            other => Err(self.unexpected(other).await),
        }
    }

    /// A reply that answers another request: the worker is out of protocol.
    async fn unexpected(&mut self, (reply, _): (Reply, Option<Vec<u8>>)) -> WorkerError {
        self.broke(ProtocolError::Unexpected(format!("{reply:?}")))
            .await
    }

    /// Sends `request` (and its bytes) and reads its reply; a [`Reply::Failed`] is the
    /// input's error.
    async fn call(
        &mut self,
        request: &Request,
        bytes: Option<&[u8]>,
    ) -> Result<(Reply, Option<Vec<u8>>), WorkerError> {
        let encoding = |e| WorkerError::Broken {
            reason: FailureReason::Crashed,
            what: "request could not be encoded".into(),
            cause: Some(e),
        };
        let outgoing = Outgoing {
            message: message_frame(request).map_err(encoding)?,
            bytes: match bytes {
                Some(bytes) => Some((bytes_header(bytes.len()).map_err(encoding)?, bytes)),
                None => None,
            },
        };
        match self.exchange(Some(outgoing)).await? {
            (Reply::Failed { kind, message }, _) => Err(match kind {
                FailedKind::Image => WorkerError::Image(message),
                _ => WorkerError::Document(message),
            }),
            answer => Ok(answer),
        }
    }

    /// Writes the frames of a request (none: reads the hello), then reads one reply and the
    /// bytes that follow it, all within the time of a page.
    async fn exchange(
        &mut self,
        request: Option<Outgoing<'_>>,
    ) -> Result<(Reply, Option<Vec<u8>>), WorkerError> {
        if self.broken {
            return Err(WorkerError::Broken {
                reason: FailureReason::Crashed,
                what: "broke on an earlier request".into(),
                cause: None,
            });
        }
        let limit = self.limits.max_reply_bytes;
        let stdin = &mut self.stdin;
        let stdout = &mut self.stdout;
        let talk = async move {
            if let Some(outgoing) = request {
                stdin.write_all(&outgoing.message).await?;
                if let Some((header, bytes)) = outgoing.bytes {
                    stdin.write_all(&header).await?;
                    stdin.write_all(bytes).await?;
                }
                stdin.flush().await?;
            }
            let reply: Reply = read_frame(stdout, limit)
                .await?
                .ok_or(ProtocolError::Closed)?
                .message()?;
            let bytes = if reply.has_bytes() {
                Some(
                    read_frame(stdout, limit)
                        .await?
                        .ok_or(ProtocolError::Closed)?
                        .bytes()?,
                )
            } else {
                None
            };
            Ok::<_, ProtocolError>((reply, bytes))
        };
        match tokio::time::timeout(self.limits.page_timeout, talk).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(self.broke(e).await),
            Err(_) => {
                self.broken = true;
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                Err(WorkerError::Broken {
                    reason: FailureReason::Timeout,
                    what: format!(
                        "did not answer within {} s and was killed",
                        self.limits.page_timeout.as_secs_f64()
                    ),
                    cause: None,
                })
            }
        }
    }

    /// The worker broke with `cause`: it is killed if it still runs, reaped, and its end read
    /// (its exit, its signal, the last of its error output) into the typed reason.
    async fn broke(&mut self, cause: ProtocolError) -> WorkerError {
        self.broken = true;
        // A worker that died closed its pipes first: give it a moment to be reaped as it ended.
        let ended = match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => None,
        };
        let status = match ended {
            Some(status) => status,
            None => {
                // Alive and out of protocol (garbage, an answer past the ceiling): killed.
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                return WorkerError::Broken {
                    reason: FailureReason::Crashed,
                    what: format!("spoke out of protocol and was killed ({cause})"),
                    cause: Some(cause),
                };
            }
        };
        let tail = self
            .stderr
            .lock()
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .unwrap_or_default();
        let memory = tail.lines().find(|l| l.contains("memory allocation of"));
        let last = memory.or_else(|| tail.lines().rev().find(|l| !l.trim().is_empty()));
        let reason =
            if killed_by_cpu_limit(&status) || memory.is_some() || signal(&status) == Some(9) {
                // The CPU limit (SIGXCPU, then SIGKILL at the hard limit), an allocation refused
                // under RLIMIT_AS (Rust's handler prints it and aborts), or the kernel's OOM kill.
                FailureReason::ResourceLimit
            } else {
                FailureReason::Crashed
            };
        let what = match (reason, last) {
            (FailureReason::ResourceLimit, Some(line)) => {
                format!("passed a limit ({status}: {})", line.trim())
            }
            (FailureReason::ResourceLimit, None) => format!("passed a limit ({status})"),
            (_, Some(line)) => format!("died ({status}: {})", line.trim()),
            (_, None) => format!("died ({status})"),
        };
        WorkerError::Broken {
            reason,
            what,
            cause: Some(cause),
        }
    }
}

/// A request's frames: its message, and its bytes frame's header and body.
struct Outgoing<'a> {
    message: Vec<u8>,
    bytes: Option<([u8; 5], &'a [u8])>,
}

/// Keeps the last [`STDERR_TAIL`] bytes of a worker's error output in `tail`.
async fn keep_tail(mut pipe: impl AsyncRead + Unpin, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if let Ok(mut t) = tail.lock() {
            t.extend_from_slice(&buf[..n]);
            let excess = t.len().saturating_sub(STDERR_TAIL);
            t.drain(..excess);
        }
    }
}

/// Reads one frame whose body is at most `limit` bytes: `None` when the pipe closed before its
/// first byte. The body is read as it arrives: nothing is allocated for bytes that do not come.
async fn read_frame(
    input: &mut (impl AsyncRead + Unpin),
    limit: u64,
) -> Result<Option<Frame>, ProtocolError> {
    let mut head = [0u8; 5];
    let mut got = 0;
    while got < head.len() {
        match input.read(&mut head[got..]).await? {
            0 if got == 0 => return Ok(None),
            0 => {
                return Err(ProtocolError::Truncated {
                    expected: 5,
                    got: got as u64,
                });
            }
            n => got += n,
        }
    }
    let (tag, len) = parse_header(head, limit)?;
    let mut body = Vec::with_capacity(len.min(1 << 20) as usize);
    let read = (&mut *input).take(len).read_to_end(&mut body).await? as u64;
    if read < len {
        return Err(ProtocolError::Truncated {
            expected: len + 5,
            got: read + 5,
        });
    }
    Ok(Some(Frame::from_parts(tag, body)))
}
