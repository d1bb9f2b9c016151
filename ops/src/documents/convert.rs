//! Convert: PDFs (files, and every `*.pdf` under directories) read by the pipeline in this
//! process, and each written into an output directory as Markdown or JSON Lines. The pipeline's
//! state lives in the output directory's [`STATE_DIR`]: a file whose bytes (SHA-256) were
//! converted before is not read again, and a broken file fails alone with its typed reason.

use std::path::{Path, PathBuf};
use std::time::Instant;

use ingest_pipeline::configured::{self, PipelineSettings};
use ingest_pipeline::inbox::Inbox;
use ingest_pipeline::pipeline::sha256_hex;
use ingest_pipeline::render::{self, RenderError};
use ingest_pipeline::store::{self, DocStatus, Document, ExportFormat};
use ingest_pipeline::vision::TesseractReader;
use serde::{Deserialize, Serialize};

use super::output::{Outputs, output_name};
use super::{Documents, FollowArgs, Progress};
use crate::error::OpsError;

/// The directory, inside the output directory, holding the pipeline's database (`ingest.db`:
/// documents by SHA-256, their pages' text and tables, the stages' queues) and page images
/// (`pages/`). Kept between runs so that a run converts only what is new.
pub const STATE_DIR: &str = ".horos";

/// What to convert, and where.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConvertArgs {
    /// PDF files (any name), and directories searched recursively for `*.pdf`.
    pub paths: Vec<PathBuf>,
    /// The output directory: one file per document, named after the PDF (its path below a
    /// directory named in `paths` kept), and the pipeline's state in [`STATE_DIR`].
    pub out: PathBuf,
    /// Markdown or JSON Lines.
    #[serde(default)]
    pub format: ExportFormat,
}

/// Why a file was not converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureKind {
    /// The file or directory could not be read (missing, no permission).
    Unreadable,
    /// An empty file.
    Empty,
    /// Not a PDF (no `%PDF-` header).
    NotAPdf,
    /// A PDF cut short (no `%%EOF` at its end).
    Truncated,
    /// An encrypted PDF (a password is needed).
    Encrypted,
    /// A PDF that cannot be parsed, or has no page.
    Malformed,
    /// Over a limit of the pipeline (file size, pages, page size, an object stream's decoded
    /// size).
    TooLarge,
    /// The pipeline failed it (a page could not be rendered or read: without Tesseract, a page
    /// with no text layer cannot be read).
    Pipeline,
}

impl FailureKind {
    /// Its name, as serialised: `unreadable`, `empty`, `not_a_pdf`, `truncated`, `encrypted`,
    /// `malformed`, `too_large` or `pipeline`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unreadable => "unreadable",
            Self::Empty => "empty",
            Self::NotAPdf => "not_a_pdf",
            Self::Truncated => "truncated",
            Self::Encrypted => "encrypted",
            Self::Malformed => "malformed",
            Self::TooLarge => "too_large",
            Self::Pipeline => "pipeline",
        }
    }
}

impl From<&RenderError> for FailureKind {
    fn from(e: &RenderError) -> Self {
        match e {
            RenderError::Empty => Self::Empty,
            RenderError::NotPdf => Self::NotAPdf,
            RenderError::Truncated => Self::Truncated,
            RenderError::Encrypted(_) => Self::Encrypted,
            RenderError::Malformed(_) | RenderError::NoPages => Self::Malformed,
            RenderError::FileTooLarge { .. }
            | RenderError::TooManyPages { .. }
            | RenderError::PageTooLarge { .. }
            | RenderError::StreamTooLarge(_) => Self::TooLarge,
            _ => Self::Pipeline,
        }
    }
}

/// A file's failure: its kind and the whole reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// The reason, as the reader or the pipeline said it.
    pub error: String,
}

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConvertStatus {
    /// Read in this run and written.
    Converted,
    /// The same bytes were converted by an earlier run: not read again (its output written
    /// only where it was missing).
    AlreadyConverted,
    /// Not converted: see its [`Failure`].
    Failed,
}

