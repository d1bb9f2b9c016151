//! vLLM's pooling API (`POST /pooling`) with the `token_embed` task, the way late-interaction
//! models (ColPali, ColQwen) answer it: one vector per token of each input.
//!
//! The vectors are scripted so that retrieval can be tested: each token is a lower-cased word and
//! its vector a deterministic unit vector of that word ([`crate::FakeConfig::embedding_dim`]
//! values), so a question's vectors meet a page's where they share words. A text input's tokens
//! are its words; an image's are the words of its PNG `tEXt` chunk with keyword
//! [`IMAGE_WORDS_KEYWORD`] (a test writes the page's words there), else 16 tokens derived from the
//! image's bytes. `task: "embed"` pools each input to one vector, as vLLM does.

use base64::Engine as _;
use serde_json::Value;

use crate::vectors::{embed, fnv};

/// The PNG `tEXt` keyword whose text gives an image's tokens.
pub const IMAGE_WORDS_KEYWORD: &str = "fakeai-words";

/// Tokens given to an image without words.
const IMAGE_TOKENS: usize = 16;

/// Largest number of tokens one input yields (longer texts are cut, like a model's context).
const MAX_TOKENS: usize = 2048;

/// How the inputs are pooled.
pub(crate) enum Pooling {
    /// One vector per token (`token_embed`).
    Tokens,
    /// One vector per input (`embed`).
    Mean,
}

/// The tokens of each input of a pooling request, and how to pool them.
pub(crate) fn parse(json: &Value) -> Result<(Pooling, Vec<Vec<String>>), String> {
    let pooling = match json.get("task").and_then(Value::as_str) {
        None | Some("token_embed") => Pooling::Tokens,
        Some("embed") => Pooling::Mean,
        Some(other) => return Err(format!("task `{other}` is not supported by this model")),
    };
    let inputs = if let Some(messages) = json.get("messages") {
        let messages = messages
            .as_array()
            .filter(|m| !m.is_empty())
            .ok_or("`messages` must be a non-empty array")?;
        let mut tokens = Vec::new();
        for m in messages {
            tokens.extend(content_tokens(m.get("content").unwrap_or(&Value::Null))?);
        }
        vec![tokens]
    } else {
        match json.get("input") {
            Some(Value::String(s)) => vec![words(s)],
            Some(Value::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|v| v.as_str().map(words).ok_or("`input` items must be strings"))
                .collect::<Result<_, _>>()?,
            _ => return Err("`input` must be a string or a non-empty array".into()),
        }
    };
    if inputs.iter().any(Vec::is_empty) {
        return Err("an input has no token".into());
    }
    Ok((pooling, inputs))
}

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .take(MAX_TOKENS)
        .collect()
}

fn content_tokens(content: &Value) -> Result<Vec<String>, String> {
    match content {
        Value::String(s) => Ok(words(s)),
        Value::Array(parts) => {
            let mut out = Vec::new();
            for p in parts {
                match p.get("type").and_then(Value::as_str) {
                    Some("text") => out.extend(words(
                        p.get("text").and_then(Value::as_str).unwrap_or_default(),
                    )),
                    Some("image_url") => {
                        let url = p
                            .get("image_url")
                            .and_then(|u| u.get("url"))
                            .and_then(Value::as_str)
                            .ok_or("an image part needs `image_url.url`")?;
                        out.extend(url_image_tokens(url)?);
                    }
                    _ => return Err("content parts must be `text` or `image_url`".into()),
                }
            }
            Ok(out)
        }
        _ => Err("`content` must be a string or a list of parts".into()),
    }
}

/// The tokens of the image a data URL holds ([`image_tokens`]).
fn url_image_tokens(url: &str) -> Result<Vec<String>, String> {
    let data = url
        .strip_prefix("data:")
        .and_then(|r| r.split_once(";base64,"))
        .map(|(_, d)| d)
        .ok_or("only data:...;base64, image URLs are served")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("bad base64 image: {e}"))?;
    Ok(image_tokens(&bytes))
}

