//! `horos-ref models`: what the running coordinator serves, and an operator's load, unload, pin
//! and unpin of a model (through its admin API).

use std::time::Duration;

use serde_json::Value;

use super::row;
use crate::admin::{Admin, model_op_path};
use crate::cli::ModelsArgs;
use crate::config::Config;
use crate::error::AppError;

pub async fn models(config: &Config, args: ModelsArgs, json_out: bool) -> Result<(), AppError> {
    // A load waits until the model serves: as long as a job may.
    let admin = Admin::new(config, Duration::from_secs(3600))?;
    let op = [
        ("load", &args.load),
        ("unload", &args.unload),
        ("pin", &args.pin),
        ("unpin", &args.unpin),
    ]
    .into_iter()
    .find_map(|(op, model)| model.as_deref().map(|m| (op, m)));
    if let Some((op, model)) = op {
        let v = admin.post(&model_op_path(model, op)).await?;
        if json_out {
            println!("{v}");
        } else {
            println!("{}", describe(op, &v));
        }
        return Ok(());
    }
    let v = admin.get("/api/v1/models").await?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    row!(
        "{:<32} {:<9} {:>6} {:>6} {:>9}  where",
        "MODEL",
        "STATE",
        "ACTIVE",
        "PINNED",
        "IDLE_S"
    );
    for m in v["data"].as_array().into_iter().flatten() {
        let place = if m["remote"] == true {
            "remote".to_owned()
        } else {
            let gpus: Vec<String> = m["gpus"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|g| format!("gpu{}:{}MB", g["gpu"], g["mb"]))
                .collect();
            match (m["port"].as_u64(), gpus.is_empty()) {
                (Some(p), true) => format!("port {p}"),
                (Some(p), false) => format!("port {p} {}", gpus.join(",")),
                (None, _) => "fixed".to_owned(),
            }
        };
        row!(
            "{:<32} {:<9} {:>6} {:>6} {:>9.0}  {place}",
            m["model"].as_str().unwrap_or("?"),
            m["state"].as_str().unwrap_or("?"),
            m["active"],
            m["pinned"],
            m["idle_s"].as_f64().unwrap_or(0.0),
        );
    }
    Ok(())
}

fn describe(op: &str, v: &Value) -> String {
    let model = v["model"].as_str().unwrap_or("?");
    match op {
        "load" => format!(
            "{model} ready (took {:.1} s)",
            v["took_s"].as_f64().unwrap_or(0.0)
        ),
        "unload" if v["unloaded"] == true => format!("{model} unloaded"),
        "unload" => format!("{model} stays: it was not loaded, or is pinned or busy"),
        _ => format!(
            "{model} {}",
            if v["pinned"] == true {
                "pinned"
            } else {
                "unpinned"
            }
        ),
    }
}
