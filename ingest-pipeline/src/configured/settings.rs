//! `[ingest]` as a configuration file writes it ([`IngestSettings`]), translated into the
//! [`PipelineSettings`] the pipeline is opened from. Its keys name where documents come from
//! (the inbox, which the caller keeps: it confines the paths its commands and tools are given)
//! and which servers read and embed them; every other key is [`PipelineTuning`]'s.

use std::path::PathBuf;

use horos_server_control::settings::{
    CheckScope, InvalidSettings, Problem, Table, from_table, program_path, take_keys,
};
use serde::Deserialize;

use super::{EmbeddingsSettings, PipelineSettings, ReaderSettings, VisualSettings};
use crate::pipeline::PipelineTuning;

/// How `[ingest]` reads page images.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReaderKind {
    /// Tesseract on the CPU.
    Tesseract,
    /// An OpenAI-compatible vision model at `vision_url`.
    Openai,
}

/// Which visual embedder `[ingest]` uses for the page images (MaxSim search).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisualKind {
    /// A late-interaction model (ColPali, ColQwen) behind vLLM's `/pooling` at `visual_url`:
    /// pages and text questions share its vector space (`search --mode visual`).
    Pooling {
        /// The server (no `/v1`).
        url: String,
        /// The model name.
        model: String,
    },
    /// `visual = "pixel-patch-fallback"`, the default without `visual_url`: offline pixel
    /// patches, no model; it finds re-renderings of a page, never answers a text question.
    PixelPatchFallback,
}

/// `[ingest]`: PDFs from the inbox into searchable text, tables and embeddings. Its own keys
/// say where documents come from and which servers read and embed them; every other key is
/// [`PipelineTuning`]'s (`dpi`, `chunk_tokens`, `chunk_overlap`, `retry_delay_s`,
/// `max_attempts`, `[ingest.workers]`, `[ingest.pdf_workers]`, ...).
#[derive(Debug, Clone)]
pub struct IngestSettings {
    /// The only directory documents are accepted from (relative: to the configuration file).
    pub inbox: PathBuf,
    /// The pipeline's database and page images (relative: to the configuration file).
    pub dir: PathBuf,
    /// `tesseract` or `openai`.
    pub reader: ReaderKind,
    /// The vision server (reader = "openai").
    pub vision_url: Option<String>,
    /// The vision model name.
    pub vision_model: String,
    /// Whether pages the vision model cannot read while its server is down (refused, 5xx) are
    /// read by Tesseract instead (default true); each page records which read it. `run` turns
    /// it off when `[allocator]` switches the model's lane: a parked lane is not down.
    pub vision_fallback: bool,
    /// Whether each page to be read (not one that keeps its text layer) has its orientation
    /// detected by Tesseract (`--psm 0`, package `tesseract-ocr-osd`) when it is rendered, so
    /// that a sideways or upside-down scan goes upright to the reader, Tesseract or the vision
    /// model, and to the visual embedder (default true; each page records its turn).
    pub detect_rotation: bool,
    /// The embeddings server (`/v1/embeddings`), e.g. the coordinator.
    pub embeddings_url: String,
    /// The embeddings model name.
    pub embeddings_model: String,
    /// The visual embedder (`visual_url` + `visual_model`, or the pixel-patch fallback).
    pub visual: VisualKind,
    /// The pipeline's own settings.
    pub tuning: PipelineTuning,
}

/// The keys of `[ingest]` that are not the tuning's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnKeys {
    inbox: PathBuf,
    #[serde(default = "default_ingest_dir")]
    dir: PathBuf,
    #[serde(default = "default_reader")]
    reader: ReaderKind,
    #[serde(default)]
    vision_url: Option<String>,
    #[serde(default = "default_vision_model")]
    vision_model: String,
    #[serde(default = "default_true")]
    vision_fallback: bool,
    #[serde(default = "default_true")]
    detect_rotation: bool,
    embeddings_url: String,
    embeddings_model: String,
    #[serde(default)]
    visual: Option<String>,
    #[serde(default)]
    visual_url: Option<String>,
    #[serde(default = "default_visual_model")]
    visual_model: String,
}

