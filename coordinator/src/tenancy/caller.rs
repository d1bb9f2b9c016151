//! Who is calling: a [`Caller`] (a key, or a client id where callers without a key are let in)
//! and the one check of a client id, made before anything about it is recorded.

use crate::error::ApiError;

/// The longest `x_client_id` kept (it goes to logs, the decision log, `/metrics` and the
/// status page).
pub(crate) const MAX_CLIENT_ID_BYTES: usize = 128;

/// `id` checked as a caller's `x_client_id`: 1 to [`MAX_CLIENT_ID_BYTES`] bytes of
/// `[A-Za-z0-9._:-]`, and not of the `key:NAME` form, which names a virtual key's profile (a
/// caller without a key cannot take a key's name). Checked before anything is recorded, on
/// every route.
pub(crate) fn checked_client_id(id: &str) -> Result<&str, ApiError> {
    let bad = |why: String| {
        ApiError::bad_request(format!("x_client_id {why}"))
            .param("x_client_id")
            .code("invalid_client_id")
    };
    if id.is_empty() || id.len() > MAX_CLIENT_ID_BYTES {
        return Err(bad(format!(
            "is {} bytes long: 1 to {MAX_CLIENT_ID_BYTES}",
            id.len()
        )));
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        return Err(bad("may hold letters, digits and . _ : - only".to_owned()));
    }
    if id.starts_with("key:") {
        return Err(bad(
            "may not start with \"key:\": that names a virtual key (send the key instead)"
                .to_owned(),
        ));
    }
    Ok(id)
}

/// Who a request is from, as usage and limits count it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Caller {
    /// A virtual key, by its name.
    Key(String),
    /// A caller without a key, by its `x_client_id`.
    Client(String),
    /// Neither.
    Anonymous,
}

impl Caller {
    /// The label in metrics and on the status page: `key:NAME`, `client:ID`, `anonymous`.
    pub fn label(&self) -> String {
        match self {
            Caller::Key(k) => format!("key:{k}"),
            Caller::Client(c) => format!("client:{c}"),
            Caller::Anonymous => "anonymous".to_owned(),
        }
    }
}
