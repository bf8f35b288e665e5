//! Messages a client sends after startup (protocol 3.0), one variant per message, named as the protocol
//! documentation names it. Each decodes from a [`Frame`] and encodes back to the same bytes.

use bytes::{BufMut, Bytes, BytesMut};

use super::cursor::{Cursor, put_count16, put_cstr, put_nullable, write_tagged};
use super::{Frame, ProtocolError, Target};

/// Frontend message type bytes.
pub mod tag {
    #![allow(missing_docs)]
    pub const BIND: u8 = b'B';
    pub const CLOSE: u8 = b'C';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_FAIL: u8 = b'f';
    pub const DESCRIBE: u8 = b'D';
    pub const EXECUTE: u8 = b'E';
    pub const FLUSH: u8 = b'H';
    pub const FUNCTION_CALL: u8 = b'F';
    pub const PARSE: u8 = b'P';
    /// PasswordMessage, SASLInitialResponse, SASLResponse and GSSResponse all share this tag.
    pub const PASSWORD: u8 = b'p';
    pub const QUERY: u8 = b'Q';
    pub const SYNC: u8 = b'S';
    pub const TERMINATE: u8 = b'X';
}

/// A frontend message after startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontendMessage {
    /// Bind: make a portal from a prepared statement and parameter values.
    Bind {
        /// The destination portal ("" is the unnamed portal).
        portal: Bytes,
        /// The source prepared statement ("" is the unnamed statement).
        statement: Bytes,
        /// Parameter format codes (0 text, 1 binary).
        param_formats: Vec<i16>,
        /// Parameter values; `None` is SQL NULL.
        params: Vec<Option<Bytes>>,
        /// Result column format codes.
        result_formats: Vec<i16>,
    },
    /// Close: release a prepared statement or portal.
    Close {
        /// Statement or portal.
        target: Target,
        /// Its name.
        name: Bytes,
    },
    /// CopyData: a chunk of COPY FROM STDIN data.
    CopyData(Bytes),
    /// CopyDone: the end of COPY FROM STDIN data.
    CopyDone,
    /// CopyFail: the client aborts COPY FROM STDIN.
    CopyFail {
        /// Why.
        message: Bytes,
    },
    /// Describe: ask for a statement's or portal's parameter and row descriptions.
    Describe {
        /// Statement or portal.
        target: Target,
        /// Its name.
        name: Bytes,
    },
    /// Execute: run a portal, returning at most `max_rows` rows (0 = all).
    Execute {
        /// The portal.
        portal: Bytes,
        /// The row limit; a portal that hits it is suspended.
        max_rows: i32,
    },
    /// Flush: ask the server to send what it has buffered.
    Flush,
    /// FunctionCall: the legacy fast-path function call.
    FunctionCall {
        /// The function's OID.
        oid: u32,
        /// Argument format codes.
        arg_formats: Vec<i16>,
        /// Arguments; `None` is NULL.
        args: Vec<Option<Bytes>>,
        /// The result's format code.
        result_format: i16,
    },
    /// Parse: prepare a statement.
    Parse {
        /// The statement name ("" is the unnamed statement).
        name: Bytes,
        /// The SQL text.
        query: Bytes,
        /// Parameter type OIDs (0 = unspecified).
        param_types: Vec<u32>,
    },
    /// PasswordMessage, SASLInitialResponse, SASLResponse or GSSResponse: which one depends on the
    /// authentication request the server sent, so the body stays raw; see [`SaslInitialResponse`].
    Password(Bytes),
    /// Query: a simple-protocol query string, possibly holding several statements.
    Query {
        /// The SQL text.
        sql: Bytes,
    },
    /// Sync: end of an extended-protocol batch; the server answers ReadyForQuery.
    Sync,
    /// Terminate: the client is closing the connection.
    Terminate,
}