const OWN_KEYS: [&str; 12] = [
    "inbox",
    "dir",
    "reader",
    "vision_url",
    "vision_model",
    "vision_fallback",
    "detect_rotation",
    "embeddings_url",
    "embeddings_model",
    "visual",
    "visual_url",
    "visual_model",
];

/// Why `reader = "openai"` alone is refused.
const NO_VISION_URL: &str = "ingest.vision_url is needed with ingest.reader = \"openai\"";

/// `visual = ...` naming the offline fallback.
const PIXEL_PATCH_FALLBACK: &str = "pixel-patch-fallback";

impl<'de> Deserialize<'de> for IngestSettings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut table = Table::deserialize(d)?;
        let b: OwnKeys = from_table(take_keys(&mut table, &OWN_KEYS))?;
        let visual = match (b.visual.as_deref(), b.visual_url) {
            (None | Some("pooling"), Some(url)) => VisualKind::Pooling {
                url,
                model: b.visual_model,
            },
            (None | Some(PIXEL_PATCH_FALLBACK), None) => VisualKind::PixelPatchFallback,
            (Some("pooling"), None) => {
                return Err(serde::de::Error::custom(
                    "ingest.visual = \"pooling\" needs ingest.visual_url",
                ));
            }
            (Some(PIXEL_PATCH_FALLBACK), Some(_)) => {
                return Err(serde::de::Error::custom(
                    "ingest.visual_url is set but ingest.visual = \"pixel-patch-fallback\"",
                ));
            }
            (Some(other), _) => {
                return Err(serde::de::Error::custom(format!(
                    "ingest.visual = \"{other}\" (expected \"pooling\" or \"{PIXEL_PATCH_FALLBACK}\")"
                )));
            }
        };
        Ok(IngestSettings {
            inbox: b.inbox,
            dir: b.dir,
            reader: b.reader,
            vision_url: b.vision_url,
            vision_model: b.vision_model,
            vision_fallback: b.vision_fallback,
            detect_rotation: b.detect_rotation,
            embeddings_url: b.embeddings_url,
            embeddings_model: b.embeddings_model,
            visual,
            tuning: from_table(table)?,
        })
    }
}

fn default_ingest_dir() -> PathBuf {
    PathBuf::from("ingest")
}
fn default_reader() -> ReaderKind {
    ReaderKind::Tesseract
}
fn default_visual_model() -> String {
    "vidore/colpali-v1.3-hf".to_owned()
}
fn default_true() -> bool {
    true
}
fn default_vision_model() -> String {
    "Qwen/Qwen2-VL-7B-Instruct".to_owned()
}

impl IngestSettings {
    /// The pipeline's settings this section describes, on the PostgreSQL `database_url` when
    /// given (the configuration's shared database), else in `dir`'s own SQLite file.
    pub fn settings(
        &self,
        database_url: Option<&str>,
    ) -> Result<PipelineSettings, InvalidSettings> {
        let reader = match self.reader {
            ReaderKind::Tesseract => ReaderSettings::Tesseract,
            ReaderKind::Openai => ReaderSettings::VisionModel {
                url: self
                    .vision_url
                    .clone()
                    .ok_or_else(|| InvalidSettings(NO_VISION_URL.into()))?,
                model: self.vision_model.clone(),
                tesseract_fallback: self.vision_fallback,
            },
        };
        let visual = match &self.visual {
            VisualKind::Pooling { url, model } => VisualSettings::Pooling {
                url: url.clone(),
                model: model.clone(),
            },
            VisualKind::PixelPatchFallback => VisualSettings::PixelPatchFallback,
        };
        Ok(PipelineSettings {
            dir: self.dir.clone(),
            database_url: database_url.map(str::to_owned),
            reader,
            detect_rotation: self.detect_rotation,
            embeddings: Some(EmbeddingsSettings {
                url: self.embeddings_url.clone(),
                model: self.embeddings_model.clone(),
            }),
            visual,
            tuning: self.tuning.clone(),
        })
    }

