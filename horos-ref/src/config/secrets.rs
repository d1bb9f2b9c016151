//! The values of a configuration that its servers' logs must never show (the logs are served
//! over HTTP: `/api/v1/logs`, the status page): what its `${VAR}`s expanded to, and the keys of
//! `[coordinator]`. `run` hands them to the log book ([`crate::servers::log_book`]); a reload
//! adds those of the file read again ([`crate::reload`]).
//!
//! Which expanded values are secrets: every value of a variable whose name looks secret
//! (`HF_TOKEN`, `LLAMA_API_KEY`, `PGPASSWORD`), and every other value of 8 bytes or more but a
//! path (`/models`, `./bin`, `~/llama`). A server's command line has no key naming its
//! arguments, so a secret's only mark may be where it is; treating every expanded value as one
//! keeps a key out of the logs whatever its variable is called. Paths are the exception: the
//! servers print their model and binary paths on most lines, and a path is not a credential.
//! Shorter values (a port, a GPU index) would match ordinary text.

use std::cell::RefCell;

use super::Env;

/// The values a log must not show (see the module's documentation). Its debug form shows how
/// many, never them.
#[derive(Clone, Default, PartialEq)]
pub struct Secrets(Vec<String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} values)", self.0.len())
    }
}

impl Secrets {
    /// The values.
    pub fn values(&self) -> &[String] {
        &self.0
    }

    /// Adds `value` (empty ones are not secrets).
    pub(super) fn push(&mut self, value: String) {
        if !value.trim().is_empty() && !self.0.contains(&value) {
            self.0.push(value);
        }
    }
}

/// The values of `[coordinator]`'s keys: the admin key, and those read through `env` from the
/// variables it names (the admin key's, the data-plane keys', the remote APIs').
pub(super) fn of_coordinator(
    c: &horos_coordinator::CoordinatorConfig,
    env: &Env,
) -> impl Iterator<Item = String> {
    let vars = c
        .api_key_env
        .iter()
        .chain(c.keys.values().filter_map(|k| k.key_env.as_ref()))
        .chain(c.remotes.values().filter_map(|r| r.api_key_env.as_ref()));
    let read: Vec<String> = vars.filter_map(|v| env(v)).collect();
    read.into_iter()
        .chain(c.api_key.as_ref().map(|k| k.expose().to_owned()))
}

/// An environment that remembers the secrets among the values it gave (see
/// [`horos_servers::logs::is_secret`]): the `${VAR}`s of a configuration are expanded through
/// it.
pub(super) struct Recording<'a> {
    env: &'a Env,
    seen: RefCell<Secrets>,
}

impl<'a> Recording<'a> {
    /// Reads through `env`.
    pub(super) fn new(env: &'a Env) -> Self {
        Self {
            env,
            seen: RefCell::default(),
        }
    }

    /// The variable `name`, its value remembered when it is a secret.
    pub(super) fn get(&self, name: &str) -> Option<String> {
        let value = (self.env)(name)?;
        if horos_servers::logs::is_secret(name, &value) {
            self.seen.borrow_mut().push(value.clone());
        }
        Some(value)
    }

    /// The secrets it gave.
    pub(super) fn into_secrets(self) -> Secrets {
        self.seen.into_inner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_remembers_only_the_secrets_it_gave_and_shows_none() {
        let env = |v: &str| match v {
            "API_KEY" => Some("sk-expanded-1".to_owned()),
            "MODELS" => Some("/srv/models".to_owned()),
            _ => None,
        };
        let r = Recording::new(&env);
        assert_eq!(r.get("API_KEY").as_deref(), Some("sk-expanded-1"));
        assert_eq!(r.get("API_KEY").as_deref(), Some("sk-expanded-1"));
        assert_eq!(r.get("MODELS").as_deref(), Some("/srv/models"));
        assert_eq!(r.get("NOPE"), None);
        let s = r.into_secrets();
        assert_eq!(s.values(), ["sk-expanded-1"]);
        assert_eq!(format!("{s:?}"), "Secrets(1 values)");
    }
}
