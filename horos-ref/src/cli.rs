//! The command line: global options and one subcommand.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::demo;

/// `horos-ref [--config FILE] [--json] [--log-json] COMMAND`.
#[derive(Debug, Parser)]
#[command(
    name = "horos-ref",
    version,
    about = "HOROS reference binary: a batch feeder for inference servers"
)]
pub struct Cli {
    /// The configuration file [default: horos.toml] (`convert` reads none unless given one).
    #[arg(short, long, global = true)]
    pub config: Option<PathBuf>,
    /// Machine-readable output (JSON).
    #[arg(long, global = true)]
    pub json: bool,
    /// Logs (stderr) as JSON lines; the level comes from `HOROS_LOG` (error, warn, info, debug,
    /// trace; default info).
    #[arg(long, global = true)]
    pub log_json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The configuration file when none is named.
pub const DEFAULT_CONFIG: &str = "horos.toml";

impl Cli {
    /// The configuration file: `--config`, else [`DEFAULT_CONFIG`].
    pub fn config_file(&self) -> &Path {
        self.config
            .as_deref()
            .unwrap_or_else(|| Path::new(DEFAULT_CONFIG))
    }
}

/// The subcommands; each has a file of its own under `commands/`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a first configuration for this machine (`--out`, default horos.toml): its GPUs
    /// (NVML, or `--gpus 2x24000` simulated, else a CPU-only simulated pair), the models of
    /// `--models DIR` with their memory estimated from their own files, the inference servers
    /// on PATH; a chat model as a lane, the others in the model pool. It runs as written.
    Init(InitArgs),
    /// Check a configuration without starting anything: its keys and values, the environment
    /// variables it names, its ports free, its programs and model files present, its VRAM plan
    /// fitting the GPUs. Each problem with its key and a fix; the exit status is 1 when any.
    Check(CheckArgs),
    /// Run the feeder until SIGINT or SIGTERM (the batch in progress is finished first);
    /// SIGHUP reads the configuration again and applies its keys, limits and profiles (as
    /// `reload`). Its own log also goes to `RUN_DIR/run.log` (`logs run`).
    Run,
    /// Submit a chat job to a lane's queue.
    Submit(SubmitArgs),
    /// A lane job's state and, once done, its answer (as the feeder stored it).
    Result {
        /// The job's id (from `submit`).
        id: i64,
    },
    /// Queue statistics.
    Stats,
    /// The nodes sharing the database (`database = "postgres://..."`): their lanes and
    /// heartbeats; a node silent for 10 s crashed or lost the database.
    Nodes,
    /// Dead letters of a queue (an ingest stage's: in the pipeline's file); `--requeue ID` puts
    /// one back (an ingest job only while its document is pending: `ingest --retry` re-ingests a
    /// failed one); `--purge` deletes a lane's.
    Dead(DeadArgs),
    /// Lanes: server health and queue depth.
    Status,
    /// Queue a PDF from the [ingest] inbox for ingestion (`run` processes it); `--retry`
    /// ingests a failed document again from scratch.
    Ingest(IngestArgs),
    /// PDFs to Markdown (or JSON Lines) in one command, no configuration nor `run` needed: the
    /// files and directories named (searched recursively for *.pdf) are read in this process
    /// (a page's text layer where it has one, else Tesseract) and each written into `--out`
    /// as `NAME.md` (or `NAME.jsonl`, one line per page). The pipeline's state stays in
    /// `DIR/.horos/`: files whose bytes were converted before are not read again. A file that
    /// is not a readable PDF fails alone, with its reason; the exit status is 1 when any
    /// failed. With `--config`, its [ingest] reader and tuning are used (never its embeddings).
    Convert(ConvertArgs),
    /// Documents of the [ingest] pipeline: status, pages, errors; `docs ID` (or `docs show
    /// ID`) is one document's report, `docs delete ID` deletes one with everything derived from
    /// it, `docs pages ID` shows what read each page, `docs export ID` prints it as Markdown,
    /// `docs export --all --out DIR` writes every document into DIR.
    #[command(args_conflicts_with_subcommands = true)]
    Docs {
        /// A document's id: its report (as `docs show ID`).
        id: Option<i64>,
        /// What to do (none: list the documents).
        #[command(subcommand)]
        action: Option<DocsCommand>,
    },
    /// Search over the ingested pages. `--mode fts` (the default): pages holding every word
    /// (`"a phrase"` in quotes, `pre*` a prefix), else any of them; any text is a query
    /// (operators, `C++`, an unbalanced quote or bytes that are not UTF-8 are searched as words,
    /// never an error). `--mode visual`: the question embedded by `[ingest]`'s late-interaction
    /// model (`visual_url`), pages ranked by MaxSim over their image vectors.
    Search {
        /// The query (bytes that are not UTF-8 are read as U+FFFD).
        #[arg(required_unless_present_any = ["like", "image"])]
        query: Option<std::ffi::OsString>,
        /// Instead of a query: the pages that look like this one, `DOCUMENT:PAGE` (the visual
        /// index; the page itself first).
        #[arg(long, value_name = "DOC:PAGE", conflicts_with_all = ["query", "image", "mode"])]
        like: Option<String>,
        /// The pages that look like this image (PNG, JPEG; a scan, a photo of a page, a
        /// sketch) on the visual index; with a query too, the two searches fused by rank.
        #[arg(long, value_name = "FILE", conflicts_with = "mode")]
        image: Option<std::path::PathBuf>,
        /// How many pages.
        #[arg(long, default_value_t = 5)]
        k: usize,
        /// `text` (full text), `vector` (text vectors), `visual` (MaxSim over page images, by the
        /// question's text) or `hybrid` (their reciprocal-rank fusion).
        #[arg(long, value_enum, default_value_t = SearchMode::Text)]
        mode: SearchMode,
        /// Only this document.
        #[arg(long = "doc")]
        doc: Option<i64>,
    },
    /// The running coordinator's models and their state; `--load`, `--unload`, `--pin` or
    /// `--unpin` one (its admin API, with `[coordinator]`'s key).
    Models(ModelsArgs),
    /// What runs where in the running system: each lane's servers (GPU, gate, state,
    /// restarts), the models loaded on demand, and what each GPU serves (its admin API).
    Ps,
    /// A server's log: a lane server's instance, a model loaded on demand, or `run` itself (its
    /// admin API; secrets of `[coordinator]`'s keys are replaced). Without a name: the logs
    /// there are.
    Logs(LogsArgs),
    /// Reads the configuration file again and applies its `[coordinator]` keys, limits
    /// (`clients`, `allow_anonymous`) and profiles to the running system's new requests (its
    /// admin API; as SIGHUP to `run`). A file that does not parse or check is refused whole and
    /// the settings in force stay; the answer says what changed and what needs a restart.
    Reload,
    /// The status page in the terminal, refreshed: what `ps` shows, plus the queues, ingest,
    /// dead letters and the latest decisions, cut to the terminal's size. Prints once when the
    /// output is not a terminal (or with `--once`); Ctrl-C quits.
    Top(TopArgs),
    /// GPU memory booked in the VRAM ledger by any process (acquire, renew, release, list),
    /// so the model pool never books the same megabytes.
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// A question answered from the ingested pages by a chat model, through the running
    /// coordinator's `POST /v1/answers`: each claim cites its document and page (`[n]`); when no
    /// page supports the question, it says so and no model is called.
    Ask(AskCliArgs),
    /// Speaks a text through the running coordinator's `/v1/audio/speech` into a file.
    Speak(SpeakArgs),
    /// The running coordinator's async jobs, newest first, with filters; `--submit KIND`
    /// queues one (`--wait` follows it and prints its answer), `--show ID` reads one, `--cancel
    /// ID` cancels one.
    Jobs(JobsArgs),
    /// The tools (submit, status, stats, dead, ingest, search, document, models, answer) over JSON-RPC
    /// 2.0 / MCP on stdin/stdout.
    Mcp,
    /// A worker process of `run`'s ingest pipeline (`worker pdf`: opens, renders and reads the
    /// text layers of documents sent over its standard input, answering on its standard
    /// output in the protocol of horos-pdf's `worker` module). `run` starts these itself.
    #[command(hide = true)]
    Worker {
        /// Which worker.
        #[command(subcommand)]
        kind: WorkerKind,
    },
    /// The whole system on this machine with an embedded default configuration: CPU inference
    /// servers, sample documents ingested, a search and a chat answered, the status page served.
    Demo(demo::DemoArgs),
}

