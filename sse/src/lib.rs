//! # horos-sse — one incremental parser for server-sent events
//!
//! Bytes in as they arrive, in pieces of any size; events out. Lines end with `\n`, `\r\n` or `\r`
//! (a `\r\n` split between two pieces included); `data:` lines are joined with `\n`; `event:` is
//! kept; comments, `id:` and `retry:` are ignored; llama-server's `error:` line becomes an event
//! named `error`. Only the unfinished event is held, never more than the limit given.
//!
//! - **Strict** ([`SseParser::new`]): events out; an event over the limit or not UTF-8 is an
//!   [`SseError`]. What a client reading a stream wants.
//! - **Pass-through** ([`SseParser::passthrough`]): [`SseFrame`]s out, each with the exact bytes it
//!   was made of and its event where it has one, so a proxy can forward, drop or rewrite events
//!   and leave the others byte for byte. The frames' bytes, joined, are the input. An event over
//!   the limit (or not UTF-8) is not refused: its bytes pass on as they come, in frames without
//!   an event.
//!
//! ```
//! use std::collections::VecDeque;
//! use horos_sse::SseParser;
//!
//! let mut parser = SseParser::new(1 << 20);
//! let mut events = VecDeque::new();
//! parser.push(b"data: {\"a\":1}\r\n\r\ndata: [DO", &mut events)?;
//! parser.push(b"NE]\n\n", &mut events)?;
//! assert_eq!(events.pop_front().map(|e| e.data), Some("{\"a\":1}".to_owned()));
//! assert_eq!(events.pop_front().map(|e| e.data), Some("[DONE]".to_owned()));
//! # Ok::<(), horos_sse::SseError>(())
//! ```

use std::collections::VecDeque;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any (`error` for llama-server's `error:` line).
    pub event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// A piece of a stream in pass-through mode: the bytes it was made of, and its event when those
/// bytes are one whole event with data (not a comment, a blank line, or a part of an event too
/// large to hold).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseFrame {
    /// The bytes, exactly as they arrived (line ends and the blank line included). Empty in
    /// strict mode, which keeps no bytes.
    pub raw: Vec<u8>,
    /// The event these bytes make, if they make one.
    pub event: Option<SseEvent>,
}

/// Why a strict parser refused a stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// An event (its unfinished line and its data so far) went over the limit.
    #[error("server-sent event larger than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// A field's value is not UTF-8.
    #[error("server-sent event is not UTF-8: {line}")]
    NotUtf8 {
        /// The line, lossily decoded, at most 200 characters.
        line: String,
    },
}

/// The fields of the event being read.
#[derive(Debug, Default)]
struct Building {
    data: String,
    has_data: bool,
    event: Option<String>,
}

impl Building {
    /// Reads one non-empty line into the event.
    fn line(&mut self, line: &[u8]) -> Result<(), SseError> {
        if line.first() == Some(&b':') {
            return Ok(()); // a comment / keep-alive
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        let value = std::str::from_utf8(value).map_err(|_| SseError::NotUtf8 {
            line: String::from_utf8_lossy(line).chars().take(200).collect(),
        })?;
        match field {
            b"data" => self.push_data(value),
            b"event" => self.event = Some(value.to_owned()),
            // llama-server reports errors inside a stream as an `error:` line.
            b"error" => {
                self.event = Some("error".to_owned());
                self.push_data(value);
            }
            _ => {} // id, retry, unknown fields: ignored
        }
        Ok(())
    }

    fn push_data(&mut self, value: &str) {
        if self.has_data {
            self.data.push('\n');
        }
        self.data.push_str(value);
        self.has_data = true;
    }

    /// The event read, if it has data; the fields are reset either way.
    fn take(&mut self) -> Option<SseEvent> {
        let b = std::mem::take(self);
        b.has_data.then_some(SseEvent {
            event: b.event,
            data: b.data,
        })
    }
}

/// The parser. Feed it with [`SseParser::push`] (events) or [`SseParser::push_frames`] (frames),
/// end it with [`SseParser::finish`] or [`SseParser::finish_frames`].
#[derive(Debug)]
pub struct SseParser {
    /// Strict: the unfinished line. Pass-through: the bytes of the unfinished event.
    held: Vec<u8>,
    /// Bytes of the unfinished line (the end of `held`).
    line_len: usize,
    /// The last byte taken was a `\r` ending a line: a `\n` next belongs to that line end.
    cr: bool,
    /// Pass-through: a blank line ended by that `\r`; the frame goes once the next byte tells
    /// whether a `\n` is part of it (so frames do not depend on where the input was cut).
    deferred: bool,
    building: Building,
    /// Pass-through: the event is not one to parse (not UTF-8, or over the limit).
    unparsed: bool,
    /// Pass-through: the event went over the limit; its bytes pass on as they come.
    oversized: bool,
    passthrough: bool,
    max_event_bytes: usize,
}

impl SseParser {
    /// A strict parser refusing events bigger than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        Self::with_mode(max_event_bytes, false)
    }

