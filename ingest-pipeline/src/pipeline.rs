//! The staged pipeline: one squeueha queue per stage, a pool of workers per stage whose size can
//! change while running, retries after a delay, dead letters with the reason.
//!
//! Stages (queues) and default workers:
//!
//! | stage | workers | job |
//! |---|---|---|
//! | `pdf_to_images` | 2 | render a document page by page; each page's PNG is written and its read jobs enqueued as soon as it is rendered |
//! | `image_to_ocr` | 8 | read a page, or one tile of a large page, with the [`VisionReader`]; the last tile of a page completes the page's fan-in |
//! | `ocr_to_database` | 4 | join the tiles' text without the overlap's duplicates, store text (FTS5), tables, figures and chunks |
//! | `embed_text` | 2 | embed the page's chunks with the [`TextEmbedder`] |
//! | `embed_visual` | 2 | embed the page image with the [`VisualEmbedder`] (many vectors) |
//!
//! Every stage records its result, acks its job and enqueues the next stage in one SQLite
//! transaction (the queue and the store share one database file), so a pipeline killed at any
//! point resumes where it stopped: unacked jobs reappear after their visibility timeout, and
//! rendering restarts after the last page recorded. Jobs finishing together share one commit
//! (the queue's group commit, on in [`PipelineConfig::new`]): a job is answered only once the
//! commit holding its transaction succeeded, and a failure in a group re-runs each member alone.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fanin::{
    Completion, FanIn, FanInConfig, FragmentOutcome, FragmentResult, ParentSpec, ParentState,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use squeueha::{AsyncQueue, DeadJob, Job, Nacked, NewJob, Queue, QueueTx};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::chunk::{ChunkConfig, chunk_text};
use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::render::{RenderConfig, RenderedPage, encode_png, render_pages};
use crate::store::{self, CostModel, DocStatus, Document, EmbedStep, PageImage, Report};
use crate::tiling::{Tile, TileConfig, cut_tiles, merge_tile_texts, merge_tile_words, tile_grid};
use crate::vision::{Reading, VisionReader};

/// A pipeline stage; each has its own queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Render pages to images.
    PdfToImages,
    /// Read images (OCR or vision model).
    ImageToOcr,
    /// Store text, tables and chunks.
    OcrToDatabase,
    /// Embed text chunks.
    EmbedText,
    /// Embed page images.
    EmbedVisual,
}

impl Stage {
    /// Every stage in pipeline order.
    pub const ALL: [Stage; 5] = [
        Stage::PdfToImages,
        Stage::ImageToOcr,
        Stage::OcrToDatabase,
        Stage::EmbedText,
        Stage::EmbedVisual,
    ];

    /// The queue name.
    pub fn queue(self) -> &'static str {
        match self {
            Stage::PdfToImages => "pdf_to_images",
            Stage::ImageToOcr => "image_to_ocr",
            Stage::OcrToDatabase => "ocr_to_database",
            Stage::EmbedText => "embed_text",
            Stage::EmbedVisual => "embed_visual",
        }
    }

    /// Default number of workers (2, 8, 4, 2, 2).
    pub fn default_workers(self) -> usize {
        match self {
            Stage::PdfToImages => 2,
            Stage::ImageToOcr => 8,
            Stage::OcrToDatabase => 4,
            Stage::EmbedText | Stage::EmbedVisual => 2,
        }
    }

    fn index(self) -> usize {
        match self {
            Stage::PdfToImages => 0,
            Stage::ImageToOcr => 1,
            Stage::OcrToDatabase => 2,
            Stage::EmbedText => 3,
            Stage::EmbedVisual => 4,
        }
    }
}

/// Pipeline settings.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// The SQLite file holding queues and store.
    pub db_path: PathBuf,
    /// Where page images are written.
    pub work_dir: PathBuf,
    /// Rendering (dpi, page-size guard).
    pub render: RenderConfig,
    /// Tiling of large pages.
    pub tiles: TileConfig,
    /// Chunking for text embeddings.
    pub chunks: ChunkConfig,
    /// Delay before a failed job is tried again. Default 30 s.
    pub retry_delay: Duration,
    /// Attempts per job before its dead letter. Default 3.
    pub max_attempts: u32,
    /// How long a claimed job stays invisible to other workers. Default 10 min.
    pub visibility: Duration,
    /// Workers per stage at start, in [`Stage::ALL`] order.
    pub workers: [usize; 5],
    /// Rendered pages waiting to be written, per rendering job (memory bound). Default 2.
    pub page_buffer: usize,
    /// After a claim that took fewer jobs than the stage had free workers, wait this long before
    /// claiming again; and when a worker frees while others are busy, wait up to this long for
    /// them before claiming: so that busy stages claim several jobs per transaction. Zero turns
    /// both off. Default 2 ms.
    pub claim_linger: Duration,
    /// Texts per embedding request. Default 32.
    pub embed_batch: usize,
    /// Cost assumptions of the report.
    pub cost: CostModel,
    /// Queue settings. Default: squeueha's, with group commit on (every job ends with one write
    /// transaction; concurrent jobs share its commit).
    pub queue: squeueha::Config,
}