    /// What `horos-ref check` finds missing on this machine (when `scope` looks at files):
    /// Tesseract, where a page may be read by it (`reader = "tesseract"`, or the vision reader's
    /// fallback) or turned upright by it (`detect_rotation`); the PDF workers' program, when
    /// `[ingest.pdf_workers] command` names one.
    pub fn problems(&self, scope: CheckScope) -> Vec<Problem> {
        if !scope.files {
            return Vec::new();
        }
        let path = std::env::var_os("PATH");
        let mut problems = Vec::new();
        let needs = match self.reader {
            ReaderKind::Tesseract => Some("ingest.reader"),
            ReaderKind::Openai if self.vision_fallback => Some("ingest.vision_fallback"),
            ReaderKind::Openai if self.detect_rotation => Some("ingest.detect_rotation"),
            ReaderKind::Openai => None,
        };
        if let Some(key) = needs
            && program_path("tesseract", path.as_deref()).is_none()
        {
            problems.push(Problem::new(
                key,
                "`tesseract` is not on PATH",
                "install Tesseract (scripts/setup_ocr.sh: tesseract-ocr, -eng, -osd)",
            ));
        }
        let workers = &self.tuning.pdf_workers;
        if let Some(program) = workers.command.as_ref().and_then(|c| c.first())
            && workers.count > 0
            && program_path(program, path.as_deref()).is_none()
        {
            problems.push(Problem::new(
                "ingest.pdf_workers.command",
                format!("`{program}` is not an executable file, nor on PATH"),
                "name a program that serves horos-pdf's worker protocol, or remove the key \
                 (run's own `worker pdf` is the default)",
            ));
        }
        problems
    }

    /// Checks the values; the message names the key (`ingest.dpi`).
    pub fn validate(&self) -> Result<(), InvalidSettings> {
        self.check().map_err(InvalidSettings)
    }

