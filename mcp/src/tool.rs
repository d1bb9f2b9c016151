//! The [`Tool`] trait, its error type, and the [`ToolRegistry`] a server lists and calls.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

/// A tool a client can list (`tools/list`) and call (`tools/call`).
///
/// The server checks the arguments against [`Tool::input_schema`] (see
/// [`validate_arguments`](crate::validate_arguments)) before [`Tool::call`] runs, so a tool
/// can deserialise them into its own type with `serde_json::from_value(args)?` (a mismatch
/// becomes [`ToolError::InvalidArguments`]).
///
/// What `call` returns becomes the `structuredContent` of the result (wrapped as
/// `{"result": value}` when it is not an object) and its text in a `text` content block.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The unique name clients call it by: 1 to 128 of `A-Z a-z 0-9 _ - .`.
    fn name(&self) -> &str;

    /// What it does, for the model choosing tools.
    fn description(&self) -> &str;

    /// The JSON Schema of its arguments: an object schema (`"type": "object"`).
    fn input_schema(&self) -> Value;

    /// An optional human-readable title.
    fn title(&self) -> Option<&str> {
        None
    }

    /// An optional JSON Schema (`"type": "object"`) of its structured results.
    fn output_schema(&self) -> Option<Value> {
        None
    }

    /// Runs the tool on already-checked arguments (always a JSON object).
    async fn call(&self, args: Value) -> Result<Value, ToolError>;
}

/// Why a tool call failed.
///
/// [`InvalidArguments`](Self::InvalidArguments) and [`Failed`](Self::Failed) are answered as a
/// tool result with `isError: true` (the model sees the message and can react);
/// [`Internal`](Self::Internal) is a server fault, answered as a JSON-RPC -32603 error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments are wrong in a way the schema could not express.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool ran and failed (an upstream error, a missing file, a business rule...).
    #[error("{0}")]
    Failed(String),
    /// The server cannot serve the call (a broken invariant, a lost resource).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ToolError {
    /// A [`ToolError::Failed`] from anything printable.
    pub fn failed(message: impl std::fmt::Display) -> Self {
        Self::Failed(message.to_string())
    }

    /// A [`ToolError::InvalidArguments`] from anything printable.
    pub fn invalid_arguments(message: impl std::fmt::Display) -> Self {
        Self::InvalidArguments(message.to_string())
    }

    /// A [`ToolError::Internal`] from anything printable.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::Internal(message.to_string())
    }
}

/// `serde_json::from_value::<Args>(args)?` in a tool: a mismatch is the caller's mistake.
impl From<serde_json::Error> for ToolError {
    fn from(error: serde_json::Error) -> Self {
        Self::InvalidArguments(error.to_string())
    }
}

impl From<crate::ArgumentError> for ToolError {
    fn from(error: crate::ArgumentError) -> Self {
        Self::InvalidArguments(error.to_string())
    }
}

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Another tool already has this name.
    #[error("a tool named `{0}` is already registered")]
    Duplicate(String),
    /// The name is empty, longer than 128 characters, or has a character outside
    /// `A-Z a-z 0-9 _ - .`.
    #[error("invalid tool name `{0}`: 1 to 128 of A-Z a-z 0-9 _ - .")]
    InvalidName(String),
    /// The input or output schema is not an object schema.
    #[error("tool `{name}`: the {which} schema must be a JSON object with \"type\": \"object\"")]
    InvalidSchema {
        /// The tool's name.
        name: String,
        /// `input` or `output`.
        which: &'static str,
    },
}

/// A registered tool with what `tools/list` shows of it, computed once.
struct Entry {
    tool: Arc<dyn Tool>,
    input_schema: Value,
    listing: Value,
}

/// The tools of a server, in registration order.
#[derive(Default)]
pub struct ToolRegistry {
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names().collect::<Vec<_>>())
            .finish()
    }
}

fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool; its schemas are read once, here.
    pub fn register(&mut self, tool: impl Tool) -> Result<(), RegistryError> {
        self.register_arc(Arc::new(tool))
    }

    /// Adds a shared tool (one that also lives elsewhere, or a `dyn Tool`).
    pub fn register_arc(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let name = tool.name().to_owned();
        if !valid_name(&name) {
            return Err(RegistryError::InvalidName(name));
        }
        if self.by_name.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        let input_schema = tool.input_schema();
        if !object_schema(&input_schema) {
            return Err(RegistryError::InvalidSchema {
                name,
                which: "input",
            });
        }
        let mut listing = Map::new();
        listing.insert("name".into(), json!(name));
        if let Some(title) = tool.title() {
            listing.insert("title".into(), json!(title));
        }
        listing.insert("description".into(), json!(tool.description()));
        listing.insert("inputSchema".into(), input_schema.clone());
        if let Some(output_schema) = tool.output_schema() {
            if !object_schema(&output_schema) {
                return Err(RegistryError::InvalidSchema {
                    name,
                    which: "output",
                });
            }
            listing.insert("outputSchema".into(), output_schema);
        }
        self.by_name.insert(name, self.entries.len());
        self.entries.push(Entry {
            tool,
            input_schema,
            listing: Value::Object(listing),
        });
        Ok(())
    }

    /// [`register`](Self::register) for chaining: `ToolRegistry::new().with(A)?.with(B)?`.
    pub fn with(mut self, tool: impl Tool) -> Result<Self, RegistryError> {
        self.register(tool)?;
        Ok(self)
    }

    /// The tool with this name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|&i| &self.entries[i].tool)
    }

    /// The input schema of the tool with this name, as read at registration.
    pub fn input_schema(&self, name: &str) -> Option<&Value> {
        self.by_name
            .get(name)
            .map(|&i| &self.entries[i].input_schema)
    }

    /// The names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries
            .iter()
            .map(|e| e.listing["name"].as_str().unwrap_or_default())
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `tools` array of a `tools/list` result: `name`, `title` (if any), `description`,
    /// `inputSchema`, `outputSchema` (if any) of each tool, in registration order.
    pub fn list(&self) -> Vec<Value> {
        self.entries.iter().map(|e| e.listing.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str, Value, Option<Value>);

    #[async_trait]
    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            "test tool"
        }
        fn input_schema(&self) -> Value {
            self.1.clone()
        }
        fn title(&self) -> Option<&str> {
            Some("Named")
        }
        fn output_schema(&self) -> Option<Value> {
            self.2.clone()
        }
        async fn call(&self, args: Value) -> Result<Value, ToolError> {
            Ok(args)
        }
    }

    fn obj() -> Value {
        json!({"type": "object"})
    }

    #[test]
    fn registers_lists_and_finds_tools_in_order() {
        let mut registry = ToolRegistry::new();
        registry.register(Named("b.tool-1_x", obj(), None)).unwrap();
        registry.register(Named("a", obj(), Some(obj()))).unwrap();
        assert_eq!(registry.len(), 2);
        assert!(!registry.is_empty());
        assert_eq!(registry.names().collect::<Vec<_>>(), ["b.tool-1_x", "a"]);
        assert_eq!(registry.get("a").unwrap().name(), "a");
        assert!(registry.get("c").is_none());
        assert_eq!(registry.input_schema("a"), Some(&obj()));
        let list = registry.list();
        assert_eq!(
            list[1],
            json!({"name": "a", "title": "Named", "description": "test tool", "inputSchema": obj(), "outputSchema": obj()})
        );
        assert!(list[0].get("outputSchema").is_none());
        assert!(format!("{registry:?}").contains("b.tool-1_x"));
    }

    #[test]
    fn rejects_bad_registrations() {
        let mut registry = ToolRegistry::new().with(Named("a", obj(), None)).unwrap();
        assert_eq!(
            registry.register(Named("a", obj(), None)),
            Err(RegistryError::Duplicate("a".into()))
        );
        for bad in ["", "has space", "slash/", "é"] {
            assert_eq!(
                registry.register(Named(bad, obj(), None)),
                Err(RegistryError::InvalidName(bad.into()))
            );
        }
        let long: &'static str = Box::leak("x".repeat(129).into_boxed_str());
        assert!(matches!(
            registry.register(Named(long, obj(), None)),
            Err(RegistryError::InvalidName(_))
        ));
        assert_eq!(
            registry.register(Named("b", json!({"type": "string"}), None)),
            Err(RegistryError::InvalidSchema {
                name: "b".into(),
                which: "input"
            })
        );
        assert_eq!(
            registry.register(Named("c", obj(), Some(json!(true)))),
            Err(RegistryError::InvalidSchema {
                name: "c".into(),
                which: "output"
            })
        );
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn tool_errors_convert_and_print() {
        let e: ToolError = serde_json::from_value::<u32>(json!("x"))
            .unwrap_err()
            .into();
        assert!(matches!(e, ToolError::InvalidArguments(_)));
        assert_eq!(ToolError::failed("boom").to_string(), "boom");
        assert_eq!(
            ToolError::internal("lost").to_string(),
            "internal error: lost"
        );
        assert_eq!(
            ToolError::invalid_arguments("x").to_string(),
            "invalid arguments: x"
        );
        let e: ToolError = crate::ArgumentError::Missing("a".into()).into();
        assert_eq!(
            e,
            ToolError::InvalidArguments("missing required argument `a`".into())
        );
    }
}
