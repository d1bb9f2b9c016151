//! A ceiling on what a page's streams decode to, checked before the page is interpreted.
//!
//! hayro inflates a stream whole, with no limit, when a page needs it: a few kilobytes of
//! `FlateDecode` can ask for gigabytes. [`Ceiling::check_page`] walks what a page uses, as its
//! interpreter would reach it: its content streams, then the named resources their operators
//! use (fonts, forms and images, graphics states, patterns, shadings, colour spaces; resources a
//! page's dictionary lists but its content never names are not counted), what those hold
//! (font files, soft masks, functions, colour profiles, a form's own content and resources, a
//! Type 3 font's glyphs), and its annotations' appearances; never the page tree above the page
//! or another page through a link. It runs each stream's filters against the limit through a
//! 64 KiB buffer without keeping their output, except a content stream's, kept (under the
//! limit) to read its operators: a stream that decodes to more than the limit, or streams that
//! together decode to more than it, make the page [`TooLarge`] before hayro reads any of it.
//!
//! What is counted, per stream:
//!
//! - `FlateDecode`, `LZWDecode`, `RunLengthDecode`, `ASCIIHexDecode`, `ASCII85Decode`: their
//!   output, exactly, up to the first byte past the limit (a chain keeps its intermediate
//!   output, itself under the limit);
//! - `DCTDecode`, `JPXDecode`, `JBIG2Decode`, `CCITTFaxDecode`: not run; their output is taken
//!   as 4 bytes per pixel of the larger of the image dictionary's `/Width` × `/Height` and, for
//!   JPEG and JPEG 2000, the size the codestream's own header declares;
//! - an image (an image XObject, or an image inline in a content stream): at least 4 bytes per
//!   declared pixel, what hayro makes of its samples (one byte per component, then RGB);
//! - a content stream: its inline images too.
//!
//! Each stream is counted once per document ([`Ceiling`] remembers the sizes), and once per
//! page however often the page uses it.
//!
//! Before that, [`check_file`] counts the streams hayro inflates while it opens the file, before
//! any page can be walked: the object streams and cross-reference streams, found in the file's
//! bytes.
//!
//! What is not bounded here: an encrypted file's object streams (inflated by hayro after it
//! decrypts them), an object or cross-reference stream with a filter other than
//! `FlateDecode` alone, and a `Flate` stream that flate2 finds broken but hayro's lenient
//! fallback decoder reads further (counted as far as flate2 read).

mod count;
mod file;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use hayro::hayro_syntax::Filter;
use hayro::hayro_syntax::content::UntypedIter;
use hayro::hayro_syntax::object::{Dict, MaybeRef, Name, Object, ObjectIdentifier, Stream};
use hayro::hayro_syntax::page::{Page, Resources};
use hayro::hayro_syntax::xref::XRef;

use count::{Exceeded, Sink};

/// What went past the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// One stream (an indirect object), by its object and generation numbers; a content
    /// stream's size includes its inline images.
    Stream {
        /// Object number.
        object: u32,
        /// Generation number.
        generation: i32,
    },
    /// The page's streams together.
    Page,
}

impl std::fmt::Display for Decoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decoded::Stream { object, generation } => write!(f, "stream {object} {generation} R"),
            Decoded::Page => f.write_str("the page's streams together"),
        }
    }
}

/// A page whose streams decode to more than the ceiling allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{what} decoded past the limit of {limit} bytes")]
pub struct TooLarge {
    /// What went past the limit.
    pub what: Decoded,
    /// The limit, in decoded bytes.
    pub limit: u64,
}

/// Checks the object streams and cross-reference streams of the PDF file `data` (those hayro
/// inflates while it opens the file) against `limit` decoded bytes each.
pub fn check_file(data: &[u8], limit: u64) -> Result<(), TooLarge> {
    file::check(data, limit)
}

/// Keys never followed from a page: the page tree above it, what leads to other pages
/// (destinations, actions, threads, the structure tree's back links), and resources, which are
/// followed by the names the content uses.
const NOT_FOLLOWED: [&[u8]; 12] = [
    b"Parent",
    b"P",
    b"Dest",
    b"A",
    b"AA",
    b"PA",
    b"B",
    b"Next",
    b"Prev",
    b"First",
    b"Last",
    b"Resources",
];

/// How an object was reached, for what its streams hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Anything.
    Other,
    /// A content stream (a page's `/Contents`, or a Type 3 glyph).
    Content,
    /// A Type 3 font's `/CharProcs`: its values are content streams.
    CharProcs,
}

/// An object to walk: how it was reached, and the resources a content stream below it names
/// (its own when it has some).
type Item<'a> = (Object<'a>, Kind, Resources<'a>);

