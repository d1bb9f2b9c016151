//! Who may read which documents: every document belongs to one [`Collection`], and a caller
//! reads the [`Collections`] its key (or the gateway's setting for callers without a key) names.
//! The gateway sets them from the admitted caller; the index answers only from documents in them
//! ([`Searcher::search`](crate::Searcher::search), [`PassageQuery::collections`](crate::PassageQuery)).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A collection's name: 1 to [`Collection::MAX_BYTES`] bytes of `[A-Za-z0-9._-]`. A document
/// belongs to exactly one; [`Collection::default`] is `"default"`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Collection(String);

/// A name that is not a collection's: empty, too long, or holding a byte outside
/// `[A-Za-z0-9._-]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{name}` is not a collection name: 1 to {max} bytes of letters, digits, `.`, `_` and `-`",
    max = Collection::MAX_BYTES
)]
pub struct InvalidCollection {
    /// The name as given.
    pub name: String,
}

impl Collection {
    /// The longest name, in bytes.
    pub const MAX_BYTES: usize = 64;
    /// The collection of a document ingested without one, and the one a caller reads when its
    /// key names none.
    pub const DEFAULT: &'static str = "default";

    /// `name` checked.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidCollection> {
        let name = name.into();
        let valid = (1..=Self::MAX_BYTES).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if valid {
            Ok(Self(name))
        } else {
            Err(InvalidCollection { name })
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Collection {
    fn default() -> Self {
        Self(Self::DEFAULT.to_owned())
    }
}

impl fmt::Display for Collection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Collection {
    type Error = InvalidCollection;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        Self::new(name)
    }
}

impl std::str::FromStr for Collection {
    type Err = InvalidCollection;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::new(name)
    }
}

impl From<Collection> for String {
    fn from(c: Collection) -> Self {
        c.0
    }
}

/// The documents a caller may read: every document, or only those of some collections (none:
/// no document at all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Collections {
    /// Every document, whatever its collection: the operator, and every caller of a gateway
    /// with no key configured (one scope).
    #[default]
    All,
    /// Only documents of these collections.
    Only(Vec<Collection>),
}

impl Collections {
    /// The wildcard that stands for every collection in a list of names.
    pub const EVERY: &'static str = "*";

    /// The collections a list of names grants (a configuration's `collections = [...]`): `"*"`
    /// among them is [`Collections::All`], else each name checked; an empty list reads nothing.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Self, InvalidCollection> {
        if names.iter().any(|n| n.as_ref() == Self::EVERY) {
            return Ok(Self::All);
        }
        let mut only = names
            .iter()
            .map(|n| Collection::new(n.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        only.sort();
        only.dedup();
        Ok(Self::Only(only))
    }

    /// The `"default"` collection only: what a key that names none reads.
    pub fn default_only() -> Self {
        Self::Only(vec![Collection::default()])
    }

    /// Whether a document of `collection` may be read.
    pub fn allows(&self, collection: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(names) => names.iter().any(|c| c.as_str() == collection),
        }
    }

    /// Whether every document may be read (nothing to filter).
    pub fn is_all(&self) -> bool {
        matches!(self, Self::All)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_a_star_grants_every_collection() {
        assert_eq!(Collection::default().as_str(), "default");
        for good in ["a", "Team-1.docs_v2", &"x".repeat(64)] {
            assert_eq!(
                Collection::new(good).map(|c| c.to_string()),
                Ok(good.into())
            );
        }
        for bad in ["", "a b", "a/b", "é", "*", &"x".repeat(65), "a\0"] {
            assert!(Collection::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            Collections::from_names(&["b", "a", "b"]),
            Ok(Collections::Only(vec![
                Collection::new("a").unwrap_or_default(),
                Collection::new("b").unwrap_or_default()
            ]))
        );
        assert_eq!(Collections::from_names(&["a", "*"]), Ok(Collections::All));
        let none = Collections::from_names::<&str>(&[]).unwrap_or_default();
        assert!(!none.allows("default") && !none.is_all());
        assert!(Collections::from_names(&["ok", "not ok"]).is_err());
        assert!(Collections::default_only().allows("default"));
        assert!(!Collections::default_only().allows("alpha"));
        assert!(Collections::All.allows("alpha"));
        let c: Result<Collection, _> = serde_json::from_str("\"a/b\"");
        assert!(c.is_err());
    }
}
