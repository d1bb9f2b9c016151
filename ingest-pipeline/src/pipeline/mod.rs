//! The staged pipeline: one squeueha queue per stage, a pool of workers per stage whose size can
//! change while running, retries after a delay, dead letters with the reason.
//!
//! Stages (queues) and default workers:
//!
//! | stage | workers | job |
//! |---|---|---|
//! | `pdf_to_images` | 2 | render a document page by page, turn a page to be read upright ([`PipelineConfig::orientation`]); each page's PNG is written and its read jobs enqueued as soon as it is rendered |
//! | `image_to_ocr` | 8 | read a page, or one tile of a large page, with the [`VisionReader`]; the last tile of a page completes the page's fan-in |
//! | `ocr_to_database` | 4 | join the tiles' text without the overlap's duplicates, store text (FTS5), tables, figures and chunks |
//! | `embed_text` | 2 | embed the page's chunks with the [`TextEmbedder`] |
//! | `embed_visual` | 2 | embed the page image with the [`VisualEmbedder`] (many vectors) |
//!
//! Every stage records its result, acks its job and enqueues the next stage in one SQLite
//! transaction (the queue and the store share one database file), so a pipeline killed at any
//! point resumes where it stopped: unacked jobs reappear after their visibility timeout, and
//! rendering restarts after the last page recorded. Jobs finishing together share one commit
//! ([`AsyncQueue::transaction`]): a job is answered only once the commit holding its transaction
//! succeeded, and a failure in a shared commit re-runs each member alone.

mod config;
mod embed_text;
mod embed_visual;
mod image_and_text;
mod image_to_ocr;
mod manage;
mod ocr_to_database;
mod passages;
mod pdf_to_images;
mod search;
mod workers;

pub use config::{InvalidTuning, PdfWorkersTuning, PipelineConfig, PipelineTuning, Stage};
pub use ocr_to_database::join_readings;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fanin::{FanIn, FanInConfig};
use horos_server_control::Collection;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use squeueha::{AsyncQueue, DeadJob, NewJob, Queue, QueueTx};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::embed::{TextEmbedder, VisualEmbedder};
use crate::store::{self, DocStatus, Document, Report};
use crate::tiling::Tile;
use crate::vision::VisionReader;

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
    /// No document has this id.
    #[error("no document {0}")]
    UnknownDocument(i64),
    /// No dead letter of the pipeline's stages has this job id.
    #[error("no dead job {0} in the pipeline's queues")]
    NoDeadJob(i64),
    /// The dead job's document has ended (failed or done) or was deleted: requeued, the job
    /// would be dropped at once. A failed document is ingested again by [`Pipeline::retry`].
    #[error(
        "dead job {job} is document {doc}'s, which is {}: requeued, it would be dropped",
        .status.map_or("deleted", DocStatus::as_str)
    )]
    DocumentEnded {
        /// The dead job.
        job: i64,
        /// Its document.
        doc: i64,
        /// The document's status; `None` when it was deleted.
        status: Option<DocStatus>,
    },
    /// Only a failed document can be retried.
    #[error("document {id} is {status:?}, not failed: only a failed document is retried")]
    NotFailed {
        /// The document.
        id: i64,
        /// Its status.
        status: DocStatus,
    },
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
    /// The async handle; its [`AsyncQueue::transaction`] commits the jobs' transactions together.
    aq: AsyncQueue,
    /// Notified when a document of this process ends (done or failed), for [`Pipeline::wait_for`].
    finished: Notify,
    /// Notified when the workers are told to stop (the dead-letter sweep waits on it).
    stopping: Notify,
    /// Per stage, the `(died_at, id)` of the last dead letter the sweep read.
    swept: std::sync::Mutex<[(i64, i64); 5]>,
    fan: FanIn,
    /// The PDF workers documents are read in ([`PipelineConfig::pdf_workers`]), if any.
    pdf_workers: Option<Arc<crate::worker::WorkerPool>>,
    /// The same workers' pool for image questions ([`Pipeline::search_image`]): places of their
    /// own, so that a question never waits behind a long document.
    image_workers: Option<crate::worker::WorkerPool>,
    reader: R,
    text: T,
    visual: V,
    /// The visual index between questions (searches through this pipeline reuse it).
    visual_index: crate::store::VisualIndexCache,
    /// The chunks' text vectors in memory (built from the store when the workers start).
    text_index: crate::store::TextVectorIndex,
    targets: [watch::Sender<usize>; 5],
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

/// Records a document in `collection` (unless its bytes are known) and enqueues its rendering,
/// in `tx`.
fn insert_and_enqueue(
    tx: &mut QueueTx<'_>,
    sha: &str,
    path: &Path,
    collection: &Collection,
    attempts: u32,
) -> Result<Submission, PipelineError> {
    let title = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let (doc, new) = store::insert_document_in(tx, sha, &title, path, collection)?;
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
}

#[cfg(feature = "postgres")]
fn open_postgres(url: &str, cfg: &PipelineConfig) -> Result<Queue, PipelineError> {
    Ok(Queue::open_postgres(url, cfg.queue.clone())?)
}