/// `logs`' arguments.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The log (`horos-ref logs` lists them): a lane server's instance (`think-gpu0`), a
    /// model's name, `run`.
    pub name: Option<String>,
    /// Keep printing what is written, until Ctrl-C.
    #[arg(short, long, requires = "name")]
    pub follow: bool,
    /// How many of the last lines.
    #[arg(short = 'n', long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub lines: u32,
}

/// `init`'s arguments.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The directory of the models: GGUF files and Hugging Face folders (config.json and
    /// *.safetensors), searched a few levels deep.
    #[arg(long, value_name = "DIR")]
    pub models: Option<PathBuf>,
    /// Simulated GPUs instead of NVML's, `COUNTxMB` (`2x24000`) or sizes in MB (`24000,16000`).
    #[arg(long, value_name = "GPUS")]
    pub gpus: Option<String>,
    /// The file written.
    #[arg(long, default_value = "horos.toml")]
    pub out: PathBuf,
    /// Overwrite `--out` if it exists.
    #[arg(long)]
    pub force: bool,
    /// The coordinator's port on 127.0.0.1; the lane's server listens on the next (under the
    /// allocator, one per GPU on the ports after it), the pool's servers on the ten after those.
    #[arg(long, default_value_t = 8210)]
    pub port: u16,
}

