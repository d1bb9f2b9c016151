//! Deserialization of response objects that keep their unknown fields in an `extra` map.
//!
//! `#[serde(flatten)]` would do it, but serde buffers a flattened struct's whole object (every
//! field, nested objects included) into an intermediate tree and deserializes the fields again from
//! it, at every nesting level: a chat answer cost more to decode into the typed structs than into a
//! `serde_json::Value`. The visitor written by [`deserialize_with_extra!`] reads each field once,
//! straight into its place, and only unknown fields become `Value`s.
//!
//! The same macro writes a [`Fast`] decoder for each type: a parser of JSON text for exactly these
//! shapes, which the client uses on answers (half the instructions of `serde_json`'s generic path).
//! It hands to `serde_json` what it does not parse itself (strings with escapes, the values of
//! unknown fields other than plain strings, `null` and booleans, floats), and gives up on anything
//! unexpected (a wrong type, a syntax error, a number that is not a plain integer): the caller then
//! parses the text again with `serde_json`, whose result, value or error, is the answer. So the
//! fast path only ever returns what `serde_json` would have (checked by the tests below, on
//! variations of real answers), except that an unknown field's value gets `serde_json`'s whole
//! nesting limit (128) rather than what is left of it at that depth.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, DeserializeOwned, Deserializer, Visitor};
use serde_json::Value;

/// An object key: borrowed from the input when it can be (no escapes), owned otherwise.
pub(crate) struct Key<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Implements `Deserialize` for a struct that has `Default`, the named fields (each optional in the
/// JSON: a missing one keeps its default) and an `extra: Extra` map that receives every other field.
/// A repeated key keeps its last value.
macro_rules! deserialize_with_extra {
    ($ty:ident { $($field:ident),+ $(,)? }) => {
        impl<'de> ::serde::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct ObjectVisitor;
                impl<'de> ::serde::de::Visitor<'de> for ObjectVisitor {
                    type Value = $ty;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        f.write_str(concat!("a JSON object (", stringify!($ty), ")"))
                    }
                    fn visit_map<A: ::serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<$ty, A::Error> {
                        let mut out = <$ty>::default();
                        while let Some(key) = map.next_key::<$crate::de::Key<'de>>()? {
                            match &*key.0 {
                                $(stringify!($field) => out.$field = map.next_value()?,)+
                                _ => {
                                    let value: ::serde_json::Value = map.next_value()?;
                                    out.extra.insert(key.0.into_owned(), value);
                                }
                            }
                        }
                        Ok(out)
                    }
                }
                d.deserialize_map(ObjectVisitor)
            }
        }

        impl $crate::de::Fast for $ty {
            fn fast(p: &mut $crate::de::Parser<'_>) -> Option<Self> {
                p.eat(b'{')?;
                let mut out = <$ty>::default();
                if p.eat_if(b'}') {
                    return Some(out);
                }
                loop {
                    let key = p.string()?;
                    p.eat(b':')?;
                    match &*key {
                        $(stringify!($field) => out.$field = $crate::de::Fast::fast(p)?,)+
                        _ => {
                            let value = p.value()?;
                            out.extra.insert(key.into_owned(), value);
                        }
                    }
                    if !p.eat_if(b',') {
                        p.eat(b'}')?;
                        return Some(out);
                    }
                }
            }
        }
    };
}

/// A type the [`Parser`] decodes: `None` when it gives up (see the module's text).
pub(crate) trait Fast: Sized {
    /// Parses one value at the parser's position (leading whitespace allowed).
    fn fast(p: &mut Parser<'_>) -> Option<Self>;
}

/// Parses `text` with the fast decoder, then with `serde_json` if it gave up.
pub(crate) fn from_str<T: Fast + DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    let mut p = Parser { s: text, i: 0 };
    match T::fast(&mut p) {
        Some(v) if p.at_end() => Ok(v),
        _ => serde_json::from_str(text),
    }
}

/// [`from_str`] on bytes: one UTF-8 check of the whole text (`serde_json::from_slice` checks each
/// string on its own, which costs more on many short strings).
pub(crate) fn from_slice<T: Fast + DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    match std::str::from_utf8(bytes) {
        Ok(text) => from_str(text),
        Err(_) => serde_json::from_slice(bytes), // fails, with the position of the bad byte
    }
}

