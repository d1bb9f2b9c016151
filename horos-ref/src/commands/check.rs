//! `horos-ref check [FILE] [--offline]`: the configuration checked without starting anything.
//! The file's keys and values (as `run` reads it), the environment variables it names, then
//! each section's problems on this machine and the VRAM plan ([`Config::problems`]). Each
//! problem names its key and a fix; any problem is a failure (exit status 1).

use std::path::Path;

use horos_server_control::settings::{CheckScope, Problem, Table, env_problems};

use crate::commands::print_json;
use crate::config::{Config, ConfigError};
use crate::error::AppError;

/// Checks `file`; `offline`: programs, model files and ports are not looked at.
pub fn check(file: &Path, offline: bool, json: bool) -> Result<(), AppError> {
    let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
        path: file.display().to_string(),
        source,
    })?;
    let problems = problems(file, &text, offline);
    if json {
        print_json(&serde_json::json!({
            "file": file.display().to_string(),
            "ok": problems.is_empty(),
            "problems": problems,
        }));
    } else if problems.is_empty() {
        println!("{}: no problem found", file.display());
    } else {
        for p in &problems {
            println!("{}: {}\n    fix: {}", p.key, p.message, p.fix);
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(AppError::Usage(format!(
            "{}: {} problem(s)",
            file.display(),
            problems.len()
        )))
    }
}

/// Every problem of the configuration `text` read from `file`.
fn problems(file: &Path, text: &str, offline: bool) -> Vec<Problem> {
    let table: Table = match toml::from_str(text) {
        Ok(t) => t,
        Err(e) => return vec![parse_problem(&e.to_string())],
    };
    let real = |v: &str| std::env::var(v).ok().filter(|v| !v.is_empty());
    let mut problems = env_problems(&table, &real);
    // The unset variables are named above: the rest is checked as if they were set.
    let stand_in = move |v: &str| real(v).or_else(|| Some(format!("unset-{v}")));
    match Config::load_with(file, &stand_in) {
        Ok(config) => {
            let scope = CheckScope {
                files: !offline,
                ports: !offline,
            };
            // A command or path naming an unset variable is reported once, as the variable.
            let unset: Vec<String> = problems.iter().map(|p| p.key.clone()).collect();
            problems.extend(
                config
                    .problems(scope)
                    .into_iter()
                    .filter(|p| !unset.contains(&p.key)),
            );
        }
        Err(ConfigError::Parse { message, .. }) => problems.push(parse_problem(&message)),
        Err(ConfigError::Invalid { message, .. }) => problems.push(invalid_problem(&message)),
        Err(e @ ConfigError::Read { .. }) => {
            problems.push(Problem::new("", e.to_string(), "check the file's path"));
        }
    }
    problems
}

/// toml's message (an unknown key, a wrong type, a syntax error) as a problem of its key.
fn parse_problem(message: &str) -> Problem {
    // toml says "unknown field `x`, expected ..." or "invalid type ... in `lane[0].batch_size`".
    let key = message
        .lines()
        .rev()
        .find_map(|l| l.split('`').nth(1))
        .unwrap_or("")
        .to_owned();
    Problem::new(
        key,
        message.replace('\n', " ").trim().to_owned(),
        "correct the key or value (horos-ref/README.md lists every key)",
    )
}

/// A value out of range, as its section's check words it (`lane[0].batch_size = 0 is not
/// ...`): its key is the message's first word.
fn invalid_problem(message: &str) -> Problem {
    let key = message
        .split(|c: char| c.is_whitespace() || c == ':')
        .next()
        .unwrap_or("")
        .trim_matches('`')
        .to_owned();
    Problem::new(
        key,
        message.to_owned(),
        "change the value as the message says (horos-ref/README.md describes the key)",
    )
}