/// One file's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvertedFile {
    /// The PDF, shown lossily.
    pub path: String,
    /// What happened.
    pub status: ConvertStatus,
    /// Its document in the state's store.
    pub document: Option<i64>,
    /// Its pages.
    pub pages: Option<u32>,
    /// The file written (or already there), shown lossily.
    pub output: Option<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// What [`Documents::convert`] did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Converted {
    /// Each file: the paths that could not be read, then the files that could not be opened as
    /// PDFs, then the others; each group in the order found (the arguments' order, a
    /// directory's files by path).
    pub files: Vec<ConvertedFile>,
    /// Files read in this run.
    pub converted: usize,
    /// Files converted by an earlier run.
    pub already_converted: usize,
    /// Files failed.
    pub failed: usize,
    /// Pages read in this run.
    pub pages: u64,
    /// Seconds the run took.
    pub seconds: f64,
}

/// A file found, and the name of its output.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Input {
    path: PathBuf,
    name: PathBuf,
}

/// A file, as admitted to the pipeline.
enum Admitted {
    /// Converted by an earlier run.
    Done(Document),
    /// Queued now.
    Queued(Document),
}

impl Documents {
    /// The documents of a conversion into `out`: the pipeline `settings` describe (its reader
    /// and tuning; the default, [`PipelineSettings::reading_only`], without), moved into
    /// `out`'s [`STATE_DIR`] and never embedding. Every readable file is accepted (the caller
    /// names its own files).
    pub async fn for_conversion(
        out: &Path,
        settings: Option<PipelineSettings>,
    ) -> Result<Documents, OpsError> {
        let dir = out.join(STATE_DIR);
        let settings = match settings {
            Some(s) => PipelineSettings {
                dir,
                database_url: None,
                embeddings: None,
                ..s
            },
            None => PipelineSettings::reading_only(dir),
        };
        let pipeline = configured::open(&settings).await.map_err(OpsError::Setup)?;
        Ok(Documents::new(pipeline, Inbox::new("/")))
    }

