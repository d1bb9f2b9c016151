//! Helpers for the settings types of the HOROS crates, read from a TOML section: a section
//! whose keys are partly one type's and partly another's is split with [`take_keys`] and each
//! part read with [`from_table`] (unknown keys refused, a bad value named by its key); a check
//! that fails answers an [`InvalidSettings`] naming the key.

use std::collections::BTreeMap;

use serde::de::{DeserializeOwned, Error};

/// The TOML table a section is read into (re-exported: the crates that split a section need no
/// `toml` dependency of their own).
pub use toml::Table;

/// A settings value that cannot be used; its message names the key (`lane[0].batch_size = 0
/// is not between 1 and 1024`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidSettings(pub String);

impl From<InvalidSettings> for String {
    fn from(e: InvalidSettings) -> String {
        e.0
    }
}

/// Moves `keys` out of `table` into a table of their own.
pub fn take_keys(table: &mut toml::Table, keys: &[&str]) -> toml::Table {
    keys.iter()
        .filter_map(|k| table.remove(*k).map(|v| ((*k).to_owned(), v)))
        .collect()
}

/// The names whose values differ between `old` and `new` (added, changed or removed), sorted:
/// what a reload compares to tell which settings changed.
pub fn changed_names<V: PartialEq>(
    old: &BTreeMap<String, V>,
    new: &BTreeMap<String, V>,
) -> Vec<String> {
    let mut names: Vec<String> = old
        .iter()
        .filter(|(n, v)| new.get(*n) != Some(*v))
        .map(|(n, _)| n.clone())
        .chain(new.keys().filter(|n| !old.contains_key(*n)).cloned())
        .collect();
    names.sort();
    names
}

/// [`changed_names`] of two readings of a TOML table.
pub fn changed_keys(old: &toml::Table, new: &toml::Table) -> Vec<String> {
    let sorted = |t: &toml::Table| -> BTreeMap<String, toml::Value> {
        t.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    changed_names(&sorted(old), &sorted(new))
}

/// A settings type from the keys of a section: unknown keys are refused and a bad value is
/// named by its key (toml says "in `key`").
pub fn from_table<T: DeserializeOwned, E: Error>(table: toml::Table) -> Result<T, E> {
    T::deserialize(toml::Value::Table(table)).map_err(E::custom)
}

/// A problem `horos-ref check` found in a configuration, without starting anything: the key it
/// concerns (`lane[0].command`), what is wrong, and what to do about it. Each settings type
/// lists its own (its `problems` method); the binary gathers them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// The TOML key, as a path (`coordinator.pool.model[1].weights`).
    pub key: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: String,
}

impl Problem {
    /// A problem of `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Problem {
            key: key.into(),
            message: message.into(),
            fix: fix.into(),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} (fix: {})", self.key, self.message, self.fix)
    }
}

/// What a check looks at beyond the file itself: the state of this machine. A configuration
/// written for another machine is checked with both off (its keys, values, environment
/// variables and VRAM plan still are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckScope {
    /// Programs and model files named by the configuration exist here.
    pub files: bool,
    /// The ports the configuration listens on are free here.
    pub ports: bool,
}

impl Default for CheckScope {
    fn default() -> Self {
        CheckScope {
            files: true,
            ports: true,
        }
    }
}

/// `text` with every `${VAR}` replaced by the variable's value (read through `env`); an unset
/// variable or an unclosed `${` is an error naming the variable, never a value.
pub fn expand_env(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, InvalidSettings> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| InvalidSettings("`${` without its closing `}`".to_owned()))?;
        let name = &after[..end];
        if !is_variable_name(name) {
            return Err(InvalidSettings(format!(
                "`${{{name}}}` is not an environment variable's name"
            )));
        }
        out.push_str(&env(name).ok_or_else(|| {
            InvalidSettings(format!("the environment variable {name} is not set"))
        })?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn is_variable_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The `${VAR}` names in `text` (well-formed ones only).
fn variables(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else { break };
        if is_variable_name(&after[..end]) {
            found.push(&after[..end]);
        }
        rest = &after[end + 1..];
    }
    found
}