/// A stream as counted, once per document.
#[derive(Debug)]
struct Counted {
    /// What it decodes to (a content stream's inline images included).
    size: u64,
    /// The names a content stream's operators take (empty for another stream).
    names: HashSet<Vec<u8>>,
}

/// The decoded-size ceiling of one document's pages: `limit` bytes per stream and per page.
#[derive(Debug)]
pub struct Ceiling {
    limit: u64,
    /// Each stream once counted; `None`: past the limit.
    counted: HashMap<ObjectIdentifier, Option<Arc<Counted>>>,
}

impl Ceiling {
    /// A ceiling of `limit` decoded bytes per stream and per page.
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            counted: HashMap::new(),
        }
    }

    /// What `page`'s streams decode to together, or [`TooLarge`] at the first stream past the
    /// limit or the first that takes the page's total past it.
    pub fn check_page<'a>(&mut self, page: &Page<'a>) -> Result<u64, TooLarge> {
        let xref = page.xref();
        let mut seen: HashSet<ObjectIdentifier> = page.raw().obj_id().into_iter().collect();
        let mut stack: Vec<Item<'a>> = vec![(
            Object::Dict(page.raw().clone()),
            Kind::Other,
            page.resources().clone(),
        )];
        let mut total = 0u64;
        while let Some((object, kind, resources)) = stack.pop() {
            let dict = match object {
                Object::Dict(dict) => dict,
                Object::Array(array) => {
                    for item in array.raw_iter() {
                        let next = (kind, resources.clone());
                        follow(item, next, xref, &mut seen, &mut stack);
                    }
                    continue;
                }
                Object::Stream(stream) => {
                    let content = kind == Kind::Content || is_content(stream.dict());
                    let resources = match stream.dict().get::<Dict<'a>>(b"Resources") {
                        Some(own) if content => Resources::new(own),
                        _ => resources,
                    };
                    let counted = self.count(&stream, content)?;
                    total = total.saturating_add(counted.size);
                    if total > self.limit {
                        return Err(self.too_large(Decoded::Page));
                    }
                    for named in resource_dicts(&resources) {
                        for (name, value) in named.entries() {
                            if counted.names.contains(&*name) {
                                let next = (Kind::Other, resources.clone());
                                follow(value, next, xref, &mut seen, &mut stack);
                            }
                        }
                    }
                    let dict = stream.dict().clone();
                    stack.push((Object::Dict(dict), Kind::Other, resources));
                    continue;
                }
                _ => continue,
            };
            for (key, value) in dict.entries() {
                let key: &[u8] = &key;
                if NOT_FOLLOWED.contains(&key) {
                    continue;
                }
                let next = match (key, kind) {
                    (b"Contents", _) | (_, Kind::CharProcs) => (Kind::Content, resources.clone()),
                    // A Type 3 font's glyphs name its resources, else those in force.
                    (b"CharProcs", _) => (
                        Kind::CharProcs,
                        dict.get::<Dict<'a>>(b"Resources")
                            .map_or_else(|| resources.clone(), Resources::new),
                    ),
                    _ => (Kind::Other, resources.clone()),
                };
                follow(value, next, xref, &mut seen, &mut stack);
            }
        }
        Ok(total)
    }

    fn too_large(&self, what: Decoded) -> TooLarge {
        TooLarge {
            what,
            limit: self.limit,
        }
    }

    /// One stream as counted (from the document's memory when it was counted before).
    fn count(&mut self, stream: &Stream<'_>, content: bool) -> Result<Arc<Counted>, TooLarge> {
        let id = stream.obj_id();
        let what = Decoded::Stream {
            object: id.obj_number,
            generation: id.gen_number,
        };
        if let Some(known) = self.counted.get(&id) {
            return known.clone().ok_or(self.too_large(what));
        }
        let counted = self.decoded(stream, content).ok().map(Arc::new);
        self.counted.insert(id, counted.clone());
        counted.ok_or(self.too_large(what))
    }

    /// A stream's decoded size; for a content stream, its inline images' too, and the names
    /// its operators take.
    fn decoded(&self, stream: &Stream<'_>, content: bool) -> Result<Counted, Exceeded> {
        let (size, bytes) = decode(stream, self.limit, content)?;
        let mut size = size.max(image_bytes(stream));
        let mut names = HashSet::new();
        if let Some(bytes) = bytes {
            let mut ops = UntypedIter::new(&bytes);
            while let Some(op) = ops.next() {
                let inline_image = &**op.operator == b"BI";
                for operand in op.operands() {
                    match operand {
                        Object::Stream(image) if inline_image => {
                            let (decoded, _) = decode(image, self.limit, false)?;
                            size = size.saturating_add(decoded.max(image_bytes(image)));
                        }
                        Object::Name(name) => {
                            names.insert(name.to_vec());
                        }
                        _ => {}
                    }
                }
            }
        }
        if size > self.limit {
            return Err(Exceeded);
        }
        Ok(Counted { size, names })
    }
}