impl FrontendMessage {
    /// Decodes a whole frame sent by a client.
    pub fn decode(frame: &Frame) -> Result<Self, ProtocolError> {
        let body = frame.body();
        let msg = match frame.tag() {
            tag::BIND => {
                let mut c = Cursor::new("Bind", &body);
                let portal = c.cstr()?;
                let statement = c.cstr()?;
                let n = c.count16()?;
                let param_formats = (0..n).map(|_| c.i16()).collect::<Result<_, _>>()?;
                let n = c.count16()?;
                let params = (0..n).map(|_| c.nullable()).collect::<Result<_, _>>()?;
                let n = c.count16()?;
                let result_formats = (0..n).map(|_| c.i16()).collect::<Result<_, _>>()?;
                c.finish()?;
                FrontendMessage::Bind { portal, statement, param_formats, params, result_formats }
            }
            tag::CLOSE | tag::DESCRIBE => {
                let name = if frame.tag() == tag::CLOSE { "Close" } else { "Describe" };
                let mut c = Cursor::new(name, &body);
                let target = Target::from_byte(name, c.u8()?)?;
                let obj = c.cstr()?;
                c.finish()?;
                if frame.tag() == tag::CLOSE {
                    FrontendMessage::Close { target, name: obj }
                } else {
                    FrontendMessage::Describe { target, name: obj }
                }
            }
            tag::COPY_DATA => FrontendMessage::CopyData(body),
            tag::COPY_DONE => empty("CopyDone", &body, FrontendMessage::CopyDone)?,
            tag::COPY_FAIL => {
                let mut c = Cursor::new("CopyFail", &body);
                let message = c.cstr()?;
                c.finish()?;
                FrontendMessage::CopyFail { message }
            }
            tag::EXECUTE => {
                let mut c = Cursor::new("Execute", &body);
                let portal = c.cstr()?;
                let max_rows = c.i32()?;
                c.finish()?;
                FrontendMessage::Execute { portal, max_rows }
            }
            tag::FLUSH => empty("Flush", &body, FrontendMessage::Flush)?,
            tag::FUNCTION_CALL => {
                let mut c = Cursor::new("FunctionCall", &body);
                let oid = c.u32()?;
                let n = c.count16()?;
                let arg_formats = (0..n).map(|_| c.i16()).collect::<Result<_, _>>()?;
                let n = c.count16()?;
                let args = (0..n).map(|_| c.nullable()).collect::<Result<_, _>>()?;
                let result_format = c.i16()?;
                c.finish()?;
                FrontendMessage::FunctionCall { oid, arg_formats, args, result_format }
            }
            tag::PARSE => {
                let mut c = Cursor::new("Parse", &body);
                let name = c.cstr()?;
                let query = c.cstr()?;
                let n = c.count16()?;
                let param_types = (0..n).map(|_| c.u32()).collect::<Result<_, _>>()?;
                c.finish()?;
                FrontendMessage::Parse { name, query, param_types }
            }
            tag::PASSWORD => FrontendMessage::Password(body),
            tag::QUERY => {
                let mut c = Cursor::new("Query", &body);
                let sql = c.cstr()?;
                c.finish()?;
                FrontendMessage::Query { sql }
            }
            tag::SYNC => empty("Sync", &body, FrontendMessage::Sync)?,
            tag::TERMINATE => empty("Terminate", &body, FrontendMessage::Terminate)?,
            other => return Err(ProtocolError::UnknownTag { direction: "frontend", tag: char::from(other) }),
        };
        Ok(msg)
    }

    /// The message's type byte.
    pub fn tag(&self) -> u8 {
        match self {
            FrontendMessage::Bind { .. } => tag::BIND,
            FrontendMessage::Close { .. } => tag::CLOSE,
            FrontendMessage::CopyData(_) => tag::COPY_DATA,
            FrontendMessage::CopyDone => tag::COPY_DONE,
            FrontendMessage::CopyFail { .. } => tag::COPY_FAIL,
            FrontendMessage::Describe { .. } => tag::DESCRIBE,
            FrontendMessage::Execute { .. } => tag::EXECUTE,
            FrontendMessage::Flush => tag::FLUSH,
            FrontendMessage::FunctionCall { .. } => tag::FUNCTION_CALL,
            FrontendMessage::Parse { .. } => tag::PARSE,
            FrontendMessage::Password(_) => tag::PASSWORD,
            FrontendMessage::Query { .. } => tag::QUERY,
            FrontendMessage::Sync => tag::SYNC,
            FrontendMessage::Terminate => tag::TERMINATE,
        }
    }

    /// Encodes the message, tag and length included.
    pub fn encode(&self, dst: &mut BytesMut) {
        write_tagged(dst, self.tag(), |d| match self {
            FrontendMessage::Bind { portal, statement, param_formats, params, result_formats } => {
                put_cstr(d, portal);
                put_cstr(d, statement);
                put_count16(d, param_formats.len());
                param_formats.iter().for_each(|f| d.put_i16(*f));
                put_count16(d, params.len());
                params.iter().for_each(|p| put_nullable(d, p));
                put_count16(d, result_formats.len());
                result_formats.iter().for_each(|f| d.put_i16(*f));
            }
            FrontendMessage::Close { target, name } | FrontendMessage::Describe { target, name } => {
                d.put_u8(target.as_byte());
                put_cstr(d, name);
            }
            FrontendMessage::CopyData(data) => d.put_slice(data),
            FrontendMessage::CopyDone
            | FrontendMessage::Flush
            | FrontendMessage::Sync
            | FrontendMessage::Terminate => {}
            FrontendMessage::CopyFail { message } => put_cstr(d, message),
            FrontendMessage::Execute { portal, max_rows } => {
                put_cstr(d, portal);
                d.put_i32(*max_rows);
            }
            FrontendMessage::FunctionCall { oid, arg_formats, args, result_format } => {
                d.put_u32(*oid);
                put_count16(d, arg_formats.len());
                arg_formats.iter().for_each(|f| d.put_i16(*f));
                put_count16(d, args.len());
                args.iter().for_each(|a| put_nullable(d, a));
                d.put_i16(*result_format);
            }
            FrontendMessage::Parse { name, query, param_types } => {
                put_cstr(d, name);
                put_cstr(d, query);
                put_count16(d, param_types.len());
                param_types.iter().for_each(|t| d.put_u32(*t));
            }
            FrontendMessage::Password(body) => d.put_slice(body),
            FrontendMessage::Query { sql } => put_cstr(d, sql),
        });
    }
}