/// `check`'s arguments.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The configuration (default: the global --config).
    pub file: Option<PathBuf>,
    /// Check the file for another machine: programs, model files and ports are not looked at
    /// here (keys, values, environment variables and the VRAM plan still are).
    #[arg(long)]
    pub offline: bool,
}

/// `top`'s arguments.
#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 2.0, value_parser = positive_seconds)]
    pub interval: f64,
    /// Print one screen and exit.
    #[arg(long)]
    pub once: bool,
}

fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.1..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("{s}: seconds between 0.1 and 3600")),
    }
}

/// `ingest`'s arguments: a new PDF, or `--retry` a failed document (one of the two, the group
/// `what`; the other flags go with either: the struct's own group would take them all in, and
/// refuse `PATH --no-wait`).
#[derive(Debug, clap::Args)]
#[group(skip)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["path", "retry"])))]
pub struct IngestArgs {
    /// The PDF, or a directory of PDFs (searched recursively), inside the inbox; relative paths
    /// are relative to the inbox; any file name, UTF-8 or not.
    pub path: Option<PathBuf>,
    /// Follow the documents until they are ingested or failed: a progress bar on a terminal
    /// (files and pages done, rate, ETA), a line every few seconds otherwise. The default for a
    /// directory; `horos-ref run` does the work, so start it first.
    #[arg(long, conflicts_with = "no_wait")]
    pub wait: bool,
    /// Queue the documents and return at once (for a directory too).
    #[arg(long)]
    pub no_wait: bool,
    /// Ingest this failed document again from scratch: its id, or the path it was submitted
    /// from. It is deleted with everything derived from it and its file submitted again (a new
    /// document id, in the collection it was in).
    #[arg(long, value_name = "DOC_ID_OR_PATH")]
    pub retry: Option<std::ffi::OsString>,
    /// The collection the documents belong to: who may read them (the data-plane keys whose
    /// `collections` name it). 1 to 64 bytes of letters, digits, `.`, `_`, `-`; `default`
    /// without it. Bytes already ingested stay in the collection they were first given.
    #[arg(long, value_name = "NAME", conflicts_with = "retry")]
    pub collection: Option<horos_server_control::Collection>,
}

