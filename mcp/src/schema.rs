//! A tool's input schema derived from its argument type ([`input_schema_for`]), and a basic
//! check of tool arguments against it ([`validate_arguments`]).
//!
//! Not a JSON Schema validator: it checks what models most often get wrong and what a tool
//! would otherwise have to check itself — the arguments are an object, every name in
//! `required` is present, every argument declared in `properties` with a `type` has that type
//! (a type name or a list of them), and no undeclared argument is given when
//! `additionalProperties` is `false`. Other keywords are left to the tool.

use serde_json::{Map, Value};

/// Why arguments do not fit a tool's input schema. Reported to the client as a tool result
/// with `isError: true`, so that the model sees the message and can correct its call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentError {
    /// The arguments are not a JSON object.
    #[error("the arguments must be a JSON object, not {0}")]
    NotAnObject(&'static str),
    /// A name listed in the schema's `required` is absent.
    #[error("missing required argument `{0}`")]
    Missing(String),
    /// An argument does not have the type its schema declares.
    #[error("argument `{name}` must be {expected}, not {actual}")]
    WrongType {
        /// The argument's name.
        name: String,
        /// The declared type(s), e.g. `integer` or `string or null`.
        expected: String,
        /// The JSON type given.
        actual: &'static str,
    },
    /// An argument the schema does not declare, while it sets `additionalProperties: false`.
    #[error("unknown argument `{0}`")]
    Unexpected(String),
}

/// The input schema of a tool whose arguments deserialise into `T`, derived from `T` (its
/// `#[derive(schemars::JsonSchema)]`), so that the schema and the type cannot drift: its
/// fields are the properties, those without a default are `required`, its doc comments the
/// descriptions, its `#[schemars(range(..), length(..), regex(..))]` the bounds,
/// `deny_unknown_fields` an `additionalProperties: false`, its `#[schemars(example = ..)]`
/// the `examples`. Subschemas are inlined (no `$ref`), and neither `$schema` nor the Rust
/// type's name (`title`) is kept.
pub fn input_schema_for<T: schemars::JsonSchema>() -> Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = true;
        })
        .into_generator()
        .into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Some(o) = value.as_object_mut() {
        o.remove("title");
    }
    value
}

/// The JSON type name of a value, as JSON Schema spells it.
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether `value` matches the JSON Schema type name `ty`; unknown names match everything, so
/// that a schema this check does not understand never rejects a call.
fn has_type(value: &Value, ty: &str) -> bool {
    match ty {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "number" => value.is_number(),
        // JSON Schema counts 1.0 as an integer.
        "integer" => match value {
            Value::Number(n) => {
                n.is_i64()
                    || n.is_u64()
                    || n.as_f64()
                        .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
            }
            _ => false,
        },
        _ => true,
    }
}

