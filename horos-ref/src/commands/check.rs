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
        Err(e) => return vec![parse_problem(text, &e.to_string())],
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
        Err(ConfigError::Parse { message, .. }) => problems.push(parse_problem(text, &message)),
        Err(ConfigError::Invalid { message, .. }) => {
            problems.push(invalid_problem(&table, &message));
        }
        Err(e @ ConfigError::Read { .. }) => {
            problems.push(Problem::new("", e.to_string(), "check the file's path"));
        }
    }
    problems
}

/// toml's message (an unknown key, a wrong type, a syntax error) as a problem of its key: the
/// name it quotes (`unknown field `x``), under the table of the line it gives
/// (`lane[1].vllm.x`).
fn parse_problem(text: &str, message: &str) -> Problem {
    let line = message
        .split("at line ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok());
    // The key written on that line, else the name toml quotes.
    let written = line
        .and_then(|n| text.lines().nth(n.saturating_sub(1)))
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim().trim_matches('"').to_owned())
        .filter(|k| !k.is_empty() && !k.starts_with('['));
    let quoted = message.lines().rev().find_map(|l| l.split('`').nth(1));
    let leaf = written.as_deref().or(quoted).unwrap_or("");
    let table = line.map(|n| table_at(text, n)).unwrap_or_default();
    let key = match (table.is_empty(), leaf.is_empty()) {
        (_, true) => table,
        (true, false) => leaf.to_owned(),
        (false, false) => format!("{table}.{leaf}"),
    };
    // toml's last line says what is wrong; the lines above it show where.
    let reason = message
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(message);
    let message = match line {
        Some(n) => format!("{} (line {n})", reason.trim()),
        None => reason.trim().to_owned(),
    };
    Problem::new(
        key,
        message,
        "correct the key or value (horos-ref/README.md lists every key)",
    )
}

/// The table that line `line` (from 1) of `text` is in, as a key path: `[[lane]]` headers are
/// counted (`lane[1]`), and a table under one names its latest (`[lane.vllm]`: `lane[1].vllm`).
fn table_at(text: &str, line: usize) -> String {
    // Each array of tables seen, with its latest index.
    let mut arrays: Vec<(String, usize)> = Vec::new();
    let mut current = String::new();
    for l in text.lines().take(line.saturating_sub(1)) {
        let l = l.trim();
        let (name, array) = match (l.strip_prefix("[["), l.strip_prefix('[')) {
            (Some(r), _) => (r.split("]]").next().unwrap_or("").trim(), true),
            (None, Some(r)) => (r.split(']').next().unwrap_or("").trim(), false),
            _ => continue,
        };
        if array {
            match arrays.iter_mut().find(|(a, _)| a == name) {
                Some((_, i)) => *i += 1,
                None => arrays.push((name.to_owned(), 0)),
            }
        }
        // The longest array this header is (or is under), at its latest index.
        let under = arrays
            .iter()
            .filter(|(a, _)| name == a || name.starts_with(&format!("{a}.")))
            .max_by_key(|(a, _)| a.len());
        current = match under {
            Some((a, i)) => format!("{a}[{i}]{}", &name[a.len()..]),
            None => name.to_owned(),
        };
    }
    current
}

/// A value out of range, as its section's check words it: its key is the message's first word
/// (`lane[0].batch_size = 0 is not ...`), or a lane named by its queue (`lane `think`: `gpus`
/// is set by ...`) found in `table` (`lane[0].gpus`).
fn invalid_problem(table: &Table, message: &str) -> Problem {
    let first = message
        .split(|c: char| c.is_whitespace() || c == ':')
        .next()
        .unwrap_or("")
        .trim_matches('`');
    let by_queue = message.strip_prefix("lane `").and_then(|rest| {
        let (queue, after) = rest.split_once('`')?;
        let lanes = table.get("lane")?.as_array()?;
        let i = lanes
            .iter()
            .position(|l| l.get("queue").and_then(|q| q.as_str()) == Some(queue))?;
        // The key the message quotes next, if any: `lane `think`: `gpus` is set ...`.
        let key = after
            .strip_prefix(": `")
            .and_then(|k| k.split('`').next())
            .filter(|k| k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        Some(match key {
            Some(k) => format!("lane[{i}].{k}"),
            None => format!("lane[{i}]"),
        })
    });
    Problem::new(
        by_queue.unwrap_or_else(|| first.to_owned()),
        message.to_owned(),
        "change the value as the message says (horos-ref/README.md describes the key)",
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::table_at;

    #[test]
    fn a_lane_named_by_its_queue_is_named_by_its_index() {
        let table: super::Table =
            toml::from_str("[[lane]]\nqueue = \"a\"\n[[lane]]\nqueue = \"think\"\n").unwrap();
        let key = |m: &str| super::invalid_problem(&table, m).key;
        assert_eq!(
            key("lane `think`: `gpus` is set by [allocator]"),
            "lane[1].gpus"
        );
        assert_eq!(key("lane `think`: its server on the 2th GPU"), "lane[1]");
        assert_eq!(
            key("lane[0].batch_size = 0 is not between 1 and 1024"),
            "lane[0].batch_size"
        );
        assert_eq!(
            key("coordinator.pool: memory_mb and gpus"),
            "coordinator.pool"
        );
    }

    /// `template = "model"` without a pooled model of its name, or beside a `template_file`:
    /// a problem of `coordinator.manifest.NAME.template`; with one, none.
    #[test]
    fn template_model_without_a_pooled_model_or_with_a_template_file_is_a_problem() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("horos.toml");
        let problems = |text: &str| {
            std::fs::write(&file, text).unwrap();
            super::problems(&file, text, true)
        };
        let entry = "[coordinator.manifest.m]\ntemplate = \"model\"\n";
        let pool = "[coordinator.pool]\n[[coordinator.pool.model]]\nname = \"m\"\n\
                    backend = \"llama-server\"\nweights = \"m.gguf\"\n";
        assert!(problems(&format!("{entry}{pool}")).is_empty());
        let without_pool = problems(entry);
        let unweighted = problems(&format!(
            "{entry}{}",
            pool.replace(
                "backend = \"llama-server\"\nweights = \"m.gguf\"",
                "command = [\"srv\", \"{port}\"]"
            )
        ));
        let with_file = problems(&format!("{entry}template_file = \"t.jinja\"\n{pool}"));
        for (found, says) in [
            (without_pool, "no [[coordinator.pool.model]] is named `m`"),
            (unweighted, "has no weights path"),
            (with_file, "both template and template_file"),
        ] {
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!(found[0].key, "coordinator.manifest.m.template");
            assert!(found[0].message.contains(says), "{found:?}");
        }
    }

    #[test]
    fn a_line_is_named_by_its_table_and_array_index() {
        let text = "a = 1\n[[lane]]\nq = 1\n[[lane]]\nq = 2\n[lane.vllm]\nm = 1\n\
                    [coordinator]\nb = 1\n[[coordinator.pool.model]]\nn = 1\n\
                    [coordinator.pool.model.docker]\ni = 1\n";
        let at = |line| table_at(text, line);
        assert_eq!(at(1), "");
        assert_eq!(at(3), "lane[0]");
        assert_eq!(at(5), "lane[1]");
        assert_eq!(at(7), "lane[1].vllm");
        assert_eq!(at(9), "coordinator");
        assert_eq!(at(11), "coordinator.pool.model[0]");
        assert_eq!(at(13), "coordinator.pool.model[0].docker");
    }
}
