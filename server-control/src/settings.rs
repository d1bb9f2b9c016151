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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn changed_keys_are_added_changed_and_removed_ones() {
        let old: Table = toml::from_str("a = 1\nb = 2\n[c]\nx = 1").unwrap();
        let new: Table = toml::from_str("a = 1\nb = 3\nd = 4\n[c]\nx = 1").unwrap();
        assert_eq!(changed_keys(&old, &new), ["b", "d"]);
        assert_eq!(changed_keys(&new, &old), ["b", "d"]);
        assert!(changed_keys(&old, &old).is_empty());
    }
}
