//! `horos-ref models`: what the running coordinator serves, and an operator's load, unload, pin
//! and unpin of a model (horos-ops' `models`, through its admin API).

use std::time::Duration;

use horos_ops::models::{ModelAction, ModelRow, ModelsAnswer, ModelsArgs as Models};

use super::row;
use crate::cli::ModelsArgs;
use crate::config::Config;
use crate::error::AppError;

pub async fn models(config: &Config, args: ModelsArgs, json_out: bool) -> Result<(), AppError> {
    // A load waits until the model serves: as long as a job may.
    let admin = crate::admin::client(config, Duration::from_secs(3600))?;
    let op = [
        (ModelAction::Load, args.load),
        (ModelAction::Unload, args.unload),
        (ModelAction::Pin, args.pin),
        (ModelAction::Unpin, args.unpin),
    ]
    .into_iter()
    .find_map(|(action, model)| model.map(|m| (action, m)));
    let args = match op {
        Some((action, model)) => Models {
            action,
            model: Some(model),
        },
        None if args.unload_all => Models {
            action: ModelAction::UnloadAll,
            model: None,
        },
        None => Models::default(),
    };
    let answer = horos_ops::models::models(&admin, args).await?;
    if json_out {
        super::print_json(&answer);
        return Ok(());
    }
    let list = match answer {
        ModelsAnswer::List(list) => list,
        ModelsAnswer::Loaded(l) => {
            println!("{} ready (took {:.1} s)", l.model, l.took_s);
            return Ok(());
        }
        ModelsAnswer::Unloaded(u) if u.unloaded => {
            println!("{} unloaded", u.model);
            return Ok(());
        }
        ModelsAnswer::Unloaded(u) => {
            println!("{} stays: it was not loaded, or is pinned or busy", u.model);
            return Ok(());
        }
        ModelsAnswer::UnloadedAll(all) => {
            println!(
                "unloaded: {}; stays (pinned or busy): {}",
                list_or_none(&all.unloaded),
                list_or_none(&all.kept)
            );
            return Ok(());
        }
        ModelsAnswer::Pinned(p) => {
            let now = if p.pinned { "pinned" } else { "unpinned" };
            println!("{} {now}", p.model);
            return Ok(());
        }
    };
    row!(
        "{:<32} {:<9} {:>6} {:>6} {:>9}  where",
        "MODEL",
        "STATE",
        "ACTIVE",
        "PINNED",
        "IDLE_S"
    );
    for m in &list.data {
        // ACTIVE and PINNED print unpadded, as they always have.
        row!(
            "{:<32} {:<9} {} {} {:>9.0}  {}",
            m.model,
            m.state.as_str(),
            m.active,
            m.pinned,
            m.idle_s,
            place(m),
        );
    }
    Ok(())
}

/// Where a model runs: `remote`, `fixed`, or its port and GPUs.
fn place(m: &ModelRow) -> String {
    if m.remote {
        return "remote".to_owned();
    }
    let gpus: Vec<String> = m
        .gpus
        .iter()
        .map(|g| format!("gpu{}:{}MB", g.gpu, g.mb))
        .collect();
    match (m.port, gpus.is_empty()) {
        (Some(p), true) => format!("port {p}"),
        (Some(p), false) => format!("port {p} {}", gpus.join(",")),
        (None, _) => "fixed".to_owned(),
    }
}

fn list_or_none(models: &[String]) -> String {
    if models.is_empty() {
        "none".to_owned()
    } else {
        models.join(", ")
    }
}
