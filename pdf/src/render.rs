//! PDF pages rendered to images with [hayro](https://crates.io/crates/hayro), a pure-Rust
//! rasterizer, one page at a time.
//!
//! [`render_pages`] validates the input first ([`check_pdf_bytes`]): empty files, files that are
//! not PDF, truncated files, password-protected files and pages too large to rasterize within
//! the configured pixel budget each end as a typed [`RenderError`] instead of a panic or an
//! unbounded allocation. Pages are handed to a callback as soon as each is rendered, so a long
//! document is never held in memory as a whole.
//!
//! Before a page is read, what its streams decode to is counted against
//! [`RenderConfig::max_decoded_bytes`] ([`crate::ceiling`]): a page past it is handed to the
//! callback with its [`RenderedPage::failure`] ([`PageFailure::TooLarge`]) and no image or text,
//! and the pages after it are rendered as usual.

use std::io::Cursor;
use std::ops::ControlFlow;
use std::panic::AssertUnwindSafe;

use hayro::hayro_interpret::util::TransformExt;
use hayro::hayro_interpret::{InterpreterCache, InterpreterSettings};
use hayro::hayro_syntax::{LoadPdfError, Pdf};
use hayro::kurbo::Affine;
use hayro::vello_cpu::color::palette::css::WHITE;
use hayro::vello_cpu::{Pixmap, RasterizerSettings, RenderContext, Resources, TargetInit};
use hayro::{RenderCache, RenderSettings, render_into};
use image::{ExtendedColorType, ImageEncoder, RgbImage};

use crate::ceiling::{self, Ceiling};
use crate::text_layer::{self, TextLayer, TextLayerMode};

/// Settings of the renderer.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RenderConfig {
    /// Resolution in dots per inch (a PDF point is 1/72 inch). Default 150.
    pub dpi: f32,
    /// Largest page accepted, in pixels (width × height) at `dpi`. A larger page is refused with
    /// [`RenderError::PageTooLarge`] before any buffer is allocated. Default 64 Mpx (256 MB RGBA).
    pub max_page_pixels: u64,
    /// Largest input file accepted, in bytes. Default 512 MiB.
    pub max_file_bytes: u64,
    /// Most pages a document may have: a longer one is refused with
    /// [`RenderError::TooManyPages`] before any page is rendered. Default 10,000.
    pub max_pages: u32,
    /// Most bytes one stream of a page, and all the page's streams together, may decode to
    /// (inflated content, fonts, images at 4 bytes per pixel: [`crate::ceiling`]). A page past
    /// it fails alone with [`PageFailure::TooLarge`], counted before any of it is decoded for
    /// real; an object or cross-reference stream past it (inflated while the file is opened)
    /// fails the document with [`RenderError::StreamTooLarge`]. Default 256 MiB.
    pub max_decoded_bytes: u64,
    /// Whether each page's text layer is read too ([`RenderedPage::text_layer`]). Default
    /// [`TextLayerMode::Auto`].
    pub text_layer: TextLayerMode,
    /// Whether a page whose text layer is usable ([`TextLayer::is_usable`]) is rasterized too.
    /// Default true (a visual embedder embeds its image). False: its
    /// [`image`](RenderedPage::image) is empty (0 × 0), which saves nine tenths of the time of
    /// a born-digital document where nothing reads its pixels (a pipeline that does not embed).
    pub raster_text_pages: bool,
}

impl Default for RenderConfig {
    fn default() -> Self {
        Self {
            dpi: 150.0,
            max_page_pixels: 64 * 1024 * 1024,
            max_file_bytes: 512 * 1024 * 1024,
            max_pages: 10_000,
            max_decoded_bytes: 256 * 1024 * 1024,
            text_layer: TextLayerMode::Auto,
            raster_text_pages: true,
        }
    }
}

