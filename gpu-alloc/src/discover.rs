//! Models found in a directory, each with what it is and the memory it needs, from its own
//! files: GGUF files (the header's architecture, weights and attention cache) and Hugging Face
//! folders (`config.json` beside `*.safetensors`: the architectures, the safetensors headers'
//! weights, the attention cache). What `horos-ref init` proposes lanes and a pool from.
//!
//! Every estimate is [`estimate`](crate::estimate)'s chain (a GGUF header or safetensors
//! index, else the files' sizes) at [`DEFAULT_CONTEXT`](crate::gguf::DEFAULT_CONTEXT) tokens
//! of attention cache, plus [`CONTEXT_MARGIN_MB`] for a server's context and scratch buffers.

use std::path::{Path, PathBuf};

use crate::estimate::{
    Estimate, estimate_from_files, estimate_from_gguf_header, estimate_from_safetensors,
};
use crate::pool::Category;

/// Added to each model's estimate: a server's own buffers beyond the weights, attention cache
/// and compute buffers (CUDA context, tokenizer, batches).
pub const CONTEXT_MARGIN_MB: u64 = 256;

/// How deep below the directory models are looked for.
const MAX_DEPTH: usize = 6;

/// How a model's weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFormat {
    /// One GGUF file (llama-server).
    Gguf,
    /// A Hugging Face folder: `config.json` and `*.safetensors` (vLLM).
    Safetensors,
}

/// A model found in a directory.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundModel {
    /// A name for it: the file's stem or the folder's (lower case; `model` folders take their
    /// parent's name).
    pub name: String,
    /// The GGUF file or the folder.
    pub path: PathBuf,
    /// How its weights are stored.
    pub format: ModelFormat,
    /// What it does: a chat model ([`Category::Llm`]), an embedding model, a vision model.
    pub category: Category,
    /// Its architecture as its files name it (`llama`, `bert`, `Qwen2ForCausalLM`).
    pub architecture: String,
    /// The memory it needs to serve, MB: the estimate plus [`CONTEXT_MARGIN_MB`].
    pub vram_mb: u64,
    /// The estimate it comes from (before the margin).
    pub estimate: Estimate,
}

/// Why a directory could not be searched.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the models' directory {path}: {source}")]
pub struct DiscoverError {
    /// The directory.
    pub path: PathBuf,
    /// The cause.
    #[source]
    pub source: std::io::Error,
}

