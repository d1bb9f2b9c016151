//! The protocol between a pipeline and its PDF workers: length-prefixed frames over the
//! worker's standard input and output.
//!
//! A frame is a 4-byte big-endian length `n`, then `n` bytes: a tag byte and the body. Tag 1 is
//! a message, the JSON of a [`Request`] (to the worker) or a [`Reply`] (from it); tag 2 is bytes
//! that belong to the message before it (the PDF of [`Request::Open`], the image of
//! [`Request::DecodeImage`], the PNG of [`Reply::Page`] and [`Reply::Image`]). Each side refuses
//! a frame longer than its ceiling from the length alone, before reading its body, and reads a
//! body as it arrives (nothing is allocated for a length that is not followed by its bytes).
//!
//! The worker speaks first: [`Reply::Hello`] with its [`PROTOCOL_VERSION`]; a pipeline refuses a
//! worker of another version. Then each request has exactly one reply, in order.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::render::{FailureReason, RenderConfig};
use crate::text_layer::TextLayer;

/// The version of this protocol, sent in [`Reply::Hello`].
pub const PROTOCOL_VERSION: u32 = 1;

/// The largest message frame (its JSON) either side reads: 16 MiB (a page's text layer with
/// its word boxes is the largest message).
pub const MAX_MESSAGE_BYTES: u64 = 16 << 20;

/// Tag of a message frame.
const TAG_MESSAGE: u8 = 1;
/// Tag of a bytes frame.
const TAG_BYTES: u8 = 2;

/// A request from the pipeline to a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Request {
    /// Open the PDF in the bytes frame that follows, with `config` (closing the one open
    /// before); [`Reply::Opened`] with its page count, or [`Reply::Failed`].
    Open {
        /// The renderer's settings for this document.
        config: RenderConfig,
    },
    /// Render page `page` (from 1) of the open document: [`Reply::Page`].
    RenderPage {
        /// The page, from 1.
        page: u32,
    },
    /// Read page `page`'s text layer only: [`Reply::Page`] without an image.
    TextLayer {
        /// The page, from 1.
        page: u32,
    },
    /// Decode the image in the bytes frame that follows (PNG, JPEG, ...) if it declares at most
    /// `max_pixels` pixels: [`Reply::Image`] with it as an RGB PNG, or [`Reply::Failed`].
    DecodeImage {
        /// The most pixels accepted, read from the image's header before any is decoded.
        max_pixels: u64,
    },
}

impl Request {
    /// Whether a bytes frame follows this request.
    pub fn has_bytes(&self) -> bool {
        matches!(self, Request::Open { .. } | Request::DecodeImage { .. })
    }
}

/// A reply from a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reply {
    /// The worker's first frame.
    Hello {
        /// Its [`PROTOCOL_VERSION`].
        protocol: u32,
        /// Whether it sees a network interface besides the loopback (`None`: it cannot tell).
        network: Option<bool>,
    },
    /// The document is open.
    Opened {
        /// Its number of pages.
        pages: u32,
    },
    /// A page read; its PNG follows in a bytes frame when `page.image` is true.
    Page {
        /// What was read.
        page: PageHeader,
    },
    /// An image decoded; its RGB PNG follows in a bytes frame.
    Image {
        /// Its width in pixels.
        width: u32,
        /// Its height in pixels.
        height: u32,
    },
    /// The request failed for a reason of its input (the worker goes on).
    Failed {
        /// Whose fault.
        kind: FailedKind,
        /// What went wrong.
        message: String,
    },
}

impl Reply {
    /// Whether a bytes frame follows this reply.
    pub fn has_bytes(&self) -> bool {
        match self {
            Reply::Page { page } => page.image,
            Reply::Image { .. } => true,
            _ => false,
        }
    }
}

/// Whose fault a [`Reply::Failed`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailedKind {
    /// The document's: it cannot be opened or a page of it rendered (a
    /// [`RenderError`](crate::render::RenderError), as text).
    Document,
    /// The image's: it is not an image, or declares too many pixels.
    Image,
    /// The request's: out of order (a page before any document was opened).
    Request,
}

