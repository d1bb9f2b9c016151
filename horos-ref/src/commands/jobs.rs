//! `horos-ref jobs`: the running coordinator's async jobs (`POST /v1/jobs`), newest first, with
//! filters; `--cancel ID` cancels one, `--show ID [--out FILE]` shows one and writes its audio or
//! image (through its admin API).

use std::time::Duration;

use super::row;
use crate::cli::JobsArgs;
use crate::config::Config;
use crate::error::AppError;

pub async fn jobs(config: &Config, args: JobsArgs, json_out: bool) -> Result<(), AppError> {
    let admin = crate::admin::client(config, Duration::from_secs(30))?;
    if let Some(id) = args.cancel {
        let v = admin
            .post_json(&format!("/api/v1/jobs/{id}/cancel"))
            .await?;
        if json_out {
            println!("{v}");
        } else {
            println!(
                "job {id} cancelled (it was {})",
                v["was"].as_str().unwrap_or("?")
            );
        }
        return Ok(());
    }
    if let Some(id) = args.show {
        let v = admin.get_json(&format!("/api/v1/jobs/{id}")).await?;
        return show(&v, args.out.as_deref(), json_out);
    }
    let mut query = vec![format!("limit={}", args.limit)];
    for (key, value) in [
        ("state", &args.state),
        ("kind", &args.kind),
        ("client", &args.client),
        ("model", &args.model),
    ] {
        if let Some(v) = value {
            query.push(format!("{key}={}", encode(v)));
        }
    }
    let v = admin
        .get_json(&format!("/api/v1/jobs?{}", query.join("&")))
        .await?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    row!(
        "{:>8} {:<12} {:<10} {:<24} {:<24}",
        "ID",
        "KIND",
        "STATE",
        "CLIENT",
        "MODEL"
    );
    for j in v["data"].as_array().into_iter().flatten() {
        row!(
            "{:>8} {:<12} {:<10} {:<24} {:<24}",
            j["id"],
            j["kind"].as_str().unwrap_or("?"),
            j["state"].as_str().unwrap_or("?"),
            j["client"].as_str().unwrap_or("-"),
            j["model"].as_str().unwrap_or("-"),
        );
    }
    Ok(())
}

/// Percent-encodes a query value (everything but unreserved characters).
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A job's state and result: a chat's answer, the size of an audio or image result (written to
/// `out` when given).
fn show(
    v: &serde_json::Value,
    out: Option<&std::path::Path>,
    json_out: bool,
) -> Result<(), AppError> {
    use base64::Engine as _;
    let result = &v["result"];
    // Speech: the audio at the top; images: the first image's.
    let media = result["b64_json"]
        .as_str()
        .or_else(|| result["data"][0]["b64_json"].as_str());
    let written = match (out, media) {
        (Some(path), Some(b64)) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| AppError::Usage(format!("the job's result is not base64: {e}")))?;
            std::fs::write(path, &bytes)
                .map_err(|e| AppError::Usage(format!("{}: {e}", path.display())))?;
            Some((path, bytes.len()))
        }
        (Some(_), None) => {
            return Err(AppError::Usage(format!(
                "job {} has no audio or image to write (state {})",
                v["id"], v["state"]
            )));
        }
        (None, _) => None,
    };
    if json_out {
        let mut v = v.clone();
        if let Some((path, bytes)) = written {
            v["written"] = serde_json::json!({"path": path, "bytes": bytes});
        }
        println!("{v}");
        return Ok(());
    }
    let kind = v["kind"].as_str().unwrap_or("?");
    println!(
        "job {} ({kind}): {}",
        v["id"],
        v["state"].as_str().unwrap_or("?")
    );
    if let Some(e) = v["error"]["message"]
        .as_str()
        .or(v["error"]["error"]["message"].as_str())
    {
        println!("error: {e}");
    }
    if let Some(text) = result["choices"][0]["message"]["content"]
        .as_str()
        .or(result["choices"][0]["text"].as_str())
    {
        println!("{text}");
    }
    match written {
        Some((path, bytes)) => println!("wrote {bytes} bytes to {}", path.display()),
        None if media.is_some() => println!(
            "{} bytes of {} (write them with --out FILE)",
            result["bytes"]
                .as_u64()
                .map_or_else(|| "some".to_owned(), |b| b.to_string()),
            result["content_type"].as_str().unwrap_or("image data")
        ),
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(super::encode("a b/c&d=é"), "a%20b%2Fc%26d%3D%C3%A9");
        assert_eq!(super::encode("Qwen2.5-7B_x~"), "Qwen2.5-7B_x~");
    }
}
