//! Messages a server sends (protocol 3.0), one variant per message, named as the protocol documentation names
//! it. Each decodes from a [`Frame`] and encodes back to the same bytes.

use bytes::{BufMut, Bytes, BytesMut};

use super::cursor::{Cursor, put_count16, put_cstr, put_nullable, write_tagged};
use super::{Frame, ProtocolError, TxnStatus};

/// Backend message type bytes.
pub mod tag {
    #![allow(missing_docs)]
    pub const AUTHENTICATION: u8 = b'R';
    pub const BACKEND_KEY_DATA: u8 = b'K';
    pub const BIND_COMPLETE: u8 = b'2';
    pub const CLOSE_COMPLETE: u8 = b'3';
    pub const COMMAND_COMPLETE: u8 = b'C';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_IN_RESPONSE: u8 = b'G';
    pub const COPY_OUT_RESPONSE: u8 = b'H';
    pub const COPY_BOTH_RESPONSE: u8 = b'W';
    pub const DATA_ROW: u8 = b'D';
    pub const EMPTY_QUERY_RESPONSE: u8 = b'I';
    pub const ERROR_RESPONSE: u8 = b'E';
    pub const FUNCTION_CALL_RESPONSE: u8 = b'V';
    pub const NEGOTIATE_PROTOCOL_VERSION: u8 = b'v';
    pub const NO_DATA: u8 = b'n';
    pub const NOTICE_RESPONSE: u8 = b'N';
    pub const NOTIFICATION_RESPONSE: u8 = b'A';
    pub const PARAMETER_DESCRIPTION: u8 = b't';
    pub const PARAMETER_STATUS: u8 = b'S';
    pub const PARSE_COMPLETE: u8 = b'1';
    pub const PORTAL_SUSPENDED: u8 = b's';
    pub const READY_FOR_QUERY: u8 = b'Z';
    pub const ROW_DESCRIPTION: u8 = b'T';
}

/// The authentication request inside an Authentication (`R`) message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    /// AuthenticationOk (0).
    Ok,
    /// AuthenticationKerberosV5 (2), no longer supported by servers.
    KerberosV5,
    /// AuthenticationCleartextPassword (3).
    CleartextPassword,
    /// AuthenticationMD5Password (5) with its salt.
    Md5Password {
        /// The four-byte salt.
        salt: [u8; 4],
    },
    /// AuthenticationGSS (7).
    Gss,
    /// AuthenticationGSSContinue (8).
    GssContinue(Bytes),
    /// AuthenticationSSPI (9).
    Sspi,
    /// AuthenticationSASL (10) with the mechanisms the server offers, in preference order.
    Sasl {
        /// Mechanism names, such as `SCRAM-SHA-256` and `SCRAM-SHA-256-PLUS`.
        mechanisms: Vec<Bytes>,
    },
    /// AuthenticationSASLContinue (11).
    SaslContinue(Bytes),
    /// AuthenticationSASLFinal (12).
    SaslFinal(Bytes),
}

/// One column of a RowDescription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDescription {
    /// The column name.
    pub name: Bytes,
    /// The table's OID, or 0.
    pub table_oid: u32,
    /// The column's attribute number, or 0.
    pub column: i16,
    /// The data type's OID.
    pub type_oid: u32,
    /// The type's size (negative for variable width).
    pub type_size: i16,
    /// The type modifier.
    pub type_modifier: i32,
    /// The format code (0 text, 1 binary).
    pub format: i16,
}

/// The fields of an ErrorResponse or NoticeResponse, each a one-byte code (`S` severity, `C` SQLSTATE, `M`
/// message, ...) and a value, in the order sent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ErrorFields {
    /// Code/value pairs.
    pub fields: Vec<(u8, Bytes)>,
}

impl ErrorFields {
    /// The value of one field.
    pub fn get(&self, code: u8) -> Option<&Bytes> {
        self.fields.iter().find(|(c, _)| *c == code).map(|(_, v)| v)
    }

