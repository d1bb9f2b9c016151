//! The stream filters run against a ceiling: each decoder hands its output to a [`Sink`] that
//! counts it and stops the decoder at the first byte past the limit, keeping the bytes only when
//! asked (a filter whose output another filter reads, or a content stream whose inline images
//! are looked at). A decoder never allocates for its output beyond what the sink keeps; the
//! inflater reads through a fixed 64 KiB buffer.

use std::io::Read;

/// The output of a decoder went past the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Exceeded;

/// Where a decoder's output goes: counted, and kept when `keep` is set, up to `limit` bytes.
pub(super) struct Sink {
    /// Bytes written so far.
    pub(super) written: u64,
    limit: u64,
    keep: Option<Vec<u8>>,
}

impl Sink {
    /// A sink that counts only.
    pub(super) fn counting(limit: u64) -> Self {
        Self {
            written: 0,
            limit,
            keep: None,
        }
    }

    /// A sink that keeps what it counts (never more than `limit` bytes).
    pub(super) fn keeping(limit: u64) -> Self {
        Self {
            written: 0,
            limit,
            keep: Some(Vec::new()),
        }
    }

    /// The bytes kept (empty for a counting sink).
    pub(super) fn into_bytes(self) -> Vec<u8> {
        self.keep.unwrap_or_default()
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), Exceeded> {
        self.written = self.written.saturating_add(bytes.len() as u64);
        if self.written > self.limit {
            return Err(Exceeded);
        }
        if let Some(kept) = &mut self.keep {
            kept.extend_from_slice(bytes);
        }
        Ok(())
    }

    fn put_repeated(&mut self, byte: u8, count: usize) -> Result<(), Exceeded> {
        self.written = self.written.saturating_add(count as u64);
        if self.written > self.limit {
            return Err(Exceeded);
        }
        if let Some(kept) = &mut self.keep {
            kept.resize(kept.len() + count, byte);
        }
        Ok(())
    }

    /// Forgets what was written after `mark` bytes (a decoder's attempt that is thrown away).
    fn rewind(&mut self, mark: u64) {
        self.written = mark;
        if let Some(kept) = &mut self.keep {
            kept.truncate(usize::try_from(mark).unwrap_or(usize::MAX));
        }
    }
}

/// How a read through an inflater ended.
enum Pumped {
    /// The stream ended.
    Done,
    /// The compressed data is broken (what came before it was written).
    Broken,
}

fn pump(mut reader: impl Read, sink: &mut Sink) -> Result<Pumped, Exceeded> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok(Pumped::Done),
            Ok(n) => sink.put(&buf[..n])?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Ok(Pumped::Broken),
        }
    }
}

/// `FlateDecode` as hayro tries it: zlib, then raw deflate when zlib fails; when both fail,
/// what zlib gave before it failed (hayro's lenient fallback decoder reads about as far).
pub(super) fn flate(data: &[u8], sink: &mut Sink) -> Result<(), Exceeded> {
    let mark = sink.written;
    if let Pumped::Done = pump(flate2::read::ZlibDecoder::new(data), sink)? {
        return Ok(());
    }
    sink.rewind(mark);
    if let Pumped::Done = pump(flate2::read::DeflateDecoder::new(data), sink)? {
        return Ok(());
    }
    sink.rewind(mark);
    pump(flate2::read::ZlibDecoder::new(data), sink).map(|_| ())
}

/// `LZWDecode` (9- to 12-bit codes, 256 clears, 257 ends; `early_change` as the stream's
/// `/EarlyChange`, 1 by default). A broken code ends the output there.
pub(super) fn lzw(data: &[u8], early_change: bool, sink: &mut Sink) -> Result<(), Exceeded> {
    const CLEAR: u16 = 256;
    const END: u16 = 257;
    const FIRST: u16 = 258;
    const MAX: usize = 4096;
    // Each code: the code it extends, its last byte, its first byte and its length.
    let mut prefix = vec![0u16; MAX];
    let mut last = vec![0u8; MAX];
    let mut first = vec![0u8; MAX];
    let mut len = vec![0u16; MAX];
    for b in 0..256 {
        last[b] = b as u8;
        first[b] = b as u8;
        len[b] = 1;
    }
    let mut string = vec![0u8; MAX];
    let mut next = FIRST;
    let mut width = 9u32;
    let mut prev: Option<u16> = None;
    let (mut acc, mut bits, mut pos) = (0u32, 0u32, 0usize);
    let early = u16::from(early_change);
    loop {
        while bits < width {
            let Some(&byte) = data.get(pos) else {
                return Ok(());
            };
            acc = (acc << 8) | u32::from(byte);
            bits += 8;
            pos += 1;
        }
        let code = ((acc >> (bits - width)) & ((1 << width) - 1)) as u16;
        bits -= width;
        acc &= (1u32 << bits).wrapping_sub(1);
        if code == CLEAR {
            next = FIRST;
            width = 9;
            prev = None;
            continue;
        }
        if code == END {
            return Ok(());
        }
        let Some(p) = prev else {
            if code >= 256 {
                return Ok(());
            }
            sink.put(&[code as u8])?;
            prev = Some(code);
            continue;
        };
        let known = code < next;
        if !known && code != next {
            return Ok(());
        }
        // The new entry: the previous string and the first byte of this one (of the previous
        // one when this code is the entry being made).
        let head = if known {
            first[usize::from(code)]
        } else {
            first[usize::from(p)]
        };
        if usize::from(next) < MAX {
            let n = usize::from(next);
            prefix[n] = p;
            last[n] = head;
            first[n] = first[usize::from(p)];
            len[n] = len[usize::from(p)].saturating_add(1);
            next += 1;
        }
        // Spell the code's string backwards into `string`.
        let mut c = usize::from(code);
        let n = usize::from(len[c]).min(MAX);
        for i in (0..n).rev() {
            string[i] = last[c];
            c = usize::from(prefix[c]);
        }
        sink.put(&string[..n])?;
        prev = Some(code);
        if next + early >= (1 << width) && width < 12 {
            width += 1;
        }
    }
}

