//! Backend-neutral SQL for the caller's own tables inside a [`QueueTx`](crate::QueueTx).
//!
//! One statement text serves both backends: write SQL that SQLite and PostgreSQL both accept
//! (`INSERT ... ON CONFLICT DO NOTHING`, `RETURNING`, `COALESCE`, `CAST(x AS BIGINT)`) with
//! SQLite's numbered placeholders `?1`, `?2`, ...; on PostgreSQL they are rewritten to `$1`, `$2`.
//! Parameters and columns are [`Value`]s, converted to the column's type on PostgreSQL (an
//! integer binds to `INTEGER`, `BIGINT` or `SMALLINT` alike, a range error is reported, never
//! truncated). PostgreSQL gives each placeholder one type: a parameter used twice must stand in
//! places of the same type (bind it twice, as `?1` and `?2`, otherwise).

use std::borrow::Cow;

use crate::error::{Error, Result};

/// A parameter or a column value: SQLite's five storage classes, which PostgreSQL's common types
/// map onto (integers of every width and booleans to `Integer`, `bytea` to `Blob`).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL `NULL`.
    Null,
    /// A 64-bit integer (also booleans: 0 or 1).
    Integer(i64),
    /// A double.
    Real(f64),
    /// UTF-8 text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Integer(_) => "an integer",
            Value::Real(_) => "a real",
            Value::Text(_) => "text",
            Value::Blob(_) => "a blob",
        }
    }
}

macro_rules! int_into_value {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::Integer(i64::from(v))
            }
        }
    )*};
}
int_into_value!(i64, i32, i16, u32, u16, u8, bool);

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Real(v)
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_owned())
    }
}

impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::Text(v.clone())
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Value {
        Value::Blob(v)
    }
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Value {
        Value::Blob(v.to_vec())
    }
}

impl From<&Vec<u8>> for Value {
    fn from(v: &Vec<u8>) -> Value {
        Value::Blob(v.clone())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// Builds a `&[Value]` from expressions that convert into [`Value`]:
/// `tx.execute("UPDATE t SET n = ?1 WHERE id = ?2", params![n, id])`.
#[macro_export]
macro_rules! params {
    () => { &[] as &[$crate::Value] };
    ($($v:expr),+ $(,)?) => { &[$($crate::Value::from($v)),+] as &[$crate::Value] };
}

/// One row of a query's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub(crate) values: Vec<Value>,
}

impl Row {
    /// Column `index` (from 0) converted to `T`; a NULL or a value of another kind is an
    /// [`Error::InvalidArgument`] naming the column, unless `T` is an `Option`.
    pub fn get<T: FromValue>(&self, index: usize) -> Result<T> {
        let value = self.values.get(index).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "column {index} out of range (the row has {})",
                self.values.len()
            ))
        })?;
        T::from_value(value).map_err(|expected| {
            Error::InvalidArgument(format!(
                "column {index}: expected {expected}, found {}",
                value.kind()
            ))
        })
    }

    /// The raw values.
    pub fn values(&self) -> &[Value] {
        &self.values
    }
}

/// A Rust type a column converts to. The error names what was expected.
pub trait FromValue: Sized {
    /// Converts `value`, or says what kind was expected.
    fn from_value(value: &Value) -> std::result::Result<Self, &'static str>;
}

macro_rules! int_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(value: &Value) -> std::result::Result<Self, &'static str> {
                match value {
                    Value::Integer(v) => <$t>::try_from(*v).map_err(|_| concat!("an integer in range of ", stringify!($t))),
                    _ => Err("an integer"),
                }
            }
        }
    )*};
}
int_from_value!(i64, i32, u32, u64, usize, u16, u8);

impl FromValue for bool {
    fn from_value(value: &Value) -> std::result::Result<Self, &'static str> {
        match value {
            Value::Integer(v) => Ok(*v != 0),
            _ => Err("a boolean"),
        }
    }
}

impl FromValue for f64 {
    fn from_value(value: &Value) -> std::result::Result<Self, &'static str> {
        match value {
            Value::Real(v) => Ok(*v),
            Value::Integer(v) => Ok(*v as f64),
            _ => Err("a number"),
        }
    }
}

