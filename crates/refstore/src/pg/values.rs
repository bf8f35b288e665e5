//! Values on the wire: result columns described and rows encoded by their types and formats, and Bind
//! parameters decoded.

use bytes::{BufMut, Bytes, BytesMut};
use wire::pg::BackendMessage;
use wire::pg::backend::FieldDescription;

use super::PgError;
use super::exec::Cell;
use super::sql::ColType;

/// The type oid of `int8`, the type of every parameter and most columns.
pub(super) const INT8_OID: u32 = 20;
const INT4_OID: u32 = 23;
const INT2_OID: u32 = 21;
const TEXT_OID: u32 = 25;
const VARCHAR_OID: u32 = 1043;

pub(super) fn command_complete(tag: &str) -> BackendMessage {
    BackendMessage::CommandComplete { tag: Bytes::copy_from_slice(tag.as_bytes()) }
}

/// The format of result column `i` under a Bind's result formats (none: all text; one: all alike).
fn format_of(formats: &[i16], i: usize) -> i16 {
    match formats {
        [] => 0,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(0),
    }
}

fn type_of(ty: ColType) -> (u32, i16) {
    match ty {
        ColType::Int8 => (INT8_OID, 8),
        ColType::Int4 => (INT4_OID, 4),
        ColType::Text => (TEXT_OID, -1),
    }
}

pub(super) fn row_description(cols: &[(&str, ColType)], formats: &[i16]) -> Vec<FieldDescription> {
    cols.iter()
        .enumerate()
        .map(|(i, &(name, ty))| {
            let (type_oid, type_size) = type_of(ty);
            FieldDescription {
                name: Bytes::copy_from_slice(name.as_bytes()),
                table_oid: 0,
                column: 0,
                type_oid,
                type_size,
                type_modifier: -1,
                format: format_of(formats, i),
            }
        })
        .collect()
}

/// Encodes a row. Integers go as their column's type: text, or binary int8/int4; a text column's binary
/// form is its UTF-8 text, the same bytes as its text form (which is why the proxy casts its tags to text).
pub(super) fn data_row(row: &[Cell], cols: &[(&str, ColType)], formats: &[i16]) -> BackendMessage {
    let values = row
        .iter()
        .enumerate()
        .map(|(i, cell)| {
            let ty = cols.get(i).map_or(ColType::Int8, |c| c.1);
            let mut b = BytesMut::new();
            match (*cell, ty, format_of(formats, i)) {
                (Cell::Int(v), ColType::Int8, 1) => b.put_i64(v),
                // An int4 column only ever holds int4 values (krait_fence's keys are checked on the way in).
                (Cell::Int(v), ColType::Int4, 1) => b.put_i32(i32::try_from(v).unwrap_or(i32::MAX)),
                (Cell::Int(v), _, _) => b.put_slice(v.to_string().as_bytes()),
                (Cell::Text(t), _, _) => b.put_slice(t.as_bytes()),
            }
            Some(b.freeze())
        })
        .collect();
    BackendMessage::DataRow { values }
}

/// Decodes one Bind parameter: text is a decimal integer; binary is an int2/int4/int8 by the declared type,
/// or UTF-8 text for text types.
pub(super) fn decode_param(bytes: &[u8], format: i16, type_oid: u32) -> Result<i64, PgError> {
    let bad =
        || PgError::new("22P03", format!("incorrect binary data format in a parameter of type {type_oid}"));
    let text = |b: &[u8]| {
        std::str::from_utf8(b).ok().and_then(|s| s.trim().parse::<i64>().ok()).ok_or_else(|| {
            PgError::new("22P02", format!("invalid input syntax for type bigint: \"{}\"", wire::pg::text(b)))
        })
    };
    match (format, type_oid) {
        (0, _) | (1, TEXT_OID | VARCHAR_OID) => text(bytes),
        (1, INT8_OID) => bytes.try_into().map(i64::from_be_bytes).map_err(|_| bad()),
        (1, INT4_OID) => bytes.try_into().map(|b| i64::from(i32::from_be_bytes(b))).map_err(|_| bad()),
        (1, INT2_OID) => bytes.try_into().map(|b| i64::from(i16::from_be_bytes(b))).map_err(|_| bad()),
        (1, other) => Err(PgError::new("42804", format!("parameters of type oid {other} are not supported"))),
        (f, _) => Err(PgError::new("08P01", format!("unsupported parameter format code {f}"))),
    }
}
