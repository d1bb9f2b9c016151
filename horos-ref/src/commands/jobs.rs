//! `horos-ref jobs`: the running coordinator's async jobs (`POST /v1/jobs`), newest first, with
//! filters; `--cancel ID` cancels one (through its admin API).

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

#[cfg(test)]
mod tests {
    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(super::encode("a b/c&d=é"), "a%20b%2Fc%26d%3D%C3%A9");
        assert_eq!(super::encode("Qwen2.5-7B_x~"), "Qwen2.5-7B_x~");
    }
}