/// The named resources a content stream can use, by category.
fn resource_dicts<'r, 'a>(resources: &'r Resources<'a>) -> [&'r Dict<'a>; 7] {
    [
        &resources.ext_g_states,
        &resources.fonts,
        &resources.properties,
        &resources.color_spaces,
        &resources.x_objects,
        &resources.patterns,
        &resources.shadings,
    ]
}

/// Pushes `item` (resolved, when it is a reference not followed yet) onto the walk's stack,
/// reached as `next` says.
fn follow<'a>(
    item: MaybeRef<Object<'a>>,
    next: (Kind, Resources<'a>),
    xref: &'a XRef,
    seen: &mut HashSet<ObjectIdentifier>,
    stack: &mut Vec<Item<'a>>,
) {
    let (kind, resources) = next;
    match item {
        MaybeRef::Ref(r) => {
            let id = ObjectIdentifier::from(r);
            if seen.insert(id)
                && let Some(object) = xref.get::<Object<'a>>(id)
            {
                stack.push((object, kind, resources));
            }
        }
        MaybeRef::NotRef(object @ (Object::Dict(_) | Object::Array(_) | Object::Stream(_))) => {
            stack.push((object, kind, resources));
        }
        MaybeRef::NotRef(_) => {}
    }
}

/// Whether a stream's bytes are content (operators): a form XObject or a tiling pattern.
fn is_content(dict: &Dict<'_>) -> bool {
    dict.get::<Name<'_>>(b"Subtype").as_deref() == Some(b"Form".as_slice())
        || dict.get::<i32>(b"PatternType") == Some(1)
}

/// Runs `stream`'s filters under `limit`: the bytes written by the last one, and its bytes
/// when `keep` (nothing is kept past the limit).
fn decode(stream: &Stream<'_>, limit: u64, keep: bool) -> Result<(u64, Option<Vec<u8>>), Exceeded> {
    let dict = stream.dict();
    // An external file (`/F`): hayro reads nothing.
    if matches!(
        dict.get::<Object<'_>>(b"F"),
        Some(Object::String(_) | Object::Dict(_))
    ) {
        return Ok((0, keep.then(Vec::new)));
    }
    let filters = stream.filters();
    let raw = stream.raw_data();
    let mut input: Vec<u8> = Vec::new();
    let mut from_raw = true;
    let mut params = decode_params(dict);
    let last = filters.len().saturating_sub(1);
    for (i, filter) in filters.iter().enumerate() {
        let early_change = params
            .next()
            .flatten()
            .and_then(|p| p.get::<i32>(b"EarlyChange"))
            != Some(0);
        let mut sink = if i < last || keep {
            Sink::keeping(limit)
        } else {
            Sink::counting(limit)
        };
        let data: &[u8] = if from_raw { &raw } else { &input };
        match filter {
            Filter::FlateDecode => count::flate(data, &mut sink)?,
            Filter::LzwDecode => count::lzw(data, early_change, &mut sink)?,
            Filter::RunLengthDecode => count::run_length(data, &mut sink)?,
            Filter::AsciiHexDecode => count::ascii_hex(data, &mut sink)?,
            Filter::Ascii85Decode => count::ascii_85(data, &mut sink)?,
            Filter::Crypt => {
                // Decryption is in `raw_data` already.
                continue;
            }
            // An image codec ends the chain: its output is estimated from the image's size.
            Filter::DctDecode
            | Filter::JpxDecode
            | Filter::Jbig2Decode
            | Filter::CcittFaxDecode => {
                return Ok((codec_bytes(*filter, data, dict), keep.then(Vec::new)));
            }
        }
        if i == last {
            let written = sink.written;
            return Ok((written, keep.then(|| sink.into_bytes())));
        }
        input = sink.into_bytes();
        from_raw = false;
    }
    // No filter, or a chain that ends with `Crypt`: the last output.
    let size = if from_raw { raw.len() } else { input.len() } as u64;
    if size > limit {
        return Err(Exceeded);
    }
    let out = || if from_raw { raw.into_owned() } else { input };
    Ok((size, keep.then(out)))
}

