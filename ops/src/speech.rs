//! Text to speech on a running system: [`Remote::speak`] asks the coordinator's
//! `POST /v1/audio/speech` (admitted, routed and counted like any call) and keeps the audio.

use serde_json::{Value, json};

use crate::error::OpsError;
use crate::remote::Remote;

/// What to speak, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeechArgs {
    /// The model (a pooled `tts` model, say).
    pub model: String,
    /// The text.
    pub input: String,
    /// The voice (`None`: the model's default).
    pub voice: Option<String>,
    /// `wav`, `pcm`, `flac`, `mp3`, `opus` or `aac` (`None`: the server's default).
    pub format: Option<String>,
    /// 0.25 to 4.0 (`None`: 1.0).
    pub speed: Option<f64>,
}

/// The audio a coordinator answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Speech {
    /// Its bytes.
    pub audio: Vec<u8>,
    /// Its content type (`audio/wav`, ...).
    pub content_type: String,
}

impl SpeechArgs {
    /// The request body: OpenAI's fields, the unset ones left out.
    pub fn body(&self) -> Result<Value, OpsError> {
        if self.input.trim().is_empty() {
            return Err(OpsError::InvalidArgument {
                param: "input",
                message: "nothing to speak: the text is empty".into(),
            });
        }
        let mut body = json!({"model": self.model, "input": self.input});
        if let Some(v) = &self.voice {
            body["voice"] = json!(v);
        }
        if let Some(f) = &self.format {
            body["response_format"] = json!(f);
        }
        if let Some(s) = self.speed {
            body["speed"] = json!(s);
        }
        Ok(body)
    }
}

impl Remote {
    /// The audio of `args` from the coordinator's `POST /v1/audio/speech` (its error, with the
    /// field it names, as [`OpsError::Coordinator`]).
    pub async fn speak(&self, args: &SpeechArgs) -> Result<Speech, OpsError> {
        let (audio, content_type) = self
            .client()
            .post_bytes("/v1/audio/speech", &args.body()?)
            .await?;
        Ok(Speech {
            audio: audio.to_vec(),
            content_type: content_type.unwrap_or_else(|| "application/octet-stream".into()),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_body_has_the_fields_set_and_an_empty_text_is_refused() {
        let mut a = SpeechArgs {
            model: "voice".into(),
            input: "Hello".into(),
            voice: None,
            format: Some("wav".into()),
            speed: None,
        };
        assert_eq!(
            a.body().unwrap(),
            json!({"model": "voice", "input": "Hello", "response_format": "wav"})
        );
        a.input = " ".into();
        assert!(matches!(
            a.body(),
            Err(OpsError::InvalidArgument { param: "input", .. })
        ));
    }
}
