//! The `HOROS_REQUIRE_<X>=1` convention: a test of an optional component skips where the
//! component is absent, unless CI requires it.

/// Whether `var` (a `HOROS_REQUIRE_<X>` name) is set to `1`: the component must be there and its
/// tests must not skip. Any other value, or none, allows skipping.
///
/// # Panics
///
/// When `var` does not start with `HOROS_REQUIRE_` (a typo would silently allow skipping).
pub fn required(var: &str) -> bool {
    assert!(
        var.starts_with("HOROS_REQUIRE_"),
        "{var} is not a HOROS_REQUIRE_* variable"
    );
    std::env::var(var).is_ok_and(|v| v == "1")
}

/// The test cannot run here because of `msg` (what is missing, and where it comes from): prints
/// a `SKIP:` line on stderr, and the caller returns.
///
/// # Panics
///
/// When [`required`]`(var)`: the message is `{var}=1 but {msg}`.
pub fn skip_or_fail(var: &str, msg: &str) {
    assert!(!required(var), "{var}=1 but {msg}");
    eprintln!("SKIP: {msg} (set {var}=1 to fail instead)");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set nowhere: the tests of this crate never require it.
    const UNSET: &str = "HOROS_REQUIRE_TESTKIT_SELF_TEST_NEVER_SET";

    #[test]
    fn an_unset_variable_lets_the_test_skip() {
        assert!(!required(UNSET));
        skip_or_fail(UNSET, "nothing is missing: the test kit's own test");
    }

    #[test]
    #[should_panic(expected = "not a HOROS_REQUIRE_* variable")]
    fn another_variable_is_refused() {
        required("HOROS_PG_URL");
    }
}
