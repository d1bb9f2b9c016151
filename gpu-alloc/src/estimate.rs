//! The VRAM estimation chain: explicit value → model metadata → a GGUF file's header (weights,
//! attention cache, compute buffers) → file size (GGUF × 1.1, safetensors × 1.3) → name pattern (`7b`, `32b`, quantisation suffixes).
//! After a real load, the measured usage replaces the estimate
//! ([`VramEstimator::record_measured`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

const MIB: f64 = 1024.0 * 1024.0;

/// What is known about a model for estimation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelFacts {
    /// Model id or name (used by the name pattern).
    pub name: String,
    /// VRAM given explicitly in the manifest, MB.
    pub explicit_mb: Option<u64>,
    /// VRAM from resolved model metadata, MB.
    pub metadata_mb: Option<u64>,
    /// Weight file or directory.
    pub path: Option<PathBuf>,
}

/// Where an estimate came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EstimateSource {
    /// Measured after a real load.
    Measured,
    /// The manifest's explicit value.
    Explicit,
    /// Model metadata.
    Metadata,
    /// A GGUF file's header: its weights, the attention cache at the default context, and
    /// compute buffers (see [`gguf`](crate::gguf)).
    GgufHeader,
    /// A safetensors model directory's index (or single file's header) for the weights and its
    /// `config.json` for the attention cache (see [`safetensors`](crate::safetensors)).
    SafetensorsIndex,
    /// GGUF weight files × 1.1.
    GgufFiles,
    /// safetensors weight files × 1.3.
    SafetensorsFiles,
    /// Parameter count and quantisation parsed from the name.
    NamePattern,
}

/// A VRAM estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Estimate {
    /// MB.
    pub mb: u64,
    /// Its source.
    pub source: EstimateSource,
}

/// Nothing in the chain could estimate the model.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error(
    "cannot estimate the VRAM of {0:?}: no explicit value, metadata, weight files or size in the name"
)]
pub struct EstimateError(pub String);

fn file_bytes(path: &Path, ext: &str) -> u64 {
    let matches = |p: &Path| {
        p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case(ext))
    };
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && matches(path) => m.len(),
        Ok(m) if m.is_file() => 0,
        Ok(m) if m.is_dir() => std::fs::read_dir(path)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter(|e| matches(&e.path()))
                    .filter_map(|e| e.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0),
        _ => 0,
    }
}

/// File-size heuristic: GGUF weights × 1.1, safetensors × 1.3 (a file or a directory).
pub fn estimate_from_files(path: &Path) -> Option<Estimate> {
    let gguf = file_bytes(path, "gguf");
    if gguf > 0 {
        return Some(Estimate {
            mb: (gguf as f64 * 1.1 / MIB).ceil() as u64,
            source: EstimateSource::GgufFiles,
        });
    }
    let st = file_bytes(path, "safetensors");
    (st > 0).then(|| Estimate {
        mb: (st as f64 * 1.3 / MIB).ceil() as u64,
        source: EstimateSource::SafetensorsFiles,
    })
}

/// From a GGUF file's header (a `.gguf` file, or a directory holding exactly one): its weights,
/// the attention cache at [`DEFAULT_CONTEXT`](crate::gguf::DEFAULT_CONTEXT) tokens (capped by
/// the model's own), and 10 % of the weights for compute buffers. `None` when there is no such
/// file or its header cannot be read (the file-size heuristic then applies).
pub fn estimate_from_gguf_header(path: &Path) -> Option<Estimate> {
    let is_gguf = |p: &Path| {
        p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    };
    let file = if path.is_dir() {
        let files: Vec<PathBuf> = std::fs::read_dir(path)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file() && is_gguf(p))
            .collect();
        // Split models (several shards) keep their keys in the first: sizes are simpler.
        match files.as_slice() {
            [one] => one.clone(),
            _ => return None,
        }
    } else if is_gguf(path) {
        path.to_path_buf()
    } else {
        return None;
    };
    match crate::gguf::read(&file) {
        Ok(facts) => Some(Estimate {
            mb: facts.vram_mb(None).max(1),
            source: EstimateSource::GgufHeader,
        }),
        Err(e) => {
            tracing::debug!(file = %file.display(), error = %e, "GGUF header not usable; estimating from the file size");
            None
        }
    }
}

/// From a safetensors model directory's index (or its single file's header) and its
/// `config.json`: weights, the f16 attention cache at
/// [`DEFAULT_CONTEXT`](crate::gguf::DEFAULT_CONTEXT) tokens (capped by the model's own), and
/// 10 % of the weights for compute buffers. `None` when the directory has neither.
pub fn estimate_from_safetensors(path: &Path) -> Option<Estimate> {
    let facts = crate::safetensors::read_dir(path)?;
    Some(Estimate {
        mb: facts.vram_mb().max(1),
        source: EstimateSource::SafetensorsIndex,
    })
}