/// The environment variables a configuration names that are not set (read through `env`):
/// every `${VAR}` in a string value, and the value of every key ending in `_env` (`key_env`,
/// `api_key_env`: a secret read from that variable). Each is a [`Problem`] of its key.
pub fn env_problems(table: &Table, env: &dyn Fn(&str) -> Option<String>) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (k, v) in table {
        walk_env(k, k, v, env, &mut problems);
    }
    problems
}

fn walk_env(
    name: &str,
    key: &str,
    value: &toml::Value,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut Vec<Problem>,
) {
    let unset = |var: &str| env(var).is_none_or(|v| v.is_empty());
    match value {
        toml::Value::String(s) => {
            let mut named: Vec<&str> = variables(s);
            if name.ends_with("_env") && is_variable_name(s) {
                named.push(s);
            }
            for var in named.into_iter().filter(|v| unset(v)) {
                out.push(Problem::new(
                    key,
                    format!("the environment variable {var} is not set"),
                    format!("export {var}=... before starting horos-ref"),
                ));
            }
        }
        toml::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk_env(name, &format!("{key}[{i}]"), item, env, out);
            }
        }
        toml::Value::Table(t) => {
            for (k, v) in t {
                walk_env(k, &format!("{key}.{k}"), v, env, out);
            }
        }
        _ => {}
    }
}

/// A [`Problem`] of `key` when nothing can listen on `addr` here now (another process holds the
/// port, or the address is not this machine's).
pub fn port_problem(key: &str, addr: std::net::SocketAddr) -> Option<Problem> {
    let e = std::net::TcpListener::bind(addr).err()?;
    Some(Problem::new(
        key,
        format!("cannot listen on {addr}: {e}"),
        "stop what holds the port, or choose a free one",
    ))
}