/// Why a document could not be rendered. Every variant is a property of the document (not of
/// the machine), so a job failing with one of them should not be retried.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum RenderError {
    /// The file has no bytes.
    #[error("empty file")]
    Empty,
    /// The file is larger than [`RenderConfig::max_file_bytes`].
    #[error("file of {size} bytes exceeds the limit of {limit} bytes")]
    FileTooLarge {
        /// Size of the file.
        size: u64,
        /// The configured limit.
        limit: u64,
    },
    /// The file does not start with a `%PDF-` header.
    #[error("not a PDF file (no %PDF- header in the first 1024 bytes)")]
    NotPdf,
    /// The file has a PDF header but no `%%EOF` marker at its end.
    #[error("truncated PDF (no %%EOF marker in the last 2048 bytes)")]
    Truncated,
    /// The document is encrypted and cannot be opened without a password.
    #[error("encrypted PDF: {0}")]
    Encrypted(String),
    /// The document could not be parsed.
    #[error("malformed PDF: {0}")]
    Malformed(String),
    /// The document has no page.
    #[error("PDF has no pages")]
    NoPages,
    /// An object stream or cross-reference stream, which hayro inflates while it opens the
    /// file, decodes to more than [`RenderConfig::max_decoded_bytes`]
    /// ([`ceiling::check_file`]).
    #[error("object or cross-reference {0}")]
    StreamTooLarge(ceiling::TooLarge),
    /// The document has more pages than [`RenderConfig::max_pages`].
    #[error("{pages} pages > max_pages = {limit}")]
    TooManyPages {
        /// Its pages.
        pages: u64,
        /// The configured limit.
        limit: u32,
    },
    /// A page would need more pixels than allowed.
    #[error(
        "page {page} is {width_pt:.0} x {height_pt:.0} points: {width_px} x {height_px} px at \
         this dpi exceeds the limit of {limit} pixels"
    )]
    PageTooLarge {
        /// Page number, from 1.
        page: u32,
        /// Page width in points.
        width_pt: f32,
        /// Page height in points.
        height_pt: f32,
        /// Width it would have in pixels.
        width_px: u64,
        /// Height it would have in pixels.
        height_px: u64,
        /// The configured pixel limit.
        limit: u64,
    },
    /// The rasterizer panicked on this page (a bug or an unsupported construct in the file).
    #[error("renderer failed on page {page}")]
    RendererPanicked {
        /// Page number, from 1.
        page: u32,
    },
    /// PNG encoding failed.
    #[error("PNG encoding failed: {0}")]
    Encode(String),
    /// A page number past the document's last page (or 0) was asked for.
    #[error("no page {page}: the document has {pages}")]
    NoSuchPage {
        /// The page asked for, from 1.
        page: u32,
        /// The document's pages.
        pages: u32,
    },
}

/// Why one page failed alone, as a stable name (stored, and shown in reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureReason {
    /// Its streams decode to more than the ceiling allows ([`PageFailure::TooLarge`]).
    TooLarge,
    /// The worker reading it ([`crate::worker`]) passed one of its OS limits: its address space
    /// (`RLIMIT_AS`: an allocation refused) or its CPU seconds (`RLIMIT_CPU`).
    ResourceLimit,
    /// The worker reading it did not answer within its wall-clock time per page, and was killed.
    Timeout,
    /// The worker reading it died (a signal, an exit) or spoke out of protocol.
    Crashed,
}

impl FailureReason {
    /// The stable name: `too_large`, `resource_limit`, `timeout`, `crashed`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::TooLarge => "too_large",
            FailureReason::ResourceLimit => "resource_limit",
            FailureReason::Timeout => "timeout",
            FailureReason::Crashed => "crashed",
        }
    }

    /// The reason named `name` ([`FailureReason::as_str`]), if any.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "too_large" => Some(FailureReason::TooLarge),
            "resource_limit" => Some(FailureReason::ResourceLimit),
            "timeout" => Some(FailureReason::Timeout),
            "crashed" => Some(FailureReason::Crashed),
            _ => None,
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why one page was not rendered. The document goes on: the pages after it are rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PageFailure {
    /// A stream of the page, or its streams together, decode to more than
    /// [`RenderConfig::max_decoded_bytes`].
    #[error("page {page}: {cause}")]
    TooLarge {
        /// Page number, from 1.
        page: u32,
        /// What went past the limit.
        #[source]
        cause: ceiling::TooLarge,
    },
}

impl PageFailure {
    /// Its stable name.
    pub fn reason(&self) -> FailureReason {
        match self {
            PageFailure::TooLarge { .. } => FailureReason::TooLarge,
        }
    }
}

/// One rendered page.
#[derive(Debug, Clone)]
pub struct RenderedPage {
    /// Page number, from 1.
    pub page_no: u32,
    /// Number of pages in the document.
    pub page_count: u32,
    /// The page as 8-bit RGB; empty (0 × 0) for a page kept by its text layer when
    /// [`RenderConfig::raster_text_pages`] is off.
    pub image: RgbImage,
    /// The page's size in pixels at the configured dpi (the image's, when it has one).
    pub size: (u32, u32),
    /// The page's text layer, in the image's pixels (`None` with [`TextLayerMode::Ignore`], or
    /// when the interpreter failed on it); whether it is usable is
    /// [`TextLayer::is_usable`]'s call.
    pub text_layer: Option<TextLayer>,
    /// Why the page was not read, when it failed alone: its image is then empty (0 × 0) and it
    /// has no text layer.
    pub failure: Option<PageFailure>,
}