impl PipelineConfig {
    /// Defaults with the database and work directory under `dir`.
    pub fn new(dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        Self {
            db_path: dir.join("ingest.db"),
            work_dir: dir.join("pages"),
            render: RenderConfig::default(),
            tiles: TileConfig::default(),
            chunks: ChunkConfig::default(),
            retry_delay: Duration::from_secs(30),
            max_attempts: 3,
            visibility: Duration::from_secs(600),
            workers: Stage::ALL.map(Stage::default_workers),
            page_buffer: 2,
            embed_batch: 32,
            claim_linger: Duration::from_millis(2),
            cost: CostModel::default(),
            queue: squeueha::Config {
                group_commit: true,
                ..squeueha::Config::default()
            },
        }
    }
}

/// Pipeline errors (of the API calls; job failures end in dead letters instead).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Queue failure.
    #[error("queue: {0}")]
    Queue(#[from] squeueha::Error),
    /// Fan-in failure.
    #[error("fan-in: {0}")]
    FanIn(#[from] fanin::Error),
    /// Store failure.
    #[error("store: {0}")]
    Store(#[from] store::StoreError),
    /// I/O failure.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A blocking task failed.
    #[error("task: {0}")]
    Task(String),
    /// A wait timed out.
    #[error("timed out waiting for document {0}")]
    Timeout(i64),
}

impl From<rusqlite::Error> for PipelineError {
    fn from(e: rusqlite::Error) -> Self {
        PipelineError::Store(store::StoreError::Sqlite(e))
    }
}

impl From<serde_json::Error> for PipelineError {
    fn from(e: serde_json::Error) -> Self {
        PipelineError::Store(store::StoreError::Json(e))
    }
}

/// What [`Pipeline::submit`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Submission {
    /// A new document: its ingestion was queued.
    Queued(Document),
    /// The same bytes were submitted before: nothing was done.
    Known(Document),
}

impl Submission {
    /// The document either way.
    pub fn document(&self) -> &Document {
        match self {
            Submission::Queued(d) | Submission::Known(d) => d,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct RenderJob {
    doc_id: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct ReadJob {
    doc_id: i64,
    page_no: u32,
    tile: Option<Tile>,
}

#[derive(Debug, Serialize, Deserialize)]
struct PageJob {
    doc_id: i64,
    page_no: u32,
}

/// Why a job failed: `Retry` comes back after the retry delay (until its attempts are used),
/// `Permanent` goes to the dead letters at once (the document's own fault).
#[derive(Debug)]
enum JobError {
    Retry(String),
    Permanent(String),
}

impl From<PipelineError> for JobError {
    fn from(e: PipelineError) -> Self {
        JobError::Retry(e.to_string())
    }
}

struct Inner<R, T, V> {
    cfg: PipelineConfig,
    queue: Queue,
    aq: AsyncQueue,
    /// Group commit of the jobs' transactions.
    /// Notified when a document of this process ends (done or failed), for [`Pipeline::wait_for`].
    finished: Notify,
    fan: FanIn,
    reader: R,
    text: T,
    visual: V,
    targets: [watch::Sender<usize>; 5],
    readers: std::sync::Mutex<Vec<rusqlite::Connection>>,
    active: [AtomicUsize; 5],
    stop: AtomicBool,
}

/// The pipeline: submit documents, run workers, search the results.
pub struct Pipeline<R, T, V> {
    inner: Arc<Inner<R, T, V>>,
}

impl<R, T, V> Clone for Pipeline<R, T, V> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

/// Where tile `index` of the page image at `page` is written.
fn tile_path(page: &Path, index: u32) -> PathBuf {
    let stem = page
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    page.with_file_name(format!("{stem}-tile-{index:03}.png"))
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

async fn blocking<X: Send + 'static>(
    f: impl FnOnce() -> Result<X, PipelineError> + Send + 'static,
) -> Result<X, PipelineError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| PipelineError::Task(e.to_string()))?
}

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    /// Opens the database (creating queues' and store's tables) with a reader and embedders.
    pub fn open(cfg: PipelineConfig, reader: R, text: T, visual: V) -> Result<Self, PipelineError> {
        std::fs::create_dir_all(&cfg.work_dir)?;
        if let Some(parent) = cfg.db_path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let queue = Queue::open_with(&cfg.db_path, cfg.queue.clone())?;
        queue.transaction(|tx: &mut QueueTx<'_>| -> Result<(), PipelineError> {
            store::migrate(tx.connection())?;
            Ok(())
        })?;
        let fan = FanIn::open(queue.clone(), FanInConfig::default())?;
        let targets = cfg.workers.map(|n| watch::channel(n).0);
        Ok(Self {
            inner: Arc::new(Inner {
                aq: AsyncQueue::new(queue.clone()),
                finished: Notify::new(),
                fan,
                queue,
                reader,
                text,
                visual,
                targets,
                readers: std::sync::Mutex::new(Vec::new()),
                active: Default::default(),
                stop: AtomicBool::new(false),
                cfg,
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PipelineConfig {
        &self.inner.cfg
    }

    /// The fan-in of tiles into pages (progress, results of tiled pages).
    pub fn fan_in(&self) -> &FanIn {
        &self.inner.fan
    }

    /// The queue handle (stats, dead letters).
    pub fn queue(&self) -> &Queue {
        &self.inner.queue
    }

    /// Opens a read connection on the database (for searches and reports).
    pub fn connection(&self) -> Result<rusqlite::Connection, PipelineError> {
        let conn = rusqlite::Connection::open(&self.inner.cfg.db_path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        Ok(conn)
    }

    /// Runs `f` on a pooled read connection, on the blocking pool.
    async fn read<X: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> Result<X, PipelineError> + Send + 'static,
    ) -> Result<X, PipelineError> {
        let this = self.clone();
        blocking(move || {
            let pooled = this.inner.readers.lock().ok().and_then(|mut v| v.pop());
            let conn = match pooled {
                Some(c) => c,
                None => this.connection()?,
            };
            let out = f(&conn);
            if let Ok(mut v) = this.inner.readers.lock()
                && v.len() < 16
            {
                v.push(conn);
            }
            out
        })
        .await
    }

    /// Submits a PDF. A document whose bytes (SHA-256) are already known is not processed again.
    pub async fn submit(&self, path: impl AsRef<Path>) -> Result<Submission, PipelineError> {
        let path = path.as_ref().to_path_buf();
        let queue = self.inner.queue.clone();
        let attempts = self.inner.cfg.max_attempts;
        blocking(move || {
            let sha = sha256_file(&path)?;
            let title = path
                .file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default();
            let path_s = path.to_string_lossy().to_string();
            queue.transaction(
                |tx: &mut QueueTx<'_>| -> Result<Submission, PipelineError> {
                    let (doc, new) =
                        store::insert_document(tx.connection(), &sha, &title, &path_s)?;
                    if !new {
                        return Ok(Submission::Known(doc));
                    }
                    tx.enqueue(
                        Stage::PdfToImages.queue(),
                        NewJob::json(&RenderJob { doc_id: doc.id })?
                            .max_attempts(attempts)
                            .dedup_key(format!("render:{}", doc.id)),
                    )?;
                    Ok(Submission::Queued(doc))
                },
            )
        })
        .await
    }

    /// Changes the number of workers of a stage while running.
    pub fn set_workers(&self, stage: Stage, n: usize) {
        self.inner.targets[stage.index()].send_replace(n);
    }

    /// Workers of a stage currently running.
    pub fn active_workers(&self, stage: Stage) -> usize {
        self.inner.active[stage.index()].load(Ordering::SeqCst)
    }

    /// Starts the workers on the current tokio runtime; they run until [`Running::shutdown`].
    pub fn start(&self) -> Running {
        self.inner.stop.store(false, Ordering::SeqCst);
        let mut set = JoinSet::new();
        for stage in Stage::ALL {
            let this = self.clone();
            set.spawn(async move { this.supervise(stage).await });
        }
        Running {
            stop: self.inner.clone(),
            set,
        }
    }

    /// One claimer per stage: it claims as many jobs as the stage has free workers, in one
    /// transaction, and runs each on its own task; the number of workers is a semaphore whose
    /// size follows [`Pipeline::set_workers`].
    async fn supervise(self, stage: Stage) {
        let inner = &self.inner;
        let mut rx = inner.targets[stage.index()].subscribe();
        let sem = Arc::new(tokio::sync::Semaphore::new(0));
        let total = &inner.active[stage.index()];
        let mut tasks = JoinSet::new();
        loop {
            while tasks.try_join_next().is_some() {}
            if inner.stop.load(Ordering::SeqCst) {
                break;
            }
            let target = *rx.borrow_and_update();
            let have = total.load(Ordering::SeqCst);
            if target > have {
                sem.add_permits(target - have);
                total.store(target, Ordering::SeqCst);
            } else if target < have {
                // Only idle permits can go now; busy ones go when their jobs finish.
                let gone = sem.forget_permits(have - target);
                total.store(have - gone, Ordering::SeqCst);
            }
            let mut free = sem.available_permits();
            let wait = Duration::from_millis(300);
            let all = total.load(Ordering::SeqCst);
            if free == 0 || target < all {
                let sem2 = sem.clone();
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { break },
                    permit = sem2.acquire_owned() => drop(permit),
                    () = tokio::time::sleep(wait) => {}
                }
                continue;
            }
            let linger = inner.cfg.claim_linger;
            if free < all && !linger.is_zero() {
                // Other workers are still busy: give them up to `claim_linger` to finish, so that
                // a stage of short jobs claims a batch per transaction instead of one job each
                // time a worker frees (a claim costs about as much as a short job).
                let n = u32::try_from(all).unwrap_or(u32::MAX);
                if let Ok(Ok(permits)) =
                    tokio::time::timeout(linger, sem.clone().acquire_many_owned(n)).await
                {
                    drop(permits);
                }
                free = sem.available_permits();
            }
            let jobs = tokio::select! {
                jobs = inner.aq.poll_batch_wait(stage.queue(), free, inner.cfg.visibility, wait) => jobs,
                changed = rx.changed() => { if changed.is_err() { break } continue }
            };
            let jobs = match jobs {
                Ok(jobs) => jobs,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let fewer = !jobs.is_empty() && jobs.len() < free && !linger.is_zero();
            for job in jobs {
                let Ok(permit) = sem.clone().try_acquire_owned() else {
                    // Cannot happen (we claimed at most `free`); give the job back at once.
                    let _ = inner.aq.release(job.lease, Duration::ZERO).await;
                    continue;
                };
                let this = self.clone();
                tasks.spawn(async move {
                    this.run_job(stage, job).await;
                    drop(permit);
                });
            }
            if fewer {
                // Let more jobs arrive so that the next claim takes several in one transaction.
                tokio::time::sleep(linger).await;
            }
        }
        while tasks.join_next().await.is_some() {}
    }

    async fn run_job(&self, stage: Stage, job: Job) {
        let started = Instant::now();
        // Heartbeat: a long job (a long document's rendering) keeps its lease.
        let aq = self.inner.aq.clone();
        let visibility = self.inner.cfg.visibility;
        let lease = job.lease;
        let heartbeat = tokio::spawn(async move {
            loop {
                tokio::time::sleep(visibility / 3).await;
                if aq.extend(lease, visibility).await.is_err() {
                    return;
                }
            }
        });
        let result = self.dispatch(stage, &job, started).await;
        heartbeat.abort();
        let Err(err) = result else { return };
        self.fail_job(stage, &job, err).await;
    }

    fn job_doc_id(job: &Job) -> Option<i64> {
        if let Ok(c) = serde_json::from_slice::<Completion>(&job.payload) {
            return serde_json::from_value::<PageJob>(c.data)
                .ok()
                .map(|p| p.doc_id);
        }
        serde_json::from_slice::<PageJob>(&job.payload)
            .map(|p| p.doc_id)
            .or_else(|_| serde_json::from_slice::<RenderJob>(&job.payload).map(|r| r.doc_id))
            .ok()
    }

    /// Whether a job is a tile: a fragment of its page's fan-in.
    fn is_tile_job(stage: Stage, job: &Job) -> bool {
        stage == Stage::ImageToOcr
            && serde_json::from_slice::<ReadJob>(&job.payload).is_ok_and(|r| r.tile.is_some())
    }

    async fn drop_job(&self, job: &Job) -> Result<(), JobError> {
        let lease = job.lease;
        self.tx(move |tx| Ok(tx.ack(lease)?)).await?;
        Ok(())
    }

    async fn dispatch(&self, stage: Stage, job: &Job, started: Instant) -> Result<(), JobError> {
        match stage {
            Stage::PdfToImages => self.render_job(job, started).await,
            Stage::ImageToOcr => self.read_job(job, started).await,
            Stage::OcrToDatabase => self.store_job(job, started).await,
            Stage::EmbedText => self.embed_text_job(job, started).await,
            Stage::EmbedVisual => self.embed_visual_job(job, started).await,
        }
    }

    async fn fail_job(&self, stage: Stage, job: &Job, err: JobError) {
        let doc_id = Self::job_doc_id(job);
        let queue = self.inner.queue.clone();
        let delay = self.inner.cfg.retry_delay;
        let lease = job.lease;
        if Self::is_tile_job(stage, job) {
            let last = matches!(err, JobError::Permanent(_)) || job.is_last_attempt();
            if last {
                // The fragment fails for good: fan-in buries it and fails the page's parent
                // (fail fast), whose next stage then marks the document failed.
                let fan = self.inner.fan.clone();
                let job = job.clone();
                let reason = match &err {
                    JobError::Permanent(r) | JobError::Retry(r) => r.clone(),
                };
                let _ = blocking(move || {
                    fan.fail(&job, &reason)?;
                    if let Some(doc_id) = doc_id {
                        queue.transaction(|tx: &mut QueueTx<'_>| -> Result<(), PipelineError> {
                            let msg = format!("{}: {reason}", stage.queue());
                            store::fail_document(tx.connection(), doc_id, &msg)?;
                            Ok(())
                        })?;
                    }
                    Ok(())
                })
                .await;
                self.inner.finished.notify_waiters();
                return;
            }
        }
        // A failure to record the failure leaves the job to its lease expiry: it comes back.
        let _ = blocking(move || {
            queue.transaction(|tx: &mut QueueTx<'_>| -> Result<(), PipelineError> {
                let (reason, dead) = match &err {
                    JobError::Permanent(reason) => {
                        tx.bury(lease, reason)?;
                        (reason.clone(), true)
                    }
                    JobError::Retry(reason) => (
                        reason.clone(),
                        tx.nack(lease, reason, Some(delay))? == Nacked::Dead,
                    ),
                };
                if dead && let Some(doc_id) = doc_id {
                    let msg = format!("{}: {reason}", stage.queue());
                    store::fail_document(tx.connection(), doc_id, &msg)?;
                }
                Ok(())
            })
        })
        .await;
        self.inner.finished.notify_waiters();
    }

    /// Wakes [`Pipeline::wait_for`] when a job's commit ended its document.
    fn finished(&self, ended: bool) {
        if ended {
            self.inner.finished.notify_waiters();
        }
    }

    async fn doc(&self, doc_id: i64) -> Result<Document, JobError> {
        self.read(move |c| Ok(store::document(c, doc_id)?))
            .await?
            .ok_or_else(|| JobError::Permanent(format!("document {doc_id} not found")))
    }

    /// Runs `f` in a queue transaction on the blocking pool; with the queue's group commit (on in
    /// [`PipelineConfig::new`]) concurrent jobs share commits. `f` may run more than once, always
    /// against a state without its earlier runs.
    async fn tx<X: Send + 'static>(
        &self,
        f: impl FnMut(&mut QueueTx<'_>) -> Result<X, PipelineError> + Send + 'static,
    ) -> Result<X, PipelineError> {
        let queue = self.inner.queue.clone();
        blocking(move || queue.transaction(f)).await
    }

    async fn render_job(&self, job: &Job, started: Instant) -> Result<(), JobError> {
        let rj: RenderJob = job.json().map_err(|e| JobError::Permanent(e.to_string()))?;
        let doc = self.doc(rj.doc_id).await?;
        if doc.status != DocStatus::Pending {
            let lease = job.lease;
            self.tx(move |tx| Ok(tx.ack(lease)?)).await?;
            return Ok(());
        }
        let path = PathBuf::from(&doc.path);
        // Refuse an oversized file before reading it into memory.
        let limit = self.inner.cfg.render.max_file_bytes;
        if let Ok(meta) = tokio::fs::metadata(&path).await
            && meta.len() > limit
        {
            let e = crate::render::RenderError::FileTooLarge {
                size: meta.len(),
                limit,
            };
            return Err(JobError::Permanent(format!("{}: {e}", doc.path)));
        }
        let data = match tokio::fs::read(&path).await {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(JobError::Permanent(format!("{}: file not found", doc.path)));
            }
            Err(e) => return Err(JobError::Retry(e.to_string())),
        };
        let sha: String = Sha256::digest(&data)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if sha != doc.sha256 {
            return Err(JobError::Permanent(format!(
                "{}: file changed since submission",
                doc.path
            )));
        }
        let doc_id = doc.id;
        let first = self
            .read(move |c| Ok(store::last_rendered_page(c, doc_id)?))
            .await?
            + 1;
        let (tx_pages, mut rx_pages) =
            tokio::sync::mpsc::channel::<RenderedPage>(self.inner.cfg.page_buffer.max(1));
        let render_cfg = self.inner.cfg.render;
        let renderer = tokio::task::spawn_blocking(move || {
            render_pages(data, &render_cfg, first, |page| {
                if tx_pages.blocking_send(page).is_err() {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
        });
        let dir = self.inner.cfg.work_dir.join(&doc.sha256);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| JobError::Retry(e.to_string()))?;
        let mut page_error: Option<JobError> = None;
        while let Some(page) = rx_pages.recv().await {
            match self.save_page(doc_id, &dir, page).await {
                Ok(true) => {}
                // The document failed meanwhile (another stage's dead letter): stop rendering.
                Ok(false) => break,
                Err(e) => {
                    page_error = Some(e);
                    break;
                }
            }
        }
        drop(rx_pages);
        let rendered = renderer.await.map_err(|e| JobError::Retry(e.to_string()))?;
        if let Some(e) = page_error {
            return Err(e);
        }
        let page_count = rendered.map_err(|e| JobError::Permanent(format!("{}: {e}", doc.path)))?;
        let lease = job.lease;
        let secs = started.elapsed().as_secs_f64();
        let finished = self
            .tx(move |tx| {
                let c = tx.connection();
                store::set_page_count(c, doc_id, page_count)?;
                let finished = store::finish_rendering(c, doc_id)?;
                store::add_stage_time(c, doc_id, Stage::PdfToImages.queue(), secs, 0.0)?;
                tx.ack(lease)?;
                Ok(finished)
            })
            .await?;
        self.finished(finished);
        Ok(())
    }

    /// Writes a page's PNG (and its tiles') and records the page with its read jobs; `false` when
    /// the document has failed meanwhile (nothing recorded: rendering stops).
    async fn save_page(
        &self,
        doc_id: i64,
        dir: &Path,
        page: RenderedPage,
    ) -> Result<bool, JobError> {
        let path = dir.join(format!("page-{:05}.png", page.page_no));
        let tiles_cfg = self.inner.cfg.tiles;
        let write_path = path.clone();
        let (w, h, bytes, tiles) = tokio::task::spawn_blocking(move || -> Result<_, JobError> {
            let png = encode_png(&page.image).map_err(|e| JobError::Permanent(e.to_string()))?;
            let tmp = write_path.with_extension("png.tmp");
            std::fs::write(&tmp, &png).map_err(|e| JobError::Retry(e.to_string()))?;
            std::fs::rename(&tmp, &write_path).map_err(|e| JobError::Retry(e.to_string()))?;
            let (w, h) = page.image.dimensions();
            let tiles = if png.len() as u64 > tiles_cfg.threshold_bytes {
                tile_grid(w, h, &tiles_cfg)
            } else {
                Vec::new()
            };
            // Tiles are cut here, once, from the page still in memory; each read job reads its own.
            let encoded =
                cut_tiles(&page.image, &tiles).map_err(|e| JobError::Permanent(e.to_string()))?;
            for (tile, bytes) in tiles.iter().zip(encoded) {
                let path = tile_path(&write_path, tile.index);
                let tmp = path.with_extension("png.tmp");
                std::fs::write(&tmp, &bytes).map_err(|e| JobError::Retry(e.to_string()))?;
                std::fs::rename(&tmp, &path).map_err(|e| JobError::Retry(e.to_string()))?;
            }
            Ok((w, h, png.len() as u64, tiles))
        })
        .await
        .map_err(|e| JobError::Retry(e.to_string()))??;
        let page_no = page.page_no;
        let page_count = page.page_count;
        let attempts = self.inner.cfg.max_attempts;
        let path_s = path.to_string_lossy().to_string();
        let fan = self.inner.fan.clone();
        self.tx(move |tx| {
            let c = tx.connection();
            // Checked here rather than before each page: one transaction per page, no extra read.
            if store::document(c, doc_id)?.is_some_and(|d| d.status == DocStatus::Failed) {
                return Ok(false);
            }
            store::set_page_count(c, doc_id, page_count)?;
            let img = PageImage {
                doc_id,
                page_no,
                width: w,
                height: h,
                image_bytes: bytes,
                image_path: &path_s,
                tiles: tiles.len().max(1) as u32,
            };
            // The page row and its read jobs are created together, once: a rendering resumed
            // after a crash skips recorded pages, and a page rendered twice enqueues nothing.
            if !store::insert_page(c, &img)? {
                return Ok(true);
            }
            if tiles.is_empty() {
                tx.enqueue(
                    Stage::ImageToOcr.queue(),
                    NewJob::json(&ReadJob {
                        doc_id,
                        page_no,
                        tile: None,
                    })?
                    .max_attempts(attempts),
                )?;
                return Ok(true);
            }
            // A tiled page is a fan-in parent: one fragment job per tile; the last tile's
            // report enqueues the page's ocr_to_database job in the same transaction.
            let mut jobs = Vec::with_capacity(tiles.len());
            for &t in &tiles {
                jobs.push(
                    NewJob::json(&ReadJob {
                        doc_id,
                        page_no,
                        tile: Some(t),
                    })?
                    .max_attempts(attempts),
                );
            }
            let spec = ParentSpec::new(
                format!("page {doc_id}:{page_no}"),
                Stage::ImageToOcr.queue(),
            )
            .jobs(jobs)
            .then(
                Stage::OcrToDatabase.queue(),
                serde_json::json!({ "doc_id": doc_id, "page_no": page_no }),
            );
            fan.create_parent_in(tx, &spec)?;
            Ok(true)
        })
        .await
        .map_err(JobError::from)
    }

    /// The PNG of a page, or of one of its tiles, in one blocking step; `None` when the
    /// document has failed meanwhile (its remaining work is dropped).
    async fn load_page(
        &self,
        doc_id: i64,
        page_no: u32,
        tile: Option<u32>,
    ) -> Result<Option<Vec<u8>>, JobError> {
        let loaded = self
            .read(move |c| {
                if store::document(c, doc_id)?.is_some_and(|d| d.status == DocStatus::Failed) {
                    return Ok(None);
                }
                let Some(info) = store::page_info(c, doc_id, page_no)? else {
                    return Ok(Some(Err(format!(
                        "page {page_no} of document {doc_id} not recorded"
                    ))));
                };
                let path = match tile {
                    None => PathBuf::from(&info.image_path),
                    Some(i) => tile_path(Path::new(&info.image_path), i),
                };
                Ok(Some(Ok(std::fs::read(&path).map_err(|e| {
                    PipelineError::Task(format!("{}: {e}", path.display()))
                })?)))
            })
            .await?;
        match loaded {
            None => Ok(None),
            Some(Ok(png)) => Ok(Some(png)),
            Some(Err(msg)) => Err(JobError::Permanent(msg)),
        }
    }

    async fn read_job(&self, job: &Job, started: Instant) -> Result<(), JobError> {
        let rj: ReadJob = job.json().map_err(|e| JobError::Permanent(e.to_string()))?;
        let Some(png) = self
            .load_page(rj.doc_id, rj.page_no, rj.tile.map(|t| t.index))
            .await?
        else {
            return self.drop_job(job).await;
        };
        let reading = self.inner.reader.read(Arc::new(png)).await.map_err(|e| {
            if e.is_retryable() {
                JobError::Retry(e.to_string())
            } else {
                JobError::Permanent(e.to_string())
            }
        })?;
        let secs = started.elapsed().as_secs_f64();
        if rj.tile.is_some() {
            // A tile: fan-in records it and acks its job; the last one enqueues the page's
            // ocr_to_database job, all in one transaction.
            let fan = self.inner.fan.clone();
            let job = job.clone();
            let bytes = serde_json::to_vec(&(rj.tile, &reading))
                .map_err(|e| JobError::Permanent(e.to_string()))?;
            blocking(move || Ok(fan.complete(&job, FragmentResult::Bytes(bytes))?)).await?;
            let infer = reading.inference_seconds;
            self.tx(move |tx| {
                store::add_stage_time(
                    tx.connection(),
                    rj.doc_id,
                    Stage::ImageToOcr.queue(),
                    secs,
                    infer,
                )?;
                Ok(())
            })
            .await?;
            return Ok(());
        }
        let lease = job.lease;
        let attempts = self.inner.cfg.max_attempts;
        self.tx(move |tx| {
            let c = tx.connection();
            if store::record_page_reading(c, rj.doc_id, rj.page_no, &reading)? {
                tx.enqueue(
                    Stage::OcrToDatabase.queue(),
                    NewJob::json(&PageJob {
                        doc_id: rj.doc_id,
                        page_no: rj.page_no,
                    })?
                    .max_attempts(attempts),
                )?;
            }
            store::add_stage_time(
                tx.connection(),
                rj.doc_id,
                Stage::ImageToOcr.queue(),
                secs,
                reading.inference_seconds,
            )?;
            tx.ack(lease)?;
            Ok(())
        })
        .await?;
        Ok(())
    }

    async fn store_job(&self, job: &Job, started: Instant) -> Result<(), JobError> {
        // A tiled page arrives as the fan-in's completion: its tiles' readings are the parent's
        // results, in tile order.
        let (pj, tiles): (PageJob, Option<Vec<(Tile, Reading)>>) =
            match serde_json::from_slice::<Completion>(&job.payload) {
                Ok(c) => {
                    let pj: PageJob = serde_json::from_value(c.data)
                        .map_err(|e| JobError::Permanent(e.to_string()))?;
                    if c.state != ParentState::Completed {
                        let (doc_id, lease) = (pj.doc_id, job.lease);
                        let fan = self.inner.fan.clone();
                        let parent = c.parent_id;
                        let outcomes = blocking(move || Ok(fan.results(parent)?)).await?;
                        let reason = outcomes
                            .iter()
                            .find_map(|o| match o {
                                FragmentOutcome::Failed(e) => Some(e.clone()),
                                _ => None,
                            })
                            .unwrap_or_default();
                        let msg = format!(
                            "{}: page {}: tiles {:?} failed: {reason}",
                            Stage::ImageToOcr.queue(),
                            pj.page_no,
                            c.failed
                        );
                        self.tx(move |tx| {
                            store::fail_document(tx.connection(), doc_id, &msg)?;
                            tx.ack(lease)?;
                            Ok(())
                        })
                        .await?;
                        self.inner.finished.notify_waiters();
                        return Ok(());
                    }
                    let fan = self.inner.fan.clone();
                    let parent = c.parent_id;
                    let results = blocking(move || Ok(fan.results(parent)?)).await?;
                    let mut tiles = Vec::with_capacity(results.len());
                    for r in results {
                        let FragmentOutcome::Done(bytes) = r else {
                            return Err(JobError::Permanent(format!(
                                "tile of page {} not done: {r:?}",
                                pj.page_no
                            )));
                        };
                        let tile: (Option<Tile>, Reading) = serde_json::from_slice(&bytes)
                            .map_err(|e| JobError::Permanent(e.to_string()))?;
                        let (Some(t), reading) = tile else {
                            return Err(JobError::Permanent(format!(
                                "page {}: tile result without its tile",
                                pj.page_no
                            )));
                        };
                        tiles.push((t, reading));
                    }
                    (pj, Some(tiles))
                }
                Err(_) => (
                    job.json().map_err(|e| JobError::Permanent(e.to_string()))?,
                    None,
                ),
            };
        let lease = job.lease;
        let attempts = self.inner.cfg.max_attempts;
        let chunk_cfg = self.inner.cfg.chunks;
        let reader = self.inner.reader.name().to_string();
        self.tx(move |tx| {
            let c = tx.connection();
            if store::document(c, pj.doc_id)?.is_some_and(|d| d.status == DocStatus::Failed) {
                tx.ack(lease)?;
                return Ok(());
            }
            if let Some(tiles) = &tiles {
                // Kept beside the page for the report and for inspection.
                for (tile, reading) in tiles {
                    store::record_tile_reading(c, pj.doc_id, pj.page_no, tile, reading)?;
                }
            }
            let (whole, tiles) = store::page_readings(c, pj.doc_id, pj.page_no)?;
            let reading = join_readings(whole, tiles);
            let chunks = chunk_text(&reading.text, &chunk_cfg);
            store::store_page_text(c, pj.doc_id, pj.page_no, &reading, &reader, &chunks)?;
            for stage in [Stage::EmbedText, Stage::EmbedVisual] {
                tx.enqueue(
                    stage.queue(),
                    NewJob::json(&PageJob {
                        doc_id: pj.doc_id,
                        page_no: pj.page_no,
                    })?
                    .max_attempts(attempts),
                )?;
            }
            let secs = started.elapsed().as_secs_f64();
            store::add_stage_time(
                tx.connection(),
                pj.doc_id,
                Stage::OcrToDatabase.queue(),
                secs,
                0.0,
            )?;
            tx.ack(lease)?;
            Ok(())
        })
        .await?;
        Ok(())
    }

    async fn embed_text_job(&self, job: &Job, started: Instant) -> Result<(), JobError> {
        let pj: PageJob = job.json().map_err(|e| JobError::Permanent(e.to_string()))?;
        let (doc_id, page_no) = (pj.doc_id, pj.page_no);
        let Some(chunks) = self
            .read(move |c| {
                if store::document(c, doc_id)?.is_some_and(|d| d.status == DocStatus::Failed) {
                    return Ok(None);
                }
                Ok(Some(store::page_chunks(c, doc_id, page_no)?))
            })
            .await?
        else {
            return self.drop_job(job).await;
        };
        let mut ids = Vec::with_capacity(chunks.len());
        let mut vectors = Vec::with_capacity(chunks.len());
        let infer = Instant::now();
        for batch in chunks.chunks(self.inner.cfg.embed_batch.max(1)) {
            let texts: Vec<String> = batch.iter().map(|c| c.1.clone()).collect();
            let got = self.inner.text.embed(texts).await.map_err(|e| {
                if e.is_retryable() {
                    JobError::Retry(e.to_string())
                } else {
                    JobError::Permanent(e.to_string())
                }
            })?;
            if got.len() != batch.len() {
                return Err(JobError::Retry(format!(
                    "{} vectors for {} texts",
                    got.len(),
                    batch.len()
                )));
            }
            ids.extend(batch.iter().map(|c| c.0));
            vectors.extend(got);
        }
        let infer_secs = if chunks.is_empty() {
            0.0
        } else {
            infer.elapsed().as_secs_f64()
        };
        let model = self.inner.text.name().to_string();
        let lease = job.lease;
        let secs = started.elapsed().as_secs_f64();
        let finished = self
            .tx(move |tx| {
                let c = tx.connection();
                store::store_chunk_vectors(c, &ids, &vectors, &model)?;
                let finished = store::finish_step(c, pj.doc_id, pj.page_no, EmbedStep::Text)?;
                store::add_stage_time(c, pj.doc_id, Stage::EmbedText.queue(), secs, infer_secs)?;
                tx.ack(lease)?;
                Ok(finished)
            })
            .await?;
        self.finished(finished);
        Ok(())
    }

    async fn embed_visual_job(&self, job: &Job, started: Instant) -> Result<(), JobError> {
        let pj: PageJob = job.json().map_err(|e| JobError::Permanent(e.to_string()))?;
        let Some(png) = self.load_page(pj.doc_id, pj.page_no, None).await? else {
            return self.drop_job(job).await;
        };
        let infer = Instant::now();
        let mv = self
            .inner
            .visual
            .embed_image(Arc::new(png))
            .await
            .map_err(|e| {
                if e.is_retryable() {
                    JobError::Retry(e.to_string())
                } else {
                    JobError::Permanent(e.to_string())
                }
            })?;
        let infer_secs = infer.elapsed().as_secs_f64();
        let model = self.inner.visual.name().to_string();
        let lease = job.lease;
        let secs = started.elapsed().as_secs_f64();
        let finished = self
            .tx(move |tx| {
                let c = tx.connection();
                store::store_page_vectors(c, pj.doc_id, pj.page_no, &mv, &model)?;
                let finished = store::finish_step(c, pj.doc_id, pj.page_no, EmbedStep::Visual)?;
                store::add_stage_time(c, pj.doc_id, Stage::EmbedVisual.queue(), secs, infer_secs)?;
                tx.ack(lease)?;
                Ok(finished)
            })
            .await?;
        self.finished(finished);
        Ok(())
    }

    /// Waits until the document is done or failed.
    pub async fn wait_for(
        &self,
        doc_id: i64,
        timeout: Duration,
    ) -> Result<Document, PipelineError> {
        let deadline = Instant::now() + timeout;
        loop {
            // Registered before the check, so an end recorded meanwhile is not missed.
            let finished = self.inner.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            let this = self.clone();
            let doc = this.read(move |c| Ok(store::document(c, doc_id)?)).await?;
            if let Some(doc) = doc
                && doc.status != DocStatus::Pending
            {
                return Ok(doc);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(PipelineError::Timeout(doc_id));
            }
            // This process's workers wake us when a document ends; another process's within
            // 100 ms.
            let poll = Duration::from_millis(100).min(deadline - now);
            let _ = tokio::time::timeout(poll, finished).await;
        }
    }

    /// The report of a document.
    pub fn report(&self, doc_id: i64) -> Result<Report, PipelineError> {
        Ok(store::report(
            &self.connection()?,
            doc_id,
            &self.inner.cfg.cost,
        )?)
    }

    /// Dead letters of every stage.
    pub fn dead_letters(&self) -> Result<Vec<DeadJob>, PipelineError> {
        let mut out = Vec::new();
        for s in Stage::ALL {
            out.extend(self.inner.queue.dead_letters(s.queue(), 10_000)?);
        }
        Ok(out)
    }
}

/// Joins a page's readings: the whole-page reading, or its tiles' (exactly by word boxes when
/// every tile has them, else by removing repeated word runs between consecutive tiles).
pub fn join_readings(whole: Option<Reading>, tiles: Vec<(Tile, Reading)>) -> Reading {
    if tiles.is_empty() {
        return whole.unwrap_or_default();
    }
    let text = if tiles.iter().all(|(_, r)| r.words.is_some()) {
        let with_words: Vec<(Tile, Vec<crate::tiling::Word>)> = tiles
            .iter()
            .map(|(t, r)| (*t, r.words.clone().unwrap_or_default()))
            .collect();
        merge_tile_words(&with_words)
    } else {
        let texts: Vec<String> = tiles.iter().map(|(_, r)| r.text.clone()).collect();
        merge_tile_texts(&texts, 3)
    };
    let mut tables = Vec::new();
    let mut figures: Vec<String> = Vec::new();
    let mut inference_seconds = 0.0;
    for (_, r) in tiles {
        tables.extend(r.tables);
        for f in r.figures {
            if !figures.contains(&f) {
                figures.push(f);
            }
        }
        inference_seconds += r.inference_seconds;
    }
    Reading {
        text,
        words: None,
        tables,
        figures,
        inference_seconds,
    }
}

/// Handle on running workers.
pub struct Running {
    stop: Arc<dyn StopFlag>,
    set: JoinSet<()>,
}

trait StopFlag: Send + Sync {
    fn stop(&self);
}

impl<R: Send + Sync, T: Send + Sync, V: Send + Sync> StopFlag for Inner<R, T, V> {
    fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in &self.targets {
            t.send_modify(|_| {});
        }
    }
}

impl Running {
    /// Stops taking jobs, lets the jobs in progress finish, and waits for the workers.
    pub async fn shutdown(mut self) {
        self.stop.stop();
        while self.set.join_next().await.is_some() {}
    }
}