/// `RunLengthDecode`.
pub(super) fn run_length(data: &[u8], sink: &mut Sink) -> Result<(), Exceeded> {
    let mut i = 0;
    while let Some(&n) = data.get(i) {
        match n {
            128 => break,
            0..=127 => {
                let end = (i + 2 + usize::from(n)).min(data.len());
                sink.put(&data[(i + 1).min(end)..end])?;
                i = end;
            }
            _ => {
                let Some(&byte) = data.get(i + 1) else {
                    break;
                };
                sink.put_repeated(byte, 257 - usize::from(n))?;
                i += 2;
            }
        }
    }
    Ok(())
}

/// `ASCIIHexDecode`.
pub(super) fn ascii_hex(data: &[u8], sink: &mut Sink) -> Result<(), Exceeded> {
    let mut high: Option<u8> = None;
    for &c in data {
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            b'>' => break,
            _ => continue,
        };
        match high.take() {
            None => high = Some(digit),
            Some(h) => sink.put(&[h << 4 | digit])?,
        }
    }
    if let Some(h) = high {
        sink.put(&[h << 4])?;
    }
    Ok(())
}

/// `ASCII85Decode`.
pub(super) fn ascii_85(data: &[u8], sink: &mut Sink) -> Result<(), Exceeded> {
    let mut group = [0u8; 5];
    let mut n = 0;
    let body = data.strip_prefix(b"<~").unwrap_or(data);
    for &c in body {
        match c {
            b'~' => break,
            b'z' if n == 0 => sink.put(&[0; 4])?,
            b'!'..=b'u' => {
                group[n] = c - b'!';
                n += 1;
                if n == 5 {
                    sink.put(&base85_word(&group))?;
                    n = 0;
                }
            }
            _ => {}
        }
    }
    if n > 1 {
        // A partial group of n characters is n - 1 bytes, padded with 'u' to decode.
        group[n..].fill(b'u' - b'!');
        sink.put(&base85_word(&group)[..n - 1])?;
    }
    Ok(())
}

fn base85_word(group: &[u8; 5]) -> [u8; 4] {
    let value = group
        .iter()
        .fold(0u32, |v, &d| v.wrapping_mul(85).wrapping_add(u32::from(d)));
    value.to_be_bytes()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write;

    use super::*;

    fn kept(decode: impl FnOnce(&mut Sink) -> Result<(), Exceeded>) -> Vec<u8> {
        let mut sink = Sink::keeping(1 << 20);
        decode(&mut sink).unwrap();
        sink.into_bytes()
    }

    #[test]
    fn each_filter_decodes_what_it_counts() {
        let text = b"the quick brown fox jumps over the lazy dog, the quick brown fox".to_vec();
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&text).unwrap();
        let zlib = z.finish().unwrap();
        assert_eq!(kept(|s| flate(&zlib, s)), text);
        let mut d = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        d.write_all(&text).unwrap();
        assert_eq!(kept(|s| flate(&d.finish().unwrap(), s)), text);
        assert_eq!(kept(|s| ascii_hex(b"48 65 6C6c6f7>", s)), b"Hello\x70");
        assert_eq!(
            kept(|s| ascii_85(b"<~87cURD]i,\"Ebo80~>", s)),
            b"Hello World!"
        );
        assert_eq!(kept(|s| ascii_85(b"z!!~>", s)), [0, 0, 0, 0, 0]);
        assert_eq!(
            kept(|s| run_length(&[2, b'a', b'b', b'c', 253, b'x', 128, 9], s)),
            b"abcxxxx"
        );
        // The PDF reference's LZW example (7.4.4.2): 45 45 45 45 45 65 45 45 45 66.
        let codes: [u16; 8] = [256, 45, 258, 258, 65, 259, 66, 257];
        let (mut acc, mut bits, mut lzw_bytes) = (0u64, 0, Vec::new());
        for c in codes {
            acc = acc << 9 | u64::from(c);
            bits += 9;
            while bits >= 8 {
                lzw_bytes.push((acc >> (bits - 8)) as u8);
                bits -= 8;
            }
        }
        lzw_bytes.push((acc << (8 - bits)) as u8);
        assert_eq!(
            kept(|s| lzw(&lzw_bytes, true, s)),
            [45, 45, 45, 45, 45, 65, 45, 45, 45, 66]
        );
    }

    #[test]
    fn a_decoder_stops_at_the_first_byte_past_the_limit() {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&vec![0u8; 4 << 20]).unwrap();
        let zeros = z.finish().unwrap();
        let mut sink = Sink::counting(1 << 20);
        assert_eq!(flate(&zeros, &mut sink), Err(Exceeded));
        assert!(sink.written <= (1 << 20) + 64 * 1024, "{}", sink.written);
        let mut sink = Sink::counting(8 << 20);
        flate(&zeros, &mut sink).unwrap();
        assert_eq!(sink.written, 4 << 20);
        let mut sink = Sink::keeping(100);
        assert_eq!(run_length(&[129, 0, 129, 0], &mut sink), Err(Exceeded));
        assert!(sink.into_bytes().len() <= 100);
    }
}