impl RenderedPage {
    /// Encodes the page as PNG (fast compression).
    pub fn to_png(&self) -> Result<Vec<u8>, RenderError> {
        encode_png(&self.image)
    }
}

/// Encodes an RGB image as PNG with fast compression.
pub fn encode_png(image: &RgbImage) -> Result<Vec<u8>, RenderError> {
    encode_png_with(
        image,
        image::codecs::png::CompressionType::Fast,
        image::codecs::png::FilterType::Adaptive,
    )
}

/// Encodes an RGB image as PNG with the given compression and filter.
pub fn encode_png_with(
    image: &RgbImage,
    compression: image::codecs::png::CompressionType,
    filter: image::codecs::png::FilterType,
) -> Result<Vec<u8>, RenderError> {
    let mut out = Vec::with_capacity(image.as_raw().len() / 8);
    image::codecs::png::PngEncoder::new_with_quality(Cursor::new(&mut out), compression, filter)
        .write_image(
            image.as_raw(),
            image.width(),
            image.height(),
            ExtendedColorType::Rgb8,
        )
        .map_err(|e| RenderError::Encode(e.to_string()))?;
    Ok(out)
}

/// Cheap checks on the raw bytes before parsing: empty, size limit, header, `%%EOF` trailer.
pub fn check_pdf_bytes(data: &[u8], config: &RenderConfig) -> Result<(), RenderError> {
    if data.is_empty() {
        return Err(RenderError::Empty);
    }
    let size = data.len() as u64;
    if size > config.max_file_bytes {
        return Err(RenderError::FileTooLarge {
            size,
            limit: config.max_file_bytes,
        });
    }
    let head = &data[..data.len().min(1024)];
    if find(head, b"%PDF-").is_none() {
        return Err(RenderError::NotPdf);
    }
    let tail = &data[data.len().saturating_sub(2048)..];
    if find(tail, b"%%EOF").is_none() {
        return Err(RenderError::Truncated);
    }
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Opens a PDF after [`check_pdf_bytes`] and [`ceiling::check_file`], mapping hayro's errors to
/// [`RenderError`]; a document without pages or with more than [`RenderConfig::max_pages`] is
/// refused.
pub fn open_pdf(data: Vec<u8>, config: &RenderConfig) -> Result<Pdf, RenderError> {
    check_pdf_bytes(&data, config)?;
    ceiling::check_file(&data, config.max_decoded_bytes).map_err(RenderError::StreamTooLarge)?;
    let pdf = std::panic::catch_unwind(AssertUnwindSafe(|| Pdf::new(data)))
        .map_err(|_| RenderError::Malformed("parser panicked".into()))?
        .map_err(|e| match e {
            LoadPdfError::Decryption(d) => RenderError::Encrypted(format!("{d:?}")),
            LoadPdfError::Invalid => RenderError::Malformed("invalid structure".into()),
        })?;
    let pages = pdf.pages().len();
    if pages == 0 {
        return Err(RenderError::NoPages);
    }
    if pages as u64 > u64::from(config.max_pages) {
        return Err(RenderError::TooManyPages {
            pages: pages as u64,
            limit: config.max_pages,
        });
    }
    Ok(pdf)
}

/// Number of pages of a PDF, with the same checks as [`render_pages`] (the page-size guard
/// included, so that an oversized page is refused before any page is rendered).
pub fn page_count(data: Vec<u8>, config: &RenderConfig) -> Result<u32, RenderError> {
    let pdf = open_pdf(data, config)?;
    check_page_sizes(&pdf, config)?;
    Ok(u32::try_from(pdf.pages().len()).unwrap_or(u32::MAX))
}

/// Pixel size of a page at the configured dpi, or [`RenderError::PageTooLarge`].
fn page_pixels(
    page_no: u32,
    dims: (f32, f32),
    config: &RenderConfig,
) -> Result<(u16, u16), RenderError> {
    let scale = f64::from(config.dpi) / 72.0;
    let w = (f64::from(dims.0) * scale).ceil().max(1.0) as u64;
    let h = (f64::from(dims.1) * scale).ceil().max(1.0) as u64;
    let too_large = || RenderError::PageTooLarge {
        page: page_no,
        width_pt: dims.0,
        height_pt: dims.1,
        width_px: w,
        height_px: h,
        limit: config.max_page_pixels,
    };
    if w.saturating_mul(h) > config.max_page_pixels {
        return Err(too_large());
    }
    // The rasterizer addresses pixels with u16.
    let w16 = u16::try_from(w).map_err(|_| too_large())?;
    let h16 = u16::try_from(h).map_err(|_| too_large())?;
    Ok((w16, h16))
}

fn check_page_sizes(pdf: &Pdf, config: &RenderConfig) -> Result<(), RenderError> {
    for (idx, page) in pdf.pages().iter().enumerate() {
        let page_no = u32::try_from(idx + 1).unwrap_or(u32::MAX);
        page_pixels(page_no, page.render_dimensions(), config)?;
    }
    Ok(())
}

/// Renders the pages of `data` numbered `first_page..` (from 1) one at a time, calling `sink`
/// with each page as soon as it is rendered; `sink` may stop early with `ControlFlow::Break`.
///
/// Every page's size is checked against [`RenderConfig::max_page_pixels`] before the first page
/// is rendered, so a document with one oversized page fails as a whole, early. What each page's
/// streams decode to is counted against [`RenderConfig::max_decoded_bytes`] before the page is
/// read: a page past it is handed to `sink` unread, with its [`RenderedPage::failure`], and the
/// next pages are rendered. At most one page image is alive at a time inside this function
/// (plus what `sink` keeps).
///
/// Returns the document's page count.
pub fn render_pages<F>(
    data: Vec<u8>,
    config: &RenderConfig,
    first_page: u32,
    mut sink: F,
) -> Result<u32, RenderError>
where
    F: FnMut(RenderedPage) -> ControlFlow<()>,
{
    let pdf = open_pdf(data, config)?;
    let mut document = PageRenderer::new(&pdf, config)?;
    let page_count = document.page_count();
    for page_no in first_page.max(1)..=page_count {
        if sink(document.render(page_no)?).is_break() {
            break;
        }
    }
    Ok(page_count)
}

/// The pages of a document opened by [`open_pdf`], rendered one at a time in any order with
/// [`PageRenderer::render`]: the renderer's caches and the decoded-size ceiling's counts are
/// kept between pages. [`render_pages`] walks one over the pages; a PDF worker
/// ([`crate::worker`]) keeps one per opened document.
pub struct PageRenderer<'a> {
    pdf: &'a Pdf,
    config: RenderConfig,
    page_count: u32,
    cache: RenderCache<'a>,
    text_cache: InterpreterCache<'a>,
    ctx: RenderContext,
    pixmap: Pixmap,
    resources: Resources,
    ceiling: Ceiling,
}

