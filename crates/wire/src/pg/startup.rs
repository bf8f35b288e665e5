//! The untagged first message of a connection (protocol docs, "Start-up" and "Message Formats"). Its first i32
//! after the length is a protocol version or one of the special request codes.

use bytes::{BufMut, Bytes, BytesMut};

use super::ProtocolError;
use super::cursor::{Cursor, put_cstr, write_untagged};

/// The request code of an SSLRequest (1234 << 16 | 5679).
pub const SSL_REQUEST_CODE: i32 = 80_877_103;
/// The request code of a GSSENCRequest (1234 << 16 | 5680).
pub const GSSENC_REQUEST_CODE: i32 = 80_877_104;
/// The request code of a CancelRequest (1234 << 16 | 5678).
pub const CANCEL_REQUEST_CODE: i32 = 80_877_102;
/// Protocol version 3.0 as it appears in a StartupMessage.
pub const PROTOCOL_3_0: i32 = 196_608;

/// One startup-phase packet from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupPacket {
    /// StartupMessage: the protocol version and the connection parameters (`user`, `database`, ...), in order.
    Startup {
        /// Major version (3 for every protocol this codec speaks).
        major: u16,
        /// Minor version; a server that speaks an older one answers NegotiateProtocolVersion.
        minor: u16,
        /// Name/value pairs, in the order sent.
        params: Vec<(Bytes, Bytes)>,
    },
    /// SSLRequest: the client asks for TLS; the server answers one byte, `S` or `N`.
    SslRequest,
    /// GSSENCRequest: the client asks for GSSAPI encryption; the server answers `G` or `N`.
    GssEncRequest,
    /// CancelRequest: cancel the query running on the backend with this process id and secret key.
    CancelRequest {
        /// The backend's process id, from BackendKeyData.
        pid: i32,
        /// The secret key, from BackendKeyData (4 bytes in protocol 3.0).
        secret: Bytes,
    },
}

impl StartupPacket {
    /// Decodes a packet body (after the length field, as [`super::split_startup`] returns it).
    pub fn decode(body: &Bytes) -> Result<Self, ProtocolError> {
        let mut c = Cursor::new("startup packet", body);
        let code = c.i32()?;
        let packet = match code {
            SSL_REQUEST_CODE => StartupPacket::SslRequest,
            GSSENC_REQUEST_CODE => StartupPacket::GssEncRequest,
            CANCEL_REQUEST_CODE => {
                let pid = c.i32()?;
                let secret = c.rest();
                if secret.is_empty() || secret.len() > 256 {
                    return Err(ProtocolError::invalid("CancelRequest", "secret key must be 1 to 256 bytes"));
                }
                StartupPacket::CancelRequest { pid, secret }
            }
            version => {
                let (major, minor) = ((version >> 16) as u16, (version & 0xffff) as u16);
                if major != 3 {
                    return Err(ProtocolError::invalid(
                        "StartupMessage",
                        format!("unsupported protocol version {major}.{minor}"),
                    ));
                }
                let mut params = Vec::new();
                loop {
                    let name = c.cstr()?;
                    if name.is_empty() {
                        break;
                    }
                    let value = c.cstr()?;
                    params.push((name, value));
                }
                StartupPacket::Startup { major, minor, params }
            }
        };
        c.finish()?;
        Ok(packet)
    }

    /// Encodes the packet with its length prefix.
    pub fn encode(&self, dst: &mut BytesMut) {
        write_untagged(dst, |d| match self {
            StartupPacket::SslRequest => d.put_i32(SSL_REQUEST_CODE),
            StartupPacket::GssEncRequest => d.put_i32(GSSENC_REQUEST_CODE),
            StartupPacket::CancelRequest { pid, secret } => {
                d.put_i32(CANCEL_REQUEST_CODE);
                d.put_i32(*pid);
                d.put_slice(secret);
            }
            StartupPacket::Startup { major, minor, params } => {
                d.put_u16(*major);
                d.put_u16(*minor);
                for (name, value) in params {
                    put_cstr(d, name);
                    put_cstr(d, value);
                }
                d.put_u8(0);
            }
        });
    }

    /// The value of a startup parameter, such as `user` or `database`.
    pub fn param(&self, name: &str) -> Option<&Bytes> {
        match self {
            StartupPacket::Startup { params, .. } => {
                params.iter().find(|(n, _)| n.as_ref() == name.as_bytes()).map(|(_, v)| v)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(p: StartupPacket) {
        let mut buf = BytesMut::new();
        p.encode(&mut buf);
        let body = crate::pg::split_startup(&mut buf, 10_000).unwrap().unwrap();
        assert_eq!(StartupPacket::decode(&body).unwrap(), p);
    }

    #[test]
    fn every_startup_packet_roundtrips() {
        roundtrip(StartupPacket::SslRequest);
        roundtrip(StartupPacket::GssEncRequest);
        roundtrip(StartupPacket::CancelRequest { pid: 42, secret: Bytes::from_static(b"\x01\x02\x03\x04") });
        roundtrip(StartupPacket::Startup {
            major: 3,
            minor: 0,
            params: vec![
                (Bytes::from_static(b"user"), Bytes::from_static(b"alice")),
                (Bytes::from_static(b"database"), Bytes::from_static(b"shop")),
            ],
        });
    }

    #[test]
    fn startup_params_are_found_by_name() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&PROTOCOL_3_0.to_be_bytes());
        buf.extend_from_slice(b"user\0bob\0application_name\0psql\0\0");
        let p = StartupPacket::decode(&buf.freeze()).unwrap();
        assert_eq!(p.param("user").unwrap().as_ref(), b"bob");
        assert_eq!(p.param("database"), None);
    }

    #[test]
    fn protocol_2_and_missing_terminators_are_refused() {
        let v2 = Bytes::from_static(b"\0\x02\0\0user\0x\0\0");
        assert!(matches!(StartupPacket::decode(&v2), Err(ProtocolError::Invalid { .. })));
        let unterminated = Bytes::from_static(b"\0\x03\0\0user\0x");
        assert_eq!(StartupPacket::decode(&unterminated), Err(ProtocolError::Truncated("startup packet")));
    }
}