/// Each filter's `/DecodeParms` (or `/DP`) dictionary, in order.
fn decode_params<'a>(dict: &Dict<'a>) -> impl Iterator<Item = Option<Dict<'a>>> + use<'a> {
    let single = dict
        .get::<Dict<'a>>(b"DecodeParms")
        .or_else(|| dict.get::<Dict<'a>>(b"DP"));
    let array = dict
        .get::<hayro::hayro_syntax::object::Array<'a>>(b"DecodeParms")
        .or_else(|| dict.get::<hayro::hayro_syntax::object::Array<'a>>(b"DP"));
    let listed: Vec<Option<Dict<'a>>> = match array {
        Some(a) => a.iter::<Object<'a>>().map(Object::into_dict).collect(),
        None => vec![single],
    };
    listed.into_iter().chain(std::iter::repeat(None))
}

/// The image's declared pixels, 4 bytes each (0 for a stream that is not an image).
fn image_bytes(stream: &Stream<'_>) -> u64 {
    let dict = stream.dict();
    let inline = !dict.contains_key(b"Subtype") && dict.contains_key(b"W");
    let is_image =
        inline || dict.get::<Name<'_>>(b"Subtype").as_deref() == Some(b"Image".as_slice());
    if !is_image {
        return 0;
    }
    declared_pixels(dict).saturating_mul(4)
}

/// `/Width` × `/Height` (or `/W` × `/H` inline), 0 when either is missing or negative.
fn declared_pixels(dict: &Dict<'_>) -> u64 {
    let side = |long: &[u8], short: &[u8]| {
        dict.get::<i64>(long)
            .or_else(|| dict.get::<i64>(short))
            .and_then(|v| u64::try_from(v).ok())
            .unwrap_or(0)
    };
    side(b"Width", b"W").saturating_mul(side(b"Height", b"H"))
}

/// What an image codec would make of `data`: 4 bytes per pixel of the larger of the
/// dictionary's size and the codestream's own.
fn codec_bytes(filter: Filter, data: &[u8], dict: &Dict<'_>) -> u64 {
    let header = match filter {
        Filter::DctDecode => jpeg_pixels(data),
        Filter::JpxDecode => jpx_pixels(data),
        _ => 0,
    };
    declared_pixels(dict).max(header).saturating_mul(4)
}

/// Width × height from a JPEG's first start-of-frame marker (0 when none is found).
fn jpeg_pixels(data: &[u8]) -> u64 {
    let mut i = 2;
    while i + 4 <= data.len() {
        if data[i] != 0xFF {
            i += 1;
            continue;
        }
        let marker = data[i + 1];
        // Fill bytes, and the markers without a length.
        if marker == 0xFF || marker == 0x01 || (0xD0..=0xD8).contains(&marker) {
            i += if marker == 0xFF { 1 } else { 2 };
            continue;
        }
        let len = usize::from(u16::from_be_bytes([data[i + 2], data[i + 3]]));
        let is_frame = matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC);
        if is_frame && i + 9 <= data.len() {
            let h = u64::from(u16::from_be_bytes([data[i + 5], data[i + 6]]));
            let w = u64::from(u16::from_be_bytes([data[i + 7], data[i + 8]]));
            return w * h;
        }
        if marker == 0xDA {
            return 0;
        }
        i += 2 + len;
    }
    0
}

/// Width × height from a JPEG 2000 codestream's `SIZ` marker (0 when none is found).
fn jpx_pixels(data: &[u8]) -> u64 {
    let Some(at) = data.windows(4).position(|w| w == [0xFF, 0x4F, 0xFF, 0x51]) else {
        return 0;
    };
    // SOC, SIZ, Lsiz (2), Rsiz (2), then Xsiz, Ysiz, XOsiz, YOsiz (4 each).
    let word = |k: usize| {
        let s = at + 8 + 4 * k;
        data.get(s..s + 4)
            .map(|b| u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
            .unwrap_or(0)
    };
    word(0)
        .saturating_sub(word(2))
        .saturating_mul(word(1).saturating_sub(word(3)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn image_headers_give_their_size() {
        // SOI, APP0 (length 4), SOF0: length 17, precision 8, height 300, width 200.
        let jpeg = [
            0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0x00, 0x00, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0x01,
            0x2C, 0x00, 0xC8, 0x03,
        ];
        assert_eq!(jpeg_pixels(&jpeg), 200 * 300);
        assert_eq!(jpeg_pixels(&[0xFF, 0xD8, 0xFF, 0xDA, 0, 2]), 0);
        let mut jpx = vec![0xFF, 0x4F, 0xFF, 0x51, 0, 41, 0, 0];
        for v in [1000u32, 500, 10, 20] {
            jpx.extend_from_slice(&v.to_be_bytes());
        }
        assert_eq!(jpx_pixels(&jpx), 990 * 480);
        assert_eq!(jpx_pixels(b"not a codestream"), 0);
    }
}