/// Checks `args` against `schema` (see the module documentation for what is checked). The
/// first problem found is returned: required names in schema order, then arguments in order.
pub fn validate_arguments(schema: &Value, args: &Value) -> Result<(), ArgumentError> {
    let Value::Object(args) = args else {
        return Err(ArgumentError::NotAnObject(json_type(args)));
    };
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !args.contains_key(name) {
                return Err(ArgumentError::Missing(name.to_owned()));
            }
        }
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (name, value) in args {
        let Some(property) = properties.get(name) else {
            if closed {
                return Err(ArgumentError::Unexpected(name.clone()));
            }
            continue;
        };
        let types: Vec<&str> = match property.get("type") {
            Some(Value::String(ty)) => vec![ty.as_str()],
            Some(Value::Array(tys)) => tys.iter().filter_map(Value::as_str).collect(),
            _ => continue,
        };
        if !types.is_empty() && !types.iter().any(|ty| has_type(value, ty)) {
            return Err(ArgumentError::WrongType {
                name: name.clone(),
                expected: types.join(" or "),
                actual: json_type(value),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer"},
                "b": {"type": "number"},
                "s": {"type": ["string", "null"]},
                "flag": {"type": "boolean"},
                "list": {"type": "array"},
                "obj": {"type": "object"},
                "any": {"description": "no type"},
                "odd": {"type": "uuid"}
            },
            "required": ["a", "b"]
        })
    }

    #[test]
    fn accepts_matching_arguments() {
        let ok = [
            json!({"a": 1, "b": 2}),
            json!({"a": 1.0, "b": 2.5, "s": null}),
            json!({"a": -3, "b": 1e300, "s": "x", "flag": true, "list": [], "obj": {}, "any": [1], "odd": 5}),
            json!({"a": 1, "b": 2, "extra": "allowed without additionalProperties: false"}),
        ];
        for args in ok {
            assert_eq!(validate_arguments(&schema(), &args), Ok(()), "{args}");
        }
        // A schema without properties or required accepts any object.
        assert_eq!(
            validate_arguments(&json!({"type": "object"}), &json!({"x": 1})),
            Ok(())
        );
    }

    #[test]
    fn reports_the_first_problem() {
        let cases = [
            (json!([1]), ArgumentError::NotAnObject("array")),
            (json!(null), ArgumentError::NotAnObject("null")),
            (json!({"b": 1}), ArgumentError::Missing("a".into())),
            (json!({"a": 1}), ArgumentError::Missing("b".into())),
            (
                json!({"a": 1.5, "b": 1}),
                ArgumentError::WrongType {
                    name: "a".into(),
                    expected: "integer".into(),
                    actual: "number",
                },
            ),
            (
                json!({"a": "1", "b": 1}),
                ArgumentError::WrongType {
                    name: "a".into(),
                    expected: "integer".into(),
                    actual: "string",
                },
            ),
            (
                json!({"a": 1, "b": 1, "s": 3}),
                ArgumentError::WrongType {
                    name: "s".into(),
                    expected: "string or null".into(),
                    actual: "integer",
                },
            ),
            (
                json!({"a": 1, "b": 1, "flag": "yes"}),
                ArgumentError::WrongType {
                    name: "flag".into(),
                    expected: "boolean".into(),
                    actual: "string",
                },
            ),
        ];
        for (args, expected) in cases {
            assert_eq!(
                validate_arguments(&schema(), &args),
                Err(expected),
                "{args}"
            );
        }
    }

    #[test]
    fn closed_schemas_reject_unknown_arguments() {
        let schema =
            json!({"type": "object", "properties": {"x": {}}, "additionalProperties": false});
        assert_eq!(validate_arguments(&schema, &json!({"x": 1})), Ok(()));
        assert_eq!(
            validate_arguments(&schema, &json!({"y": 1})),
            Err(ArgumentError::Unexpected("y".into()))
        );
    }

    /// Arguments of a test tool.
    #[derive(schemars::JsonSchema, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[schemars(example = json!({"a": 2, "label": "x"}))]
    #[allow(dead_code)]
    struct AddArgs {
        /// The first term.
        #[schemars(range(min = 1))]
        a: u32,
        /// An optional label.
        #[serde(default)]
        label: Option<String>,
        /// With a default.
        #[serde(default)]
        twice: bool,
    }

    #[test]
    fn a_derived_schema_has_the_fields_required_descriptions_bounds_and_examples() {
        let schema = input_schema_for::<AddArgs>();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["a"]));
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["properties"]["a"]["description"], "The first term.");
        assert_eq!(schema["properties"]["a"]["minimum"], 1);
        assert_eq!(
            schema["properties"]["label"]["type"],
            json!(["string", "null"])
        );
        assert!(schema.get("title").is_none() && schema.get("$schema").is_none());
        let example = &schema["examples"][0];
        assert_eq!(validate_arguments(&schema, example), Ok(()));
        assert_eq!(
            validate_arguments(&schema, &json!({"a": 1, "b": 2})),
            Err(ArgumentError::Unexpected("b".into()))
        );
        assert_eq!(
            validate_arguments(&schema, &json!({"label": "x"})),
            Err(ArgumentError::Missing("a".into()))
        );
    }

    #[test]
    fn messages_are_readable() {
        let e = ArgumentError::WrongType {
            name: "a".into(),
            expected: "integer".into(),
            actual: "string",
        };
        assert_eq!(e.to_string(), "argument `a` must be integer, not string");
        assert_eq!(
            ArgumentError::Missing("b".into()).to_string(),
            "missing required argument `b`"
        );
    }
}
