//! Embedding backends: [`TextEmbedder`] (one vector per text, e.g. BGE-M3 or MiniLM behind
//! `/v1/embeddings`) and [`VisualEmbedder`] (many vectors per page image, ColQwen2 style, and
//! many per text question when the model has a text tower: [`crate::pooling::PoolingEmbedder`]).
//!
//! [`PixelPatchFallback`] is the offline fallback needing no model: the page is resized to a
//! fixed grid of patches and each patch's ink pattern becomes one centred, normalised 128-value
//! vector (1024 vectors per page by default). It finds a page from another rendering of the
//! same page (another resolution, a scan-like copy) and nothing else: it has no text tower, so a
//! text question against it is [`EmbedError::NoTextQuery`], never results.
//!
//! An image from outside (a question) meets a ceiling before any decode: [`check_image_size`]
//! reads its width and height from its header alone and refuses more than a pixel budget with
//! [`EmbedError::ImageTooLarge`]; [`decode_image`] decodes under `image::Limits` that allow no
//! side beyond the header's and no allocation beyond 8 bytes per pixel of the budget, at most
//! [`IMAGE_DECODES_AT_ONCE`] at a time in the process.

use std::future::Future;
use std::io::Cursor;
use std::sync::Arc;

use crate::maxsim::MultiVector;

/// Most images decoded at once in this process ([`decode_image`] through the pixel-patch
/// fallback, pages and questions together): each may hold up to 8 bytes per pixel of its budget
/// while it decodes, so memory is bounded by this many budgets.
pub const IMAGE_DECODES_AT_ONCE: usize = 2;

/// The permits of [`IMAGE_DECODES_AT_ONCE`].
static IMAGE_DECODES: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(IMAGE_DECODES_AT_ONCE);

/// The pixel-patch fallback's own decode ceiling by default: 64 Mpx, the renderer's default
/// [`max_page_pixels`](crate::render::RenderConfig::max_page_pixels), so that every page rendered
/// with the defaults is embedded. An image question meets the pipeline's smaller budget first
/// ([`PipelineConfig::max_image_pixels`](crate::pipeline::PipelineConfig::max_image_pixels)).
pub const DEFAULT_MAX_DECODE_PIXELS: u64 = 64 * 1024 * 1024;

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
    /// The image's header declares more pixels than allowed: refused before any decode.
    #[error(
        "the image is {width} x {height} pixels, more than the {max_pixels} pixels allowed \
         (ingest.max_image_pixels)"
    )]
    ImageTooLarge {
        /// Its width, as its header declares it.
        width: u32,
        /// Its height, as its header declares it.
        height: u32,
        /// The budget it exceeds.
        max_pixels: u64,
    },
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
            EmbedError::Image(_)
            | EmbedError::ImageTooLarge { .. }
            | EmbedError::Shape(_)
            | EmbedError::NoTextQuery(_) => false,
        }
    }
}

/// An image's width and height, read from its header alone (PNG, JPEG or any format the
/// `image` crate was built with); nothing is decoded.
pub fn image_size(bytes: &[u8]) -> Result<(u32, u32), EmbedError> {
    image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| EmbedError::Image(e.to_string()))?
        .into_dimensions()
        .map_err(|e| EmbedError::Image(e.to_string()))
}

/// An image's width and height from its header ([`image_size`]), or
/// [`EmbedError::ImageTooLarge`] when they make more than `max_pixels`.
pub fn check_image_size(bytes: &[u8], max_pixels: u64) -> Result<(u32, u32), EmbedError> {
    let (width, height) = image_size(bytes)?;
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(EmbedError::ImageTooLarge {
            width,
            height,
            max_pixels,
        });
    }
    Ok((width, height))
}

/// Decodes an image of at most `max_pixels`: its size is checked from its header first
/// ([`check_image_size`]), then it is decoded under `image::Limits` that allow no side beyond
/// the header's and no allocation beyond 8 bytes per pixel of `max_pixels` (the widest pixel a
/// decoder makes, RGBA at 16 bits). Call it at most [`IMAGE_DECODES_AT_ONCE`] at a time (the
/// fallback's embedding does, [`PixelPatchFallback`]).
pub fn decode_image(bytes: &[u8], max_pixels: u64) -> Result<image::DynamicImage, EmbedError> {
    let (width, height) = check_image_size(bytes, max_pixels)?;
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(width);
    limits.max_image_height = Some(height);
    limits.max_alloc = Some(max_pixels.saturating_mul(8));
    let mut reader = image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| EmbedError::Image(e.to_string()))?;
    reader.limits(limits);
    reader
        .decode()
        .map_err(|e| EmbedError::Image(e.to_string()))
}

