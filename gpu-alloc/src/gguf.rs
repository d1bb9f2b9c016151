//! What a GGUF file's header says about the memory its model needs: the weights (the tensors'
//! data), and the attention cache from the architecture's layer count, key/value heads and
//! head size. Only the header is read (bounded: a hostile or truncated file is an error, never
//! a huge allocation or a panic).

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

const MIB: f64 = 1024.0 * 1024.0;

/// The context an estimate assumes when the caller gives none: llama.cpp's default, capped by
/// the model's own.
pub const DEFAULT_CONTEXT: u64 = 4096;

/// Limits on what a header may declare before it is refused.
const MAX_STRING: u64 = 1 << 20;
const MAX_ARRAY: u64 = 1 << 24;
const MAX_ITEMS: u64 = 1 << 20;
const MAX_DIMS: u32 = 8;

/// Why a header could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be read (or ended early).
    #[error("cannot read the GGUF file: {0}")]
    Io(#[from] std::io::Error),
    /// Not a GGUF file, or one this reader does not understand.
    #[error("not a usable GGUF header: {0}")]
    Format(String),
}

/// What the header says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GgufFacts {
    /// `general.architecture` (`llama`, `qwen2`, `bert`, ...).
    pub architecture: String,
    /// Parameters: the tensors' elements.
    pub parameters: u64,
    /// Bytes of tensor data (the file after its header).
    pub weight_bytes: u64,
    /// The context the model was trained for (`ARCH.context_length`).
    pub context_length: Option<u64>,
    /// Layers (`ARCH.block_count`).
    pub layers: Option<u64>,
    /// Embedding size (`ARCH.embedding_length`).
    pub embedding: Option<u64>,
    /// Attention heads (`ARCH.attention.head_count`).
    pub heads: Option<u64>,
    /// Key/value heads (`ARCH.attention.head_count_kv`; = heads without grouped attention).
    pub kv_heads: Option<u64>,
}

impl GgufFacts {
    /// Bytes of the attention cache (f16 keys and values) for `context` tokens; 0 when the
    /// header lacks the sizes (embedding models have no cache worth counting).
    pub fn kv_cache_bytes(&self, context: u64) -> u64 {
        let (Some(layers), Some(embedding), Some(heads)) =
            (self.layers, self.embedding, self.heads)
        else {
            return 0;
        };
        if heads == 0 {
            return 0;
        }
        let kv_heads = self.kv_heads.unwrap_or(heads);
        let head_dim = embedding / heads;
        2u64.saturating_mul(layers)
            .saturating_mul(context)
            .saturating_mul(kv_heads)
            .saturating_mul(head_dim)
            .saturating_mul(2)
    }

    /// MB the model takes to serve `context` tokens (default: [`DEFAULT_CONTEXT`], capped by
    /// the model's own): its weights, the attention cache, and 10 % of the weights for the
    /// compute buffers.
    pub fn vram_mb(&self, context: Option<u64>) -> u64 {
        let ctx = context.unwrap_or_else(|| {
            self.context_length
                .map_or(DEFAULT_CONTEXT, |c| c.min(DEFAULT_CONTEXT))
        });
        let bytes = self.weight_bytes as f64 * 1.1 + self.kv_cache_bytes(ctx) as f64;
        (bytes / MIB).ceil() as u64
    }
}

struct Reader<R> {
    r: R,
}

