//! [`Value`]s on PostgreSQL: converted to and from the column's own type, so that one statement
//! text and one set of parameters serve both backends.

use std::error::Error as StdError;

use ::postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use bytes::BytesMut;

use super::Ctx;
use ::postgres::{GenericClient, Statement};

use crate::error::Result;
use crate::sql::{Row, Value, to_postgres};

type BoxError = Box<dyn StdError + Sync + Send>;

fn mismatch(value: &Value, ty: &Type) -> BoxError {
    format!("cannot bind {value:?} to a parameter of type {ty}").into()
}

impl ToSql for Value {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
        match (self, ty) {
            (Value::Null, _) => Ok(IsNull::Yes),
            (Value::Integer(v), &Type::INT8) => v.to_sql(ty, out),
            (Value::Integer(v), &Type::INT4) => i32::try_from(*v)?.to_sql(ty, out),
            (Value::Integer(v), &Type::INT2) => i16::try_from(*v)?.to_sql(ty, out),
            (Value::Integer(v), &Type::FLOAT8) => (*v as f64).to_sql(ty, out),
            (Value::Integer(v), &Type::BOOL) => (*v != 0).to_sql(ty, out),
            (Value::Integer(v), &Type::TEXT | &Type::VARCHAR) => v.to_string().to_sql(ty, out),
            (Value::Real(v), &Type::FLOAT8) => v.to_sql(ty, out),
            (Value::Real(v), &Type::FLOAT4) => (*v as f32).to_sql(ty, out),
            (Value::Text(v), &Type::TEXT | &Type::VARCHAR | &Type::BPCHAR | &Type::NAME) => {
                v.as_str().to_sql(ty, out)
            }
            (Value::Text(v), &Type::BYTEA) => v.as_bytes().to_sql(ty, out),
            (Value::Blob(v), &Type::BYTEA) => v.as_slice().to_sql(ty, out),
            (v, ty) => Err(mismatch(v, ty)),
        }
    }

    fn accepts(ty: &Type) -> bool {
        accepted(ty)
    }

    to_sql_checked!();
}

fn accepted(ty: &Type) -> bool {
    matches!(
        *ty,
        Type::INT2
            | Type::INT4
            | Type::INT8
            | Type::FLOAT4
            | Type::FLOAT8
            | Type::BOOL
            | Type::TEXT
            | Type::VARCHAR
            | Type::BPCHAR
            | Type::NAME
            | Type::BYTEA
    )
}

impl<'a> FromSql<'a> for Value {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> std::result::Result<Value, BoxError> {
        Ok(match *ty {
            Type::INT2 => Value::Integer(i16::from_sql(ty, raw)?.into()),
            Type::INT4 => Value::Integer(i32::from_sql(ty, raw)?.into()),
            Type::INT8 => Value::Integer(i64::from_sql(ty, raw)?),
            Type::BOOL => Value::Integer(bool::from_sql(ty, raw)?.into()),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::BYTEA => Value::Blob(<Vec<u8>>::from_sql(ty, raw)?),
            _ => Value::Text(String::from_sql(ty, raw)?),
        })
    }

    fn from_sql_null(_: &Type) -> std::result::Result<Value, BoxError> {
        Ok(Value::Null)
    }

    fn accepts(ty: &Type) -> bool {
        // NUMERIC (what SUM of integers gives) is refused: write CAST(SUM(x) AS BIGINT).
        accepted(ty)
    }
}

fn refs(params: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

type PgResult<T> = std::result::Result<T, ::postgres::Error>;

/// Runs the caller's `sql` through the connection's cache of prepared statements (or prepared
/// for this call when the cache is off); a statement that fails is forgotten, so that one whose
/// table changed is prepared again next time.
fn run<C: GenericClient, T>(
    ctx: &mut Ctx<'_, C>,
    sql: &str,
    params: &[Value],
    with_stmt: impl FnOnce(&mut C, &Statement, &[&(dyn ToSql + Sync)]) -> PgResult<T>,
    with_text: impl FnOnce(&mut C, &str, &[&(dyn ToSql + Sync)]) -> PgResult<T>,
) -> Result<T> {
    let params = refs(params);
    match ctx.caller_stmt(sql)? {
        Some(stmt) => with_stmt(ctx.c, &stmt, &params).map_err(|e| {
            ctx.forget_caller_stmt(sql);
            e.into()
        }),
        None => Ok(with_text(ctx.c, &to_postgres(sql), &params)?),
    }
}

pub(crate) fn execute<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    sql: &str,
    params: &[Value],
) -> Result<u64> {
    run(
        ctx,
        sql,
        params,
        |c, s, p| c.execute(s, p),
        |c, s, p| c.execute(s, p),
    )
}

pub(crate) fn query<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    sql: &str,
    params: &[Value],
) -> Result<Vec<Row>> {
    let rows = run(
        ctx,
        sql,
        params,
        |c, s, p| c.query(s, p),
        |c, s, p| c.query(s, p),
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let mut values = Vec::with_capacity(r.len());
        for i in 0..r.len() {
            values.push(r.try_get::<_, Value>(i)?);
        }
        out.push(Row { values });
    }
    Ok(out)
}

pub(crate) fn execute_batch<C: GenericClient>(c: &mut C, sql: &str) -> Result<()> {
    Ok(c.batch_execute(sql)?)
}
