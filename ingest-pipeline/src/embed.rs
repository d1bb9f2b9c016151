//! Embedding backends: [`TextEmbedder`] (one vector per text, e.g. BGE-M3 or MiniLM behind
//! `/v1/embeddings`) and [`VisualEmbedder`] (many vectors per page image, ColQwen2 style, and
//! many per text question when the model has a text tower: [`crate::pooling::PoolingEmbedder`]).
//!
//! [`PixelPatchFallback`] is the offline fallback needing no model: the page is resized to a
//! fixed grid of patches and each patch's ink pattern becomes one centred, normalised 128-value
//! vector (1024 vectors per page by default). It finds a page from another rendering of the
//! same page (another resolution, a scan-like copy) and nothing else: it has no text tower, so a
//! text question against it is [`EmbedError::NoTextQuery`], never results.

use std::future::Future;
use std::sync::Arc;

use crate::maxsim::MultiVector;

/// Why embedding failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The server failed; `retryable` tells whether trying again later may succeed.
    #[error("embedding request failed: {message}")]
    Backend {
        /// Description.
        message: String,
        /// Whether a retry may succeed.
        retryable: bool,
    },
    /// The image could not be decoded.
    #[error("image decoding failed: {0}")]
    Image(String),
    /// The answer had an unexpected shape.
    #[error("unexpected embedding answer: {0}")]
    Shape(String),
    /// A blocking task failed.
    #[error("embedding task failed: {0}")]
    Task(String),
    /// The visual embedder cannot embed a text question (the pixel-patch fallback has no text
    /// tower): configure a late-interaction model (ColPali, ColQwen) to search pages by text.
    #[error(
        "visual embedder `{0}` cannot embed a text question: configure a late-interaction model (ingest.visual_url)"
    )]
    NoTextQuery(String),
}

impl EmbedError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            EmbedError::Backend { retryable, .. } => *retryable,
            EmbedError::Task(_) => true,
            EmbedError::Image(_) | EmbedError::Shape(_) | EmbedError::NoTextQuery(_) => false,
        }
    }
}

/// One vector per text.
pub trait TextEmbedder: Send + Sync + 'static {
    /// Model name recorded with the vectors.
    fn name(&self) -> &str;
    /// Embeds `texts` (in order).
    fn embed(
        &self,
        texts: Vec<String>,
    ) -> impl Future<Output = Result<Vec<Vec<f32>>, EmbedError>> + Send;
}

/// Many vectors per page image (late interaction).
pub trait VisualEmbedder: Send + Sync + 'static {
    /// Model name recorded with the vectors.
    fn name(&self) -> &str;
    /// Embeds one PNG page image.
    fn embed_image(
        &self,
        png: Arc<Vec<u8>>,
    ) -> impl Future<Output = Result<MultiVector, EmbedError>> + Send;
    /// Embeds a text question into the pages' vector space (query vectors for MaxSim). By
    /// default [`EmbedError::NoTextQuery`]: only a model with a text tower can.
    fn embed_query(
        &self,
        _text: String,
    ) -> impl Future<Output = Result<MultiVector, EmbedError>> + Send {
        let name = self.name().to_owned();
        async move { Err(EmbedError::NoTextQuery(name)) }
    }
    /// Embeds an image given as a question ("pages that look like this"): by default the
    /// image's page vectors ([`VisualEmbedder::embed_image`]); an embedder may drop what adds
    /// nothing to a query (the pixel-patch fallback drops its blank patches).
    fn embed_image_query(
        &self,
        png: Arc<Vec<u8>>,
    ) -> impl Future<Output = Result<MultiVector, EmbedError>> + Send {
        self.embed_image(png)
    }
}

/// The offline visual fallback (no model): a grid of `cols` × `rows` patches of `patch_w` ×
/// `patch_h` gray values (128 by default: 16 × 8), each centred and L2-normalised; blank patches
/// give zero vectors. It has no text tower ([`VisualEmbedder::embed_query`] is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PixelPatchFallback {
    /// Patches across.
    pub cols: u32,
    /// Patches down.
    pub rows: u32,
    /// Patch width in samples.
    pub patch_w: u32,
    /// Patch height in samples.
    pub patch_h: u32,
}

impl Default for PixelPatchFallback {
    fn default() -> Self {
        Self {
            cols: 32,
            rows: 32,
            patch_w: 16,
            patch_h: 8,
        }
    }
}

impl PixelPatchFallback {
    /// Dimension of each vector (`patch_w * patch_h`).
    pub fn dim(&self) -> usize {
        (self.patch_w * self.patch_h) as usize
    }

