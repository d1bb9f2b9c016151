//! The files an export writes: one per document in a directory, named after the PDF (a name
//! two different documents would share gets the SHA-256's first 8 digits), written whole or not
//! at all (a temporary file renamed).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use ingest_pipeline::store::{DocumentExport, ExportFormat};

use crate::error::OpsError;

/// The output directory of one export, and the names given so far.
#[derive(Debug)]
pub(super) struct Outputs {
    dir: PathBuf,
    format: ExportFormat,
    /// Each name given (relative, without extension), and the document (SHA-256) it went to.
    taken: HashMap<PathBuf, String>,
}

impl Outputs {
    /// Files in `format` under `dir`.
    pub(super) fn new(dir: &Path, format: ExportFormat) -> Self {
        Self {
            dir: dir.to_path_buf(),
            format,
            taken: HashMap::new(),
        }
    }

    /// The file of document `sha256` named `name` (relative to the directory, no extension):
    /// `DIR/name.md`, or `DIR/name-<sha256[..8]>.md` when `name` went to another document in
    /// this export.
    pub(super) fn file_for(&mut self, name: &Path, sha256: &str) -> PathBuf {
        let short = sha256.get(..8).unwrap_or(sha256);
        let mut name = name.to_path_buf();
        if self.taken.get(&name).is_some_and(|other| other != sha256) {
            let mut file = name.file_name().map(OsString::from).unwrap_or_default();
            file.push(format!("-{short}"));
            name.set_file_name(file);
        }
        self.taken.insert(name.clone(), sha256.to_owned());
        let mut file = self.dir.join(&name).into_os_string();
        file.push(".");
        file.push(self.format.extension());
        PathBuf::from(file)
    }

    /// Writes `export` into `file` (its directories created), replacing it whole.
    pub(super) fn write(&self, file: &Path, export: &DocumentExport) -> Result<(), OpsError> {
        let text = export.render(self.format)?;
        let failed = |source| OpsError::Write {
            path: file.to_path_buf(),
            source,
        };
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(failed)?;
        }
        let mut tmp = file.as_os_str().to_owned();
        tmp.push(".tmp");
        std::fs::write(&tmp, text).map_err(failed)?;
        std::fs::rename(&tmp, file).map_err(failed)
    }
}

/// The name of a PDF's output: its path below `root` without its extension when it lies there
/// (a directory's tree is kept), else its file name without its extension.
pub(super) fn output_name(pdf: &Path, root: Option<&Path>) -> PathBuf {
    let below = root
        .and_then(|r| pdf.strip_prefix(r).ok())
        .filter(|rel| rel.parent().is_some_and(|p| !p.as_os_str().is_empty()));
    let stem = pdf.file_stem().map(PathBuf::from).unwrap_or_default();
    match below.and_then(Path::parent) {
        Some(parent) => parent.join(stem),
        None => stem,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_name_is_the_pdfs_path_below_the_directory_named() {
        let root = Path::new("/in");
        assert_eq!(
            output_name(Path::new("/in/a/b/report.v2.pdf"), Some(root)),
            Path::new("a/b/report.v2")
        );
        assert_eq!(
            output_name(Path::new("/in/x.PDF"), Some(root)),
            Path::new("x")
        );
        assert_eq!(
            output_name(Path::new("/elsewhere/y.pdf"), Some(root)),
            Path::new("y")
        );
        assert_eq!(output_name(Path::new("/z/y.pdf"), None), Path::new("y"));
    }

    #[test]
    fn a_name_shared_by_two_documents_gets_the_second_ones_hash() {
        let mut out = Outputs::new(Path::new("/out"), ExportFormat::Jsonl);
        let a = out.file_for(Path::new("sub/manual.v1"), "aaaaaaaa11");
        assert_eq!(a, Path::new("/out/sub/manual.v1.jsonl"));
        // The same document again: the same file.
        assert_eq!(out.file_for(Path::new("sub/manual.v1"), "aaaaaaaa11"), a);
        let b = out.file_for(Path::new("sub/manual.v1"), "bbbbbbbb22");
        assert_eq!(b, Path::new("/out/sub/manual.v1-bbbbbbbb.jsonl"));
    }
}
