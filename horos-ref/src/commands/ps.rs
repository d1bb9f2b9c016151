//! `horos-ref ps`: what runs where in the running system (like `ollama ps`): the lanes' server
//! instances, the models loaded on demand, and each GPU with what it serves, from the
//! coordinator's admin API.

use std::time::Duration;

use serde_json::{Value, json};

use crate::config::Config;
use crate::error::AppError;
use horos_ops::status::cell as text;

pub async fn ps(config: &Config, json_out: bool) -> Result<(), AppError> {
    let admin = crate::admin::client(config, Duration::from_secs(10))?;
    let status = admin.get_json("/api/v1/status").await?;
    let models = admin.get_json("/api/v1/models").await?;
    if json_out {
        println!(
            "{}",
            json!({"lanes": status["sections"]["lanes"], "models": models["data"],
                   "gpus": status["gpus"], "modes": status["modes"]})
        );
        return Ok(());
    }
    // On a terminal, each line is cut to its width (a long URL or model list would wrap).
    for line in lines(&status, &models) {
        super::print_row(&line);
    }
    Ok(())
}

/// The tables `ps` prints (lanes, pooled models, GPUs), from `GET /api/v1/status` and
/// `GET /api/v1/models`; `top` shows them too.
pub fn lines(status: &Value, models: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let lanes = &status["sections"]["lanes"];
    let gpus = &status["gpus"];
    out.push(format!(
        "{:<14} {:>4}  {:<28} {:<7} {:<8} {:<9} {:>8}",
        "LANE", "GPU", "URL", "GATE", "BATCH", "SERVER", "RESTARTS"
    ));
    for l in lanes.as_array().into_iter().flatten() {
        out.push(format!(
            "{:<14} {:>4}  {:<28} {:<7} {:<8} {:<9} {:>8}",
            text(&l["queue"]),
            text(&l["gpu"]),
            text(&l["url"]),
            text(&l["gate"]),
            text(&l["batch"]),
            text(&l["server"]),
            text(&l["restarts"]),
        ));
    }
    let pooled: Vec<&Value> = models["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["port"].is_u64() || m["remote"] == true)
        .collect();
    if !pooled.is_empty() {
        out.push(String::new());
        out.push(format!(
            "{:<28} {:<11} {:>6} {:>6}  where",
            "MODEL", "STATE", "ACTIVE", "PINNED"
        ));
        for m in pooled {
            let place = if m["remote"] == true {
                "remote".to_owned()
            } else {
                let on: Vec<String> = m["gpus"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|g| format!("gpu{}:{}MB", g["gpu"], g["mb"]))
                    .collect();
                format!("port {} {}", text(&m["port"]), on.join(","))
            };
            // Asleep: at which level (`SLEEPING l1`: its weights in host RAM).
            let state = match m["sleep_level"].as_str() {
                Some("one") => format!("{} l1", text(&m["state"])),
                Some("two") => format!("{} l2", text(&m["state"])),
                _ => text(&m["state"]),
            };
            out.push(format!(
                "{:<28} {:<11} {:>6} {:>6}  {place}",
                text(&m["model"]),
                state,
                text(&m["active"]),
                text(&m["pinned"]),
            ));
        }
    }
    if let Some(gpus) = gpus.as_array().filter(|g| !g.is_empty()) {
        out.push(String::new());
        out.push(format!(
            "{:>4}  {:<22} {:>16} {:>6} {:>5}  serves",
            "GPU", "NAME", "MEMORY MB", "TEMP", "UTIL"
        ));
        for g in gpus {
            let serves: Vec<String> = status["modes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["gpu"] == g["index"])
                .map(|m| format!("{} ({})", text(&m["mode"]), text(&m["state"])))
                .collect();
            out.push(format!(
                "{:>4}  {:<22} {:>16} {:>6} {:>5}  {}",
                text(&g["index"]),
                text(&g["name"]),
                format!(
                    "{} / {}",
                    text(&g["memory_used_mb"]),
                    text(&g["memory_total_mb"])
                ),
                g["temperature_c"]
                    .as_f64()
                    .map_or(String::new(), |t| format!("{t:.0}°C")),
                g["utilization_pct"]
                    .as_u64()
                    .map_or(String::new(), |u| format!("{u}%")),
                serves.join(", ")
            ));
        }
    }
    out
}