    /// A pass-through parser holding at most `max_event_bytes` of an event; a bigger one passes
    /// as it comes, in frames without an event.
    pub fn passthrough(max_event_bytes: usize) -> Self {
        Self::with_mode(max_event_bytes, true)
    }

    fn with_mode(max_event_bytes: usize, passthrough: bool) -> Self {
        SseParser {
            held: Vec::new(),
            line_len: 0,
            cr: false,
            deferred: false,
            building: Building::default(),
            unparsed: false,
            oversized: false,
            passthrough,
            max_event_bytes,
        }
    }

    /// Bytes held now: the unfinished line (strict) or event (pass-through); never more than the
    /// limit after a call returns.
    pub fn held_bytes(&self) -> usize {
        self.held.len()
    }

    /// Feeds bytes; pushes the events they complete onto `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut VecDeque<SseEvent>) -> Result<(), SseError> {
        self.feed(bytes, &mut |f: SseFrame| out.extend(f.event))
    }

    /// Ends the input: an event not ended by a blank line is dispatched anyway.
    pub fn finish(&mut self, out: &mut VecDeque<SseEvent>) -> Result<(), SseError> {
        self.end(&mut |f: SseFrame| out.extend(f.event))
    }

    /// Feeds bytes; pushes the frames they complete onto `out` (in pass-through mode, also the
    /// bytes of an oversized event so far).
    pub fn push_frames(&mut self, bytes: &[u8], out: &mut Vec<SseFrame>) -> Result<(), SseError> {
        self.feed(bytes, &mut |f| out.push(f))
    }

    /// Ends the input: what is held becomes the last frame.
    pub fn finish_frames(&mut self, out: &mut Vec<SseFrame>) -> Result<(), SseError> {
        self.end(&mut |f| out.push(f))
    }

    fn feed(&mut self, mut bytes: &[u8], sink: &mut dyn FnMut(SseFrame)) -> Result<(), SseError> {
        if self.cr
            && let Some((&first, rest)) = bytes.split_first()
        {
            self.cr = false;
            if first == b'\n' {
                if self.passthrough {
                    self.held.push(b'\n');
                }
                bytes = rest;
            }
            if self.deferred {
                self.deferred = false;
                self.dispatch(sink);
            }
            self.check_size(sink)?;
        }
        while !bytes.is_empty() {
            let Some(i) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') else {
                self.held.extend_from_slice(bytes);
                self.line_len += bytes.len();
                self.check_size(sink)?;
                break;
            };
            let (head, rest) = bytes.split_at(i);
            self.held.extend_from_slice(head);
            self.line_len += head.len();
            let mut end = 1;
            if rest[0] == b'\r' {
                match rest.get(1) {
                    Some(b'\n') => end = 2,
                    Some(_) => {}
                    None => self.cr = true,
                }
            }
            self.end_line(&rest[..end], sink)?;
            self.check_size(sink)?;
            bytes = &rest[end..];
        }
        if self.oversized && !self.held.is_empty() {
            let raw = std::mem::take(&mut self.held);
            sink(SseFrame { raw, event: None });
        }
        Ok(())
    }

    fn end(&mut self, sink: &mut dyn FnMut(SseFrame)) -> Result<(), SseError> {
        if self.line_len > 0 {
            self.end_line(&[], sink)?;
        }
        self.cr = false;
        self.deferred = false;
        self.dispatch(sink);
        Ok(())
    }

    /// The line held ends with `end` (its line-end bytes; none at the end of the input).
    fn end_line(&mut self, end: &[u8], sink: &mut dyn FnMut(SseFrame)) -> Result<(), SseError> {
        if self.line_len == 0 {
            if self.passthrough {
                self.held.extend_from_slice(end);
                if self.cr {
                    self.deferred = true;
                    return Ok(());
                }
            }
            self.dispatch(sink);
            return Ok(());
        }
        if !self.unparsed && !self.oversized {
            let start = self.held.len().saturating_sub(self.line_len);
            match self.building.line(&self.held[start..]) {
                Ok(()) => {}
                Err(e) if !self.passthrough => return Err(e),
                Err(_) => self.unparsed = true,
            }
        }
        self.line_len = 0;
        if self.passthrough {
            self.held.extend_from_slice(end);
        } else {
            self.held.clear();
        }
        Ok(())
    }

    fn dispatch(&mut self, sink: &mut dyn FnMut(SseFrame)) {
        let event = self.building.take();
        let event = event.filter(|_| !self.unparsed && !self.oversized);
        self.unparsed = false;
        self.oversized = false;
        self.line_len = 0;
        if self.passthrough {
            let raw = std::mem::take(&mut self.held);
            if !raw.is_empty() || event.is_some() {
                sink(SseFrame { raw, event });
            }
        } else if event.is_some() {
            sink(SseFrame {
                raw: Vec::new(),
                event,
            });
        }
    }

    /// Refuses (strict) or lets through (pass-through) an event over the limit.
    fn check_size(&mut self, sink: &mut dyn FnMut(SseFrame)) -> Result<(), SseError> {
        if !self.passthrough {
            if self.held.len() + self.building.data.len() > self.max_event_bytes {
                return Err(SseError::TooLarge {
                    limit: self.max_event_bytes,
                });
            }
            return Ok(());
        }
        if !self.oversized && self.held.len() > self.max_event_bytes {
            self.oversized = true;
            self.building = Building::default();
            let raw = std::mem::take(&mut self.held);
            sink(SseFrame { raw, event: None });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn events_in_pieces(input: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut p = SseParser::new(1 << 20);
        let mut out = VecDeque::new();
        for c in input.chunks(piece) {
            p.push(c, &mut out).unwrap();
        }
        p.finish(&mut out).unwrap();
        out.into_iter().collect()
    }

    fn frames_in_pieces(input: &[u8], piece: usize, max: usize) -> Vec<SseFrame> {
        let mut p = SseParser::passthrough(max);
        let mut out = Vec::new();
        for c in input.chunks(piece.max(1)) {
            p.push_frames(c, &mut out).unwrap();
            assert!(p.held_bytes() <= max, "{} held over {max}", p.held_bytes());
        }
        p.finish_frames(&mut out).unwrap();
        out
    }

    fn joined(frames: &[SseFrame]) -> Vec<u8> {
        frames.iter().flat_map(|f| f.raw.iter().copied()).collect()
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    const MIXED: &[u8] = b": keep-alive\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: line1\ndata:line2\n\ndata: [DONE]\r\rdata: tail";

    #[test]
    fn events_survive_any_split() {
        let want = vec![
            ev(None, "{\"a\":1}"),
            ev(Some("x"), "line1\nline2"),
            ev(None, "[DONE]"),
            ev(None, "tail"),
        ];
        for piece in 1..MIXED.len() {
            assert_eq!(events_in_pieces(MIXED, piece), want, "piece size {piece}");
        }
    }

    #[test]
    fn frames_keep_every_byte_and_find_the_same_events() {
        for piece in 1..MIXED.len() {
            let frames = frames_in_pieces(MIXED, piece, 1 << 20);
            assert_eq!(joined(&frames), MIXED, "piece size {piece}");
            let events: Vec<SseEvent> = frames.into_iter().filter_map(|f| f.event).collect();
            assert_eq!(events, events_in_pieces(MIXED, piece), "piece size {piece}");
        }
    }

    #[test]
    fn a_frame_is_one_event_with_its_blank_line() {
        let frames = frames_in_pieces(b": c\n\ndata: 1\r\n\r\ndata: 2\n\n", 64, 1 << 20);
        let raws: Vec<&[u8]> = frames.iter().map(|f| f.raw.as_slice()).collect();
        assert_eq!(
            raws,
            [
                &b": c\n\n"[..],
                &b"data: 1\r\n\r\n"[..],
                &b"data: 2\n\n"[..]
            ]
        );
        assert_eq!(frames[0].event, None);
        assert_eq!(frames[2].event, Some(ev(None, "2")));
    }

    #[test]
    fn error_lines_and_limits() {
        let got = events_in_pieces(b"error: {\"message\":\"boom\"}\n\n", 3);
        assert_eq!(got, [ev(Some("error"), "{\"message\":\"boom\"}")]);
        let mut p = SseParser::new(8);
        let mut out = VecDeque::new();
        assert_eq!(
            p.push(b"data: 0123456789", &mut out),
            Err(SseError::TooLarge { limit: 8 })
        );
        let mut p = SseParser::new(64);
        assert!(matches!(
            p.push(b"data: \xff\xfe\n\n", &mut out),
            Err(SseError::NotUtf8 { .. })
        ));
    }

    #[test]
    fn an_oversized_event_passes_through_and_the_next_is_parsed() {
        let big = format!("data: {}\n\n", "x".repeat(100));
        let input = format!("{big}data: small\n\n");
        for piece in [1, 7, 50, 1000] {
            let frames = frames_in_pieces(input.as_bytes(), piece, 32);
            assert_eq!(joined(&frames), input.as_bytes(), "piece {piece}");
            let events: Vec<SseEvent> = frames.into_iter().filter_map(|f| f.event).collect();
            assert_eq!(events, [ev(None, "small")], "piece {piece}");
        }
    }

    #[test]
    fn a_non_utf8_event_passes_through_without_an_event() {
        let input = b"data: \xff\n\ndata: ok\n\n";
        let frames = frames_in_pieces(input, 2, 1 << 10);
        assert_eq!(joined(&frames), input);
        let events: Vec<SseEvent> = frames.into_iter().filter_map(|f| f.event).collect();
        assert_eq!(events, [ev(None, "ok")]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Whatever the bytes and however they are cut, pass-through gives them all back, in
        /// order, and holds no more than its limit.
        #[test]
        fn passthrough_loses_no_byte(
            input in proptest::collection::vec(
                prop_oneof![
                    Just(b'\n'), Just(b'\r'), Just(b':'), Just(b' '),
                    Just(b'd'), Just(b'a'), Just(b't'), any::<u8>()
                ],
                0..300,
            ),
            piece in 1usize..40,
            max in 1usize..200,
        ) {
            let frames = frames_in_pieces(&input, piece, max);
            prop_assert_eq!(joined(&frames), input);
        }

        /// Events do not depend on where the input is cut, and both modes find the same ones.
        #[test]
        fn events_do_not_depend_on_the_cuts(
            lines in proptest::collection::vec(
                ("(data|event|error|id|: c|data:)", "[a-z {}\":]{0,12}", prop_oneof![
                    Just("\n"), Just("\r\n"), Just("\r"), Just("\n\n"), Just("\r\n\r\n")
                ]),
                0..20,
            ),
            piece in 1usize..30,
        ) {
            let input: String = lines
                .iter()
                .map(|(f, v, end)| format!("{f}: {v}{end}"))
                .collect();
            let whole = events_in_pieces(input.as_bytes(), input.len().max(1));
            prop_assert_eq!(&events_in_pieces(input.as_bytes(), piece), &whole);
            let frames = frames_in_pieces(input.as_bytes(), piece, 1 << 20);
            // Frames too: the same bytes and events wherever the cuts fall.
            prop_assert_eq!(&frames, &frames_in_pieces(input.as_bytes(), input.len().max(1), 1 << 20));
            let from_frames: Vec<SseEvent> = frames.into_iter().filter_map(|f| f.event).collect();
            prop_assert_eq!(from_frames, whole);
        }
    }
}

/// The README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