/// A position in a JSON text.
pub(crate) struct Parser<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Parser<'a> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.s.as_bytes().get(self.i) {
            self.i += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.as_bytes().get(self.i).copied()
    }

    /// Consumes `c` (after whitespace), or gives up.
    pub(crate) fn eat(&mut self, c: u8) -> Option<()> {
        self.eat_if(c).then_some(())
    }

    /// Consumes `c` (after whitespace) if it comes next.
    pub(crate) fn eat_if(&mut self, c: u8) -> bool {
        let next = self.peek() == Some(c);
        if next {
            self.i += 1;
        }
        next
    }

    fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }

    /// Consumes the literal `word` (`null`, `true`, `false`) if it comes next.
    fn word(&mut self, word: &str) -> bool {
        self.skip_ws();
        let here = self.s.as_bytes().get(self.i..).unwrap_or_default();
        let found = here.starts_with(word.as_bytes());
        if found {
            self.i += word.len();
        }
        found
    }

    /// A string: borrowed from the text when it has no escapes, else unescaped by `serde_json`.
    pub(crate) fn string(&mut self) -> Option<Cow<'a, str>> {
        if self.peek()? != b'"' {
            return None;
        }
        let bytes = self.s.as_bytes();
        let start = self.i + 1;
        let mut j = find_special(bytes, start)?;
        if bytes.get(j) == Some(&b'"') {
            self.i = j + 1;
            return self.s.get(start..j).map(Cow::Borrowed);
        }
        // Escapes (or a control character, which `serde_json` refuses): find the closing quote
        // and let `serde_json` read the string.
        loop {
            match *bytes.get(j)? {
                b'\\' => j += 2,
                b'"' => break,
                _ => j += 1,
            }
        }
        let text = self.s.get(self.i..=j)?;
        let owned: String = serde_json::from_str(text).ok()?;
        self.i = j + 1;
        Some(Cow::Owned(owned))
    }

    /// A non-negative integer written plainly (digits, no leading zero, no fraction or exponent).
    fn integer(&mut self) -> Option<u64> {
        self.skip_ws();
        let bytes = self.s.as_bytes();
        let start = self.i;
        let mut v: u64 = 0;
        while let Some(&c @ b'0'..=b'9') = bytes.get(self.i) {
            v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            self.i += 1;
        }
        let digits = self.i - start;
        if digits == 0 || (digits > 1 && bytes[start] == b'0') {
            return None;
        }
        if matches!(bytes.get(self.i), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some(v)
    }

    /// Any value: plain strings, `null` and booleans here, the rest by `serde_json`.
    pub(crate) fn value(&mut self) -> Option<Value> {
        match self.peek()? {
            b'"' => Some(Value::String(self.string()?.into_owned())),
            b'n' if self.word("null") => Some(Value::Null),
            b't' if self.word("true") => Some(Value::Bool(true)),
            b'f' if self.word("false") => Some(Value::Bool(false)),
            _ => self.by_serde(),
        }
    }

    /// One value read by `serde_json` from the current position.
    fn by_serde<T: DeserializeOwned>(&mut self) -> Option<T> {
        let rest = self.s.get(self.i..)?;
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<T>();
        let v = values.next()?.ok()?;
        self.i += values.byte_offset();
        Some(v)
    }
}