    /// Embeds a decoded image.
    pub fn embed_gray(&self, image: &image::GrayImage) -> MultiVector {
        let (w, h) = (self.cols * self.patch_w, self.rows * self.patch_h);
        let small = image::imageops::resize(image, w, h, image::imageops::FilterType::Triangle);
        let dim = self.dim();
        let mut data = Vec::with_capacity(dim * (self.cols * self.rows) as usize);
        let mut patch = vec![0f32; dim];
        for r in 0..self.rows {
            for c in 0..self.cols {
                for y in 0..self.patch_h {
                    for x in 0..self.patch_w {
                        let px = small
                            .get_pixel(c * self.patch_w + x, r * self.patch_h + y)
                            .0[0];
                        patch[(y * self.patch_w + x) as usize] = f32::from(255 - px) / 255.0;
                    }
                }
                let mean = patch.iter().sum::<f32>() / dim as f32;
                patch.iter_mut().for_each(|v| *v -= mean);
                let norm = patch.iter().map(|v| v * v).sum::<f32>().sqrt();
                if norm > 1e-3 {
                    patch.iter_mut().for_each(|v| *v /= norm);
                } else {
                    patch.iter_mut().for_each(|v| *v = 0.0);
                }
                data.extend_from_slice(&patch);
            }
        }
        MultiVector { dim, data }
    }

    /// Embeds a PNG (or any format the `image` crate was built with).
    pub fn embed_png(&self, png: &[u8]) -> Result<MultiVector, EmbedError> {
        let img = image::load_from_memory(png).map_err(|e| EmbedError::Image(e.to_string()))?;
        Ok(self.embed_gray(&img.to_luma8()))
    }

    /// A query from an image: its non-blank patch vectors only (blank ones add nothing).
    pub fn query_from_png(&self, png: &[u8]) -> Result<MultiVector, EmbedError> {
        let all = self.embed_png(png)?;
        let dim = all.dim;
        let data = all
            .data
            .chunks_exact(dim)
            .filter(|v| v.iter().any(|x| *x != 0.0))
            .flatten()
            .copied()
            .collect();
        Ok(MultiVector { dim, data })
    }
}

impl VisualEmbedder for PixelPatchFallback {
    fn name(&self) -> &str {
        "patch-grid"
    }

    async fn embed_image(&self, png: Arc<Vec<u8>>) -> Result<MultiVector, EmbedError> {
        let this = *self;
        tokio::task::spawn_blocking(move || this.embed_png(&png))
            .await
            .map_err(|e| EmbedError::Task(e.to_string()))?
    }

    async fn embed_image_query(&self, png: Arc<Vec<u8>>) -> Result<MultiVector, EmbedError> {
        let this = *self;
        tokio::task::spawn_blocking(move || this.query_from_png(&png))
            .await
            .map_err(|e| EmbedError::Task(e.to_string()))?
    }
}

/// CPU text embedder needing no model: signed feature hashing of lower-cased words and word
/// bigrams into `dim` buckets, L2-normalised. Lexical, not semantic: a baseline that keeps the
/// vector-search path working offline; use an OpenAI-compatible server for real embeddings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashingEmbedder {
    /// Dimension of the vectors. Default 384.
    pub dim: usize,
}

impl Default for HashingEmbedder {
    fn default() -> Self {
        Self { dim: 384 }
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

impl HashingEmbedder {
    /// Embeds one text.
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let dim = self.dim.max(1);
        let mut v = vec![0f32; dim];
        let words: Vec<String> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        let mut add = |key: &[u8], weight: f32| {
            let h = fnv1a(key);
            let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
            v[(h % dim as u64) as usize] += sign * weight;
        };
        for w in &words {
            add(w.as_bytes(), 1.0);
        }
        for pair in words.windows(2) {
            add(format!("{} {}", pair[0], pair[1]).as_bytes(), 0.5);
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

impl TextEmbedder for HashingEmbedder {
    fn name(&self) -> &str {
        "hashing"
    }

    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

/// Cosine similarity (0 when either vector is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_vectors_are_normalised_and_blank_is_zero() {
        let e = PixelPatchFallback::default();
        let mut img = image::GrayImage::from_pixel(640, 900, image::Luma([255]));
        for y in 100..140 {
            for x in 50..400 {
                if (x / 7) % 2 == 0 {
                    img.put_pixel(x, y, image::Luma([0]));
                }
            }
        }
        let mv = e.embed_gray(&img);
        assert_eq!(mv.dim, 128);
        assert_eq!(mv.len(), 1024);
        let norms: Vec<f32> = mv
            .data
            .chunks_exact(128)
            .map(|v| v.iter().map(|x| x * x).sum())
            .collect();
        assert!(norms.iter().any(|n| (n - 1.0).abs() < 1e-3));
        assert!(norms.iter().filter(|n| **n == 0.0).count() > 900);
        assert!((cosine(&[1.0, 0.0], &[1.0, 0.0]) - 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
    }

    #[test]
    fn hashing_embedder_is_lexical_similarity() {
        let e = HashingEmbedder::default();
        let a = e.embed_one("Pointers of kind unique map to option types");
        let b = e.embed_one("unique pointers: option types");
        let c = e.embed_one("COM interfaces and reference counting");
        assert_eq!(a.len(), 384);
        assert!(cosine(&a, &b) > cosine(&a, &c) + 0.2);
        assert!(e.embed_one("").iter().all(|x| *x == 0.0));
    }
}