/// `docs`' operations.
#[derive(Debug, Subcommand)]
pub enum DocsCommand {
    /// One document's report: pages, tiles, chunks, tables, time and inference time per stage,
    /// estimated cost, its status and why it failed.
    Show {
        /// The document's id.
        id: i64,
    },
    /// Delete a document with everything derived from it: pages and their images, tiles'
    /// readings, text and its full-text index, tables, chunks and their vectors, visual vectors.
    Delete {
        /// The document's id.
        id: i64,
    },
    /// A document's pages: what read each (text_layer, tesseract, vision_model, with the
    /// reader's name), the degrees it was turned before it was read, its characters.
    Pages {
        /// The document's id.
        id: i64,
    },
    /// A document as Markdown: its pages in reading order, each page's text, then its tables
    /// as Markdown tables and its figures; `--json`: the same per page too; `--format jsonl`: a
    /// JSON line per page instead. `--all --out DIR`: every ingested document written into
    /// DIR, one file each.
    Export {
        /// The document's id.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<i64>,
        /// Every document that is done, each into a file of `--out` named after its PDF.
        #[arg(long, requires = "out")]
        all: bool,
        /// The directory `--all` writes into.
        #[arg(long, value_name = "DIR", requires = "all")]
        out: Option<PathBuf>,
        /// `markdown`, or `jsonl` (a JSON line per page: text, tables, reader, rotation, page
        /// number, source path, SHA-256).
        #[arg(long, value_enum, default_value_t = Format::Markdown)]
        format: Format,
    },
}

/// `convert`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// PDF files, and directories searched recursively for `*.pdf`.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The output directory: one file per document, named after its PDF (a directory's tree
    /// kept); the pipeline's state in `DIR/.horos/`.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// `markdown` (one `.md` per document) or `jsonl` (one `.jsonl` per document, a JSON line
    /// per page: text, tables, reader, rotation, page number, source path, SHA-256).
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
}

/// The format of exported documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Markdown: a title heading, then each page after its `<!-- page N -->` mark.
    Markdown,
    /// JSON Lines: one JSON object per page.
    Jsonl,
}

impl From<Format> for horos_ops::documents::ExportFormat {
    fn from(f: Format) -> Self {
        match f {
            Format::Markdown => Self::Markdown,
            Format::Jsonl => Self::Jsonl,
        }
    }
}

/// `submit`'s arguments.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The queue (lane).
    #[arg(long)]
    pub queue: String,
    /// The prompt (a user message).
    #[arg(long, conflicts_with = "request")]
    pub prompt: Option<String>,
    /// A JSON file holding a whole chat request.
    #[arg(long)]
    pub request: Option<PathBuf>,
    /// The model (default: the lane's `model`).
    #[arg(long)]
    pub model: Option<String>,
    /// Most tokens to generate.
    #[arg(long)]
    pub max_tokens: Option<u32>,
    /// Priority: a rank, smaller runs first (default 0), as the coordinator's `x_priority`.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// Jobs of the queue with the same key (within 24 h) are one job: a second `submit`
    /// answers the first's id ("already queued").
    #[arg(long, value_name = "KEY")]
    pub dedup_key: Option<String>,
    /// Seconds before the job may run (it is `delayed` until then).
    #[arg(long, value_name = "SECONDS")]
    pub delay: Option<f64>,
    /// Follow the job until it is done (print its answer) or dead (fail with its last error);
    /// `horos-ref run` does the work, so start it first.
    #[arg(long)]
    pub wait: bool,
}