/// Where `program` runs from: itself when it names a path (it holds a `/`) to an executable
/// file, else the first executable of that name in the directories of `path_var` (`PATH`'s
/// value). What a check of a command's `argv[0]` asks.
pub fn program_path(
    program: &str,
    path_var: Option<&std::ffi::OsStr>,
) -> Option<std::path::PathBuf> {
    fn executable(p: &std::path::Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    if program.contains('/') {
        let p = std::path::PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(path_var?)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

/// Why a URL that a setting names cannot be called ([`http_url`]); [`expected`](Self::expected)
/// says what the setting takes instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BadUrl {
    /// A CR, LF, other control character or whitespace: it would split a request line or a
    /// header.
    #[error("holds a control character or whitespace")]
    ControlOrSpace,
    /// Not a URL at all.
    #[error("is not a URL")]
    NotAUrl(#[source] http::uri::InvalidUri),
    /// A scheme other than `http` and `https`, or none.
    #[error("is not an http:// or https:// URL")]
    Scheme,
    /// `https://` in a build without TLS.
    #[error("is https:// but this build has no TLS")]
    NoTls,
    /// No host to connect to.
    #[error("has no host")]
    NoHost,
    /// A user name or password before the host (`user:pw@host`): a secret in the
    /// configuration, and a host that is not what it seems.
    #[error("carries a user name or password (`user@host`)")]
    UserInfo,
}

impl BadUrl {
    /// What the setting takes, as an error message says it (`an http:// or https:// URL`).
    pub fn expected(&self) -> &'static str {
        match self {
            BadUrl::ControlOrSpace => "a URL without control characters or whitespace",
            BadUrl::NotAUrl(_) | BadUrl::Scheme => "an http:// or https:// URL",
            BadUrl::NoTls => "an http:// URL (this build has no TLS)",
            BadUrl::NoHost => "a URL with a host",
            BadUrl::UserInfo => "a URL without a user name or password",
        }
    }
}

/// `url` checked as a URL that a setting names for HOROS to call (a remote model's API, an
/// alert webhook): `http://` or, where `tls` (the build speaks https), `https://`; a host; no
/// user name or password; no control character or whitespace anywhere, so that nothing of it
/// can split a request line or a header.
pub fn http_url(url: &str, tls: bool) -> Result<http::Uri, BadUrl> {
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(BadUrl::ControlOrSpace);
    }
    let uri: http::Uri = url.parse().map_err(BadUrl::NotAUrl)?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") if tls => {}
        Some("https") => return Err(BadUrl::NoTls),
        _ => return Err(BadUrl::Scheme),
    }
    let authority = uri.authority().map_or("", http::uri::Authority::as_str);
    if authority.contains('@') {
        return Err(BadUrl::UserInfo);
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(BadUrl::NoHost);
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn env(var: &str) -> Option<String> {
        (var == "SET").then(|| "value".to_owned())
    }

    #[test]
    fn expand_env_replaces_set_variables_and_names_unset_ones() {
        assert_eq!(expand_env("a${SET}b", &env).unwrap(), "avalueb");
        assert!(
            expand_env("${UNSET}", &env)
                .unwrap_err()
                .0
                .contains("UNSET")
        );
        assert!(expand_env("${SET", &env).is_err());
        assert!(expand_env("${a-b}", &env).is_err());
    }

    #[test]
    fn env_problems_name_the_key_of_each_unset_variable() {
        let table: Table = toml::from_str(
            "database = \"postgres://h:${PW}@db/h\"\n\
             [[lane]]\ncommand = [\"${SET}\", \"${BIN}\"]\n\
             [coordinator.keys.a]\nkey_env = \"TEAM_KEY\"\n\
             [coordinator.remotes.b]\napi_key_env = \"SET\"\n",
        )
        .unwrap();
        let keys: Vec<String> = env_problems(&table, &env)
            .into_iter()
            .map(|p| p.key)
            .collect();
        assert_eq!(
            keys,
            [
                "coordinator.keys.a.key_env",
                "database",
                "lane[0].command[1]"
            ]
        );
    }

    #[test]
    fn a_held_port_is_a_problem_and_a_free_one_is_not() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        assert!(
            port_problem("bind", addr)
                .unwrap()
                .message
                .contains("cannot listen")
        );
        drop(held);
        assert!(port_problem("bind", addr).is_none());
    }

    #[test]
    fn changed_keys_are_added_changed_and_removed_ones() {
        let old: Table = toml::from_str("a = 1\nb = 2\n[c]\nx = 1").unwrap();
        let new: Table = toml::from_str("a = 1\nb = 3\nd = 4\n[c]\nx = 1").unwrap();
        assert_eq!(changed_keys(&old, &new), ["b", "d"]);
        assert_eq!(changed_keys(&new, &old), ["b", "d"]);
        assert!(changed_keys(&old, &old).is_empty());
    }

    #[test]
    fn http_url_takes_http_and_https_with_a_host_and_nothing_that_splits_a_header() {
        let uri = http_url("https://hooks.example.com:8443/a?b=1", true).unwrap();
        assert_eq!(
            (uri.host(), uri.port_u16()),
            (Some("hooks.example.com"), Some(8443))
        );
        assert!(http_url("http://[::1]:9000/", false).is_ok());
        for (url, tls, bad) in [
            ("http://h/a\r\nX-Evil: 1", true, "ControlOrSpace"),
            ("http://h/a\nb", true, "ControlOrSpace"),
            ("http://h/a b", true, "ControlOrSpace"),
            ("ftp://h/", true, "Scheme"),
            ("/just/a/path", true, "Scheme"),
            ("https://h/", false, "NoTls"),
            ("http://user:pw@h/", true, "UserInfo"),
            ("http://:80/", true, "NoHost"),
            ("http://", true, "NotAUrl"),
        ] {
            let e = http_url(url, tls).unwrap_err();
            assert!(format!("{e:?}").starts_with(bad), "{url}: {e:?}");
            assert!(!e.expected().is_empty());
        }
    }
}