/// Bytes per parameter implied by a quantisation marker in a lower-case name.
fn bytes_per_param(lower: &str) -> f64 {
    let has = |tokens: &[&str]| tokens.iter().any(|t| lower.contains(t));
    if has(&["q2_", "q2k", "iq2", "-q2"]) {
        0.33
    } else if has(&["q3_", "q3k", "iq3", "-q3"]) {
        0.44
    } else if has(&["q4", "iq4", "awq", "gptq", "int4", "4bit", "nf4", "mxfp4"]) {
        0.56
    } else if has(&["q5"]) {
        0.69
    } else if has(&["q6"]) {
        0.82
    } else if has(&["q8", "int8", "fp8", "8bit"]) {
        1.06
    } else if has(&["fp32", "f32"]) {
        4.0
    } else {
        2.0
    }
}

/// Name heuristic: the parameter count (`7b`, `32B`, `0.5b`, `8x7b`) times the bytes per
/// parameter of the quantisation suffix (fp16 when none), plus 20 % for activations and
/// cache.
pub fn estimate_from_name(name: &str) -> Option<Estimate> {
    let lower = name.to_ascii_lowercase();
    let b = lower.as_bytes();
    let mut best: Option<f64> = None;
    for (i, &c) in b.iter().enumerate() {
        if c != b'b' || i == 0 || !b[i - 1].is_ascii_digit() {
            continue;
        }
        // The token must end here (next char not alphanumeric).
        if b.get(i + 1).is_some_and(|n| n.is_ascii_alphanumeric()) {
            continue;
        }
        let mut j = i;
        while j > 0 && (b[j - 1].is_ascii_digit() || b[j - 1] == b'.') {
            j -= 1;
        }
        // A preceding letter makes it part of another token (e.g. "v2b"), except an
        // "NxM" expert count.
        let Ok(mut params) = lower[j..i].parse::<f64>() else {
            continue;
        };
        if j >= 2 && b[j - 1] == b'x' && b[j - 2].is_ascii_digit() {
            let mut k = j - 1;
            while k > 0 && b[k - 1].is_ascii_digit() {
                k -= 1;
            }
            if let Ok(experts) = lower[k..j - 1].parse::<f64>() {
                params *= experts;
            }
        } else if j > 0 && b[j - 1].is_ascii_alphabetic() {
            continue;
        }
        best = Some(best.map_or(params, |p: f64| p.max(params)));
    }
    let params_b = best.filter(|p| *p > 0.0)?;
    let mb = params_b * 1e9 * bytes_per_param(&lower) * 1.2 / MIB;
    Some(Estimate {
        mb: mb.ceil() as u64,
        source: EstimateSource::NamePattern,
    })
}

/// The chain without measurements.
pub fn estimate(facts: &ModelFacts) -> Result<Estimate, EstimateError> {
    if let Some(mb) = facts.explicit_mb.filter(|m| *m > 0) {
        return Ok(Estimate {
            mb,
            source: EstimateSource::Explicit,
        });
    }
    if let Some(mb) = facts.metadata_mb.filter(|m| *m > 0) {
        return Ok(Estimate {
            mb,
            source: EstimateSource::Metadata,
        });
    }
    if let Some(e) = facts.path.as_deref().and_then(estimate_from_gguf_header) {
        return Ok(e);
    }
    if let Some(e) = facts.path.as_deref().and_then(estimate_from_safetensors) {
        return Ok(e);
    }
    if let Some(e) = facts.path.as_deref().and_then(estimate_from_files) {
        return Ok(e);
    }
    estimate_from_name(&facts.name).ok_or_else(|| EstimateError(facts.name.clone()))
}

/// The chain with a memory of measured usage: once a model was really loaded, its measured
/// VRAM is used instead of any estimate.
#[derive(Debug, Default)]
pub struct VramEstimator {
    measured: Mutex<BTreeMap<String, u64>>,
}

impl VramEstimator {
    /// An estimator with no measurement yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the VRAM a load of `model` was measured to use.
    pub fn record_measured(&self, model: &str, mb: u64) {
        if mb > 0 {
            self.measured
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(model.to_owned(), mb);
        }
    }

    /// The measurement of a model, if any.
    pub fn measured(&self, model: &str) -> Option<u64> {
        self.measured
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(model)
            .copied()
    }

    /// Measured value if known, otherwise the [`estimate`] chain.
    pub fn estimate(&self, facts: &ModelFacts) -> Result<Estimate, EstimateError> {
        match self.measured(&facts.name) {
            Some(mb) => Ok(Estimate {
                mb,
                source: EstimateSource::Measured,
            }),
            None => estimate(facts),
        }
    }
}