/// The models under `dir` (searched a few levels deep), in path order. A GGUF file whose
/// header cannot be read is skipped (it is not a model llama-server would load), as is a
/// multimodal projector (`mmproj*.gguf`: the companion of a vision model, not a model).
pub fn find_models(dir: &Path) -> Result<Vec<FoundModel>, DiscoverError> {
    // The directory itself must be readable; below it, what cannot be read is skipped.
    std::fs::read_dir(dir).map_err(|source| DiscoverError {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut found = Vec::new();
    walk(dir, 0, &mut found);
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

fn walk(dir: &Path, depth: usize, found: &mut Vec<FoundModel>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    if let Some(m) = hf_folder(dir, &paths) {
        found.push(m);
        return;
    }
    for p in paths {
        if p.is_dir() && depth < MAX_DEPTH {
            walk(&p, depth + 1, found);
        } else if p.is_file() && has_extension(&p, "gguf") {
            found.extend(gguf_model(&p));
        }
    }
}

fn has_extension(p: &Path, ext: &str) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

fn name_of(p: &Path) -> String {
    let raw = p.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() {
        "model".to_owned()
    } else {
        name
    }
}

/// Architectures of GGUF embedding models (llama.cpp's names).
const GGUF_EMBEDDING: [&str; 6] = [
    "bert",
    "nomic-bert",
    "nomic-bert-moe",
    "jina-bert-v2",
    "t5encoder",
    "modern-bert",
];

fn gguf_model(path: &Path) -> Option<FoundModel> {
    let stem = name_of(path);
    if stem.starts_with("mmproj") {
        return None;
    }
    let facts = crate::gguf::read(path).ok()?;
    let estimate = estimate_from_gguf_header(path).or_else(|| estimate_from_files(path))?;
    let category = if GGUF_EMBEDDING.contains(&facts.architecture.as_str()) {
        Category::Embedding
    } else {
        Category::Llm
    };
    Some(FoundModel {
        name: stem,
        path: path.to_path_buf(),
        format: ModelFormat::Gguf,
        category,
        architecture: facts.architecture,
        vram_mb: estimate.mb + CONTEXT_MARGIN_MB,
        estimate,
    })
}

/// `dir` as a Hugging Face folder when it holds `config.json` and a `*.safetensors` file.
fn hf_folder(dir: &Path, paths: &[PathBuf]) -> Option<FoundModel> {
    let config = paths
        .iter()
        .find(|p| p.file_name() == Some("config.json".as_ref()))?;
    paths
        .iter()
        .find(|p| p.is_file() && has_extension(p, "safetensors"))?;
    let text = std::fs::read(config).ok()?;
    let json: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let architecture = json["architectures"][0].as_str().unwrap_or("").to_owned();
    let estimate = estimate_from_safetensors(dir).or_else(|| estimate_from_files(dir))?;
    let category = hf_category(&json, &architecture);
    // `…/all-MiniLM-L6-v2/model`: the folder that names the model is the parent.
    let named = if dir.file_name() == Some("model".as_ref()) {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    Some(FoundModel {
        name: name_of(Path::new(
            named
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("model"),
        )),
        path: dir.to_path_buf(),
        format: ModelFormat::Safetensors,
        category,
        architecture,
        vram_mb: estimate.mb + CONTEXT_MARGIN_MB,
        estimate,
    })
}

/// What a Hugging Face model does, from its `config.json`: a vision model has a
/// `vision_config`, a generating model's architecture ends in `ForCausalLM` or
/// `ForConditionalGeneration`, an encoder (`BertModel`, `XLMRobertaModel`) embeds.
fn hf_category(config: &serde_json::Value, architecture: &str) -> Category {
    if config.get("vision_config").is_some() {
        Category::Vision
    } else if architecture.ends_with("ForCausalLM")
        || architecture.ends_with("ForConditionalGeneration")
    {
        Category::Llm
    } else {
        Category::Embedding
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A GGUF header of `arch` and `data` bytes of weights.
    fn gguf(path: &Path, arch: &str, data: usize) {
        let mut b = Vec::new();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        let key = "general.architecture";
        b.extend_from_slice(&(key.len() as u64).to_le_bytes());
        b.extend_from_slice(key.as_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&(arch.len() as u64).to_le_bytes());
        b.extend_from_slice(arch.as_bytes());
        b.extend(std::iter::repeat_n(0u8, data));
        std::fs::write(path, b).unwrap();
    }

    /// A safetensors file of one tensor of `bytes` bytes.
    fn safetensors(path: &Path, bytes: u64) {
        let header = format!(
            "{{\"w\":{{\"dtype\":\"F16\",\"shape\":[{}],\"data_offsets\":[0,{bytes}]}}}}",
            bytes / 2
        );
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header.as_bytes());
        std::fs::write(path, b).unwrap();
    }

    #[test]
    fn gguf_files_and_hf_folders_are_found_with_their_kind_and_memory() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        gguf(&d.join("Chat-Model.Q4.gguf"), "llama", 4 << 20);
        gguf(&d.join("embed.gguf"), "bert", 1 << 20);
        gguf(&d.join("mmproj-vision.gguf"), "clip", 1 << 20);
        std::fs::write(d.join("broken.gguf"), b"not a model").unwrap();
        let hf = d.join("all-MiniLM/model");
        std::fs::create_dir_all(&hf).unwrap();
        std::fs::write(
            hf.join("config.json"),
            r#"{"architectures": ["BertModel"]}"#,
        )
        .unwrap();
        safetensors(&hf.join("model.safetensors"), 10 << 20);
        let m = find_models(d).unwrap();
        let names: Vec<&str> = m.iter().map(|m| m.name.as_str()).collect();
        // In path order (`C` sorts before `a`).
        assert_eq!(names, ["chat-model.q4", "all-minilm", "embed"]);
        assert_eq!(
            m.iter().map(|m| m.category).collect::<Vec<_>>(),
            [Category::Llm, Category::Embedding, Category::Embedding]
        );
        assert_eq!(m[1].format, ModelFormat::Safetensors);
        // 10 MiB of weights × 1.1, plus the margin.
        assert_eq!(m[1].vram_mb, 11 + CONTEXT_MARGIN_MB);
        assert_eq!(m[0].vram_mb, m[0].estimate.mb + CONTEXT_MARGIN_MB);
        assert!(m[0].estimate.mb >= 4);
        assert!(find_models(&d.join("absent")).is_err());
    }
}
