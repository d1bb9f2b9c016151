//! An incremental server-sent events parser: bytes in as they arrive, complete events out. Only the
//! unfinished line and the event being assembled are kept in memory.

use std::collections::VecDeque;

use crate::error::Error;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// The parser. Feed it with [`SseParser::push`]; complete events are appended to the queue given.
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    data: String,
    has_data: bool,
    event: Option<String>,
    /// The previous byte was `\r` (a following `\n` belongs to the same line end).
    after_cr: bool,
    max_event_bytes: usize,
}

impl SseParser {
    /// A parser refusing events bigger than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            event: None,
            after_cr: false,
            max_event_bytes,
        }
    }

    /// Feeds bytes; pushes the events they complete onto `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut VecDeque<SseEvent>) -> Result<(), Error> {
        if self.after_cr && bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        self.after_cr = false;
        while let Some(pos) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            let (head, rest) = bytes.split_at(pos);
            let is_cr = rest[0] == b'\r';
            bytes = &rest[1..];
            if is_cr {
                if bytes.first() == Some(&b'\n') {
                    bytes = &bytes[1..];
                } else if bytes.is_empty() {
                    self.after_cr = true;
                }
            }
            if self.line.is_empty() {
                self.line_done(head, out)?;
            } else {
                self.line.extend_from_slice(head);
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, out)?;
            }
        }
        if self.line.len() + bytes.len() + self.data.len() > self.max_event_bytes {
            return Err(too_big(self.max_event_bytes));
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// Ends the input: an event not terminated by a blank line is dispatched anyway.
    pub fn finish(&mut self, out: &mut VecDeque<SseEvent>) -> Result<(), Error> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
        }
        self.dispatch(out);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut VecDeque<SseEvent>) -> Result<(), Error> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // comment / keep-alive
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        let value = std::str::from_utf8(value).map_err(|_| Error::Decode {
            message: "event stream is not UTF-8".into(),
            body: String::from_utf8_lossy(line).chars().take(200).collect(),
        })?;
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
                if self.data.len() > self.max_event_bytes {
                    return Err(too_big(self.max_event_bytes));
                }
            }
            b"event" => self.event = Some(value.to_owned()),
            // llama-server reports errors inside a stream as an `error:` line.
            b"error" => {
                self.event = Some("error".to_owned());
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {} // id, retry, unknown fields: ignored
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut VecDeque<SseEvent>) {
        if self.has_data {
            out.push_back(SseEvent {
                event: self.event.take(),
                data: std::mem::take(&mut self.data),
            });
        }
        self.has_data = false;
        self.event = None;
    }
}

fn too_big(limit: usize) -> Error {
    Error::Decode {
        message: format!("server-sent event larger than {limit} bytes"),
        body: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(input: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut p = SseParser::new(1 << 20);
        let mut out = VecDeque::new();
        for c in input.chunks(piece) {
            p.push(c, &mut out).unwrap();
        }
        p.finish(&mut out).unwrap();
        out.into_iter().collect()
    }

    #[test]
    fn events_survive_any_split() {
        let input = b": keep-alive\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: line1\ndata:line2\n\ndata: [DONE]\r\rdata: tail";
        let want = vec![
            SseEvent {
                event: None,
                data: "{\"a\":1}".into(),
            },
            SseEvent {
                event: Some("x".into()),
                data: "line1\nline2".into(),
            },
            SseEvent {
                event: None,
                data: "[DONE]".into(),
            },
            SseEvent {
                event: None,
                data: "tail".into(),
            },
        ];
        for piece in 1..input.len() {
            assert_eq!(parse_in_pieces(input, piece), want, "piece size {piece}");
        }
    }

    #[test]
    fn error_lines_and_limits() {
        let got = parse_in_pieces(b"error: {\"message\":\"boom\"}\n\n", 3);
        assert_eq!(got[0].event.as_deref(), Some("error"));
        assert_eq!(got[0].data, "{\"message\":\"boom\"}");
        let mut p = SseParser::new(8);
        let mut out = VecDeque::new();
        assert!(p.push(b"data: 0123456789", &mut out).is_err());
    }
}
