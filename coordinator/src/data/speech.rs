//! Text to speech (`POST /v1/audio/speech`): the request's fields checked before it is
//! forwarded (so a bad one is a 400 naming its field, without waiting for a place or loading a
//! model), and an async job's audio answer kept in its JSON result.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::data::request::RawObject;
use crate::error::ApiError;

/// OpenAI's audio formats (which of them a server produces is its own to say).
pub const FORMATS: [&str; 6] = ["mp3", "opus", "aac", "flac", "wav", "pcm"];

/// The longest `input`, in characters (OpenAI's limit).
pub const MAX_INPUT_CHARS: usize = 4096;

/// The `speed` range.
pub const SPEED: std::ops::RangeInclusive<f64> = 0.25..=4.0;

/// Checks a speech request's fields: `input` a non-empty string of at most
/// [`MAX_INPUT_CHARS`] characters, `voice` a string, `response_format` one of [`FORMATS`],
/// `speed` a number in [`SPEED`]. Returns the input's length in characters (what its usage
/// counts). A 400 naming the field otherwise.
pub fn check(body: &RawObject) -> Result<u64, ApiError> {
    let chars = match body.get("input") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.chars().count(),
        Some(Value::String(_)) => {
            return Err(ApiError::bad_request("`input` is empty: nothing to speak").param("input"));
        }
        Some(_) => return Err(ApiError::bad_request("`input` must be a string").param("input")),
        None => {
            return Err(
                ApiError::bad_request("`input` is required (the text to speak)").param("input"),
            );
        }
    };
    if chars > MAX_INPUT_CHARS {
        return Err(ApiError::bad_request(format!(
            "`input` has {chars} characters: at most {MAX_INPUT_CHARS}"
        ))
        .param("input"));
    }
    match body.get("voice") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(_) => return Err(ApiError::bad_request("`voice` must be a string").param("voice")),
    }
    match body.get("response_format") {
        None | Some(Value::Null) => {}
        Some(Value::String(f)) if FORMATS.contains(&f.as_str()) => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "`response_format` {v} is not one of {}",
                FORMATS.join(", ")
            ))
            .param("response_format"));
        }
    }
    match body.get("speed") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_f64().is_some_and(|s| SPEED.contains(&s)) => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "`speed` {v} must be a number from {} to {}",
                SPEED.start(),
                SPEED.end()
            ))
            .param("speed"));
        }
    }
    u64::try_from(chars).map_err(|_| ApiError::bad_request("`input` is too long").param("input"))
}

/// A speech job's result: the audio base64-encoded in the JSON result with its content type
/// and length (`{"object": "audio.speech", "content_type": "audio/wav", "bytes": N,
/// "b64_json": "..."}`), so it is stored, acked, read and purged like every other result.
pub fn job_result(content_type: Option<&str>, audio: &[u8]) -> Value {
    json!({
        "object": "audio.speech",
        "content_type": content_type.unwrap_or("application/octet-stream"),
        "bytes": audio.len(),
        "b64_json": base64::engine::general_purpose::STANDARD.encode(audio),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn checked(v: Value) -> Result<u64, ApiError> {
        check(&RawObject::from_map(v.as_object().unwrap()).unwrap())
    }

    #[test]
    fn fields_are_checked_and_named() {
        assert_eq!(checked(json!({"model": "m", "input": "héllo"})).unwrap(), 5);
        assert_eq!(
            checked(json!({"input": "hi", "voice": "en", "response_format": "wav", "speed": 4.0}))
                .unwrap(),
            2
        );
        let param = |v: Value| checked(v).unwrap_err().param.unwrap().to_string();
        assert_eq!(param(json!({"model": "m"})), "input");
        assert_eq!(param(json!({"input": "  "})), "input");
        assert_eq!(param(json!({"input": 3})), "input");
        assert_eq!(param(json!({"input": "x".repeat(4097)})), "input");
        assert_eq!(param(json!({"input": "a", "voice": 1})), "voice");
        assert_eq!(
            param(json!({"input": "a", "response_format": "ogg"})),
            "response_format"
        );
        assert_eq!(param(json!({"input": "a", "speed": 0.1})), "speed");
        assert_eq!(param(json!({"input": "a", "speed": "fast"})), "speed");
    }

    #[test]
    fn a_job_result_carries_the_audio_and_its_type() {
        let v = job_result(Some("audio/wav"), b"RIFF....");
        assert_eq!(v["content_type"], "audio/wav");
        assert_eq!(v["bytes"], 8);
        let back = base64::engine::general_purpose::STANDARD
            .decode(v["b64_json"].as_str().unwrap())
            .unwrap();
        assert_eq!(back, b"RIFF....");
    }
}
