//! A Hugging Face model directory's own account of its size: the weights' bytes from
//! `model.safetensors.index.json` (`metadata.total_size`) or, for a single
//! `model.safetensors`, from its header; the attention cache from `config.json` (layers,
//! key-value heads, head size, context). Only headers and small JSON files are read, each
//! bounded: never the weights.

use std::path::Path;

use crate::gguf::DEFAULT_CONTEXT;

/// The most bytes of JSON read from an index, a config or a safetensors header.
const MAX_JSON: u64 = 64 << 20;

/// What a model directory says about its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirFacts {
    /// Bytes of weights.
    pub weights_bytes: u64,
    /// Bytes of f16 attention cache per token (0 when `config.json` does not say).
    pub kv_bytes_per_token: u64,
    /// The model's own context length, tokens (`max_position_embeddings`), if given.
    pub context: Option<u64>,
}

impl DirFacts {
    /// MB to serve [`DEFAULT_CONTEXT`] tokens (capped by the model's own context): weights,
    /// attention cache, and 10 % of the weights for compute buffers.
    pub fn vram_mb(&self) -> u64 {
        let ctx = self
            .context
            .map_or(DEFAULT_CONTEXT, |c| c.min(DEFAULT_CONTEXT));
        let bytes =
            self.weights_bytes as f64 * 1.1 + self.kv_bytes_per_token.saturating_mul(ctx) as f64;
        (bytes / (1024.0 * 1024.0)).ceil() as u64
    }
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_JSON {
        return None;
    }
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The tensors' bytes of one safetensors file, from its header (an 8-byte little-endian length,
/// then a JSON map of tensors with their `data_offsets`).
pub fn file_weights_bytes(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).ok()?;
    let len = u64::from_le_bytes(len);
    if len == 0 || len > MAX_JSON {
        return None;
    }
    let mut header = vec![0u8; usize::try_from(len).ok()?];
    f.read_exact(&mut header).ok()?;
    let header: serde_json::Value = serde_json::from_slice(&header).ok()?;
    header
        .as_object()?
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .filter_map(|(_, t)| t["data_offsets"].as_array()?.get(1)?.as_u64())
        .max()
}

/// The attention cache's f16 bytes per token and the context, from a `config.json`.
fn kv_from_config(config: &serde_json::Value) -> (u64, Option<u64>) {
    // Multimodal configs keep the language model's numbers in `text_config`.
    let c = if config.get("num_hidden_layers").is_some() {
        config
    } else {
        config.get("text_config").unwrap_or(config)
    };
    let num = |k: &str| c.get(k).and_then(serde_json::Value::as_u64);
    let layers = num("num_hidden_layers").unwrap_or(0);
    let heads = num("num_attention_heads").unwrap_or(0);
    let kv_heads = num("num_key_value_heads").unwrap_or(heads);
    let head_dim = num("head_dim").unwrap_or_else(|| {
        num("hidden_size")
            .zip(Some(heads))
            .filter(|(_, h)| *h > 0)
            .map_or(0, |(hidden, h)| hidden / h)
    });
    let per_token = 2u64
        .saturating_mul(layers)
        .saturating_mul(kv_heads)
        .saturating_mul(head_dim)
        .saturating_mul(2);
    (per_token, num("max_position_embeddings"))
}

/// What the model directory `dir` says of its size: `None` without a safetensors index or a
/// single readable `model.safetensors` (sharded files without an index are left to the
/// file-size heuristic).
pub fn read_dir(dir: &Path) -> Option<DirFacts> {
    if !dir.is_dir() {
        return None;
    }
    let weights_bytes = match read_json(&dir.join("model.safetensors.index.json")) {
        Some(index) => index["metadata"]["total_size"].as_u64()?,
        None => file_weights_bytes(&dir.join("model.safetensors"))?,
    };
    let (kv_bytes_per_token, context) =
        read_json(&dir.join("config.json")).map_or((0, None), |c| kv_from_config(&c));
    Some(DirFacts {
        weights_bytes,
        kv_bytes_per_token,
        context,
    })
}