/// Runs `decode` on the blocking pool once one of the [`IMAGE_DECODES_AT_ONCE`] permits is free.
async fn decode_bounded<X: Send + 'static>(
    decode: impl FnOnce() -> Result<X, EmbedError> + Send + 'static,
) -> Result<X, EmbedError> {
    let _permit = IMAGE_DECODES
        .acquire()
        .await
        .map_err(|e| EmbedError::Task(e.to_string()))?;
    tokio::task::spawn_blocking(decode)
        .await
        .map_err(|e| EmbedError::Task(e.to_string()))?
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
/// give zero vectors. It has no text tower ([`VisualEmbedder::embed_query`] is refused). Images
/// are decoded by [`decode_image`] under `max_pixels`, [`IMAGE_DECODES_AT_ONCE`] at a time.
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
    /// Largest image decoded, in pixels; a larger one is [`EmbedError::ImageTooLarge`]. Default
    /// [`DEFAULT_MAX_DECODE_PIXELS`].
    pub max_pixels: u64,
}

impl Default for PixelPatchFallback {
    fn default() -> Self {
        Self {
            cols: 32,
            rows: 32,
            patch_w: 16,
            patch_h: 8,
            max_pixels: DEFAULT_MAX_DECODE_PIXELS,
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

    /// Embeds a PNG (or any format the `image` crate was built with) of at most `max_pixels`
    /// ([`decode_image`]).
    pub fn embed_png(&self, png: &[u8]) -> Result<MultiVector, EmbedError> {
        let img = decode_image(png, self.max_pixels)?;
        Ok(self.embed_gray(&img.into_luma8()))
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
        decode_bounded(move || this.embed_png(&png)).await
    }

    async fn embed_image_query(&self, png: Arc<Vec<u8>>) -> Result<MultiVector, EmbedError> {
        let this = *self;
        decode_bounded(move || this.query_from_png(&png)).await
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

/// Images for the tests of this crate.
#[cfg(test)]
pub(crate) mod test_images {
    #![allow(clippy::unwrap_used)]

    /// A PNG whose header declares `width` × `height` RGBA pixels around the data of a 1 × 1
    /// image: a decompression bomb's header (11585 × 11585 is 537 MB to decode) in 70 bytes.
    pub(crate) fn png_declaring(width: u32, height: u32) -> Vec<u8> {
        let mut png = Vec::new();
        image::RgbaImage::new(1, 1)
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        // The signature (8), IHDR's length (4) and type (4), then its width and height; its
        // CRC covers the type and the 13 bytes of data.
        png[16..20].copy_from_slice(&width.to_be_bytes());
        png[20..24].copy_from_slice(&height.to_be_bytes());
        let crc = crc32(&png[12..29]);
        png[29..33].copy_from_slice(&crc.to_be_bytes());
        png
    }

    /// A gray 64 × 64 PNG of a ramp: an ordinary image.
    pub(crate) fn png_ramp() -> Vec<u8> {
        let mut png = Vec::new();
        image::GrayImage::from_fn(64, 64, |x, _| image::Luma([(x * 4) as u8]))
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        png
    }

    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::test_images::{png_declaring, png_ramp};
    use super::*;

    #[test]
    fn an_image_declaring_more_pixels_than_the_budget_is_refused_from_its_header() {
        let bomb = png_declaring(11585, 11585);
        assert!(bomb.len() < 100, "{}", bomb.len());
        assert_eq!(image_size(&bomb).unwrap(), (11585, 11585));
        let too_large = |e: &EmbedError| {
            matches!(
                e,
                EmbedError::ImageTooLarge {
                    width: 11585,
                    height: 11585,
                    max_pixels: 40_000_000
                }
            )
        };
        let e = check_image_size(&bomb, 40_000_000).unwrap_err();
        assert!(too_large(&e), "{e:?}");
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("ingest.max_image_pixels"), "{e}");
        // Its decode is refused the same way, before the 537 MB its header asks for.
        assert!(too_large(&decode_image(&bomb, 40_000_000).unwrap_err()));
        let fallback = PixelPatchFallback {
            max_pixels: 40_000_000,
            ..PixelPatchFallback::default()
        };
        assert!(too_large(&fallback.query_from_png(&bomb).unwrap_err()));
        // An ordinary image: read, decoded and embedded as before.
        let ramp = png_ramp();
        assert_eq!(check_image_size(&ramp, 40_000_000).unwrap(), (64, 64));
        assert_eq!(decode_image(&ramp, 64 * 64).unwrap().width(), 64);
        assert_eq!(fallback.embed_png(&ramp).unwrap().len(), 1024);
        // Not an image: a decoding error, not a size.
        assert!(matches!(
            check_image_size(b"not an image", 40_000_000),
            Err(EmbedError::Image(_))
        ));
    }

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