/// What a worker read of one page ([`Reply::Page`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageHeader {
    /// Page number, from 1.
    pub page_no: u32,
    /// The document's pages.
    pub page_count: u32,
    /// The page's width in pixels at the document's dpi.
    pub width: u32,
    /// The page's height in pixels at the document's dpi.
    pub height: u32,
    /// Whether its PNG follows (false: not rasterized, or failed).
    pub image: bool,
    /// Its text layer, when read.
    pub text_layer: Option<TextLayer>,
    /// Why it failed alone, when it did.
    pub failure: Option<PageFailed>,
}

/// Why a page failed alone, with the words that say what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageFailed {
    /// The stable reason.
    pub reason: FailureReason,
    /// What went past which limit.
    pub message: String,
}

/// What can go wrong between the two sides of a worker's pipes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// Reading or writing a pipe failed.
    #[error("the pipe: {0}")]
    Io(#[from] std::io::Error),
    /// The other side closed its end where a frame was due.
    #[error("the other side closed the pipe")]
    Closed,
    /// The other side closed its end in the middle of a frame.
    #[error("the pipe closed after {got} of the {expected} bytes of a frame")]
    Truncated {
        /// The bytes the frame said it had (its header included).
        expected: u64,
        /// The bytes that came.
        got: u64,
    },
    /// A frame longer than this side's ceiling, refused from its length.
    #[error("a frame of {len} bytes is past the ceiling of {limit}")]
    TooLarge {
        /// The length it declared.
        len: u64,
        /// The ceiling.
        limit: u64,
    },
    /// A frame with no tag, or a tag that is not the one due.
    #[error("a frame of the wrong kind (tag {tag}) where {expected} was due")]
    WrongFrame {
        /// The tag that came (0: an empty frame).
        tag: u8,
        /// What was due.
        expected: &'static str,
    },
    /// A message that is not the JSON of a request or reply.
    #[error("a message that does not parse: {0}")]
    Message(#[source] serde_json::Error),
    /// A reply that does not answer the request (or a hello of another protocol version).
    #[error("an unexpected reply: {0}")]
    Unexpected(String),
}

/// A frame's header: its tag and body length, checked against `limit` (the body's ceiling).
pub(crate) fn parse_header(header: [u8; 5], limit: u64) -> Result<(u8, u64), ProtocolError> {
    let len = u64::from(u32::from_be_bytes([
        header[0], header[1], header[2], header[3],
    ]));
    if len == 0 {
        return Err(ProtocolError::WrongFrame {
            tag: 0,
            expected: "a tag",
        });
    }
    let body = len - 1;
    let tag = header[4];
    let ceiling = match tag {
        TAG_MESSAGE => limit.min(MAX_MESSAGE_BYTES),
        TAG_BYTES => limit,
        _ => {
            return Err(ProtocolError::WrongFrame {
                tag,
                expected: "a message or bytes",
            });
        }
    };
    if body > ceiling {
        return Err(ProtocolError::TooLarge {
            len: body,
            limit: ceiling,
        });
    }
    Ok((tag, body))
}

/// A frame's header for `body_len` bytes of body with `tag`.
fn header(tag: u8, body_len: usize) -> Result<[u8; 5], ProtocolError> {
    let len = u32::try_from(body_len + 1).map_err(|_| ProtocolError::TooLarge {
        len: body_len as u64,
        limit: u64::from(u32::MAX) - 1,
    })?;
    let l = len.to_be_bytes();
    Ok([l[0], l[1], l[2], l[3], tag])
}

/// Encodes `message` as a message frame.
pub(crate) fn message_frame(message: &impl Serialize) -> Result<Vec<u8>, ProtocolError> {
    let json = serde_json::to_vec(message).map_err(ProtocolError::Message)?;
    let mut frame = header(TAG_MESSAGE, json.len())?.to_vec();
    frame.extend_from_slice(&json);
    Ok(frame)
}

/// The header of a bytes frame of `len` bytes.
pub(crate) fn bytes_header(len: usize) -> Result<[u8; 5], ProtocolError> {
    header(TAG_BYTES, len)
}

/// Writes `message` as a message frame (not flushed).
pub fn write_message(out: &mut impl Write, message: &impl Serialize) -> Result<(), ProtocolError> {
    out.write_all(&message_frame(message)?)?;
    Ok(())
}

/// Writes `bytes` as a bytes frame (not flushed).
pub fn write_bytes(out: &mut impl Write, bytes: &[u8]) -> Result<(), ProtocolError> {
    out.write_all(&bytes_header(bytes.len())?)?;
    out.write_all(bytes)?;
    Ok(())
}

/// Reads a frame whose body is at most `limit` bytes (a message's at most
/// [`MAX_MESSAGE_BYTES`]): `None` when the other side closed the pipe before its first byte.
pub fn read_frame(input: &mut impl Read, limit: u64) -> Result<Option<Frame>, ProtocolError> {
    let mut head = [0u8; 5];
    let mut got = 0;
    while got < head.len() {
        match input.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(ProtocolError::Truncated {
                    expected: 5,
                    got: got as u64,
                });
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (tag, len) = parse_header(head, limit)?;
    let mut body = Vec::with_capacity(len.min(1 << 20) as usize);
    let read = input.take(len).read_to_end(&mut body)? as u64;
    if read < len {
        return Err(ProtocolError::Truncated {
            expected: len + 5,
            got: read + 5,
        });
    }
    Ok(Some(Frame::from_parts(tag, body)))
}

/// One frame read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A message's JSON.
    Message(Vec<u8>),
    /// Bytes for the message before.
    Bytes(Vec<u8>),
}

impl Frame {
    pub(crate) fn from_parts(tag: u8, body: Vec<u8>) -> Frame {
        if tag == TAG_MESSAGE {
            Frame::Message(body)
        } else {
            Frame::Bytes(body)
        }
    }

    /// The message this frame holds, parsed as `T`.
    pub fn message<T: for<'de> Deserialize<'de>>(self) -> Result<T, ProtocolError> {
        match self {
            Frame::Message(json) => serde_json::from_slice(&json).map_err(ProtocolError::Message),
            Frame::Bytes(_) => Err(ProtocolError::WrongFrame {
                tag: TAG_BYTES,
                expected: "a message",
            }),
        }
    }

    /// The bytes this frame holds.
    pub fn bytes(self) -> Result<Vec<u8>, ProtocolError> {
        match self {
            Frame::Bytes(bytes) => Ok(bytes),
            Frame::Message(_) => Err(ProtocolError::WrongFrame {
                tag: TAG_MESSAGE,
                expected: "bytes",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn frames_round_trip_and_refuse_from_the_header() {
        let mut out = Vec::new();
        write_message(&mut out, &Request::RenderPage { page: 3 }).unwrap();
        write_bytes(&mut out, b"%PDF-").unwrap();
        let mut input = out.as_slice();
        let req: Request = read_frame(&mut input, 100)
            .unwrap()
            .unwrap()
            .message()
            .unwrap();
        assert_eq!(req, Request::RenderPage { page: 3 });
        let bytes = read_frame(&mut input, 100)
            .unwrap()
            .unwrap()
            .bytes()
            .unwrap();
        assert_eq!(bytes, b"%PDF-");
        assert!(read_frame(&mut input, 100).unwrap().is_none());
        // A 4 GiB frame is refused from its header, before a byte of its body is read.
        let mut huge = &[0xff, 0xff, 0xff, 0xff, TAG_BYTES][..];
        assert!(matches!(
            read_frame(&mut huge, 1 << 20),
            Err(ProtocolError::TooLarge { .. })
        ));
        // A frame cut short.
        let mut cut = &[0, 0, 0, 9, TAG_BYTES, 1, 2][..];
        assert!(matches!(
            read_frame(&mut cut, 100),
            Err(ProtocolError::Truncated {
                expected: 13,
                got: 7
            })
        ));
        let mut bad = &[0, 0, 0, 1, 7][..];
        assert!(matches!(
            read_frame(&mut bad, 100),
            Err(ProtocolError::WrongFrame { tag: 7, .. })
        ));
    }
}
