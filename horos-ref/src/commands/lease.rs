//! `horos-ref lease`: GPU memory booked by any process (a training job, a script) in the VRAM
//! ledger (`[gpus] ledger`) where the lanes' servers and the model pool book theirs, directly on
//! its SQLite file: no running `horos-ref run` is needed, and what is booked here neither the
//! pool nor a lane's server can take.

use std::time::Duration;

use horos_gpu_alloc::ledger::{LeaseRequest, VramLedger, lease_ttl};
use serde_json::json;

use super::row;
use crate::cli::LeaseCommand;
use crate::config::Config;
use crate::error::AppError;

pub async fn lease(config: &Config, cmd: LeaseCommand, json_out: bool) -> Result<(), AppError> {
    let path = config.ledger_path();
    let out = tokio::task::spawn_blocking(move || -> Result<serde_json::Value, AppError> {
        let ledger = VramLedger::open(&path)
            .map_err(|e| AppError::Usage(format!("ledger {}: {e}", path.display())))?;
        let err = |e: horos_gpu_alloc::ledger::LedgerError| AppError::Usage(e.to_string());
        Ok(match cmd {
            LeaseCommand::List => json!({ "data": ledger.leases().map_err(err)? }),
            LeaseCommand::Acquire {
                owner,
                gpu,
                mb,
                ttl_s,
                pid,
            } => {
                let req = LeaseRequest {
                    owner,
                    pid,
                    parts: vec![(gpu, mb)],
                    ttl: ttl(ttl_s)?,
                };
                serde_json::to_value(ledger.acquire(&req).map_err(err)?)
                    .map_err(|e| AppError::Usage(e.to_string()))?
            }
            LeaseCommand::Renew { id, ttl_s } => {
                if !ledger.renew(&id, ttl(ttl_s)?).map_err(err)? {
                    return Err(AppError::Usage(format!(
                        "no live lease {id} (expired or released)"
                    )));
                }
                json!({"id": id, "renewed": true})
            }
            LeaseCommand::Release { id } => {
                if !ledger.release(&id).map_err(err)? {
                    return Err(AppError::Usage(format!(
                        "no live lease {id} (expired or released)"
                    )));
                }
                json!({"id": id, "released": true})
            }
        })
    })
    .await
    .map_err(|e| AppError::Usage(e.to_string()))??;
    if json_out {
        println!("{out}");
    } else if let Some(rows) = out["data"].as_array() {
        row!(
            "{:<40} {:<24} {:>4} {:>8} {:>10}",
            "LEASE",
            "OWNER",
            "GPU",
            "MB",
            "EXPIRES_S"
        );
        let now = squeueha::now_ms();
        for r in rows {
            let left = (r["expires_at_ms"].as_i64().unwrap_or(0) - now) / 1000;
            row!(
                "{:<40} {:<24} {:>4} {:>8} {:>10}",
                r["id"].as_str().unwrap_or("?"),
                r["owner"].as_str().unwrap_or("?"),
                r["gpu"],
                r["mb"],
                left
            );
        }
    } else {
        println!("{out}");
    }
    Ok(())
}

fn ttl(s: f64) -> Result<Duration, AppError> {
    lease_ttl(s)
        .ok_or_else(|| AppError::Usage("--ttl-s: a number of seconds, at most 30 days".into()))
}
