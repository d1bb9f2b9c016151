//! `horos-ref init`: a first configuration for this machine. The GPUs (NVML, `--gpus`, else
//! the demo's simulated pair), the models of `--models` (gpu-alloc's
//! [`find_models`](horos_gpu_alloc::discover::find_models)), the servers on PATH (horos-servers'
//! [`find_servers`](horos_servers::discover::find_servers)), horos-modes'
//! [`propose`](horos_modes::proposal::propose) from them, rendered by [`horos_modes::proposal_file`].

use horos_gpu_alloc::discover::find_models;
use horos_modes::proposal::propose;
use horos_servers::discover::find_servers;
use serde_json::json;

use crate::cli::InitArgs;
use crate::commands::print_json;
use crate::error::AppError;
use horos_modes::proposal_file::{Fleet, render};

/// Writes the proposed configuration to `--out` (never over a file without `--force`).
pub async fn init(args: InitArgs, json: bool) -> Result<(), AppError> {
    if args.out.exists() && !args.force {
        return Err(AppError::Usage(format!(
            "{} exists: give --force to overwrite it, or --out another file",
            args.out.display()
        )));
    }
    let fleet = match &args.gpus {
        Some(spec) => Fleet::Given(parse_gpus(spec).map_err(AppError::Usage)?),
        None => {
            let read = tokio::task::spawn_blocking(horos_gpu_alloc::monitor::settings::nvml_gpus)
                .await
                .unwrap_or_default();
            if read.is_empty() {
                Fleet::Cpu
            } else {
                Fleet::Nvml(read)
            }
        }
    };
    let models = match &args.models {
        Some(dir) => find_models(dir).map_err(|e| AppError::Usage(e.to_string()))?,
        None => Vec::new(),
    };
    let servers = find_servers(&|k| std::env::var_os(k));
    let proposal = propose(
        &fleet.sizes(),
        &models,
        &servers,
        args.port.saturating_add(1),
    );
    let text = render(&fleet, &proposal, args.port).map_err(|e| AppError::Usage(e.to_string()))?;
    std::fs::write(&args.out, text)?;
    let lanes: Vec<_> = proposal
        .lanes
        .iter()
        .map(|l| json!({"queue": l.queue, "model": l.model, "vram_mb": l.vram_mb}))
        .collect();
    let pool: Vec<_> = proposal
        .pool
        .iter()
        .map(|m| json!({"name": m.name, "backend": m.backend, "vram_mb": m.vram_mb, "pin": m.pin}))
        .collect();
    let left_out: Vec<_> = proposal
        .left_out
        .iter()
        .map(|l| json!({"path": l.path.display().to_string(), "reason": l.reason}))
        .collect();
    if json {
        print_json(&json!({
            "out": args.out.display().to_string(),
            "gpus_mb": fleet.sizes(),
            "servers": servers.iter().map(|s| json!({"kind": s.kind, "path": s.path.display().to_string()})).collect::<Vec<_>>(),
            "lanes": lanes,
            "pool": pool,
            "left_out": left_out,
        }));
        return Ok(());
    }
    println!(
        "wrote {}: {} GPU(s) {:?} MB, {} lane(s), {} pooled model(s), {} left out",
        args.out.display(),
        fleet.sizes().len(),
        fleet.sizes(),
        lanes.len(),
        pool.len(),
        left_out.len()
    );
    for l in &proposal.left_out {
        println!("left out: {}: {}", l.path.display(), l.reason);
    }
    println!(
        "next: horos-ref check {0}; horos-ref --config {0} run",
        args.out.display()
    );
    Ok(())
}

/// `--gpus`: `COUNTxMB` (`2x24000`) or sizes separated by commas (`24000,16000`).
fn parse_gpus(spec: &str) -> Result<Vec<u64>, String> {
    let bad = || format!("--gpus {spec}: COUNTxMB (2x24000) or MB,MB,... (24000,16000)");
    let sizes: Vec<u64> = match spec.split_once('x') {
        Some((n, mb)) => {
            let n: usize = n.trim().parse().map_err(|_| bad())?;
            let mb: u64 = mb.trim().parse().map_err(|_| bad())?;
            vec![mb; n]
        }
        None => spec
            .split(',')
            .map(|s| s.trim().parse::<u64>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?,
    };
    if sizes.is_empty() || sizes.len() > 64 || sizes.contains(&0) {
        return Err(bad());
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::parse_gpus;

    #[test]
    fn gpus_are_a_count_times_a_size_or_a_list() {
        assert_eq!(parse_gpus("2x24000"), Ok(vec![24000, 24000]));
        assert_eq!(parse_gpus("24000, 16000"), Ok(vec![24000, 16000]));
        assert!(parse_gpus("0x24000").is_err());
        assert!(parse_gpus("2x0").is_err());
        assert!(parse_gpus("many").is_err());
    }
}
