//! `horos-ref reload`: the running system reads its configuration file again and applies its
//! keys, limits and profiles (horos-ops' `reload`, through its admin API; SIGHUP to `run` does
//! the same).

use std::time::Duration;

use crate::config::Config;
use crate::error::AppError;

pub async fn reload(config: &Config, json_out: bool) -> Result<(), AppError> {
    let admin = crate::admin::client(config, Duration::from_secs(30))?;
    let r = horos_ops::reload::reload(&admin).await?;
    if json_out {
        super::print_json(&r);
        return Ok(());
    }
    println!("reloaded: keys, limits and profiles apply to new requests");
    for (what, names) in [
        ("keys added", &r.keys_added),
        ("keys removed", &r.keys_removed),
        ("keys changed", &r.keys_changed),
        ("client limits changed", &r.clients_changed),
        ("profiles changed", &r.profiles_changed),
        ("changed, but need a restart", &r.restart_needed),
    ] {
        if !names.is_empty() {
            println!("  {what}: {}", names.join(", "));
        }
    }
    if r.allow_anonymous_changed {
        println!("  allow_anonymous changed");
    }
    Ok(())
}
