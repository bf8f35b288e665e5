//! Removing the extra columns from replies, so the client sees what it would have seen without Krait.
//!
//! The extra columns are always the last ones ([`super::plan`]), so stripping cuts a suffix: the kept
//! prefix of a RowDescription or DataRow body is copied byte for byte, only the column count changes.
//! CommandComplete needs no change: RETURNING does not change the row count in the tag (`UPDATE 3`), and a
//! SELECT returns as many rows as before.

use bytes::{BufMut, Bytes, BytesMut};

use super::plan::StmtPlan;

/// A reply body that does not have the shape its tag promises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StripError {
    /// The body ended early.
    #[error("{0} is truncated")]
    Truncated(&'static str),
    /// Fewer columns than the extra columns to strip.
    #[error("{what} has {have} columns, fewer than the {extra} Krait added")]
    TooFewColumns {
        /// Which message.
        what: &'static str,
        /// Columns present.
        have: usize,
        /// Columns to strip.
        extra: usize,
    },
}

fn count(body: &[u8], what: &'static str) -> Result<usize, StripError> {
    let b = body.get(..2).ok_or(StripError::Truncated(what))?;
    let n = i16::from_be_bytes([b[0], b[1]]);
    usize::try_from(n).map_err(|_| StripError::Truncated(what))
}

fn with_count(n: usize, prefix: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(2 + prefix.len());
    // n < the original count, which fit in an i16.
    out.put_i16(i16::try_from(n).unwrap_or(i16::MAX));
    out.put_slice(prefix);
    out.freeze()
}

/// Removes the last `extra` fields of a RowDescription body.
pub fn strip_row_description(body: &[u8], extra: usize) -> Result<Bytes, StripError> {
    const WHAT: &str = "RowDescription";
    let n = count(body, WHAT)?;
    if n < extra {
        return Err(StripError::TooFewColumns { what: WHAT, have: n, extra });
    }
    let keep = n - extra;
    let mut at = 2;
    for _ in 0..keep {
        let nul =
            body.get(at..).and_then(|s| s.iter().position(|&b| b == 0)).ok_or(StripError::Truncated(WHAT))?;
        at += nul + 1 + 18;
        if at > body.len() {
            return Err(StripError::Truncated(WHAT));
        }
    }
    Ok(with_count(keep, &body[2..at]))
}

/// The columns of a RowDescription body, each name with its type's OID, for recording row values
/// ([`super::values`]).
pub fn row_description_columns(body: &[u8]) -> Result<Vec<(String, u32)>, StripError> {
    const WHAT: &str = "RowDescription";
    let n = count(body, WHAT)?;
    let mut columns = Vec::with_capacity(n);
    let mut at = 2;
    for _ in 0..n {
        let nul =
            body.get(at..).and_then(|s| s.iter().position(|&b| b == 0)).ok_or(StripError::Truncated(WHAT))?;
        let name = String::from_utf8_lossy(&body[at..at + nul]).into_owned();
        // After the name: table OID (4), column number (2), type OID (4), size (2), modifier (4), format (2).
        let ty = body.get(at + nul + 7..at + nul + 11).ok_or(StripError::Truncated(WHAT))?;
        columns.push((name, u32::from_be_bytes([ty[0], ty[1], ty[2], ty[3]])));
        at += nul + 1 + 18;
        if at > body.len() {
            return Err(StripError::Truncated(WHAT));
        }
    }
    Ok(columns)
}

/// The parameter type OIDs of a ParameterDescription body.
pub fn parameter_types(body: &[u8]) -> Result<Vec<u32>, StripError> {
    const WHAT: &str = "ParameterDescription";
    let n = count(body, WHAT)?;
    let types = body.get(2..2 + 4 * n).ok_or(StripError::Truncated(WHAT))?;
    Ok(types.chunks_exact(4).map(|t| u32::from_be_bytes([t[0], t[1], t[2], t[3]])).collect())
}

