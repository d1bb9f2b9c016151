//! One file per subcommand; [`dispatch`] picks one.

mod ask;
mod check;
mod convert;
mod dead;
mod docs;
mod ingest;
mod ingest_progress;
mod init;
mod jobs;
mod lease;
mod logs;
mod mcp;
mod models;
mod nodes;
mod ps;
mod reload;
mod result;
mod run;
mod search;
mod speak;
mod stats;
mod status;
mod submit;
mod top;
pub mod worker;

use std::sync::OnceLock;

use squeueha::{AsyncQueue, Queue};

use crate::cli::{Cli, Command};
use crate::config::Config;
use crate::error::AppError;
use crate::lanes::lane_jobs;

/// Runs the command `cli` names. Every command but `demo`, `init`, `check` and `convert` reads
/// the configuration and opens its queue database first (`convert` reads one only when
/// `--config` names it).
pub async fn dispatch(cli: Cli) -> Result<(), AppError> {
    let config_file = cli.config_file().to_path_buf();
    match cli.command {
        Command::Demo(args) => {
            return crate::demo::run(args, cli.json)
                .await
                .map_err(AppError::Usage);
        }
        Command::Convert(args) => {
            let config = cli.config.as_deref().map(Config::load).transpose()?;
            return convert::convert(config.as_ref(), args, cli.json).await;
        }
        Command::Init(args) => return init::init(args, cli.json).await,
        Command::Check(args) => {
            let file = args.file.as_deref().unwrap_or(&config_file);
            return check::check(file, args.offline, cli.json);
        }
        _ => {}
    }
    let config = Config::load(&config_file)?;
    let queue = open_queue(&config).await?;
    let json = cli.json;
    match cli.command {
        Command::Run => run::run(&config, &config_file, queue, json).await,
        Command::Ask(args) => ask::ask(&config, args, json).await,
        Command::Submit(args) => submit::submit(&lane_jobs(&config, queue), args, json).await,
        Command::Result { id } => result::result(&lane_jobs(&config, queue), id, json).await,
        Command::Stats => stats::stats(&lane_jobs(&config, queue), json).await,
        Command::Nodes => nodes::nodes(&queue, json).await,
        Command::Dead(args) => dead::dead(&config, &lane_jobs(&config, queue), args, json).await,
        Command::Status => status::status(&config, &queue, json).await,
        Command::Ingest(args) => ingest::ingest(&config, args, json).await,
        Command::Docs { id, action } => {
            let action = action.or(id.map(|id| crate::cli::DocsCommand::Show { id }));
            docs::docs(&config, action, json).await
        }
        Command::Search {
            query,
            like,
            image,
            k,
            mode,
            doc,
        } => {
            let question = match (query, like, image) {
                (_, Some(like), _) => search::Question::Like(like),
                (q, _, Some(image)) => search::Question::Image(
                    image,
                    q.map(|q| q.to_string_lossy().into_owned())
                        .filter(|q| !q.trim().is_empty()),
                ),
                (Some(q), _, _) => search::Question::Text(q.to_string_lossy().into_owned()),
                (None, None, None) => return Err(AppError::Usage("a query is needed".into())),
            };
            search::search(&config, question, k, mode, doc, json).await
        }
        Command::Models(args) => models::models(&config, args, json).await,
        Command::Ps => ps::ps(&config, json).await,
        Command::Logs(args) => logs::logs(&config, args, json).await,
        Command::Reload => reload::reload(&config, json).await,
        Command::Top(args) => top::top(&config, args, json).await,
        Command::Jobs(args) => jobs::jobs(&config, args, json).await,
        Command::Speak(args) => speak::speak(&config, args, json).await,
        Command::Lease(cmd) => lease::lease(&config, cmd, json).await,
        Command::Mcp => mcp::mcp(config, queue).await,
        Command::Demo(_)
        | Command::Convert(_)
        | Command::Init(_)
        | Command::Check(_)
        | Command::Worker { .. } => Ok(()),
    }
}

async fn open_queue(config: &Config) -> Result<AsyncQueue, AppError> {
    let path = config.database.clone();
    let settings = config.queue.squeueha_config();
    let queue = tokio::task::spawn_blocking(move || Queue::open_with(path, settings))
        .await
        .map_err(|e| AppError::Usage(e.to_string()))??;
    Ok(AsyncQueue::new(queue))
}

/// The terminal's width when standard output is one (`None` when piped: lines stay whole).
fn terminal_width() -> Option<usize> {
    static WIDTH: OnceLock<Option<usize>> = OnceLock::new();
    *WIDTH.get_or_init(|| {
        std::io::IsTerminal::is_terminal(&std::io::stdout())
            .then(|| usize::from(console::Term::stdout().size().1))
    })
}

/// Prints one row of a table: cut to the terminal's width on a terminal (a long reason or URL
/// would wrap and break the columns), whole when piped.
pub fn print_row(line: &str) {
    match terminal_width() {
        Some(w) => println!("{}", console::truncate_str(line, w, "…")),
        None => println!("{line}"),
    }
}

/// Prints `value` as one line of JSON, its keys sorted (as a `serde_json::Value` prints).
pub fn print_json(value: &impl serde::Serialize) {
    println!("{}", serde_json::to_value(value).unwrap_or_default());
}

/// `println!` for a table's row ([`print_row`]).
macro_rules! row {
    ($($arg:tt)*) => {
        $crate::commands::print_row(&format!($($arg)*))
    };
}
pub(crate) use row;