#[cfg(not(feature = "postgres"))]
fn open_postgres(_url: &str, _cfg: &PipelineConfig) -> Result<Queue, PipelineError> {
    Err(PipelineError::Queue(squeueha::Error::Unsupported {
        backend: "postgres",
        what: "a PostgreSQL database_url (build ingest-pipeline with its `postgres` feature)",
    }))
}

/// Where tile `index` of the page image at `page` is written.
fn tile_path(page: &Path, index: u32) -> PathBuf {
    let stem = page
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    page.with_file_name(format!("{stem}-tile-{index:03}.png"))
}

/// SHA-256 of `data`, lowercase hex: the key a document is known by ([`Pipeline::submit`]
/// hashes the file the same way).
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a document's page images are written: one directory per document id (ids are never
/// reused), so a deleted or retried document's files are never another's.
fn doc_dir(work_dir: &Path, doc_id: i64) -> PathBuf {
    work_dir.join(format!("doc-{doc_id}"))
}

async fn blocking<X: Send + 'static>(
    f: impl FnOnce() -> Result<X, PipelineError> + Send + 'static,
) -> Result<X, PipelineError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| PipelineError::Task(e.to_string()))?
}

impl<R: VisionReader, T: TextEmbedder, V: VisualEmbedder> Pipeline<R, T, V> {
    /// Opens the database (creating queues' and store's tables) with a reader and embedders: the
    /// SQLite file `cfg.db_path`, or the PostgreSQL database `cfg.database_url`.
    pub fn open(cfg: PipelineConfig, reader: R, text: T, visual: V) -> Result<Self, PipelineError> {
        let queue = match &cfg.database_url {
            Some(url) => open_postgres(url, &cfg)?,
            None => {
                if let Some(parent) = cfg.db_path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                Queue::open_with(&cfg.db_path, cfg.queue.clone())?
            }
        };
        Self::open_on(queue, cfg, reader, text, visual)
    }

