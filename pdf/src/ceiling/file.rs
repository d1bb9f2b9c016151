//! The streams hayro inflates while it opens a file, before any page: object streams
//! (`/Type /ObjStm`, which hold other objects, the page tree's among them) and cross-reference
//! streams (`/Type /XRef`). They are found in the file's bytes, not through hayro (which would
//! inflate them to find them), and counted like a page's streams.
//!
//! Only a stream whose one filter is `FlateDecode` (as writers make them) and whose data is not
//! encrypted is counted: an encrypted file's object streams are inflated by hayro after it
//! decrypts them, unbounded here.

use super::count::{self, Sink};
use super::{Decoded, TooLarge};

/// Checks every object stream and cross-reference stream of `data` against `limit` decoded
/// bytes.
pub(super) fn check(data: &[u8], limit: u64) -> Result<(), TooLarge> {
    for name in [b"/ObjStm".as_slice(), b"/XRef".as_slice()] {
        let mut from = 0;
        while let Some(at) = find(&data[from..], name).map(|i| from + i) {
            from = at + name.len();
            if data.get(from).is_some_and(|&c| is_regular(c)) {
                continue;
            }
            let Some(stream) = stream_after(data, at) else {
                continue;
            };
            if stream.flate_only {
                let mut sink = Sink::counting(limit);
                if count::flate(stream.data, &mut sink).is_err() {
                    let (object, generation) = object_before(data, at).unwrap_or((0, 0));
                    return Err(TooLarge {
                        what: Decoded::Stream { object, generation },
                        limit,
                    });
                }
            }
            from = from.max(stream.end);
        }
    }
    Ok(())
}

/// A stream object's data as the file holds it.
struct RawStream<'a> {
    data: &'a [u8],
    /// Whether its dictionary names `FlateDecode` as its one filter.
    flate_only: bool,
    /// Where its data ends in the file.
    end: usize,
}

/// The stream whose dictionary holds the byte at `at`: the dictionary runs to the first
/// `stream` keyword after it; the data, for `/Length` bytes when it is written as a number (to
/// `endstream` otherwise).
fn stream_after(data: &[u8], at: usize) -> Option<RawStream<'_>> {
    let keyword = at + find(&data[at..], b"stream")?;
    let dict = &data[at..keyword];
    // Another object began before a stream did: `at` was in an object that is not a stream.
    if find(dict, b"endobj").is_some() {
        return None;
    }
    let dict_start = data[..at]
        .windows(3)
        .rposition(|w| w == b"obj")
        .unwrap_or(0);
    let dict = &data[dict_start..keyword];
    let mut start = keyword + b"stream".len();
    if data.get(start) == Some(&b'\r') {
        start += 1;
    }
    if data.get(start) == Some(&b'\n') {
        start += 1;
    }
    let end = match direct_length(dict) {
        Some(len) => start.saturating_add(len).min(data.len()),
        None => start + find(&data[start..], b"endstream").unwrap_or(data.len() - start),
    };
    let other_filter = OTHER_FILTERS
        .iter()
        .any(|f| contains_name(dict, f.as_bytes()));
    let flate = contains_name(dict, b"/FlateDecode") || contains_name(dict, b"/Fl");
    Some(RawStream {
        data: &data[start.min(end)..end],
        flate_only: flate && !other_filter,
        end,
    })
}

/// The filters other than `FlateDecode` (long and short names): a stream with one of them is
/// not counted here.
const OTHER_FILTERS: [&str; 9] = [
    "/ASCIIHexDecode",
    "/AHx",
    "/ASCII85Decode",
    "/A85",
    "/LZWDecode",
    "/LZW",
    "/RunLengthDecode",
    "/RL",
    "/Crypt",
];

/// `/Length N` in `dict` when N is a number, not a reference (`N 0 R`).
fn direct_length(dict: &[u8]) -> Option<usize> {
    let at = find(dict, b"/Length")? + b"/Length".len();
    let rest = std::str::from_utf8(&dict[at..]).ok()?;
    let mut words = rest
        .split(|c: char| c.is_ascii_whitespace() || "/<>[]".contains(c))
        .filter(|w| !w.is_empty());
    let n = words.next()?.parse().ok()?;
    let reference = words.next().is_some_and(|w| w.parse::<u32>().is_ok())
        && words.next().is_some_and(|w| w == "R");
    (!reference).then_some(n)
}

/// The `N G` of the `N G obj` that opens the object holding the byte at `at`.
fn object_before(data: &[u8], at: usize) -> Option<(u32, i32)> {
    let obj = data[..at].windows(3).rposition(|w| w == b"obj")?;
    let head = std::str::from_utf8(&data[obj.saturating_sub(24)..obj]).ok()?;
    let mut words = head.split_ascii_whitespace().rev();
    let generation = words.next()?.parse().ok()?;
    let object = words.next()?.parse().ok()?;
    Some((object, generation))
}

/// Whether `name` occurs in `dict` as a whole name (not the start of a longer one).
fn contains_name(dict: &[u8], name: &[u8]) -> bool {
    let mut from = 0;
    while let Some(i) = find(&dict[from..], name) {
        let after = from + i + name.len();
        if !dict.get(after).is_some_and(|&c| is_regular(c)) {
            return true;
        }
        from = after;
    }
    false
}

/// A PDF regular character: neither white space nor a delimiter.
fn is_regular(c: u8) -> bool {
    !(c.is_ascii_whitespace() || c == 0 || b"()<>[]{}/%".contains(&c))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn object_stream(dict: &str, data: &[u8]) -> Vec<u8> {
        let mut file = format!("%PDF-1.5\n7 0 obj\n<< {dict} >>\nstream\r\n").into_bytes();
        file.extend_from_slice(data);
        file.extend_from_slice(b"\r\nendstream\nendobj\n%%EOF\n");
        file
    }

    #[test]
    fn an_object_stream_past_the_limit_is_found_in_the_files_bytes() {
        let bomb = horos_testkit::pdf::flate_zeros(4 << 20);
        let dict = |length: &str| {
            format!("/Type /ObjStm /N 1 /First 4 /Filter /FlateDecode /Length {length}")
        };
        for length in [bomb.len().to_string(), "9 0 R".to_owned()] {
            let file = object_stream(&dict(&length), &bomb);
            assert_eq!(
                check(&file, 1 << 20),
                Err(TooLarge {
                    what: Decoded::Stream {
                        object: 7,
                        generation: 0
                    },
                    limit: 1 << 20
                }),
                "/Length {length}"
            );
            assert_eq!(check(&file, 8 << 20), Ok(()));
        }
        // Another filter, or a name that only starts like it: not counted here.
        let hex = dict(&bomb.len().to_string()).replace("/FlateDecode", "[/AHx /Fl]");
        assert_eq!(check(&object_stream(&hex, &bomb), 1 << 20), Ok(()));
        let other = dict(&bomb.len().to_string()).replace("/ObjStm", "/ObjStmX");
        assert_eq!(check(&object_stream(&other, &bomb), 1 << 20), Ok(()));
        assert_eq!(direct_length(b"/Length 12 0 R /N 3"), None);
        assert_eq!(direct_length(b"/Length 12/N 3"), Some(12));
    }
}
