//! Finding what the demo needs on this machine: llama-server and the two small models
//! (`scripts/setup_llama.sh`), Tesseract (`scripts/setup_ocr.sh`) and the sample PDFs
//! (`scripts/fetch_sample_pdfs.sh`). Each miss is an error that names the script to run.

use std::path::{Path, PathBuf};

/// llama-server and the GGUF files of the chat and embedding models.
#[derive(Debug, Clone)]
pub struct Llama {
    /// The llama-server binary.
    pub server: PathBuf,
    /// SmolLM2-135M-Instruct (chat).
    pub smollm2: PathBuf,
    /// all-MiniLM-L6-v2 (embeddings).
    pub minilm: PathBuf,
}

const LLAMA_VARS: [&str; 3] = [
    "HOROS_LLAMA_SERVER",
    "HOROS_SMOLLM2_GGUF",
    "HOROS_MINILM_GGUF",
];

impl Llama {
    /// From the environment (`HOROS_LLAMA_SERVER`, `HOROS_SMOLLM2_GGUF`, `HOROS_MINILM_GGUF`),
    /// else from the env file `scripts/setup_llama.sh` wrote under
    /// `${HOROS_CACHE:-~/.cache/horos}/llama-*/env`, so that the binary also works when run
    /// without `scripts/demo.sh`.
    pub fn find() -> Result<Llama, String> {
        let from_env: Vec<Option<String>> = LLAMA_VARS
            .iter()
            .map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
            .collect();
        let values = if from_env.iter().all(Option::is_some) {
            from_env.into_iter().flatten().collect()
        } else {
            env_file_values().ok_or_else(|| {
                "llama-server and its models are not installed: run scripts/demo.sh, or \
                 scripts/setup_llama.sh and `source` the env file it prints"
                    .to_owned()
            })?
        };
        let [server, smollm2, minilm]: [String; 3] = values
            .try_into()
            .map_err(|_| "llama env: three values expected".to_owned())?;
        let llama = Llama {
            server: server.into(),
            smollm2: smollm2.into(),
            minilm: minilm.into(),
        };
        for (what, p) in [
            ("HOROS_LLAMA_SERVER", &llama.server),
            ("HOROS_SMOLLM2_GGUF", &llama.smollm2),
            ("HOROS_MINILM_GGUF", &llama.minilm),
        ] {
            if !p.is_file() {
                return Err(format!(
                    "{what}={} is not a file (run scripts/setup_llama.sh)",
                    p.display()
                ));
            }
        }
        Ok(llama)
    }
}

/// The three values from the newest complete install's env file, if any.
fn env_file_values() -> Option<Vec<String>> {
    let cache = std::env::var_os("HOROS_CACHE")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".cache/horos")))?;
    let mut installs: Vec<PathBuf> = std::fs::read_dir(&cache)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("llama-"))
                && p.join(".complete").exists()
        })
        .collect();
    installs.sort();
    let text = std::fs::read_to_string(installs.last()?.join("env")).ok()?;
    LLAMA_VARS
        .iter()
        .map(|k| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(k)?.strip_prefix('='))
                .map(|v| v.trim().trim_matches('"').to_owned())
        })
        .collect()
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

/// The sample directory: `--samples`, else `HOROS_SAMPLE_PDFS`, else
/// `~/.cache/horos-rs/sample-pdfs` (where `scripts/fetch_sample_pdfs.sh` puts them).
pub fn sample_dir(given: Option<&Path>) -> PathBuf {
    if let Some(d) = given {
        return d.to_path_buf();
    }
    if let Some(d) = std::env::var_os("HOROS_SAMPLE_PDFS").filter(|d| !d.is_empty()) {
        return d.into();
    }
    home()
        .unwrap_or_else(|| PathBuf::from("/tmp"))
        .join(".cache/horos-rs/sample-pdfs")
}

/// The real documents of the sample set (the others there are malformed test inputs).
pub const SAMPLE_DOCUMENTS: [&str; 2] = ["manual.pdf", "amc-sample.pdf"];

/// The PDFs to ingest: `given` when not empty, else the sample documents in `dir`.
pub fn documents(given: &[PathBuf], dir: &Path) -> Result<Vec<PathBuf>, String> {
    let files: Vec<PathBuf> = if given.is_empty() {
        SAMPLE_DOCUMENTS.iter().map(|f| dir.join(f)).collect()
    } else {
        given.to_vec()
    };
    for f in &files {
        if !f.is_file() {
            return Err(format!(
                "{} not found (run scripts/fetch_sample_pdfs.sh, or give --pdf FILE)",
                f.display()
            ));
        }
    }
    Ok(files)
}

/// Tesseract's version line, or an error naming the script that installs it.
pub async fn tesseract() -> Result<String, String> {
    let version =
        tokio::task::spawn_blocking(|| ingest_pipeline::vision::TesseractReader::default().check())
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("Tesseract: {e} (run scripts/setup_ocr.sh)"))?;
    Ok(version.lines().next().unwrap_or("tesseract").to_owned())
}

/// Copies `files` into the inbox `inbox` (a file already there with the same size is kept) and
/// returns their names there: the system accepts documents from its inbox only.
pub fn into_inbox(files: &[PathBuf], inbox: &Path) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(inbox).map_err(|e| format!("{}: {e}", inbox.display()))?;
    let mut names = Vec::new();
    for f in files {
        let name = f
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| format!("{}: not a file name the demo can use", f.display()))?;
        let to = inbox.join(name);
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).ok();
        if size(&to) != size(f) {
            std::fs::copy(f, &to)
                .map_err(|e| format!("{} → {}: {e}", f.display(), to.display()))?;
        }
        names.push(name.to_owned());
    }
    Ok(names)
}
