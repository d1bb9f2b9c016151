//! Finding inference servers on this machine, and the programs and model files a server's
//! command names: what `horos-ref init` proposes from ([`find_servers`]) and what `horos-ref
//! check` verifies ([`command_problems`]) without starting anything.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use horos_server_control::settings::Problem;

/// The environment variable naming a llama-server binary (`scripts/setup_llama.sh` writes it to
/// its env file); found before the one on `PATH`.
pub const LLAMA_SERVER_VAR: &str = "HOROS_LLAMA_SERVER";

/// An inference server found on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundServer {
    /// Its kind in the backend registry ([`kinds`](crate::kinds)): `llama-server` or `vllm`.
    pub kind: &'static str,
    /// The executable.
    pub path: PathBuf,
    /// The environment variable that named it (`None`: found on `PATH`).
    pub from_env: Option<&'static str>,
}

/// The inference servers of this machine, at most one per kind: llama-server from
/// [`LLAMA_SERVER_VAR`] else `PATH`, vLLM (`vllm`) from `PATH`. `env` reads the environment
/// (`PATH` included), so that a test can give its own.
pub fn find_servers(env: &dyn Fn(&str) -> Option<OsString>) -> Vec<FoundServer> {
    let path = env("PATH");
    let mut found = Vec::new();
    let named = env(LLAMA_SERVER_VAR)
        .map(PathBuf::from)
        .filter(|p| is_executable(p));
    match named {
        Some(p) => found.push(FoundServer {
            kind: "llama-server",
            path: p,
            from_env: Some(LLAMA_SERVER_VAR),
        }),
        None => found.extend(
            program_path("llama-server", path.as_deref()).map(|p| FoundServer {
                kind: "llama-server",
                path: p,
                from_env: None,
            }),
        ),
    }
    found.extend(program_path("vllm", path.as_deref()).map(|p| FoundServer {
        kind: "vllm",
        path: p,
        from_env: None,
    }));
    found
}

fn is_executable(p: &Path) -> bool {
    program_path(&p.display().to_string(), None).is_some()
}

/// Where `program` runs from (server-control's
/// [`program_path`](horos_server_control::settings::program_path)).
pub use horos_server_control::settings::program_path;

/// The options after which a command names its model: llama-server's `-m` / `--model`, vLLM's
/// `serve`, a worker's `--pipeline`.
const MODEL_FLAGS: [&str; 4] = ["-m", "--model", "serve", "--pipeline"];

/// Whether `arg` reads as a path on this machine rather than a hub name (`Qwen/Qwen3-8B`): it
/// is absolute, relative to the current directory, or a model file by its extension.
fn looks_like_path(arg: &str) -> bool {
    arg.starts_with('/')
        || arg.starts_with("./")
        || arg.starts_with("../")
        || arg.starts_with('~')
        || [".gguf", ".safetensors", ".bin"]
            .iter()
            .any(|e| arg.to_ascii_lowercase().ends_with(e))
}

/// What is missing on this machine for the command `argv` of the key `key`: its program (on
/// `PATH`, or the path it names) and the model file or directory it names after `-m`,
/// `--model`, `serve` or `--pipeline` (a hub name is not checked). Placeholders (`{port}`) are
/// left alone.
pub fn command_problems(key: &str, argv: &[String]) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Some(program) = argv.first()
        && program_path(program, std::env::var_os("PATH").as_deref()).is_none()
    {
        problems.push(program_problem(&format!("{key}[0]"), program));
    }
    for (i, w) in argv.windows(2).enumerate() {
        if MODEL_FLAGS.contains(&w[0].as_str()) && looks_like_path(&w[1]) {
            problems.extend(model_path_problem(&format!("{key}[{}]", i + 1), &w[1]));
        }
    }
    problems
}

/// The [`Problem`] of a program that is not found.
pub fn program_problem(key: &str, program: &str) -> Problem {
    let message = if program.contains('/') {
        format!("`{program}` is not an executable file")
    } else {
        format!("`{program}` is not on PATH")
    };
    let fix = match program.rsplit('/').next().unwrap_or(program) {
        "llama-server" => "install it (scripts/setup_llama.sh), or write its full path",
        "vllm" => "install vLLM (scripts/setup_vllm.sh), or write its full path",
        _ => "install it, or write its full path",
    };
    Problem::new(key, message, fix)
}

/// A [`Problem`] when the model file or directory `path` (a path, not a hub name) does not
/// exist.
pub fn model_path_problem(key: &str, path: &str) -> Option<Problem> {
    if !looks_like_path(path) || Path::new(path).exists() {
        return None;
    }
    Some(Problem::new(
        key,
        format!("the model `{path}` does not exist"),
        "download the model there, or point the key at where it is",
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn servers_come_from_the_variable_first_then_path() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        for name in ["llama-server", "vllm", "other-llama"] {
            let p = bin.join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = bin.clone().into_os_string();
        let other = bin.join("other-llama").into_os_string();
        let found = find_servers(&|k| match k {
            "PATH" => Some(path.clone()),
            LLAMA_SERVER_VAR => Some(other.clone()),
            _ => None,
        });
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].path, bin.join("other-llama"));
        assert_eq!(found[0].from_env, Some(LLAMA_SERVER_VAR));
        assert_eq!((found[1].kind, found[1].from_env), ("vllm", None));
        let found = find_servers(&|k| (k == "PATH").then(|| path.clone()));
        assert_eq!(found[0].path, bin.join("llama-server"));
        assert!(find_servers(&|_| None).is_empty());
    }

    #[test]
    fn a_missing_program_and_model_file_are_named_by_their_index() {
        let p = command_problems(
            "lane[0].command",
            &strings(&[
                "/nowhere/llama-server",
                "-m",
                "/nowhere/m.gguf",
                "--port",
                "{port}",
            ]),
        );
        let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["lane[0].command[0]", "lane[0].command[2]"]);
        // A hub name is not a path; `sh` is on PATH.
        assert!(command_problems("k", &strings(&["sh", "serve", "Qwen/Qwen3-8B"])).is_empty());
    }
}
