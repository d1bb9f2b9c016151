//! [`Secret`]: a key or password held so that it cannot be printed or timed.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// A key or password. `Debug` and `Display` print `[secret]`, never the value; two secrets (or a
/// secret and a candidate, [`Secret::matches`]) are compared through their SHA-256 digests in
/// constant time, so neither the value nor its length leaks through timing. Serialised, it is
/// `"[secret]"`; deserialised, the text as it is.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that must send it (an `Authorization` header).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `candidate` is this secret: digests compared in constant time (the comparison
    /// takes as long whatever the candidate's length or its first wrong byte).
    pub fn matches(&self, candidate: &[u8]) -> bool {
        let (a, b) = (Sha256::digest(self.0.as_bytes()), Sha256::digest(candidate));
        a.iter()
            .zip(b.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.matches(other.0.as_bytes())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[secret]")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[secret]")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Secret(s.to_owned())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Secret(s)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("[secret]")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_secret_never_prints_and_compares_by_value() {
        let s = Secret::from("sk-very-secret");
        assert_eq!(format!("{s:?} {s}"), "[secret] [secret]");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"[secret]\"");
        assert!(s.matches(b"sk-very-secret"));
        for wrong in [
            &b""[..],
            b"sk",
            b"sk-very-secreT",
            b"sk-very-secret-and-more",
        ] {
            assert!(!s.matches(wrong));
        }
        let back: Secret = serde_json::from_str("\"sk-very-secret\"").unwrap();
        assert_eq!(back, s);
        assert_eq!(back.expose(), "sk-very-secret");
    }
}