/// `models`' arguments: at most one operation; none lists the models.
#[derive(Debug, clap::Args)]
#[group(multiple = false)]
pub struct ModelsArgs {
    /// Load this model now and wait until it serves (a preload).
    #[arg(long, value_name = "MODEL")]
    pub load: Option<String>,
    /// Unload this model now (a pinned or busy model stays).
    #[arg(long, value_name = "MODEL")]
    pub unload: Option<String>,
    /// Pin this model: never evicted nor unloaded by its stay-warm timer.
    #[arg(long, value_name = "MODEL")]
    pub pin: Option<String>,
    /// Unpin this model.
    #[arg(long, value_name = "MODEL")]
    pub unpin: Option<String>,
    /// Unload every idle model loaded on demand (pinned and busy ones stay).
    #[arg(long, conflicts_with_all = ["load", "unload", "pin", "unpin"])]
    pub unload_all: bool,
}

/// `lease`'s operations.
#[derive(Debug, Subcommand)]
pub enum LeaseCommand {
    /// The live leases.
    List,
    /// Books `--mb` on `--gpu` for `--ttl-s` seconds (renew before it runs out); prints the
    /// lease (its `id`).
    Acquire {
        /// Who holds it (e.g. `train:run-42`).
        #[arg(long)]
        owner: String,
        /// The GPU.
        #[arg(long)]
        gpu: u32,
        /// MB.
        #[arg(long)]
        mb: u64,
        /// Time to live, seconds.
        #[arg(long)]
        ttl_s: f64,
        /// The holder's pid: the lease ends as soon as that process does.
        #[arg(long)]
        pid: Option<u32>,
    },
    /// Pushes a lease's expiry to now + `--ttl-s`.
    Renew {
        /// The lease.
        id: String,
        /// Time to live from now, seconds.
        #[arg(long)]
        ttl_s: f64,
    },
    /// Ends a lease.
    Release {
        /// The lease.
        id: String,
    },
}

/// `jobs`' arguments.
#[derive(Debug, clap::Args)]
pub struct JobsArgs {
    /// Only jobs in this state (queued, running, succeeded, failed, cancelled).
    #[arg(long)]
    pub state: Option<String>,
    /// Only jobs of this kind (chat, completions, embeddings, images, speech).
    #[arg(long)]
    pub kind: Option<String>,
    /// Only jobs of this client (`x_client_id`).
    #[arg(long)]
    pub client: Option<String>,
    /// Only jobs for this model; with `--submit`, the job's model.
    #[arg(long)]
    pub model: Option<String>,
    /// How many.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Queue a job of this kind (chat, completions, embeddings, images, speech) through the
    /// data plane, as the key's (`--key`, else HOROS_API_KEY): `--prompt TEXT` with `--model`,
    /// or `--request FILE` (the synchronous route's JSON body). Prints its id; `--wait` follows
    /// it.
    #[arg(long, value_name = "KIND", conflicts_with_all = ["state", "kind", "client", "cancel", "show"])]
    pub submit: Option<String>,
    /// With --submit: the job's one input (a chat's user message, a completion's or an image's
    /// prompt, the text to embed or to speak).
    #[arg(long, requires_all = ["submit", "model"], conflicts_with = "request")]
    pub prompt: Option<String>,
    /// With --submit: a JSON file holding the whole request.
    #[arg(long, value_name = "FILE", requires = "submit")]
    pub request: Option<PathBuf>,
    /// With --submit: a rank, smaller runs first (as `x_priority`).
    #[arg(long, requires = "submit", allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// With --submit or --show: follow the job until it succeeded, failed or was cancelled,
    /// then show it (the key's own jobs, through the data plane).
    #[arg(long)]
    pub wait: bool,
    /// The data-plane key of --submit and --wait (default: HOROS_API_KEY; none without it).
    #[arg(long)]
    pub key: Option<String>,
    /// Cancel this job instead of listing: a queued job never runs, a running one is abandoned.
    #[arg(long, value_name = "ID", conflicts_with_all = ["state", "kind", "client", "model"])]
    pub cancel: Option<i64>,
    /// Show this job instead of listing: its state and, once it succeeded, its result (a chat's
    /// answer; the size of a speech's audio or of an image).
    #[arg(long, value_name = "ID", conflicts_with_all = ["state", "kind", "client", "model", "cancel"])]
    pub show: Option<i64>,
    /// With --show: write the job's audio (speech) or first image (images) to this file.
    #[arg(long, value_name = "FILE", requires = "show")]
    pub out: Option<std::path::PathBuf>,
}

