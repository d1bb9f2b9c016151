//! Deserialization of response objects that keep their unknown fields in an `extra` map.
//!
//! `#[serde(flatten)]` would do it, but serde buffers a flattened struct's whole object (every
//! field, nested objects included) into an intermediate tree and deserializes the fields again from
//! it, at every nesting level: a chat answer cost more to decode into the typed structs than into a
//! `serde_json::Value`. The visitor written by [`deserialize_with_extra!`] reads each field once,
//! straight into its place, and only unknown fields become `Value`s.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, Visitor};

/// An object key: borrowed from the input when it can be (no escapes), owned otherwise.
pub(crate) struct Key<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Implements `Deserialize` for a struct that has `Default`, the named fields (each optional in the
/// JSON: a missing one keeps its default) and an `extra: Extra` map that receives every other field.
/// A repeated key keeps its last value.
macro_rules! deserialize_with_extra {
    ($ty:ident { $($field:ident),+ $(,)? }) => {
        impl<'de> ::serde::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct ObjectVisitor;
                impl<'de> ::serde::de::Visitor<'de> for ObjectVisitor {
                    type Value = $ty;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        f.write_str(concat!("a JSON object (", stringify!($ty), ")"))
                    }
                    fn visit_map<A: ::serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<$ty, A::Error> {
                        let mut out = <$ty>::default();
                        while let Some(key) = map.next_key::<$crate::de::Key<'de>>()? {
                            match &*key.0 {
                                $(stringify!($field) => out.$field = map.next_value()?,)+
                                _ => {
                                    let value: ::serde_json::Value = map.next_value()?;
                                    out.extra.insert(key.0.into_owned(), value);
                                }
                            }
                        }
                        Ok(out)
                    }
                }
                d.deserialize_map(ObjectVisitor)
            }
        }
    };
}

pub(crate) use deserialize_with_extra;

#[cfg(test)]
mod tests {
    use crate::types::{ChatChunk, ChatResponse, EmbeddingResponse, ModelList};

    #[test]
    fn fields_land_in_place_and_unknown_ones_in_extra_at_every_level() {
        let text = r#"{"id":"a","object":"chat.completion","created":7,"model":"m",
            "choices":[{"index":1,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t"}]},
                        "finish_reason":null,"logprobs":null}],
            "usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"details":{"x":1}}}"#;
        let r: ChatResponse = serde_json::from_str(text).unwrap();
        assert_eq!((r.id.as_str(), r.model.as_str(), r.created), ("a", "m", 7));
        assert_eq!(r.extra["object"], "chat.completion");
        let c = &r.choices[0];
        assert_eq!((c.index, c.finish_reason.as_deref()), (1, None));
        assert!(c.extra["logprobs"].is_null());
        assert_eq!(c.message.content, None);
        assert_eq!(c.message.extra["tool_calls"][0]["id"], "t");
        let u = r.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.total_tokens), (1, 3));
        assert_eq!(u.extra["details"]["x"], 1);
        // The same from bytes, and through a `Value` (owned keys).
        let from_slice: ChatResponse = serde_json::from_slice(text.as_bytes()).unwrap();
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            from_slice,
            serde_json::from_value::<ChatResponse>(value).unwrap()
        );
    }

    #[test]
    fn escaped_keys_repeated_keys_and_nulls() {
        // `\u0069d` is `id`, which the parser cannot lend from the input.
        let r: ChatChunk = serde_json::from_str(
            r#"{"\u0069d":"x","model":"a","model":"b","usage":null,"\"q\"":1}"#,
        )
        .unwrap();
        assert_eq!(r.id, "x");
        assert_eq!(r.model, "b", "the last of a repeated key wins");
        assert_eq!(r.usage, None);
        assert_eq!(r.extra["\"q\""], 1);
    }

    #[test]
    fn wrong_shapes_are_errors_not_panics() {
        assert!(serde_json::from_str::<ChatResponse>("[]").is_err());
        assert!(serde_json::from_str::<ChatResponse>(r#"{"created":"soon"}"#).is_err());
        assert!(serde_json::from_str::<ChatResponse>(r#"{"choices":[1]}"#).is_err());
        assert!(
            serde_json::from_str::<EmbeddingResponse>(r#"{"data":[{"embedding":"x"}]}"#).is_err()
        );
        assert!(serde_json::from_str::<ModelList>(r#"{"data":[{"id":"m"}],"#).is_err());
        let m: ModelList =
            serde_json::from_str(r#"{"data":[{"id":"m","meta":{}}],"models":[]}"#).unwrap();
        assert_eq!(m.data[0].id, "m");
        assert!(m.data[0].extra.contains_key("meta") && m.extra.contains_key("models"));
    }
}