impl std::fmt::Debug for PageRenderer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageRenderer")
            .field("page_count", &self.page_count)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<'a> PageRenderer<'a> {
    /// A renderer of `pdf`'s pages (opened by [`open_pdf`]), once every page's size is checked
    /// against [`RenderConfig::max_page_pixels`].
    pub fn new(pdf: &'a Pdf, config: &RenderConfig) -> Result<Self, RenderError> {
        check_page_sizes(pdf, config)?;
        let page_count = u32::try_from(pdf.pages().len()).unwrap_or(u32::MAX);
        Ok(Self {
            pdf,
            config: *config,
            page_count,
            cache: RenderCache::new(),
            text_cache: InterpreterCache::new(),
            ctx: RenderContext::new(1, 1),
            pixmap: Pixmap::new(1, 1),
            resources: Resources::default(),
            ceiling: Ceiling::new(config.max_decoded_bytes),
        })
    }

    /// The document's number of pages.
    pub fn page_count(&self) -> u32 {
        self.page_count
    }

    /// Renders page `page_no` (from 1), with its text layer as [`RenderConfig::text_layer`]
    /// says; a page whose streams decode past [`RenderConfig::max_decoded_bytes`] comes back
    /// unread with its [`RenderedPage::failure`]. A page number out of range is
    /// [`RenderError::NoSuchPage`].
    pub fn render(&mut self, page_no: u32) -> Result<RenderedPage, RenderError> {
        self.read(page_no, true)
    }

    /// Reads page `page_no`'s text layer only (whatever [`RenderConfig::text_layer`] says), its
    /// image left empty (0 × 0); a page past the ceiling comes back with its failure, as from
    /// [`PageRenderer::render`].
    pub fn text_layer(&mut self, page_no: u32) -> Result<RenderedPage, RenderError> {
        self.read(page_no, false)
    }

    fn read(&mut self, page_no: u32, raster: bool) -> Result<RenderedPage, RenderError> {
        let mut config = self.config;
        if !raster {
            config.text_layer = TextLayerMode::Auto;
        }
        let page_count = self.page_count;
        let pages = self.pdf.pages();
        let Some(page) = page_no
            .checked_sub(1)
            .and_then(|idx| pages.get(idx as usize))
        else {
            return Err(RenderError::NoSuchPage {
                page: page_no,
                pages: page_count,
            });
        };
        let (w, h) = page_pixels(page_no, page.render_dimensions(), &config)?;
        let ceiling = &mut self.ceiling;
        let checked = std::panic::catch_unwind(AssertUnwindSafe(|| ceiling.check_page(page)))
            .map_err(|_| RenderError::RendererPanicked { page: page_no })?;
        if let Err(cause) = checked {
            return Ok(RenderedPage {
                page_no,
                page_count,
                image: RgbImage::new(0, 0),
                size: (u32::from(w), u32::from(h)),
                text_layer: None,
                failure: Some(PageFailure::TooLarge {
                    page: page_no,
                    cause,
                }),
            });
        }
        let scale = f64::from(config.dpi) / 72.0;
        // A page the interpreter fails on has no text layer: the reader reads its image.
        let text_cache = &self.text_cache;
        let text_layer = match config.text_layer {
            TextLayerMode::Ignore => None,
            TextLayerMode::Auto => std::panic::catch_unwind(AssertUnwindSafe(|| {
                text_layer::extract(page, text_cache, scale)
            }))
            .ok(),
        };
        let keeps_text = text_layer.as_ref().is_some_and(TextLayer::is_usable);
        let image = if !raster || (keeps_text && !config.raster_text_pages) {
            RgbImage::new(0, 0)
        } else {
            let (ctx, pixmap, resources, cache) = (
                &mut self.ctx,
                &mut self.pixmap,
                &mut self.resources,
                &self.cache,
            );
            let rendered = std::panic::catch_unwind(AssertUnwindSafe(|| {
                ctx.reset_and_resize(w, h);
                pixmap.resize(w, h);
                let transform = Affine::scale(scale) * page.initial_transform(true).to_kurbo();
                render_into(
                    page,
                    cache,
                    &InterpreterSettings::default(),
                    &RenderSettings::default(),
                    ctx,
                    transform,
                );
                ctx.flush();
                ctx.render_with(
                    pixmap,
                    resources,
                    RasterizerSettings {
                        target_init: TargetInit::Clear(WHITE),
                        ..Default::default()
                    },
                );
            }));
            if rendered.is_err() {
                return Err(RenderError::RendererPanicked { page: page_no });
            }
            pixmap_to_rgb(&self.pixmap)
        };
        Ok(RenderedPage {
            page_no,
            page_count,
            image,
            size: (u32::from(w), u32::from(h)),
            text_layer,
            failure: None,
        })
    }
}

