//! The docs agree with the code, where a test can tell:
//! - every subcommand `horos-ref --help` lists is named in README.md's crate table and in
//!   horos-ref/README.md;
//! - the MCP tools `horos-ref mcp` lists are the ones README.md, docs/architecture.md and
//!   ops/README.md enumerate, with their number in words;
//! - every `HOROS_REQUIRE_*` variable the code reads is listed in README.md and exported by
//!   `.ci/run` (except those docs/gpu-checks.md gives to a GPU machine).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

mod common;

use common::{BIN, Mcp};

fn root() -> PathBuf {
    horos_testkit::repo_root()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap()
}

/// The subcommands as `horos-ref --help` lists them (without `help`).
fn subcommands() -> Vec<String> {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let listed = help
        .split("Commands:")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap();
    listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_subcommand_is_in_the_readmes() {
    let names = subcommands();
    assert!(names.len() > 10, "{names:?}");
    let readme = read("README.md");
    let row = readme
        .lines()
        .find(|l| l.starts_with("| [`horos-ref/`]"))
        .expect("README.md's crate table has a horos-ref row");
    let binary_readme = read("horos-ref/README.md");
    for name in &names {
        assert!(
            row.contains(&format!("`{name}`")),
            "README.md's horos-ref row does not name `{name}`"
        );
        assert!(
            binary_readme.contains(&format!("horos-ref {name}"))
                || binary_readme.contains(&format!("`{name}`")),
            "horos-ref/README.md does not name `{name}`"
        );
    }
}

const NUMBERS: [&str; 13] = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve",
];

#[test]
fn the_mcp_tools_are_the_ones_the_docs_enumerate() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("horos.toml");
    std::fs::write(
        &config,
        "database = \"jobs.db\"\n[[lane]]\nqueue = \"q\"\nurl = \"http://127.0.0.1:9\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let mut mcp = Mcp::start(&config);
    mcp.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "docs-test", "version": "1"}}),
    );
    mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let list = mcp.request(2, "tools/list", json!({}));
    let tools: Vec<String> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    let count = NUMBERS[tools.len()];
    for doc in [
        "README.md",
        "docs/architecture.md",
        "ops/README.md",
        "ops/src/lib.rs",
    ] {
        // One line of text: comment markers and line breaks out.
        let text = read(doc)
            .replace("//!", " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let lower = text.to_lowercase();
        for wrong in NUMBERS.iter().filter(|n| **n != count) {
            for phrase in [format!("{wrong} mcp tools"), format!("mcp tools ({wrong}")] {
                assert!(
                    !lower.contains(&phrase),
                    "{doc} says `{phrase}`; there are {count}"
                );
            }
        }
        // Each place that counts the tools enumerates them right after.
        let mut places = 0;
        for phrase in [format!("{count} mcp tools"), format!("mcp tools ({count}")] {
            for (at, _) in lower.match_indices(&phrase) {
                places += 1;
                let after: String = text[at..].chars().take(300).collect();
                for tool in &tools {
                    assert!(
                        after.contains(&format!("`{tool}`")),
                        "{doc}: the {count} MCP tools' list misses `{tool}`: {after}"
                    );
                }
            }
        }
        assert!(places > 0, "{doc} does not say there are {count} MCP tools");
    }
}

/// Every `HOROS_REQUIRE_*` name in the files under `dir` (sources, scripts, CI).
fn require_vars(dir: &Path, found: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') && name != ".ci" || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            require_vars(&path, found);
            continue;
        }
        let source = ["rs", "sh", "py"]
            .iter()
            .any(|e| path.extension().is_some_and(|x| x == *e))
            || name == "run";
        if !source {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let mut rest = text.as_str();
        while let Some(at) = rest.find("HOROS_REQUIRE_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            let var = &tail[..end];
            if var.len() > "HOROS_REQUIRE_".len() && !var.ends_with('_') {
                found.insert(var.to_owned());
            }
            rest = &tail[end..];
        }
    }
}

#[test]
fn every_required_component_variable_is_documented_and_set_in_ci() {
    let mut vars = BTreeSet::new();
    require_vars(&root(), &mut vars);
    // testkit's own test of the convention reads a variable nobody sets.
    vars.retain(|v| !v.contains("SELF_TEST"));
    assert!(vars.contains("HOROS_REQUIRE_LLAMA"), "{vars:?}");
    let readme = read("README.md");
    let ci = read(".ci/run");
    let gpu = read("docs/gpu-checks.md");
    for var in &vars {
        assert!(
            readme.contains(var.as_str()),
            "README.md does not list {var}"
        );
        assert!(
            ci.contains(&format!("{var}=1")) || gpu.contains(var.as_str()),
            ".ci/run does not set {var} (and docs/gpu-checks.md does not give it to a GPU machine)"
        );
    }
}
