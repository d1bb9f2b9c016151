//! `horos-ref speak "text" --out FILE`: the running coordinator's `POST /v1/audio/speech`
//! (horos-ops' [`Remote::speak`]), the audio written to a file; prints what it wrote.

use std::time::Duration;

use horos_ops::speech::SpeechArgs;
use serde_json::json;

use crate::cli::SpeakArgs;
use crate::config::Config;
use crate::error::AppError;

pub async fn speak(config: &Config, args: SpeakArgs, json_out: bool) -> Result<(), AppError> {
    let remote = crate::admin::data_plane(config, args.key, Duration::from_secs(600))?;
    let speech = remote
        .speak(&SpeechArgs {
            model: args.model,
            input: args.text,
            voice: args.voice,
            format: Some(args.format),
            speed: args.speed,
        })
        .await?;
    std::fs::write(&args.out, &speech.audio)
        .map_err(|e| AppError::Usage(format!("cannot write {}: {e}", args.out.display())))?;
    if json_out {
        println!(
            "{}",
            json!({"path": args.out, "bytes": speech.audio.len(), "content_type": speech.content_type})
        );
    } else {
        println!(
            "wrote {} bytes of {} to {}",
            speech.audio.len(),
            speech.content_type,
            args.out.display()
        );
    }
    Ok(())
}