impl<R: Read> Reader<R> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b)?;
        Ok(b)
    }
    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }
    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn string(&mut self) -> Result<String, GgufError> {
        let n = self.u64()?;
        if n > MAX_STRING {
            return Err(GgufError::Format(format!("a string of {n} bytes")));
        }
        let mut b = vec![0u8; usize::try_from(n).unwrap_or(0)];
        self.r.read_exact(&mut b)?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }
    fn skip(&mut self, n: u64) -> Result<(), GgufError> {
        let copied = std::io::copy(&mut (&mut self.r).take(n), &mut std::io::sink())?;
        if copied < n {
            return Err(GgufError::Format("the header ends early".into()));
        }
        Ok(())
    }
    /// A value of type `t`: an integer when it is one, else skipped.
    fn value(&mut self, t: u32, depth: u32) -> Result<Option<u64>, GgufError> {
        Ok(match t {
            0 | 1 | 7 => Some(u64::from(self.bytes::<1>()?[0])),
            2 | 3 => Some(u64::from(u16::from_le_bytes(self.bytes()?))),
            4 | 5 => Some(u64::from(self.u32()?)),
            6 => {
                self.skip(4)?;
                None
            }
            10 | 11 => Some(self.u64()?),
            12 => {
                self.skip(8)?;
                None
            }
            8 => {
                let n = self.u64()?;
                if n > MAX_STRING {
                    return Err(GgufError::Format(format!("a string of {n} bytes")));
                }
                self.skip(n)?;
                None
            }
            9 if depth < 2 => {
                let inner = self.u32()?;
                let n = self.u64()?;
                if n > MAX_ARRAY {
                    return Err(GgufError::Format(format!("an array of {n} items")));
                }
                let width = match inner {
                    0 | 1 | 7 => Some(1),
                    2 | 3 => Some(2),
                    4..=6 => Some(4),
                    10..=12 => Some(8),
                    _ => None,
                };
                match width {
                    Some(w) => self.skip(n * w)?,
                    None => {
                        for _ in 0..n {
                            self.value(inner, depth + 1)?;
                        }
                    }
                }
                None
            }
            other => return Err(GgufError::Format(format!("value type {other}"))),
        })
    }
}

