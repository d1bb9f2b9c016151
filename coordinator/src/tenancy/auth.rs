//! Bearer tokens and their comparison, for the admin key and the data plane's API keys.

/// Constant-time comparison (the key must not leak through timing).
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization: Bearer TOKEN` value; the scheme's name is case-insensitive
/// (RFC 7235), so `bearer` and `BEARER` work too.
pub(crate) fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive_and_token_exact() {
        assert_eq!(bearer_token("Bearer k"), Some("k"));
        assert_eq!(bearer_token("bearer k"), Some("k"));
        assert_eq!(bearer_token("Basic k"), None);
        assert_eq!(bearer_token("Bearerk"), None);
    }
}