/// `dead`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DeadArgs {
    /// The queue: a lane's, or a stage of `[ingest]` (pdf_to_images, image_to_ocr,
    /// ocr_to_database, embed_text, embed_visual).
    #[arg(long)]
    pub queue: String,
    /// How many to list.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Requeue this dead job (of `--queue`'s database) instead of listing.
    #[arg(long)]
    pub requeue: Option<i64>,
    /// Delete the queue's dead letters instead of listing (a lane's; an ingest stage's fail
    /// their documents and stay).
    #[arg(long, conflicts_with = "requeue")]
    pub purge: bool,
}

/// How `search` ranks pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SearchMode {
    /// Full text (FTS5, BM25).
    #[value(alias = "fts")]
    Text,
    /// The question embedded by the chunks' model, cosine over the chunks.
    Vector,
    /// MaxSim of the question's vectors over the page images' (a late-interaction model).
    Visual,
    /// Reciprocal-rank fusion of the three (visual where a late-interaction model is set).
    Hybrid,
}

impl From<SearchMode> for ingest_pipeline::hybrid::Mode {
    fn from(m: SearchMode) -> Self {
        match m {
            SearchMode::Text => Self::Text,
            SearchMode::Vector => Self::Vector,
            SearchMode::Visual => Self::Visual,
            SearchMode::Hybrid => Self::Hybrid,
        }
    }
}

/// `speak`'s arguments.
#[derive(Debug, clap::Args)]
pub struct SpeakArgs {
    /// The text to speak.
    pub text: String,
    /// The file the audio is written to.
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// The model (a pooled `tts` model).
    #[arg(long, default_value = "tts")]
    pub model: String,
    /// The voice (the model's default when left out).
    #[arg(long)]
    pub voice: Option<String>,
    /// wav, pcm, flac, mp3, opus or aac (what the model's server produces).
    #[arg(long, default_value = "wav")]
    pub format: String,
    /// 0.25 to 4.0.
    #[arg(long)]
    pub speed: Option<f64>,
    /// The data-plane key (default: the HOROS_API_KEY environment variable; none without it).
    #[arg(long)]
    pub key: Option<String>,
}

/// `ask`'s arguments.
#[derive(Debug, clap::Args)]
pub struct AskCliArgs {
    /// The question.
    pub question: String,
    /// The chat model that writes the answer (a lane's or a pooled model's name).
    #[arg(long)]
    pub model: String,
    /// At most this many pages (1 to 20; default 4).
    #[arg(long)]
    pub k: Option<usize>,
    /// Only this document.
    #[arg(long = "doc")]
    pub doc: Option<i64>,
    /// A page found by meaning only supports the question from this cosine up (0 to 1;
    /// default 0.35).
    #[arg(long)]
    pub min_similarity: Option<f64>,
    /// Most tokens the model writes.
    #[arg(long)]
    pub max_tokens: Option<u32>,
    /// The model's sampling temperature (0 to 2; 0: the same answer each time).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// `true`: give the model the best pages' images; `false`: their text only (default:
    /// images for a vision model, one whose manifest says `vision = true`).
    #[arg(long)]
    pub images: Option<bool>,
    /// The data-plane key (default: the HOROS_API_KEY environment variable; none without it).
    #[arg(long)]
    pub key: Option<String>,
}

/// The workers `run` starts (`horos-ref worker KIND`).
#[derive(Debug, Clone, Copy, Subcommand)]
pub enum WorkerKind {
    /// The PDF worker: documents opened, pages rendered, text layers read, images decoded.
    Pdf,
}
