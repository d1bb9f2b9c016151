//! `horos-ref logs [NAME] [-f] [-n LINES]`: the running system's logs (horos-ops' `logs`,
//! through its admin API): the list, a log's last lines, and with `-f` what follows, polled
//! once a second until Ctrl-C.

use std::io::Write;
use std::time::Duration;

use horos_ops::logs;
use horos_server_control::LogWindow;

use super::row;
use crate::cli::LogsArgs;
use crate::config::Config;
use crate::error::AppError;

/// How often `-f` asks for what was written.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

pub async fn logs(config: &Config, args: LogsArgs, json_out: bool) -> Result<(), AppError> {
    let admin = crate::admin::client(config, Duration::from_secs(30))?;
    let Some(name) = args.name else {
        let list = logs::list(&admin).await?;
        if json_out {
            super::print_json(&list);
            return Ok(());
        }
        row!("{:<32} {:<6} {:>10}", "NAME", "KIND", "BYTES");
        for l in &list {
            let bytes = l.bytes.map_or("-".to_owned(), |b| b.to_string());
            row!("{:<32} {:<6} {:>10}", l.name, l.kind.as_str(), bytes);
        }
        return Ok(());
    };
    let lines = usize::try_from(args.lines).unwrap_or(usize::MAX);
    let mut chunk = logs::read(&admin, &name, LogWindow::Tail { lines }).await?;
    loop {
        if json_out {
            super::print_json(&chunk);
        } else {
            let mut out = std::io::stdout().lock();
            out.write_all(chunk.text.as_bytes())?;
            out.flush()?;
        }
        if !args.follow {
            return Ok(());
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
        let offset = chunk.next;
        chunk = logs::read(&admin, &name, LogWindow::After { offset }).await?;
        while json_out && chunk.text.is_empty() {
            tokio::time::sleep(FOLLOW_EVERY).await;
            chunk = logs::read(&admin, &name, LogWindow::After { offset }).await?;
        }
    }
}