fn empty(name: &'static str, body: &Bytes, msg: FrontendMessage) -> Result<FrontendMessage, ProtocolError> {
    if body.is_empty() { Ok(msg) } else { Err(ProtocolError::TrailingBytes(name)) }
}

/// SASLInitialResponse: the mechanism the client chose and its first message (`None` when it sent length -1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslInitialResponse {
    /// The chosen mechanism, e.g. `SCRAM-SHA-256`.
    pub mechanism: Bytes,
    /// The client-first-message.
    pub data: Option<Bytes>,
}

impl SaslInitialResponse {
    /// Decodes the body of a `p` message sent in answer to AuthenticationSASL.
    pub fn decode(body: &Bytes) -> Result<Self, ProtocolError> {
        let mut c = Cursor::new("SASLInitialResponse", body);
        let mechanism = c.cstr()?;
        let data = c.nullable()?;
        c.finish()?;
        Ok(SaslInitialResponse { mechanism, data })
    }

    /// Encodes it as a whole `p` message.
    pub fn encode(&self, dst: &mut BytesMut) {
        write_tagged(dst, tag::PASSWORD, |d| {
            put_cstr(d, &self.mechanism);
            put_nullable(d, &self.data);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::split_frame;

    fn b(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    fn roundtrip(m: FrontendMessage) {
        let mut buf = BytesMut::new();
        m.encode(&mut buf);
        let frame = split_frame(&mut buf, 1 << 20).unwrap().unwrap();
        assert!(buf.is_empty());
        assert_eq!(FrontendMessage::decode(&frame).unwrap(), m);
    }

    #[test]
    fn every_frontend_message_roundtrips() {
        let msgs = vec![
            FrontendMessage::Bind {
                portal: b("p1"),
                statement: b("s1"),
                param_formats: vec![0, 1],
                params: vec![Some(b("42")), None],
                result_formats: vec![1],
            },
            FrontendMessage::Close { target: Target::Statement, name: b("s1") },
            FrontendMessage::Close { target: Target::Portal, name: b("") },
            FrontendMessage::CopyData(b("1\tone\n")),
            FrontendMessage::CopyDone,
            FrontendMessage::CopyFail { message: b("client gave up") },
            FrontendMessage::Describe { target: Target::Portal, name: b("p1") },
            FrontendMessage::Execute { portal: b(""), max_rows: 10 },
            FrontendMessage::Flush,
            FrontendMessage::FunctionCall {
                oid: 1598,
                arg_formats: vec![0],
                args: vec![None, Some(b("x"))],
                result_format: 1,
            },
            FrontendMessage::Parse { name: b("s1"), query: b("select $1::int"), param_types: vec![23] },
            FrontendMessage::Password(b("secret\0")),
            FrontendMessage::Query { sql: b("begin; select 1; commit") },
            FrontendMessage::Sync,
            FrontendMessage::Terminate,
        ];
        for m in msgs {
            roundtrip(m);
        }
    }

    #[test]
    fn malformed_frontend_messages_are_errors_not_panics() {
        for raw in [
            &b"B\0\0\0\x06p\0"[..],                      // Bind cut after the portal name
            &b"E\0\0\0\x06p\0"[..],                      // Execute without max_rows
            &b"D\0\0\0\x08Xab\0"[..],                    // Describe with an unknown target
            &b"B\0\0\0\x0d\0\0\0\x01\0\0\0\x01\xff"[..], // Bind with a truncated value
            &b"Q\0\0\0\x07abc"[..],                      // Query without its NUL
            &b"S\0\0\0\x05x"[..],                        // Sync with a body
            &b"Z\0\0\0\x04"[..],                         // a backend tag sent by a client
        ] {
            let frame = Frame::from_raw(Bytes::copy_from_slice(raw)).unwrap();
            assert!(FrontendMessage::decode(&frame).is_err(), "{raw:?} decoded");
        }
    }

    #[test]
    fn sasl_initial_response_roundtrips() {
        let m = SaslInitialResponse { mechanism: b("SCRAM-SHA-256"), data: Some(b("n,,n=,r=abc")) };
        let mut buf = BytesMut::new();
        m.encode(&mut buf);
        let frame = split_frame(&mut buf, 1024).unwrap().unwrap();
        assert_eq!(SaslInitialResponse::decode(&frame.body()).unwrap(), m);
    }
}