/// Reads the header of the GGUF file at `path`.
pub fn read(path: &Path) -> Result<GgufFacts, GgufError> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut r = Reader {
        r: BufReader::new(file),
    };
    if &r.bytes::<4>()? != b"GGUF" {
        return Err(GgufError::Format("no GGUF magic".into()));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::Format(format!("version {version}")));
    }
    let tensors = r.u64()?;
    let kvs = r.u64()?;
    if tensors > MAX_ITEMS || kvs > MAX_ITEMS {
        return Err(GgufError::Format(format!(
            "{tensors} tensors and {kvs} keys declared"
        )));
    }
    let mut facts = GgufFacts::default();
    let mut ints = Vec::new();
    for _ in 0..kvs {
        let key = r.string()?;
        let t = r.u32()?;
        if key == "general.architecture" && t == 8 {
            facts.architecture = r.string()?;
            continue;
        }
        if let Some(v) = r.value(t, 0)? {
            ints.push((key, v));
        }
    }
    let arch = facts.architecture.clone();
    let get = |suffix: &str| {
        let key = format!("{arch}.{suffix}");
        ints.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    };
    facts.context_length = get("context_length");
    facts.layers = get("block_count");
    facts.embedding = get("embedding_length");
    facts.heads = get("attention.head_count");
    facts.kv_heads = get("attention.head_count_kv");
    for _ in 0..tensors {
        r.string()?;
        let dims = r.u32()?;
        if dims > MAX_DIMS {
            return Err(GgufError::Format(format!("a tensor of {dims} dimensions")));
        }
        let mut n: u64 = 1;
        for _ in 0..dims {
            n = n.saturating_mul(r.u64()?);
        }
        r.u32()?; // its type
        r.u64()?; // its offset
        facts.parameters = facts.parameters.saturating_add(n);
    }
    let header = r.r.stream_position()?;
    r.r.seek(SeekFrom::End(0))?;
    facts.weight_bytes = len.saturating_sub(header);
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small GGUF file: the keys and tensors given, then `data` bytes of "weights".
    pub(crate) fn write(path: &Path, kv: &[(&str, u64)], tensors: &[&[u64]], data: usize) {
        let mut b = Vec::new();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        b.extend_from_slice(&(kv.len() as u64 + 2).to_le_bytes());
        let s = |b: &mut Vec<u8>, t: &str| {
            b.extend_from_slice(&(t.len() as u64).to_le_bytes());
            b.extend_from_slice(t.as_bytes());
        };
        s(&mut b, "general.architecture");
        b.extend_from_slice(&8u32.to_le_bytes());
        s(&mut b, "llama");
        // An array of strings, as tokenizers have, to be skipped.
        s(&mut b, "tokenizer.ggml.tokens");
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&2u64.to_le_bytes());
        s(&mut b, "a");
        s(&mut b, "bc");
        for (k, v) in kv {
            s(&mut b, k);
            b.extend_from_slice(&4u32.to_le_bytes());
            b.extend_from_slice(&(*v as u32).to_le_bytes());
        }
        for (i, dims) in tensors.iter().enumerate() {
            s(&mut b, &format!("t{i}"));
            b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in *dims {
                b.extend_from_slice(&d.to_le_bytes());
            }
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(&0u64.to_le_bytes());
        }
        b.extend(std::iter::repeat_n(0u8, data));
        std::fs::write(path, b).unwrap();
    }

    #[test]
    fn the_header_gives_weights_parameters_and_the_attention_cache() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.gguf");
        write(
            &p,
            &[
                ("llama.context_length", 8192),
                ("llama.block_count", 30),
                ("llama.embedding_length", 576),
                ("llama.attention.head_count", 9),
                ("llama.attention.head_count_kv", 3),
            ],
            &[&[576, 49152], &[576]],
            1 << 20,
        );
        let f = read(&p).unwrap();
        assert_eq!(f.architecture, "llama");
        assert_eq!(f.parameters, 576 * 49152 + 576);
        assert_eq!(f.weight_bytes, 1 << 20);
        assert_eq!(f.context_length, Some(8192));
        // 2 (k, v) × 30 layers × 4096 tokens × 3 heads × 64 dims × 2 bytes = 90 MiB.
        assert_eq!(f.kv_cache_bytes(4096), 94_371_840);
        assert_eq!(f.vram_mb(None), 90 + 2); // 1.1 MiB of weights rounds up with it
        assert_eq!(f.vram_mb(Some(8192)), 180 + 2);
    }

    #[test]
    fn a_hostile_or_truncated_header_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.gguf");
        write(&p, &[("llama.block_count", 2)], &[&[4, 4]], 0);
        let full = std::fs::read(&p).unwrap();
        for cut in [3, 10, 30, full.len() - 9] {
            std::fs::write(&p, &full[..cut]).unwrap();
            assert!(read(&p).is_err(), "cut at {cut}");
        }
        let mut huge = full.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes()); // tensor count
        std::fs::write(&p, &huge).unwrap();
        assert!(matches!(read(&p), Err(GgufError::Format(_))));
        std::fs::write(&p, b"PK\x03\x04 not gguf").unwrap();
        assert!(matches!(read(&p), Err(GgufError::Format(_))));
    }

    #[test]
    fn a_real_model_file_when_one_is_at_hand() {
        let Some(path) = std::env::var_os("HOROS_SMOLLM2_GGUF") else {
            eprintln!("SKIP: no HOROS_SMOLLM2_GGUF (scripts/setup_llama.sh)");
            return;
        };
        let f = read(Path::new(&path)).unwrap();
        assert_eq!(f.architecture, "llama");
        // SmolLM2-135M: 135 million parameters, 30 layers, 3 of 9 heads for keys and values.
        assert!((130_000_000..140_000_000).contains(&f.parameters), "{f:?}");
        assert_eq!(
            (f.layers, f.heads, f.kv_heads),
            (Some(30), Some(9), Some(3))
        );
        assert!(f.vram_mb(None) > f.weight_bytes / (1 << 20));
    }
}
