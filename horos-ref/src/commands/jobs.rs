//! `horos-ref jobs`: the running coordinator's async jobs (`POST /v1/jobs`), newest first, with
//! filters (its admin API); `--cancel ID` cancels one, `--show ID [--out FILE]` shows one and
//! writes its audio or image; `--submit KIND [--wait]` queues one through the data plane and
//! follows it (horos-ops' `Remote::submit_async`, `wait_async_job`).

use std::time::Duration;

use horos_ops::jobs::{AsyncJobArgs, AsyncState};
use horos_ops::lanes::Wait;
use horos_ops::remote::Remote;

use super::row;
use crate::cli::JobsArgs;
use crate::config::Config;
use crate::error::AppError;

pub async fn jobs(config: &Config, args: JobsArgs, json_out: bool) -> Result<(), AppError> {
    if let Some(kind) = &args.submit {
        return submit(config, kind, &args, json_out).await;
    }
    if let (Some(id), true) = (args.show, args.wait) {
        let job = data_plane(config, &args)?.wait_async_job(id, WAIT).await?;
        return show(&serde_json::json!(job), args.out.as_deref(), json_out);
    }
    if args.wait {
        return Err(AppError::Usage(
            "--wait follows a job: give --submit KIND or --show ID".into(),
        ));
    }
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
    let query = list_query(
        args.limit,
        &[
            ("state", args.state.as_deref()),
            ("kind", args.kind.as_deref()),
            ("client", args.client.as_deref()),
            ("model", args.model.as_deref()),
        ],
    );
    let v = admin.get_json(&format!("/api/v1/jobs?{query}")).await?;
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

/// The job list's query string: `limit` and the filters given, each value encoded as a form
/// encodes it.
fn list_query(limit: usize, filters: &[(&str, Option<&str>)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.append_pair("limit", &limit.to_string());
    for (key, value) in filters {
        if let Some(v) = value {
            query.append_pair(key, v);
        }
    }
    query.finish()
}

/// How `--wait` polls: twice a second, for a day at most.
const WAIT: Wait = Wait {
    every: Duration::from_millis(500),
    at_most: Duration::from_secs(24 * 3600),
};

/// The coordinator's data plane as the key of `--key` (else HOROS_API_KEY) calls it.
fn data_plane(config: &Config, args: &JobsArgs) -> Result<Remote, AppError> {
    crate::admin::data_plane(config, args.key.clone(), Duration::from_secs(60))
}

/// `--submit KIND`: the job queued; with `--wait`, followed until it ends and shown.
async fn submit(
    config: &Config,
    kind: &str,
    args: &JobsArgs,
    json_out: bool,
) -> Result<(), AppError> {
    let mut job = match (&args.prompt, &args.request) {
        (Some(text), _) => {
            AsyncJobArgs::from_text(kind, args.model.as_deref().unwrap_or_default(), text)?
        }
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| AppError::Usage(format!("{}: {e}", path.display())))?;
            let mut request: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| AppError::Usage(format!("{}: not JSON: {e}", path.display())))?;
            if let (Some(model), Some(fields)) = (&args.model, request.as_object_mut()) {
                fields.insert("model".into(), serde_json::json!(model));
            }
            AsyncJobArgs::from_request(kind, request)?
        }
        (None, None) => {
            return Err(AppError::Usage(
                "--submit needs --prompt TEXT (with --model) or --request FILE".into(),
            ));
        }
    };
    job.priority = args.priority;
    let remote = data_plane(config, args)?;
    let queued = remote.submit_async(&job).await?;
    if !args.wait {
        if json_out {
            super::print_json(&queued);
        } else {
            println!(
                "job {} ({}) {}",
                queued.id,
                queued.kind,
                queued.state.as_str()
            );
        }
        return Ok(());
    }
    let done = remote.wait_async_job(queued.id, WAIT).await?;
    show(&serde_json::json!(done), args.out.as_deref(), json_out)?;
    if done.state == AsyncState::Succeeded {
        Ok(())
    } else {
        Err(AppError::Usage(format!(
            "job {} {}: {}",
            done.id,
            done.state.as_str(),
            done.error_message().unwrap_or("no reason given")
        )))
    }
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
        let q = super::list_query(5, &[("client", Some("a b/c&d=é")), ("model", None)]);
        assert_eq!(q, "limit=5&client=a+b%2Fc%26d%3D%C3%A9");
        // What the coordinator reads back.
        let pairs: Vec<(String, String)> =
            form_urlencoded::parse(q.as_bytes()).into_owned().collect();
        assert_eq!(pairs[1], ("client".to_owned(), "a b/c&d=é".to_owned()));
    }
}