    /// Converts `args.paths` into `args.out`: each PDF found is hashed; one whose bytes were
    /// converted before is not read again; one that is not a readable PDF fails alone with its
    /// typed [`Failure`]; the others are read by this pipeline's workers, started for the run
    /// and stopped after it, while `on_progress` is called with where they stand
    /// ([`Documents::follow`]); then each document is written, in `args.format`. A document that
    /// failed before, or that a stopped run left half read, is read again from scratch.
    /// [`OpsError::NoPdf`] when the paths hold no PDF at all.
    pub async fn convert(
        &self,
        args: ConvertArgs,
        on_progress: impl FnMut(&Progress),
    ) -> Result<Converted, OpsError> {
        let started = Instant::now();
        let (inputs, unreadable) = self.inputs(&args.paths).await?;
        if inputs.is_empty() && unreadable.is_empty() {
            let dir = args.paths.first().cloned().unwrap_or_default();
            return Err(OpsError::NoPdf { dir });
        }
        let mut files = unreadable;
        let mut outputs = Outputs::new(&args.out, args.format);
        let mut admitted = Vec::with_capacity(inputs.len());
        let mut queued: Vec<Document> = Vec::new();
        for input in inputs {
            match self.admit(&input.path, &queued).await? {
                Ok(a) => {
                    if let Admitted::Queued(d) = &a
                        && !queued.iter().any(|q| q.id == d.id)
                    {
                        queued.push(d.clone());
                    }
                    admitted.push((input, a));
                }
                Err(failure) => files.push(failed(&input.path, None, failure)),
            }
        }
        let mut pages = 0;
        if !queued.is_empty() {
            let ids = queued.iter().map(|d| d.id).collect();
            let running = self.pipeline.start();
            let followed = self.follow(FollowArgs::new(ids), on_progress).await;
            running.shutdown().await;
            pages = followed?.pages;
        }
        for (input, admitted) in admitted {
            files.push(self.finish_file(&mut outputs, input, admitted).await?);
        }
        let count = |s: ConvertStatus| files.iter().filter(|f| f.status == s).count();
        Ok(Converted {
            converted: count(ConvertStatus::Converted),
            already_converted: count(ConvertStatus::AlreadyConverted),
            failed: count(ConvertStatus::Failed),
            files,
            pages,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// The outcome of a file admitted to the pipeline, once it ended: its document written
    /// (unless an earlier run wrote it and its file is still there), or why it failed.
    async fn finish_file(
        &self,
        outputs: &mut Outputs,
        input: Input,
        admitted: Admitted,
    ) -> Result<ConvertedFile, OpsError> {
        let (id, earlier) = match admitted {
            Admitted::Done(d) => (d.id, true),
            Admitted::Queued(d) => (d.id, false),
        };
        let export = self.document_export(id).await?;
        let doc = &export.document;
        if doc.status != DocStatus::Done {
            let failure = Failure {
                kind: FailureKind::Pipeline,
                error: doc.error.clone().unwrap_or_else(|| "not finished".into()),
            };
            return Ok(failed(&input.path, Some(doc), failure));
        }
        let file = outputs.file_for(&input.name, &doc.sha256);
        if !earlier || !file.exists() {
            outputs.write(&file, &export)?;
        }
        Ok(ConvertedFile {
            path: input.path.to_string_lossy().into_owned(),
            status: if earlier {
                ConvertStatus::AlreadyConverted
            } else {
                ConvertStatus::Converted
            },
            document: Some(id),
            pages: doc.pages,
            output: Some(file.to_string_lossy().into_owned()),
            failure: None,
        })
    }

    /// The PDFs `paths` name (a file as it is, a directory's `*.pdf` recursively, by path),
    /// each once, and the paths that could not be read.
    async fn inputs(
        &self,
        paths: &[PathBuf],
    ) -> Result<(Vec<Input>, Vec<ConvertedFile>), OpsError> {
        let inbox = self.inbox.clone();
        let paths = paths.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut inputs: Vec<Input> = Vec::new();
            let mut unreadable = Vec::new();
            let unread = |path: &Path, e: &dyn std::fmt::Display| {
                failed(
                    path,
                    None,
                    Failure {
                        kind: FailureKind::Unreadable,
                        error: e.to_string(),
                    },
                )
            };
            for path in paths {
                // Relative to the working directory, not to the inbox (the whole file system).
                let real = std::path::absolute(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|abs| inbox.confine(&abs).map_err(|e| e.to_string()));
                let root = match real {
                    Ok(real) => real,
                    Err(e) => {
                        unreadable.push(unread(&path, &e));
                        continue;
                    }
                };
                if !root.is_dir() {
                    let name = output_name(&path, None);
                    inputs.push(Input { path: root, name });
                    continue;
                }
                match inbox.pdfs_under(&root) {
                    Ok(found) => {
                        for file in found {
                            match file {
                                Ok(file) => {
                                    let name = output_name(&file, Some(&root));
                                    inputs.push(Input { path: file, name });
                                }
                                Err(e) => unreadable.push(unread(&path, &e)),
                            }
                        }
                    }
                    Err(e) => unreadable.push(unread(&path, &e)),
                }
            }
            let mut seen = std::collections::HashSet::new();
            inputs.retain(|i| seen.insert(i.path.clone()));
            Ok((inputs, unreadable))
        })
        .await?
    }

    /// Hashes `path` and, unless its bytes were converted before (or `queued` by this run),
    /// checks that it is a PDF the
    /// pipeline can open and queues it (a failed or half-read document of the same bytes is
    /// deleted first: it is read again from scratch).
    async fn admit(
        &self,
        path: &Path,
        queued: &[Document],
    ) -> Result<Result<Admitted, Failure>, OpsError> {
        let file = path.to_path_buf();
        let render_cfg = self.pipeline.config().render;
        let checked = tokio::task::spawn_blocking(move || {
            let data = std::fs::read(&file)?;
            let sha = sha256_hex(&data);
            Ok::<_, std::io::Error>((sha, data))
        })
        .await?;
        let (sha, data) = match checked {
            Ok(read) => read,
            Err(e) => {
                return Ok(Err(Failure {
                    kind: FailureKind::Unreadable,
                    error: e.to_string(),
                }));
            }
        };
        if let Some(doc) = queued.iter().find(|d| d.sha256 == sha) {
            // The same bytes under another name, queued by this run.
            return Ok(Ok(Admitted::Queued(doc.clone())));
        }
        let known = self
            .read(move |reads| Ok(store::document_by_sha(reads, &sha)?))
            .await?;
        if let Some(doc) = &known
            && doc.status == DocStatus::Done
        {
            return Ok(Ok(Admitted::Done(doc.clone())));
        }
        let opened =
            tokio::task::spawn_blocking(move || render::page_count(data, &render_cfg)).await?;
        if let Err(e) = opened {
            return Ok(Err(Failure {
                kind: FailureKind::from(&e),
                error: e.to_string(),
            }));
        }
        if let Some(doc) = known {
            self.pipeline.delete(doc.id).await?;
        }
        let submission = self.pipeline.submit(path).await?;
        Ok(Ok(Admitted::Queued(submission.document().clone())))
    }
}

/// Why the pages that have no text layer (scans) cannot be read by Tesseract here, when they
/// cannot: the `tesseract` program does not run. Text-layer pages convert without it.
pub fn ocr_unavailable() -> Option<String> {
    TesseractReader::default().check().err().map(|e| {
        format!(
            "{e}: pages without a text layer cannot be read (scripts/setup_ocr.sh installs \
             Tesseract); pages with one convert without it"
        )
    })
}

/// A failed file's outcome.
fn failed(path: &Path, doc: Option<&Document>, failure: Failure) -> ConvertedFile {
    ConvertedFile {
        path: path.to_string_lossy().into_owned(),
        status: ConvertStatus::Failed,
        document: doc.map(|d| d.id),
        pages: doc.and_then(|d| d.pages),
        output: None,
        failure: Some(failure),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A one-page born-digital PDF of `lines`.
    fn text_pdf(lines: &[&str]) -> Vec<u8> {
        horos_testkit::pdf::text(lines, 12)
    }

    const A: &[&str] = &[
        "Alpha document, born digital.",
        "Its text layer is read, no OCR needed.",
    ];
    const B: &[&str] = &[
        "Bravo document in a subdirectory.",
        "A second page of words to keep.",
    ];

    /// `in/a.pdf`, `in/sub/b.pdf`, `in/bad.pdf` (text), `in/copy-of-a.pdf`, `in/notes.txt`.
    fn inputs() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::create_dir_all(input.join("sub")).unwrap();
        std::fs::write(input.join("a.pdf"), text_pdf(A)).unwrap();
        std::fs::write(input.join("copy-of-a.pdf"), text_pdf(A)).unwrap();
        std::fs::write(input.join("sub/b.pdf"), text_pdf(B)).unwrap();
        std::fs::write(input.join("bad.pdf"), "a licence, not a PDF").unwrap();
        std::fs::write(input.join("notes.txt"), "not looked at").unwrap();
        dir
    }

    async fn convert(dir: &Path, format: ExportFormat) -> Converted {
        let out = dir.join("out");
        let docs = Documents::for_conversion(&out, None).await.unwrap();
        let args = ConvertArgs {
            paths: vec![dir.join("in")],
            out,
            format,
        };
        docs.convert(args, |_| {}).await.unwrap()
    }

    fn status_of<'a>(c: &'a Converted, name: &str) -> &'a ConvertedFile {
        c.files
            .iter()
            .find(|f| f.path.ends_with(name))
            .unwrap_or_else(|| panic!("{name}: {c:?}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_run_over_the_same_bytes_converts_nothing() {
        let dir = inputs();
        let first = convert(dir.path(), ExportFormat::Markdown).await;
        assert_eq!(
            (first.converted, first.already_converted, first.failed),
            (3, 0, 1),
            "{first:?}"
        );
        // The same bytes under two names: one document, a file for each name.
        let (a, copy) = (
            status_of(&first, "/a.pdf"),
            status_of(&first, "copy-of-a.pdf"),
        );
        assert_eq!(a.document, copy.document);
        let out = dir.path().join("out");
        let md = std::fs::read_to_string(out.join("a.md")).unwrap();
        assert!(md.contains("Its text layer is read"), "{md}");
        assert!(out.join("copy-of-a.md").is_file());
        let b = std::fs::read_to_string(out.join("sub/b.md")).unwrap();
        assert!(
            b.starts_with("# b\n") && b.contains("Bravo document"),
            "{b}"
        );
        // The broken file failed alone, with its kind.
        let bad = status_of(&first, "bad.pdf");
        let failure = bad.failure.as_ref().unwrap();
        assert_eq!(failure.kind, FailureKind::NotAPdf, "{failure:?}");
        assert!(failure.error.contains("not a PDF"), "{failure:?}");
        assert!(out.join(STATE_DIR).join("ingest.db").is_file());
        // The page images of read documents are gone: their text is stored.
        let images = std::fs::read_dir(out.join(STATE_DIR).join("pages")).unwrap();
        assert_eq!(images.count(), 0);

        // Again: nothing read; a deleted output is written again from the store.
        std::fs::remove_file(out.join("a.md")).unwrap();
        let second = convert(dir.path(), ExportFormat::Markdown).await;
        assert_eq!(
            (
                second.converted,
                second.already_converted,
                second.failed,
                second.pages
            ),
            (0, 3, 1, 0),
            "{second:?}"
        );
        assert_eq!(std::fs::read_to_string(out.join("a.md")).unwrap(), md);
        // Another format needs no reading either.
        let third = convert(dir.path(), ExportFormat::Jsonl).await;
        assert_eq!((third.converted, third.already_converted), (0, 3));
        let line: serde_json::Value = serde_json::from_str(
            std::fs::read_to_string(out.join("sub/b.jsonl"))
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(line["page_no"], 1, "{line}");
        assert_eq!(line["read_by"], "text_layer", "{line}");
        assert_eq!(line["sha256"], sha256_hex(&text_pdf(B)), "{line}");
        assert!(line["source"].as_str().unwrap().ends_with("sub/b.pdf"));
    }

    #[test]
    fn a_failure_kind_is_named_as_it_is_serialised() {
        for kind in [
            FailureKind::Unreadable,
            FailureKind::Empty,
            FailureKind::NotAPdf,
            FailureKind::Truncated,
            FailureKind::Encrypted,
            FailureKind::Malformed,
            FailureKind::TooLarge,
            FailureKind::Pipeline,
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
        assert_eq!(
            FailureKind::from(&RenderError::Encrypted("x".into())),
            FailureKind::Encrypted
        );
    }

    #[tokio::test]
    async fn paths_that_hold_no_pdf_are_refused_and_a_missing_one_is_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        let out = dir.path().join("out");
        let docs = Documents::for_conversion(&out, None).await.unwrap();
        let args = |paths: Vec<PathBuf>| ConvertArgs {
            paths,
            out: out.clone(),
            format: ExportFormat::Markdown,
        };
        let e = docs
            .convert(args(vec![dir.path().join("empty")]), |_| {})
            .await
            .unwrap_err();
        assert!(matches!(e, OpsError::NoPdf { .. }), "{e:?}");
        let c = docs
            .convert(args(vec![dir.path().join("missing.pdf")]), |_| {})
            .await
            .unwrap();
        assert_eq!(c.failed, 1);
        assert_eq!(
            c.files[0].failure.as_ref().unwrap().kind,
            FailureKind::Unreadable
        );
    }
}
