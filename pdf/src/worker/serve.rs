//! The worker's side: [`serve`] answers requests on a pair of pipes until the pipeline closes
//! its end. Any binary can host it (`horos-ref worker pdf` does); it needs no file, no network
//! and no thread of its own.

use std::io::{BufReader, BufWriter, Read, Write};

use crate::limits::has_network;
use crate::render::{PageRenderer, RenderError, RenderedPage, encode_png, open_pdf};

use super::protocol::{
    FailedKind, PROTOCOL_VERSION, PageFailed, PageHeader, ProtocolError, Reply, Request,
    read_frame, write_bytes, write_message,
};

/// The largest bytes frame a worker reads (a PDF to open, an image to decode): 1 GiB. Its own
/// address-space limit is the tighter ceiling.
pub const MAX_REQUEST_BYTES: u64 = 1 << 30;

/// Answers the requests read from `input` on `output` until `input` closes (then `Ok`), or the
/// pipeline speaks out of protocol (then the error: the host should exit). The host's standard
/// input and output are the usual pipes; nothing else may write to that output.
pub fn serve(input: impl Read, output: impl Write) -> Result<(), ProtocolError> {
    serve_with(input, output, |_, _| {})
}

/// [`serve`], calling `inspect` with each request (and its bytes) before it is answered: a host
/// may log it, or count it.
pub fn serve_with(
    input: impl Read,
    output: impl Write,
    inspect: impl FnMut(&Request, &[u8]),
) -> Result<(), ProtocolError> {
    let mut io = Pipes {
        input: BufReader::new(input),
        output: BufWriter::new(output),
        inspect,
    };
    io.reply(&Reply::Hello {
        protocol: PROTOCOL_VERSION,
        network: has_network(),
    })?;
    let mut next = io.request()?;
    while let Some((request, bytes)) = next.take() {
        next = match request {
            Request::Open { config } => match open_pdf(bytes, &config) {
                Err(e) => {
                    io.failed(FailedKind::Document, &e)?;
                    io.request()?
                }
                Ok(pdf) => match PageRenderer::new(&pdf, &config) {
                    Err(e) => {
                        io.failed(FailedKind::Document, &e)?;
                        io.request()?
                    }
                    Ok(mut renderer) => {
                        io.reply(&Reply::Opened {
                            pages: renderer.page_count(),
                        })?;
                        io.serve_document(&mut renderer)?
                    }
                },
            },
            Request::DecodeImage { max_pixels } => {
                io.decode(&bytes, max_pixels)?;
                io.request()?
            }
            Request::RenderPage { .. } | Request::TextLayer { .. } => {
                io.failed(FailedKind::Request, &"no document is open")?;
                io.request()?
            }
        };
    }
    Ok(())
}

/// The worker's two pipes.
struct Pipes<R, W: Write, F> {
    input: BufReader<R>,
    output: BufWriter<W>,
    inspect: F,
}

impl<R: Read, W: Write, F: FnMut(&Request, &[u8])> Pipes<R, W, F> {
    /// The next request with its bytes (empty when it has none); `None` once the input closed.
    fn request(&mut self) -> Result<Option<(Request, Vec<u8>)>, ProtocolError> {
        let Some(frame) = read_frame(&mut self.input, MAX_REQUEST_BYTES)? else {
            return Ok(None);
        };
        let request: Request = frame.message()?;
        let bytes = if request.has_bytes() {
            read_frame(&mut self.input, MAX_REQUEST_BYTES)?
                .ok_or(ProtocolError::Closed)?
                .bytes()?
        } else {
            Vec::new()
        };
        (self.inspect)(&request, &bytes);
        Ok(Some((request, bytes)))
    }

    fn reply(&mut self, reply: &Reply) -> Result<(), ProtocolError> {
        write_message(&mut self.output, reply)?;
        self.output.flush()?;
        Ok(())
    }

    fn failed(
        &mut self,
        kind: FailedKind,
        error: &dyn std::fmt::Display,
    ) -> Result<(), ProtocolError> {
        self.reply(&Reply::Failed {
            kind,
            message: error.to_string(),
        })
    }

    /// Answers the requests on an open document until another is opened (returned) or the
    /// input closes (`None`).
    fn serve_document(
        &mut self,
        renderer: &mut PageRenderer<'_>,
    ) -> Result<Option<(Request, Vec<u8>)>, ProtocolError> {
        loop {
            let Some((request, bytes)) = self.request()? else {
                return Ok(None);
            };
            let read = match request {
                Request::Open { .. } => return Ok(Some((request, bytes))),
                Request::DecodeImage { max_pixels } => {
                    self.decode(&bytes, max_pixels)?;
                    continue;
                }
                Request::RenderPage { page } => renderer.render(page),
                Request::TextLayer { page } => renderer.text_layer(page),
            };
            match read.and_then(page_reply) {
                Ok((header, png)) => {
                    write_message(&mut self.output, &Reply::Page { page: header })?;
                    if let Some(png) = png {
                        write_bytes(&mut self.output, &png)?;
                    }
                    self.output.flush()?;
                }
                Err(e) => self.failed(FailedKind::Document, &e)?,
            }
        }
    }

    fn decode(&mut self, bytes: &[u8], max_pixels: u64) -> Result<(), ProtocolError> {
        match decode_image(bytes, max_pixels) {
            Ok((width, height, png)) => {
                write_message(&mut self.output, &Reply::Image { width, height })?;
                write_bytes(&mut self.output, &png)?;
                self.output.flush()?;
                Ok(())
            }
            Err(e) => self.failed(FailedKind::Image, &e),
        }
    }
}

/// A rendered page as its reply: the header, and its PNG when it has an image.
fn page_reply(page: RenderedPage) -> Result<(PageHeader, Option<Vec<u8>>), RenderError> {
    let png = if page.image.width() > 0 {
        Some(encode_png(&page.image)?)
    } else {
        None
    };
    let failure = page.failure.as_ref().map(|f| PageFailed {
        reason: f.reason(),
        message: f.to_string(),
    });
    Ok((
        PageHeader {
            page_no: page.page_no,
            page_count: page.page_count,
            width: page.size.0,
            height: page.size.1,
            image: png.is_some(),
            text_layer: page.text_layer,
            failure,
        },
        png,
    ))
}

/// Decodes an image of at most `max_pixels` pixels (refused from its header, before any pixel
/// is decoded) and encodes it as an RGB PNG.
fn decode_image(bytes: &[u8], max_pixels: u64) -> Result<(u32, u32, Vec<u8>), String> {
    let reader = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| e.to_string())?;
    let (width, height) = reader.into_dimensions().map_err(|e| e.to_string())?;
    let pixels = u64::from(width) * u64::from(height);
    if pixels > max_pixels {
        return Err(format!(
            "too_large: {width} x {height} pixels is past the limit of {max_pixels}"
        ));
    }
    let mut reader = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| e.to_string())?;
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(width);
    limits.max_image_height = Some(height);
    limits.max_alloc = Some(pixels.saturating_mul(8).max(1 << 20));
    reader.limits(limits);
    let rgb = reader.decode().map_err(|e| e.to_string())?.to_rgb8();
    let png = encode_png(&rgb).map_err(|e| e.to_string())?;
    Ok((rgb.width(), rgb.height(), png))
}