    /// The SQLSTATE code (`C`).
    pub fn code(&self) -> Option<&Bytes> {
        self.get(b'C')
    }

    /// The primary message (`M`).
    pub fn message(&self) -> Option<&Bytes> {
        self.get(b'M')
    }

    /// The non-localised severity (`V`), or the localised one (`S`) from servers older than 9.6.
    pub fn severity(&self) -> Option<&Bytes> {
        self.get(b'V').or_else(|| self.get(b'S'))
    }

    /// Builds an error with severity `ERROR`, the given SQLSTATE and message, as the proxy sends its own errors.
    pub fn error(sqlstate: &str, message: &str) -> Self {
        Self::with_severity("ERROR", sqlstate, message)
    }

    /// Builds an error or notice with the given severity (`ERROR`, `FATAL`, `NOTICE`, ...).
    pub fn with_severity(severity: &str, sqlstate: &str, message: &str) -> Self {
        let s = Bytes::copy_from_slice(severity.as_bytes());
        ErrorFields {
            fields: vec![
                (b'S', s.clone()),
                (b'V', s),
                (b'C', Bytes::copy_from_slice(sqlstate.as_bytes())),
                (b'M', Bytes::copy_from_slice(message.as_bytes())),
            ],
        }
    }

    fn decode(name: &'static str, body: &Bytes) -> Result<Self, ProtocolError> {
        let mut c = Cursor::new(name, body);
        let mut fields = Vec::new();
        loop {
            let code = c.u8()?;
            if code == 0 {
                break;
            }
            fields.push((code, c.cstr()?));
        }
        c.finish()?;
        Ok(ErrorFields { fields })
    }

    fn encode(&self, d: &mut BytesMut) {
        for (code, value) in &self.fields {
            d.put_u8(*code);
            put_cstr(d, value);
        }
        d.put_u8(0);
    }
}

/// A message from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendMessage {
    /// Authentication (`R`): one step of the authentication exchange.
    Authentication(Authentication),
    /// BackendKeyData: the process id and secret key a CancelRequest must quote.
    BackendKeyData {
        /// The backend's process id.
        pid: i32,
        /// The secret key (4 bytes in protocol 3.0).
        secret: Bytes,
    },
    /// BindComplete.
    BindComplete,
    /// CloseComplete.
    CloseComplete,
    /// CommandComplete with its command tag (`INSERT 0 1`, `COMMIT`, `ROLLBACK`, ...).
    CommandComplete {
        /// The command tag.
        tag: Bytes,
    },
    /// CopyData: a chunk of COPY TO STDOUT data.
    CopyData(Bytes),
    /// CopyDone.
    CopyDone,
    /// CopyInResponse: the server is ready for COPY FROM STDIN data.
    CopyInResponse(CopyFormat),
    /// CopyOutResponse: COPY TO STDOUT data follows.
    CopyOutResponse(CopyFormat),
    /// CopyBothResponse: streaming replication's copy mode in both directions.
    CopyBothResponse(CopyFormat),
    /// DataRow: one row; `None` is NULL.
    DataRow {
        /// Column values.
        values: Vec<Option<Bytes>>,
    },
    /// EmptyQueryResponse: the query string was empty.
    EmptyQueryResponse,
    /// ErrorResponse.
    ErrorResponse(ErrorFields),
    /// FunctionCallResponse: the result of a FunctionCall; `None` is NULL.
    FunctionCallResponse {
        /// The result.
        value: Option<Bytes>,
    },
    /// NegotiateProtocolVersion: the server speaks an older minor version or rejected some options.
    NegotiateProtocolVersion {
        /// The newest minor version the server supports.
        newest_minor: i32,
        /// Protocol options it did not recognise.
        unrecognized: Vec<Bytes>,
    },
    /// NoData: the statement or portal returns no rows.
    NoData,
    /// NoticeResponse: a warning or notice, which may arrive at any time.
    NoticeResponse(ErrorFields),
    /// NotificationResponse: a NOTIFY delivered to a LISTENing session, at any time.
    NotificationResponse {
        /// The notifying backend's process id.
        pid: i32,
        /// The channel.
        channel: Bytes,
        /// The payload.
        payload: Bytes,
    },
    /// ParameterDescription: the parameter types of a prepared statement.
    ParameterDescription {
        /// Type OIDs.
        types: Vec<u32>,
    },
    /// ParameterStatus: a run-time parameter's value, at startup or when it changes.
    ParameterStatus {
        /// The parameter name.
        name: Bytes,
        /// Its value.
        value: Bytes,
    },
    /// ParseComplete.
    ParseComplete,
    /// PortalSuspended: Execute hit its row limit; the portal can be executed again.
    PortalSuspended,
    /// ReadyForQuery with the transaction status.
    ReadyForQuery(TxnStatus),
    /// RowDescription: the columns of the rows that follow.
    RowDescription {
        /// One entry per column.
        fields: Vec<FieldDescription>,
    },
}