/// Every value of a DataRow body (`None` is NULL), for rows of the proxy's own injected queries.
pub fn data_row_values(body: &Bytes) -> Result<Vec<Option<Bytes>>, StripError> {
    let n = body.get(..2).map_or(0, |b| i16::from_be_bytes([b[0], b[1]]).max(0) as usize);
    split_data_row(body, n).map(|(_, values)| values)
}

/// Splits a DataRow body into the client's row (the first columns) and the extra values (`None` is NULL).
pub fn split_data_row(body: &Bytes, extra: usize) -> Result<(Bytes, Vec<Option<Bytes>>), StripError> {
    const WHAT: &str = "DataRow";
    let n = count(body, WHAT)?;
    if n < extra {
        return Err(StripError::TooFewColumns { what: WHAT, have: n, extra });
    }
    let keep = n - extra;
    let mut at = 2;
    let mut cut = 2;
    let mut extras = Vec::with_capacity(extra);
    for i in 0..n {
        if i == keep {
            cut = at;
        }
        let l = body.get(at..at + 4).ok_or(StripError::Truncated(WHAT))?;
        let len = i32::from_be_bytes([l[0], l[1], l[2], l[3]]);
        at += 4;
        let value = if len < 0 {
            None
        } else {
            let len = usize::try_from(len).map_err(|_| StripError::Truncated(WHAT))?;
            if at + len > body.len() {
                return Err(StripError::Truncated(WHAT));
            }
            let v = body.slice(at..at + len);
            at += len;
            Some(v)
        };
        if i >= keep {
            extras.push(value);
        }
    }
    if keep == n {
        cut = at;
    }
    Ok((with_count(keep, &body[2..cut]), extras))
}

/// Appends `extra` result-format codes to a Bind's list when it names one code per column, so the server
/// accepts the longer target list. An empty list (all text) or a single code (applies to all) is kept.
pub fn extend_result_formats(formats: &mut Vec<i16>, extra: usize) {
    if formats.len() > 1 {
        formats.extend(std::iter::repeat_n(0, extra));
    }
}

/// What to send the client in place of a RowDescription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientReply {
    /// This body (unchanged, or with the extra fields cut).
    Keep(Bytes),
    /// Nothing: the client did not ask for rows (a write without RETURNING, simple protocol).
    Drop,
    /// NoData instead (a Describe of a write without RETURNING).
    NoData,
}

/// The client's RowDescription for a statement's, in a result set (`describe = false`) or a Describe reply.
pub fn row_description_for_client(
    plan: &StmtPlan,
    body: &Bytes,
    describe: bool,
) -> Result<ClientReply, StripError> {
    match plan {
        StmtPlan::Rows(p) if p.hidden_result => {
            Ok(if describe { ClientReply::NoData } else { ClientReply::Drop })
        }
        StmtPlan::Rows(p) => Ok(ClientReply::Keep(strip_row_description(body, p.extra_columns())?)),
        _ => Ok(ClientReply::Keep(body.clone())),
    }
}

/// The client's DataRow (`None`: drop it) and the extra values, for a row of a statement's result.
pub fn data_row_for_client(
    plan: &StmtPlan,
    body: &Bytes,
) -> Result<(Option<Bytes>, Vec<Option<Bytes>>), StripError> {
    let row = split_result_row(plan, body)?;
    Ok((row.client, row.extras))
}

/// One row of a statement's result, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultRow {
    /// The client's DataRow body (`None`: drop it).
    pub client: Option<Bytes>,
    /// The DataRow body whose values are recorded: the client's row, or the written row the client did
    /// not ask for (`RowPlan::hidden_row`); `None` when there is neither.
    pub recorded: Option<Bytes>,
    /// The version columns' values.
    pub extras: Vec<Option<Bytes>>,
}