    /// Opens the pipeline on a queue of the caller's (SQLite or PostgreSQL; `cfg.db_path` and
    /// `cfg.database_url` are not read), creating the store's tables there.
    pub fn open_on(
        queue: Queue,
        cfg: PipelineConfig,
        reader: R,
        text: T,
        visual: V,
    ) -> Result<Self, PipelineError> {
        std::fs::create_dir_all(&cfg.work_dir)?;
        queue.transaction(|tx: &mut QueueTx<'_>| -> Result<(), PipelineError> {
            store::migrate_in(tx)?;
            Ok(())
        })?;
        let fan = FanIn::open(queue.clone(), FanInConfig::default())?;
        let targets = cfg.workers.map(|n| watch::channel(n).0);
        let text_index =
            crate::store::TextVectorIndex::with_settings(crate::store::IndexSettings {
                threads: std::thread::available_parallelism().map_or(1, usize::from),
                ..Default::default()
            });
        Ok(Self {
            inner: Arc::new(Inner {
                aq: AsyncQueue::new(queue.clone()),
                finished: Notify::new(),
                stopping: Notify::new(),
                swept: std::sync::Mutex::new([(i64::MIN, i64::MIN); 5]),
                fan,
                pdf_workers: cfg
                    .pdf_workers
                    .clone()
                    .map(|c| Arc::new(crate::worker::WorkerPool::new(c))),
                image_workers: cfg.pdf_workers.clone().map(crate::worker::WorkerPool::new),
                queue,
                reader,
                text,
                visual,
                visual_index: crate::store::VisualIndexCache::with_settings(cfg.visual_index),
                text_index,
                targets,
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

    /// The pool of PDF workers documents are read in, if any
    /// ([`PipelineConfig::pdf_workers`]): its counts, and [`WorkerPool::probe`] for a deep
    /// health check.
    ///
    /// [`WorkerPool::probe`]: crate::worker::WorkerPool::probe
    pub fn pdf_workers(&self) -> Option<&crate::worker::WorkerPool> {
        self.inner.pdf_workers.as_deref()
    }

    /// The fan-in of tiles into pages (progress, results of tiled pages).
    pub fn fan_in(&self) -> &FanIn {
        &self.inner.fan
    }

    /// The queue handle (stats, dead letters).
    pub fn queue(&self) -> &Queue {
        &self.inner.queue
    }

    /// The visual embedder (to embed a text question for visual search).
    pub fn visual(&self) -> &V {
        &self.inner.visual
    }

    /// The visual index kept in memory for searches through this pipeline (see
    /// [`crate::hybrid::search`]).
    pub fn visual_index(&self) -> &crate::store::VisualIndexCache {
        &self.inner.visual_index
    }

    /// The chunks' text vectors kept in memory for searches through this pipeline (built by
    /// [`Pipeline::build_text_index`], which [`Pipeline::start`] runs beside the workers; until
    /// then questions scan the store; see [`crate::store::TextVectorIndex`]).
    pub fn text_index(&self) -> &crate::store::TextVectorIndex {
        &self.inner.text_index
    }

    /// Builds the text-vector index from the store now (logged with the time it took), or
    /// brings it up to date when it is built: what a long-lived process does at start-up
    /// ([`Pipeline::start`] does it for the workers' process). Blocking: call it off the async
    /// runtime. A one-shot command need not: its questions scan the store.
    pub fn build_text_index(&self) -> Result<crate::store::Synced, PipelineError> {
        Ok(self.inner.text_index.sync(&mut self.reads())?)
    }

    /// Builds the visual model's centroid indexes from the store now (those above
    /// `visual_scan_max_pages`; see [`crate::store::VisualIndexCache::prepare`]), logged with the
    /// time it took: what a long-lived process does at start-up, so that its first visual
    /// question does not wait for it ([`Pipeline::start`] does it after the text-vector index).
    /// Blocking: call it off the async runtime.
    pub fn build_visual_index(&self) -> Result<Vec<crate::store::Prepared>, PipelineError> {
        let model = self.inner.visual.name().to_owned();
        Ok(self.inner.visual_index.prepare(&mut self.reads(), &model)?)
    }

    /// The text embedder (to embed a question for vector search).
    pub fn text_embedder(&self) -> &T {
        &self.inner.text
    }

    /// Reads the store through the queue's read pool ([`store::Reads`]: on SQLite readers that
    /// never wait for the writer, on PostgreSQL a pooled connection), for searches and reports:
    /// `store::documents(&mut pipeline.reads())`. Blocking: call it off the async runtime.
    pub fn reads(&self) -> store::Reads {
        store::Reads(self.inner.queue.clone())
    }

    /// Opens a connection of its own on the SQLite file (`db_path`), for reading with SQL of the
    /// caller's; a pipeline on PostgreSQL has no file: use [`Pipeline::reads`].
    pub fn connection(&self) -> Result<rusqlite::Connection, PipelineError> {
        if self.inner.cfg.database_url.is_some() {
            return Err(PipelineError::Queue(squeueha::Error::Unsupported {
                backend: "postgres",
                what: "Pipeline::connection (a SQLite connection; use Pipeline::reads)",
            }));
        }
        let conn = rusqlite::Connection::open(&self.inner.cfg.db_path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        Ok(conn)
    }

    /// Runs `f` on the store's reads ([`Pipeline::reads`]), on the blocking pool.
    async fn read<X: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn store::Db) -> Result<X, PipelineError> + Send + 'static,
    ) -> Result<X, PipelineError> {
        let this = self.clone();
        blocking(move || f(&mut this.reads())).await
    }

    /// Submits a PDF to the `"default"` collection ([`Pipeline::submit_to`]).
    pub async fn submit(&self, path: impl AsRef<Path>) -> Result<Submission, PipelineError> {
        self.submit_to(path, Collection::default()).await
    }

    /// Submits a PDF to `collection` (the callers who may read it). A document whose bytes
    /// (SHA-256) are already known is not processed again, and stays in the collection it was
    /// first submitted to ([`Submission::Known`] shows it).
    pub async fn submit_to(
        &self,
        path: impl AsRef<Path>,
        collection: Collection,
    ) -> Result<Submission, PipelineError> {
        let path = path.as_ref().to_path_buf();
        let queue = self.inner.queue.clone();
        let attempts = self.inner.cfg.max_attempts;
        blocking(move || {
            let sha = sha256_file(&path)?;
            queue.transaction(
                |tx: &mut QueueTx<'_>| -> Result<Submission, PipelineError> {
                    insert_and_enqueue(tx, &sha, &path, &collection, attempts)
                },
            )
        })
        .await
    }

    /// Changes the number of workers of a stage while running.
    pub fn set_workers(&self, stage: Stage, n: usize) {
        self.inner.targets[stage.index()].send_replace(n);
    }

    /// Workers a stage is set to run ([`Pipeline::set_workers`], else its configured number).
    pub fn target_workers(&self, stage: Stage) -> usize {
        *self.inner.targets[stage.index()].borrow()
    }

    /// Workers of a stage currently running.
    pub fn active_workers(&self, stage: Stage) -> usize {
        self.inner.active[stage.index()].load(Ordering::SeqCst)
    }

    /// Runs `f` in a queue transaction; concurrent jobs' transactions share commits
    /// ([`AsyncQueue::transaction`]). `f` may run more than once, always against a state without
    /// its earlier runs.
    async fn tx<X: Send + 'static>(
        &self,
        f: impl FnMut(&mut QueueTx<'_>) -> Result<X, PipelineError> + Send + 'static,
    ) -> Result<X, PipelineError> {
        self.inner.aq.transaction(f).await
    }

    /// The PNG of a page, or of one of its tiles, in one blocking step; `None` when the
    /// document is no longer pending (failed or deleted meanwhile: its remaining work is
    /// dropped).
    async fn load_page(
        &self,
        doc_id: i64,
        page_no: u32,
        tile: Option<u32>,
    ) -> Result<Option<Vec<u8>>, JobError> {
        let loaded = self
            .read(move |c| {
                if !store::is_pending(c, doc_id)? {
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
            &mut self.reads(),
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
        self.stopping.notify_waiters();
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