/// The format part of CopyInResponse, CopyOutResponse and CopyBothResponse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyFormat {
    /// 0 textual, 1 binary.
    pub overall: i8,
    /// Per-column format codes.
    pub columns: Vec<i16>,
}

impl CopyFormat {
    fn decode(name: &'static str, body: &Bytes) -> Result<Self, ProtocolError> {
        let mut c = Cursor::new(name, body);
        let overall = c.u8()? as i8;
        let n = c.count16()?;
        let columns = (0..n).map(|_| c.i16()).collect::<Result<_, _>>()?;
        c.finish()?;
        Ok(CopyFormat { overall, columns })
    }

    fn encode(&self, d: &mut BytesMut) {
        d.put_i8(self.overall);
        put_count16(d, self.columns.len());
        self.columns.iter().for_each(|c| d.put_i16(*c));
    }
}

fn empty(name: &'static str, body: &Bytes, msg: BackendMessage) -> Result<BackendMessage, ProtocolError> {
    if body.is_empty() { Ok(msg) } else { Err(ProtocolError::TrailingBytes(name)) }
}

impl BackendMessage {
    /// Decodes a whole frame sent by a server.
    pub fn decode(frame: &Frame) -> Result<Self, ProtocolError> {
        let body = frame.body();
        let msg = match frame.tag() {
            tag::AUTHENTICATION => BackendMessage::Authentication(decode_auth(&body)?),
            tag::BACKEND_KEY_DATA => {
                let mut c = Cursor::new("BackendKeyData", &body);
                let pid = c.i32()?;
                let secret = c.rest();
                if secret.is_empty() || secret.len() > 256 {
                    return Err(ProtocolError::invalid(
                        "BackendKeyData",
                        "secret key must be 1 to 256 bytes",
                    ));
                }
                BackendMessage::BackendKeyData { pid, secret }
            }
            tag::BIND_COMPLETE => empty("BindComplete", &body, BackendMessage::BindComplete)?,
            tag::CLOSE_COMPLETE => empty("CloseComplete", &body, BackendMessage::CloseComplete)?,
            tag::COMMAND_COMPLETE => {
                let mut c = Cursor::new("CommandComplete", &body);
                let t = c.cstr()?;
                c.finish()?;
                BackendMessage::CommandComplete { tag: t }
            }
            tag::COPY_DATA => BackendMessage::CopyData(body),
            tag::COPY_DONE => empty("CopyDone", &body, BackendMessage::CopyDone)?,
            tag::COPY_IN_RESPONSE => {
                BackendMessage::CopyInResponse(CopyFormat::decode("CopyInResponse", &body)?)
            }
            tag::COPY_OUT_RESPONSE => {
                BackendMessage::CopyOutResponse(CopyFormat::decode("CopyOutResponse", &body)?)
            }
            tag::COPY_BOTH_RESPONSE => {
                BackendMessage::CopyBothResponse(CopyFormat::decode("CopyBothResponse", &body)?)
            }
            tag::DATA_ROW => {
                let mut c = Cursor::new("DataRow", &body);
                let n = c.count16()?;
                // Each value takes at least 4 bytes, so a count the body cannot hold is refused before
                // allocating for it.
                if n > c.remaining() / 4 {
                    return Err(ProtocolError::Truncated("DataRow"));
                }
                let values = (0..n).map(|_| c.nullable()).collect::<Result<_, _>>()?;
                c.finish()?;
                BackendMessage::DataRow { values }
            }
            tag::EMPTY_QUERY_RESPONSE => {
                empty("EmptyQueryResponse", &body, BackendMessage::EmptyQueryResponse)?
            }
            tag::ERROR_RESPONSE => {
                BackendMessage::ErrorResponse(ErrorFields::decode("ErrorResponse", &body)?)
            }
            tag::FUNCTION_CALL_RESPONSE => {
                let mut c = Cursor::new("FunctionCallResponse", &body);
                let value = c.nullable()?;
                c.finish()?;
                BackendMessage::FunctionCallResponse { value }
            }
            tag::NEGOTIATE_PROTOCOL_VERSION => {
                let mut c = Cursor::new("NegotiateProtocolVersion", &body);
                let newest_minor = c.i32()?;
                let n = c.i32()?;
                let n = usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= c.remaining())
                    .ok_or(ProtocolError::invalid("NegotiateProtocolVersion", format!("bad count {n}")))?;
                let unrecognized = (0..n).map(|_| c.cstr()).collect::<Result<_, _>>()?;
                c.finish()?;
                BackendMessage::NegotiateProtocolVersion { newest_minor, unrecognized }
            }
            tag::NO_DATA => empty("NoData", &body, BackendMessage::NoData)?,
            tag::NOTICE_RESPONSE => {
                BackendMessage::NoticeResponse(ErrorFields::decode("NoticeResponse", &body)?)
            }
            tag::NOTIFICATION_RESPONSE => {
                let mut c = Cursor::new("NotificationResponse", &body);
                let pid = c.i32()?;
                let channel = c.cstr()?;
                let payload = c.cstr()?;
                c.finish()?;
                BackendMessage::NotificationResponse { pid, channel, payload }
            }
            tag::PARAMETER_DESCRIPTION => {
                let mut c = Cursor::new("ParameterDescription", &body);
                let n = c.count16()?;
                let types = (0..n).map(|_| c.u32()).collect::<Result<_, _>>()?;
                c.finish()?;
                BackendMessage::ParameterDescription { types }
            }
            tag::PARAMETER_STATUS => {
                let mut c = Cursor::new("ParameterStatus", &body);
                let name = c.cstr()?;
                let value = c.cstr()?;
                c.finish()?;
                BackendMessage::ParameterStatus { name, value }
            }
            tag::PARSE_COMPLETE => empty("ParseComplete", &body, BackendMessage::ParseComplete)?,
            tag::PORTAL_SUSPENDED => empty("PortalSuspended", &body, BackendMessage::PortalSuspended)?,
            tag::READY_FOR_QUERY => {
                let mut c = Cursor::new("ReadyForQuery", &body);
                let status = TxnStatus::from_byte(c.u8()?)?;
                c.finish()?;
                BackendMessage::ReadyForQuery(status)
            }
            tag::ROW_DESCRIPTION => {
                let mut c = Cursor::new("RowDescription", &body);
                let n = c.count16()?;
                if n > c.remaining() / 19 {
                    return Err(ProtocolError::Truncated("RowDescription"));
                }
                let mut fields = Vec::with_capacity(n);
                for _ in 0..n {
                    fields.push(FieldDescription {
                        name: c.cstr()?,
                        table_oid: c.u32()?,
                        column: c.i16()?,
                        type_oid: c.u32()?,
                        type_size: c.i16()?,
                        type_modifier: c.i32()?,
                        format: c.i16()?,
                    });
                }
                c.finish()?;
                BackendMessage::RowDescription { fields }
            }
            other => return Err(ProtocolError::UnknownTag { direction: "backend", tag: char::from(other) }),
        };
        Ok(msg)
    }

    /// The message's type byte.
    pub fn tag(&self) -> u8 {
        match self {
            BackendMessage::Authentication(_) => tag::AUTHENTICATION,
            BackendMessage::BackendKeyData { .. } => tag::BACKEND_KEY_DATA,
            BackendMessage::BindComplete => tag::BIND_COMPLETE,
            BackendMessage::CloseComplete => tag::CLOSE_COMPLETE,
            BackendMessage::CommandComplete { .. } => tag::COMMAND_COMPLETE,
            BackendMessage::CopyData(_) => tag::COPY_DATA,
            BackendMessage::CopyDone => tag::COPY_DONE,
            BackendMessage::CopyInResponse(_) => tag::COPY_IN_RESPONSE,
            BackendMessage::CopyOutResponse(_) => tag::COPY_OUT_RESPONSE,
            BackendMessage::CopyBothResponse(_) => tag::COPY_BOTH_RESPONSE,
            BackendMessage::DataRow { .. } => tag::DATA_ROW,
            BackendMessage::EmptyQueryResponse => tag::EMPTY_QUERY_RESPONSE,
            BackendMessage::ErrorResponse(_) => tag::ERROR_RESPONSE,
            BackendMessage::FunctionCallResponse { .. } => tag::FUNCTION_CALL_RESPONSE,
            BackendMessage::NegotiateProtocolVersion { .. } => tag::NEGOTIATE_PROTOCOL_VERSION,
            BackendMessage::NoData => tag::NO_DATA,
            BackendMessage::NoticeResponse(_) => tag::NOTICE_RESPONSE,
            BackendMessage::NotificationResponse { .. } => tag::NOTIFICATION_RESPONSE,
            BackendMessage::ParameterDescription { .. } => tag::PARAMETER_DESCRIPTION,
            BackendMessage::ParameterStatus { .. } => tag::PARAMETER_STATUS,
            BackendMessage::ParseComplete => tag::PARSE_COMPLETE,
            BackendMessage::PortalSuspended => tag::PORTAL_SUSPENDED,
            BackendMessage::ReadyForQuery(_) => tag::READY_FOR_QUERY,
            BackendMessage::RowDescription { .. } => tag::ROW_DESCRIPTION,
        }
    }

    /// Encodes the message, tag and length included.
    pub fn encode(&self, dst: &mut BytesMut) {
        write_tagged(dst, self.tag(), |d| match self {
            BackendMessage::Authentication(a) => encode_auth(a, d),
            BackendMessage::BackendKeyData { pid, secret } => {
                d.put_i32(*pid);
                d.put_slice(secret);
            }
            BackendMessage::BindComplete
            | BackendMessage::CloseComplete
            | BackendMessage::CopyDone
            | BackendMessage::EmptyQueryResponse
            | BackendMessage::NoData
            | BackendMessage::ParseComplete
            | BackendMessage::PortalSuspended => {}
            BackendMessage::CommandComplete { tag } => put_cstr(d, tag),
            BackendMessage::CopyData(data) => d.put_slice(data),
            BackendMessage::CopyInResponse(f)
            | BackendMessage::CopyOutResponse(f)
            | BackendMessage::CopyBothResponse(f) => f.encode(d),
            BackendMessage::DataRow { values } => {
                put_count16(d, values.len());
                values.iter().for_each(|v| put_nullable(d, v));
            }
            BackendMessage::ErrorResponse(e) | BackendMessage::NoticeResponse(e) => e.encode(d),
            BackendMessage::FunctionCallResponse { value } => put_nullable(d, value),
            BackendMessage::NegotiateProtocolVersion { newest_minor, unrecognized } => {
                d.put_i32(*newest_minor);
                d.put_i32(i32::try_from(unrecognized.len()).unwrap_or(i32::MAX));
                unrecognized.iter().for_each(|o| put_cstr(d, o));
            }
            BackendMessage::NotificationResponse { pid, channel, payload } => {
                d.put_i32(*pid);
                put_cstr(d, channel);
                put_cstr(d, payload);
            }
            BackendMessage::ParameterDescription { types } => {
                put_count16(d, types.len());
                types.iter().for_each(|t| d.put_u32(*t));
            }
            BackendMessage::ParameterStatus { name, value } => {
                put_cstr(d, name);
                put_cstr(d, value);
            }
            BackendMessage::ReadyForQuery(status) => d.put_u8(status.as_byte()),
            BackendMessage::RowDescription { fields } => {
                put_count16(d, fields.len());
                for f in fields {
                    put_cstr(d, &f.name);
                    d.put_u32(f.table_oid);
                    d.put_i16(f.column);
                    d.put_u32(f.type_oid);
                    d.put_i16(f.type_size);
                    d.put_i32(f.type_modifier);
                    d.put_i16(f.format);
                }
            }
        });
    }

    /// Encodes the message into a fresh buffer.
    pub fn to_bytes(&self) -> Bytes {
        let mut buf = BytesMut::new();
        self.encode(&mut buf);
        buf.freeze()
    }
}