/// Converts a premultiplied RGBA pixmap (rendered over an opaque white background) to RGB.
fn pixmap_to_rgb(pixmap: &Pixmap) -> RgbImage {
    let rgba = pixmap.data_as_u8_slice();
    let (w, h) = (u32::from(pixmap.width()), u32::from(pixmap.height()));
    let mut rgb = vec![0u8; rgba.len() / 4 * 3];
    // Fixed-size chunks: the compiler drops the bounds checks and vectorises the copy.
    let (src, _) = rgba.as_chunks::<4>();
    let (dst, _) = rgb.as_chunks_mut::<3>();
    for (d, s) in dst.iter_mut().zip(src) {
        *d = [s[0], s[1], s[2]];
    }
    // Length is exactly w * h * 3 by construction; fall back to a blank page otherwise.
    RgbImage::from_raw(w, h, rgb).unwrap_or_else(|| RgbImage::new(w, h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_checks_classify_inputs() {
        let c = RenderConfig::default();
        assert_eq!(check_pdf_bytes(b"", &c), Err(RenderError::Empty));
        assert_eq!(
            check_pdf_bytes(b"hello world", &c),
            Err(RenderError::NotPdf)
        );
        assert_eq!(
            check_pdf_bytes(b"%PDF-1.4\n1 0 obj", &c),
            Err(RenderError::Truncated)
        );
        assert_eq!(check_pdf_bytes(b"%PDF-1.4\n%%EOF\n", &c), Ok(()));
        let small = RenderConfig {
            max_file_bytes: 4,
            ..c
        };
        assert!(matches!(
            check_pdf_bytes(b"%PDF-", &small),
            Err(RenderError::FileTooLarge { .. })
        ));
    }

    #[test]
    fn page_pixel_guard() {
        let c = RenderConfig::default();
        assert_eq!(page_pixels(1, (595.0, 842.0), &c), Ok((1240, 1755)));
        let err = page_pixels(3, (20_000.0, 20_000.0), &c);
        assert!(matches!(
            err,
            Err(RenderError::PageTooLarge {
                page: 3,
                width_px: 41667,
                ..
            })
        ));
    }
}