    fn check(&self) -> Result<(), String> {
        self.tuning.validate().map_err(|e| format!("ingest.{e}"))?;
        if self.reader == ReaderKind::Openai && self.vision_url.is_none() {
            return Err(NO_VISION_URL.into());
        }
        if let VisualKind::Pooling { url, model } = &self.visual
            && (url.trim().is_empty() || model.trim().is_empty())
        {
            return Err("ingest.visual_url and ingest.visual_model must not be empty".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The `[ingest]` section of `text`, read and checked.
    fn ingest(text: &str) -> Result<IngestSettings, String> {
        let mut file: Table = text.parse().map_err(|e| format!("{e}"))?;
        let Some(toml::Value::Table(section)) = file.remove("ingest") else {
            return Err("no [ingest]".into());
        };
        let s: IngestSettings =
            from_table(section).map_err(|e: serde::de::value::Error| e.to_string())?;
        s.validate()?;
        Ok(s)
    }

    const BASE: &str = "[ingest]\ninbox = \"in\"\nembeddings_url = \"http://127.0.0.1:1\"\nembeddings_model = \"m\"\n";

    #[test]
    fn ingest_section_values_are_checked() {
        let base = BASE;
        let i = ingest(base).unwrap();
        assert_eq!(
            (i.reader, i.tuning.dpi, i.tuning.chunk_tokens),
            (ReaderKind::Tesseract, 150.0, 512)
        );
        assert_eq!(i.dir, PathBuf::from("ingest"));
        let e = ingest(&format!("{base}dpi = 0.5\n")).unwrap_err();
        assert!(e.contains("ingest.dpi"), "{e}");
        let e = ingest(&format!("{base}reader = \"openai\"\n")).unwrap_err();
        assert!(e.contains("ingest.vision_url"), "{e}");
        let t = ingest(&format!(
            "{base}max_attempts = 5\nchunk_tokens = 128\nchunk_overlap = 16\nmax_pages = 40\n[ingest.workers]\nimage_to_ocr = 2\n"
        ))
        .unwrap()
        .tuning;
        assert_eq!((t.max_attempts, t.chunk_tokens), (5, 128));
        let mut pipeline = crate::pipeline::PipelineConfig::new("x");
        t.apply(&mut pipeline);
        assert_eq!(pipeline.render.max_pages, 40);
        let e = ingest(&format!("{base}max_pages = 0\n")).unwrap_err();
        assert!(e.contains("ingest.max_pages"), "{e}");
        assert_eq!(t.workers.values().copied().collect::<Vec<_>>(), [2]);
        let e = ingest(&format!("{base}[ingest.workers]\nocr = 2\n")).unwrap_err();
        assert!(e.contains("ocr"), "{e}");
        let e = ingest(&format!("{base}reader = \"paper\"\n")).unwrap_err();
        assert!(e.contains("paper"), "{e}");
        let i = ingest(&format!(
            "{base}reader = \"openai\"\nvision_url = \"http://127.0.0.1:2\"\nvision_fallback = false\n"
        ))
        .unwrap();
        let s = i.settings(Some("postgres://db/x")).unwrap();
        assert_eq!(s.database_url.as_deref(), Some("postgres://db/x"));
        assert_eq!(
            s.reader,
            ReaderSettings::VisionModel {
                url: "http://127.0.0.1:2".into(),
                model: "Qwen/Qwen2-VL-7B-Instruct".into(),
                tesseract_fallback: false,
            }
        );
    }

    #[test]
    fn a_pdf_worker_program_that_is_not_here_is_a_problem() {
        let problems = |extra: &str| {
            let i = ingest(&format!(
                "{BASE}reader = \"openai\"\nvision_url = \"http://v\"\n\
                 vision_fallback = false\ndetect_rotation = false\n{extra}"
            ))
            .unwrap();
            i.problems(CheckScope::default())
                .into_iter()
                .map(|p| p.key)
                .collect::<Vec<_>>()
        };
        assert!(problems("").is_empty());
        assert!(
            problems("[ingest.pdf_workers]\ncommand = [\"sh\", \"-c\", \"true\"]\n").is_empty()
        );
        assert_eq!(
            problems("[ingest.pdf_workers]\ncommand = [\"/no/such/worker\", \"pdf\"]\n"),
            ["ingest.pdf_workers.command"]
        );
        // Not started at all with count = 0.
        assert!(
            problems("[ingest.pdf_workers]\ncount = 0\ncommand = [\"/no/such/worker\"]\n")
                .is_empty()
        );
    }

    #[test]
    fn ingest_visual_embedder_is_selected_by_its_keys() {
        let visual = |extra: &str| ingest(&format!("{BASE}{extra}")).map(|i| i.visual);
        assert_eq!(visual("").unwrap(), VisualKind::PixelPatchFallback);
        assert_eq!(
            visual("visual = \"pixel-patch-fallback\"\n").unwrap(),
            VisualKind::PixelPatchFallback
        );
        assert_eq!(
            visual(
                "visual_url = \"http://127.0.0.1:8002\"\nvisual_model = \"vidore/colqwen2-v1.0\"\n"
            )
            .unwrap(),
            VisualKind::Pooling {
                url: "http://127.0.0.1:8002".into(),
                model: "vidore/colqwen2-v1.0".into()
            }
        );
        let e = visual("visual = \"pooling\"\n").unwrap_err();
        assert!(e.contains("ingest.visual_url"), "{e}");
        let e = visual("visual = \"colpali\"\n").unwrap_err();
        assert!(e.contains("pixel-patch-fallback"), "{e}");
        let e =
            visual("visual = \"pixel-patch-fallback\"\nvisual_url = \"http://x\"\n").unwrap_err();
        assert!(e.contains("visual_url"), "{e}");
        let e = visual("visual_url = \" \"\n").unwrap_err();
        assert!(e.contains("must not be empty"), "{e}");
    }
}