fn decode_auth(body: &Bytes) -> Result<Authentication, ProtocolError> {
    let mut c = Cursor::new("Authentication", body);
    let auth = match c.i32()? {
        0 => Authentication::Ok,
        2 => Authentication::KerberosV5,
        3 => Authentication::CleartextPassword,
        5 => {
            let s = c.bytes(4)?;
            Authentication::Md5Password { salt: [s[0], s[1], s[2], s[3]] }
        }
        7 => Authentication::Gss,
        8 => Authentication::GssContinue(c.rest()),
        9 => Authentication::Sspi,
        10 => {
            let mut mechanisms = Vec::new();
            loop {
                let m = c.cstr()?;
                if m.is_empty() {
                    break;
                }
                mechanisms.push(m);
            }
            Authentication::Sasl { mechanisms }
        }
        11 => Authentication::SaslContinue(c.rest()),
        12 => Authentication::SaslFinal(c.rest()),
        other => return Err(ProtocolError::invalid("Authentication", format!("unknown request {other}"))),
    };
    c.finish()?;
    Ok(auth)
}

fn encode_auth(a: &Authentication, d: &mut BytesMut) {
    match a {
        Authentication::Ok => d.put_i32(0),
        Authentication::KerberosV5 => d.put_i32(2),
        Authentication::CleartextPassword => d.put_i32(3),
        Authentication::Md5Password { salt } => {
            d.put_i32(5);
            d.put_slice(salt);
        }
        Authentication::Gss => d.put_i32(7),
        Authentication::GssContinue(data) => {
            d.put_i32(8);
            d.put_slice(data);
        }
        Authentication::Sspi => d.put_i32(9),
        Authentication::Sasl { mechanisms } => {
            d.put_i32(10);
            mechanisms.iter().for_each(|m| put_cstr(d, m));
            d.put_u8(0);
        }
        Authentication::SaslContinue(data) => {
            d.put_i32(11);
            d.put_slice(data);
        }
        Authentication::SaslFinal(data) => {
            d.put_i32(12);
            d.put_slice(data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::split_frame;

    fn b(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    #[test]
    fn every_backend_message_roundtrips() {
        let fmt = CopyFormat { overall: 0, columns: vec![0, 0] };
        let msgs = vec![
            BackendMessage::Authentication(Authentication::Ok),
            BackendMessage::Authentication(Authentication::KerberosV5),
            BackendMessage::Authentication(Authentication::CleartextPassword),
            BackendMessage::Authentication(Authentication::Md5Password { salt: [1, 2, 3, 4] }),
            BackendMessage::Authentication(Authentication::Gss),
            BackendMessage::Authentication(Authentication::GssContinue(b("tok"))),
            BackendMessage::Authentication(Authentication::Sspi),
            BackendMessage::Authentication(Authentication::Sasl {
                mechanisms: vec![b("SCRAM-SHA-256-PLUS"), b("SCRAM-SHA-256")],
            }),
            BackendMessage::Authentication(Authentication::SaslContinue(b("r=abc,s=xyz,i=4096"))),
            BackendMessage::Authentication(Authentication::SaslFinal(b("v=xyz"))),
            BackendMessage::BackendKeyData { pid: 1234, secret: b("\x01\x02\x03\x04") },
            BackendMessage::BindComplete,
            BackendMessage::CloseComplete,
            BackendMessage::CommandComplete { tag: b("INSERT 0 1") },
            BackendMessage::CopyData(b("1\tone\n")),
            BackendMessage::CopyDone,
            BackendMessage::CopyInResponse(fmt.clone()),
            BackendMessage::CopyOutResponse(fmt.clone()),
            BackendMessage::CopyBothResponse(CopyFormat { overall: 1, columns: vec![] }),
            BackendMessage::DataRow { values: vec![Some(b("1")), None, Some(b(""))] },
            BackendMessage::EmptyQueryResponse,
            BackendMessage::ErrorResponse(ErrorFields::error("42P01", "relation \"x\" does not exist")),
            BackendMessage::FunctionCallResponse { value: None },
            BackendMessage::NegotiateProtocolVersion { newest_minor: 0, unrecognized: vec![b("_pq_.x")] },
            BackendMessage::NoData,
            BackendMessage::NoticeResponse(ErrorFields::with_severity("NOTICE", "00000", "hi")),
            BackendMessage::NotificationResponse { pid: 7, channel: b("jobs"), payload: b("42") },
            BackendMessage::ParameterDescription { types: vec![23, 25] },
            BackendMessage::ParameterStatus { name: b("TimeZone"), value: b("UTC") },
            BackendMessage::ParseComplete,
            BackendMessage::PortalSuspended,
            BackendMessage::ReadyForQuery(TxnStatus::Idle),
            BackendMessage::ReadyForQuery(TxnStatus::InTransaction),
            BackendMessage::ReadyForQuery(TxnStatus::Failed),
            BackendMessage::RowDescription {
                fields: vec![FieldDescription {
                    name: b("id"),
                    table_oid: 16384,
                    column: 1,
                    type_oid: 23,
                    type_size: 4,
                    type_modifier: -1,
                    format: 0,
                }],
            },
        ];
        for m in msgs {
            let mut buf = m.to_bytes().into();
            let frame = split_frame(&mut buf, 1 << 20).unwrap().unwrap();
            assert_eq!(BackendMessage::decode(&frame).unwrap(), m);
        }
    }

    #[test]
    fn error_fields_are_found_by_code() {
        let e = ErrorFields::error("57P01", "terminating connection due to administrator command");
        assert_eq!(e.code().unwrap().as_ref(), b"57P01");
        assert_eq!(e.severity().unwrap().as_ref(), b"ERROR");
        assert!(e.message().unwrap().starts_with(b"terminating"));
    }

    #[test]
    fn malformed_backend_messages_are_errors_not_panics() {
        for raw in [
            &b"Z\0\0\0\x05X"[..],                // unknown transaction status
            &b"D\0\0\0\x06\x7f\xff"[..],         // a DataRow claiming 32767 columns
            &b"D\0\0\0\x0a\0\x01\0\0\0\x09"[..], // a value longer than the body
            &b"R\0\0\0\x08\0\0\0\x05"[..],       // MD5 request without its salt
            &b"R\0\0\0\x08\0\0\0\x63"[..],       // unknown authentication request
            &b"T\0\0\0\x06\0\x01"[..],           // RowDescription cut short
            &b"E\0\0\0\x07Mhi"[..],              // error field without terminators
            &b"Q\0\0\0\x04"[..],                 // a frontend tag sent by a server
        ] {
            let frame = Frame::from_raw(Bytes::copy_from_slice(raw)).unwrap();
            assert!(BackendMessage::decode(&frame).is_err(), "{raw:?} decoded");
        }
    }
}