impl FromValue for String {
    fn from_value(value: &Value) -> std::result::Result<Self, &'static str> {
        match value {
            Value::Text(v) => Ok(v.clone()),
            _ => Err("text"),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(value: &Value) -> std::result::Result<Self, &'static str> {
        match value {
            Value::Blob(v) => Ok(v.clone()),
            // SQLite stores what it is given: a text column read as bytes is its UTF-8.
            Value::Text(v) => Ok(v.clone().into_bytes()),
            _ => Err("a blob"),
        }
    }
}

impl FromValue for Value {
    fn from_value(value: &Value) -> std::result::Result<Self, &'static str> {
        Ok(value.clone())
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> std::result::Result<Self, &'static str> {
        match value {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// Rewrites SQLite placeholders (`?NNN`, and bare `?` numbered after the largest so far) to
/// PostgreSQL's `$NNN`, leaving quoted strings, quoted identifiers and comments alone.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn to_postgres(sql: &str) -> Cow<'_, str> {
    if !sql.contains('?') {
        return Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut largest = 0u32;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                // SQL doubles a quote inside quotes, which this loop reads as close + open.
                for d in chars.by_ref() {
                    out.push(d);
                    if d == c {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    digits.push(d);
                    chars.next();
                }
                let n = if digits.is_empty() {
                    largest + 1
                } else {
                    digits.parse().unwrap_or(u32::MAX)
                };
                largest = largest.max(n);
                out.push('$');
                out.push_str(&n.to_string());
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

mod sqlite {
    use rusqlite::types::{ToSqlOutput, ValueRef};

    use super::{Row, Value};
    use crate::error::Result;

    impl rusqlite::ToSql for Value {
        fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
            Ok(match self {
                Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
                Value::Integer(v) => ToSqlOutput::Borrowed(ValueRef::Integer(*v)),
                Value::Real(v) => ToSqlOutput::Borrowed(ValueRef::Real(*v)),
                Value::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
                Value::Blob(v) => ToSqlOutput::Borrowed(ValueRef::Blob(v)),
            })
        }
    }

    fn value(v: ValueRef<'_>) -> Value {
        match v {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Integer(i),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        }
    }

    /// Runs a statement of the caller's with [`Value`] parameters on a SQLite connection of its
    /// own (through its statement cache): the SQLite side of [`QueueTx::execute`](crate::QueueTx::execute),
    /// for code that takes either. Returns the rows changed.
    pub fn execute(conn: &rusqlite::Connection, sql: &str, params: &[Value]) -> Result<u64> {
        let mut stmt = conn.prepare_cached(sql)?;
        let n = stmt.execute(rusqlite::params_from_iter(params.iter()))?;
        Ok(n as u64)
    }

    /// Runs a query of the caller's with [`Value`] parameters on a SQLite connection of its own
    /// (through its statement cache): the SQLite side of [`QueueTx::query`](crate::QueueTx::query).
    pub fn query(conn: &rusqlite::Connection, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let mut stmt = conn.prepare_cached(sql)?;
        let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            // Read after the step: SQLite prepares a cached statement again when its tables
            // changed, and `SELECT *` may then have more columns than when it was cached.
            let width = r.as_ref().column_count();
            let mut values = Vec::with_capacity(width);
            for i in 0..width {
                values.push(value(r.get_ref(i)?));
            }
            out.push(Row { values });
        }
        Ok(out)
    }
}

pub use sqlite::{execute as sqlite_execute, query as sqlite_query};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_rewritten_outside_quotes() {
        assert_eq!(
            to_postgres("SELECT a FROM t WHERE b = ?1 AND c = '?2' AND d = ?"),
            "SELECT a FROM t WHERE b = $1 AND c = '?2' AND d = $2"
        );
        assert_eq!(
            to_postgres("-- why?\nSELECT ?3, \"odd?\""),
            "-- why?\nSELECT $3, \"odd?\""
        );
        assert!(matches!(to_postgres("SELECT 1"), Cow::Borrowed(_)));
    }

    #[test]
    fn rows_convert_with_typed_errors() {
        let row = Row {
            values: vec![Value::Integer(7), Value::Null, Value::Text("x".into())],
        };
        assert_eq!(row.get::<i64>(0).ok(), Some(7));
        assert_eq!(row.get::<Option<i64>>(1).ok(), Some(None));
        assert!(row.get::<i64>(1).is_err());
        assert!(row.get::<i64>(2).is_err());
        assert!(row.get::<u8>(9).is_err());
        let err = row.get::<String>(0).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("column 0")));
    }
}