/// The index of the first `"`, `\\` or control character in `bytes` from `from` on, if any: eight
/// bytes at a time (the bit tricks flag a byte below 0x20, or equal to `"` or `\\`, in its top bit;
/// a borrow can only flag bytes after the first flagged one, so the lowest flag is exact).
fn find_special(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let rest = bytes.get(from..)?;
    let mut chunks = rest.chunks_exact(8);
    let mut base = from;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let control = w.wrapping_sub(ONES * 0x20) & !w;
        let q = w ^ (ONES * u64::from(b'"'));
        let quote = q.wrapping_sub(ONES) & !q;
        let b = w ^ (ONES * u64::from(b'\\'));
        let backslash = b.wrapping_sub(ONES) & !b;
        let flags = (control | quote | backslash) & HIGH;
        if flags != 0 {
            return Some(base + (flags.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|p| base + p)
}

impl Fast for String {
    fn fast(p: &mut Parser<'_>) -> Option<Self> {
        p.string().map(Cow::into_owned)
    }
}

impl Fast for u64 {
    fn fast(p: &mut Parser<'_>) -> Option<Self> {
        p.integer()
    }
}

impl Fast for u32 {
    fn fast(p: &mut Parser<'_>) -> Option<Self> {
        p.integer().and_then(|v| u32::try_from(v).ok())
    }
}

impl Fast for f32 {
    fn fast(p: &mut Parser<'_>) -> Option<Self> {
        p.by_serde()
    }
}

impl<T: Fast> Fast for Option<T> {
    fn fast(p: &mut Parser<'_>) -> Option<Self> {
        if p.peek()? == b'n' && p.word("null") {
            return Some(None);
        }
        T::fast(p).map(Some)
    }
}

impl<T: Fast> Fast for Vec<T> {
    fn fast(p: &mut Parser<'_>) -> Option<Self> {
        p.eat(b'[')?;
        let mut out = Vec::new();
        if p.eat_if(b']') {
            return Some(out);
        }
        loop {
            out.push(T::fast(p)?);
            if !p.eat_if(b',') {
                p.eat(b']')?;
                return Some(out);
            }
        }
    }
}

pub(crate) use deserialize_with_extra;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ChatChunk, ChatResponse, CompletionResponse, EmbeddingResponse, ModelList};

    #[test]
    fn fields_land_in_place_and_unknown_ones_in_extra_at_every_level() {
        let text = r#"{"id":"a","object":"chat.completion","created":7,"model":"m",
            "choices":[{"index":1,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t"}]},
                        "finish_reason":null,"logprobs":null}],
            "usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"details":{"x":1}}}"#;
        let r: ChatResponse = serde_json::from_str(text).unwrap();
        assert_eq!((r.id.as_str(), r.model.as_str(), r.created), ("a", "m", 7));
        assert_eq!(r.extra["object"], "chat.completion");
        let c = &r.choices[0];
        assert_eq!((c.index, c.finish_reason.as_deref()), (1, None));
        assert!(c.extra["logprobs"].is_null());
        assert_eq!(c.message.content, None);
        assert_eq!(c.message.extra["tool_calls"][0]["id"], "t");
        let u = r.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.total_tokens), (1, 3));
        assert_eq!(u.extra["details"]["x"], 1);
        // The same from bytes, and through a `Value` (owned keys).
        let from_slice: ChatResponse = serde_json::from_slice(text.as_bytes()).unwrap();
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            from_slice,
            serde_json::from_value::<ChatResponse>(value).unwrap()
        );
    }

    #[test]
    fn escaped_keys_repeated_keys_and_nulls() {
        // `\u0069d` is `id`, which the parser cannot lend from the input.
        let r: ChatChunk = serde_json::from_str(
            r#"{"\u0069d":"x","model":"a","model":"b","usage":null,"\"q\"":1}"#,
        )
        .unwrap();
        assert_eq!(r.id, "x");
        assert_eq!(r.model, "b", "the last of a repeated key wins");
        assert_eq!(r.usage, None);
        assert_eq!(r.extra["\"q\""], 1);
    }

    /// Answers as servers send them, and shapes that test the corners of the fast decoder.
    const ANSWERS: &[&str] = &[
        r#"{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21},"system_fingerprint":"bench"}"#,
        r#"{"id":"chatcmpl-9f","object":"chat.completion","created":1732000000,"model":"Qwen/Qwen2.5-0.5B-Instruct","choices":[{"index":0,"message":{"role":"assistant","reasoning_content":null,"content":"Line one\nLine \"two\"\t\u00e9\ud83d\ude00 \\ end","tool_calls":[]},"logprobs":{"content":[{"token":"Line","logprob":-0.0012,"bytes":[76,105],"top_logprobs":[]}]},"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":25,"total_tokens":41,"completion_tokens":16,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null}"#,
        r#"{"choices":[{"finish_reason":"tool_calls","index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"},"id":"call_1"}]}}],"created":1732000001,"model":"smollm2","system_fingerprint":"b4000-abc","object":"chat.completion","usage":{"completion_tokens":20,"prompt_tokens":30,"total_tokens":50},"id":"chatcmpl-x","timings":{"prompt_n":30,"prompt_ms":12.5,"predicted_per_second":1.5e2,"big":18446744073709551616,"neg":-3,"t":true,"f":false}}"#,
        " {\n  \"id\" : \"a\" ,\r\n\t\"choices\" : [ { \"index\" : 1 , \"message\" : { } } , { } ] ,\n  \"usage\" : null , \"created\" : 0 , \"\\u0069d\" : \"b\" , \"id\":\"c\", \"x\\\"y\" : [ ] , \"e\" : { } \n} \n",
        r#"{"id":"","model":"m","choices":[],"created":18446744073709551615,"usage":{},"object":"chat.completion"}"#,
        r#"{}"#,
        r#"{"choices":[{"delta":{"role":"assistant","content":"Hi"},"index":0,"finish_reason":null}],"id":"c","model":"m","created":1,"object":"chat.completion.chunk"}"#,
        r#"{"id":"cmpl-1","object":"text_completion","created":2,"model":"m","choices":[{"index":0,"text":" world","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#,
        r#"{"object":"list","data":[{"object":"embedding","index":1,"embedding":[0.5,-1.25e-3,3]},{"index":0,"embedding":[]}],"model":"e","usage":{"prompt_tokens":2,"total_tokens":2}}"#,
        r#"{"object":"list","data":[{"id":"m","object":"model","created":3,"owned_by":"vllm","max_model_len":2048,"meta":{"n_params":1.0}}],"models":[{"name":"m"}]}"#,
    ];

    /// `text` decoded by the fast path alone agrees with `serde_json` (same value), whenever the
    /// fast path answers; and `from_str` (fast path, then `serde_json`) always agrees with it.
    fn agrees<T: Fast + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(text: &str) {
        let reference = serde_json::from_str::<T>(text);
        let mut p = Parser { s: text, i: 0 };
        if let Some(v) = T::fast(&mut p)
            && p.at_end()
        {
            match &reference {
                Ok(r) => assert_eq!(&v, r, "{text}"),
                Err(e) => panic!("fast path accepted what serde_json refuses ({e}): {text}"),
            }
        }
        match (from_str::<T>(text), reference) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text}"),
            (a, b) => panic!("{text}: {a:?} vs {b:?}"),
        }
    }

    fn agrees_all(text: &str) {
        agrees::<ChatResponse>(text);
        agrees::<ChatChunk>(text);
        agrees::<CompletionResponse>(text);
        agrees::<EmbeddingResponse>(text);
        agrees::<ModelList>(text);
    }

    #[test]
    fn fast_decoder_agrees_with_serde_json() {
        for text in ANSWERS {
            agrees_all(text);
        }
        // The benchmark's answer takes the fast path to its end.
        let mut p = Parser {
            s: ANSWERS[0],
            i: 0,
        };
        assert!(ChatResponse::fast(&mut p).is_some() && p.at_end());
        let mut p = Parser {
            s: ANSWERS[2],
            i: 0,
        };
        assert!(ChatResponse::fast(&mut p).is_some() && p.at_end());
    }

    #[test]
    fn fast_decoder_agrees_with_serde_json_on_broken_answers() {
        // Every answer with one byte deleted, replaced or doubled, at every position: valid or
        // not, the two decoders must agree.
        const SUBSTITUTES: &[u8] = b"\"\\{}[],: \n0119-.eEnulltruefx\x01";
        for text in ANSWERS {
            let bytes = text.as_bytes();
            for i in 0..bytes.len() {
                let mut variants = vec![
                    [&bytes[..i], &bytes[i + 1..]].concat(),
                    [&bytes[..=i], &bytes[i..]].concat(),
                ];
                for &c in SUBSTITUTES {
                    variants.push([&bytes[..i], &[c], &bytes[i + 1..]].concat());
                }
                for v in variants {
                    if let Ok(t) = std::str::from_utf8(&v) {
                        agrees_all(t);
                    }
                }
            }
        }
    }

    #[test]
    fn special_bytes_are_found_at_any_offset() {
        for len in 0..40 {
            for at in 0..len {
                for c in [b'"', b'\\', 0u8, 0x1f] {
                    let mut v = vec![b'a'; len];
                    v[at] = c;
                    assert_eq!(find_special(&v, 0), Some(at), "{len} {at} {c}");
                    // a flagged byte after the first one does not move it
                    if at + 1 < len {
                        v[at + 1] = b'"';
                        assert_eq!(find_special(&v, 0), Some(at));
                    }
                }
            }
            let mut v = vec![0xc3u8; len];
            v.extend_from_slice(b" ~\x7f\xff");
            assert_eq!(find_special(&v, 0), None);
        }
    }

    #[test]
    fn wrong_shapes_are_errors_not_panics() {
        assert!(serde_json::from_str::<ChatResponse>("[]").is_err());
        assert!(serde_json::from_str::<ChatResponse>(r#"{"created":"soon"}"#).is_err());
        assert!(serde_json::from_str::<ChatResponse>(r#"{"choices":[1]}"#).is_err());
        assert!(
            serde_json::from_str::<EmbeddingResponse>(r#"{"data":[{"embedding":"x"}]}"#).is_err()
        );
        assert!(serde_json::from_str::<ModelList>(r#"{"data":[{"id":"m"}],"#).is_err());
        let m: ModelList =
            serde_json::from_str(r#"{"data":[{"id":"m","meta":{}}],"models":[]}"#).unwrap();
        assert_eq!(m.data[0].id, "m");
        assert!(m.data[0].extra.contains_key("meta") && m.extra.contains_key("models"));
    }
}