/// Takes a row of a statement's result apart: what the client gets, what is recorded, the version columns.
pub fn split_result_row(plan: &StmtPlan, body: &Bytes) -> Result<ResultRow, StripError> {
    match plan {
        StmtPlan::Rows(p) => {
            let (kept, extras) = split_data_row(body, p.extra_columns())?;
            let (client, recorded) = match (p.hidden_result, p.hidden_row) {
                (false, _) => (Some(kept.clone()), Some(kept)),
                (true, true) => (None, Some(kept)),
                (true, false) => (None, None),
            };
            Ok(ResultRow { client, recorded, extras })
        }
        _ => Ok(ResultRow { client: Some(body.clone()), recorded: Some(body.clone()), extras: Vec::new() }),
    }
}

/// The RowDescription body of the columns whose values are recorded (see [`ResultRow::recorded`]).
pub fn recorded_row_description(plan: &StmtPlan, body: &Bytes) -> Result<Option<Bytes>, StripError> {
    match plan {
        StmtPlan::Rows(p) if p.hidden_result && !p.hidden_row => Ok(None),
        StmtPlan::Rows(p) => Ok(Some(strip_row_description(body, p.extra_columns())?)),
        _ => Ok(Some(body.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::pg::backend::{BackendMessage, FieldDescription};

    fn field(name: &str) -> FieldDescription {
        FieldDescription {
            name: Bytes::copy_from_slice(name.as_bytes()),
            table_oid: 7,
            column: 1,
            type_oid: 25,
            type_size: -1,
            type_modifier: -1,
            format: 0,
        }
    }

    fn body(msg: &BackendMessage) -> Bytes {
        let raw = msg.to_bytes();
        raw.slice(5..)
    }

    #[test]
    fn row_description_columns_are_read_in_order_with_their_types() {
        let full = BackendMessage::RowDescription { fields: vec![field("a"), field("bb")] };
        assert_eq!(
            row_description_columns(&body(&full)),
            Ok(vec![("a".to_owned(), 25), ("bb".to_owned(), 25)])
        );
        assert!(row_description_columns(&body(&full)[..6]).is_err());
        assert_eq!(parameter_types(&[0, 2, 0, 0, 0, 23, 0, 0, 0, 25]), Ok(vec![23, 25]));
        assert!(parameter_types(&[0, 2, 0, 0, 0, 23]).is_err());
    }

    #[test]
    fn row_description_loses_exactly_its_suffix() {
        let full =
            BackendMessage::RowDescription { fields: vec![field("a"), field("bb"), field("krait_v0")] };
        let want = BackendMessage::RowDescription { fields: vec![field("a"), field("bb")] };
        assert_eq!(strip_row_description(&body(&full), 1), Ok(body(&want)));
        assert_eq!(strip_row_description(&body(&full), 0), Ok(body(&full)));
        assert!(strip_row_description(&body(&full), 4).is_err());
        assert!(strip_row_description(&body(&full)[..9], 1).is_err());
    }

    #[test]
    fn data_row_keeps_the_prefix_and_returns_the_extras() {
        let v = |s: &str| Some(Bytes::copy_from_slice(s.as_bytes()));
        let full = BackendMessage::DataRow { values: vec![v("x"), None, v("123"), v("7")] };
        let want = BackendMessage::DataRow { values: vec![v("x"), None] };
        let (kept, extras) = split_data_row(&body(&full), 2).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(kept, body(&want));
        assert_eq!(extras, vec![v("123"), v("7")]);
        let nulls = BackendMessage::DataRow { values: vec![v("x"), None] };
        let (kept, extras) = split_data_row(&body(&nulls), 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(kept, body(&BackendMessage::DataRow { values: vec![v("x")] }));
        assert_eq!(extras, vec![None]);
        assert!(split_data_row(&body(&full).slice(..8), 2).is_err());
    }

    #[test]
    fn result_formats_grow_only_when_listed_per_column() {
        let mut f = vec![1, 0, 1];
        extend_result_formats(&mut f, 2);
        assert_eq!(f, vec![1, 0, 1, 0, 0]);
        let mut one = vec![1];
        extend_result_formats(&mut one, 2);
        assert_eq!(one, vec![1]);
    }
}