/// The tokens the fake model sees in an image (`/pooling` answers one vector per token): the
/// words of its PNG `tEXt` chunk with keyword [`IMAGE_WORDS_KEYWORD`], else 16 tokens of its
/// bytes, its own. A test whose page images were rendered by the code under test (no words
/// written in them) asks a question of these tokens to find one page by MaxSim.
pub fn image_tokens(image: &[u8]) -> Vec<String> {
    if let Some(text) = png_text(image, IMAGE_WORDS_KEYWORD) {
        return words(&text);
    }
    let h = fnv(image);
    (0..IMAGE_TOKENS)
        .map(|i| format!("image{h:016x}p{i}"))
        .collect()
}

/// The text of a PNG's first `tEXt` chunk with `keyword`.
fn png_text(png: &[u8], keyword: &str) -> Option<String> {
    let mut rest = png.strip_prefix(b"\x89PNG\r\n\x1a\n")?;
    while rest.len() >= 12 {
        let len = u32::from_be_bytes(rest[..4].try_into().ok()?) as usize;
        let kind = &rest[4..8];
        let data = rest.get(8..8usize.checked_add(len)?)?;
        if kind == b"tEXt"
            && let Some((k, text)) = data.split_at_checked(keyword.len())
            && k == keyword.as_bytes()
            && text.first() == Some(&0)
        {
            return Some(String::from_utf8_lossy(&text[1..]).into_owned());
        }
        rest = rest.get(8 + len + 4..)?;
    }
    None
}

/// The `data` of one input: its tokens' vectors, or their mean (normalised).
pub(crate) fn pooled(pooling: &Pooling, tokens: &[String], dim: usize) -> Value {
    let vectors: Vec<Vec<f32>> = tokens.iter().map(|t| embed(t, dim)).collect();
    match pooling {
        Pooling::Tokens => serde_json::json!(vectors),
        Pooling::Mean => {
            let mut mean = vec![0f32; dim.max(1)];
            for v in &vectors {
                mean.iter_mut().zip(v).for_each(|(m, x)| *m += x);
            }
            let norm = mean.iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm > 0.0 {
                mean.iter_mut().for_each(|x| *x /= norm);
            }
            serde_json::json!(mean)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_text_chunks_are_found_and_bad_pngs_are_not() {
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        let chunk = |kind: &[u8], data: &[u8]| {
            let mut c = (data.len() as u32).to_be_bytes().to_vec();
            c.extend_from_slice(kind);
            c.extend_from_slice(data);
            c.extend_from_slice(&[0; 4]);
            c
        };
        png.extend(chunk(b"IHDR", &[0; 13]));
        png.extend(chunk(b"tEXt", b"fakeai-words\0Marshalling Types"));
        assert_eq!(
            png_text(&png, IMAGE_WORDS_KEYWORD).as_deref(),
            Some("Marshalling Types")
        );
        assert_eq!(png_text(&png[..png.len() - 10], IMAGE_WORDS_KEYWORD), None);
        assert_eq!(png_text(b"GIF89a", IMAGE_WORDS_KEYWORD), None);
        let mut huge = b"\x89PNG\r\n\x1a\n".to_vec();
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        huge.extend_from_slice(b"tEXt\0\0\0\0\0\0\0\0");
        assert_eq!(png_text(&huge, IMAGE_WORDS_KEYWORD), None);
    }

    #[test]
    fn an_image_without_words_has_tokens_of_its_own_bytes() {
        let a = image_tokens(b"\x89PNG\r\n\x1a\none image");
        assert_eq!(a.len(), IMAGE_TOKENS);
        assert_eq!(a, image_tokens(b"\x89PNG\r\n\x1a\none image"));
        assert_ne!(a, image_tokens(b"\x89PNG\r\n\x1a\nanother image"));
        // Each is one word of a question (letters and digits only).
        assert!(a.iter().all(|t| words(t) == [t.clone()]), "{a:?}");
    }
}
