//! The PostgreSQL frontend/backend protocol, version 3.0 (PostgreSQL docs, "Frontend/Backend Protocol").
//!
//! Bytes travel through this module in three steps:
//! 1. [`frame`] splits a byte stream into whole messages. A partial message is *incomplete* (`Ok(None)`), an
//!    expected state while the rest is in flight; a declared length that is negative or over the configured
//!    limit is an error, and the connection that sent it must be closed because the stream can no longer be
//!    resynchronised.
//! 2. [`startup`] decodes the untagged first message of a connection: StartupMessage, SSLRequest,
//!    GSSENCRequest or CancelRequest.
//! 3. [`frontend`] and [`backend`] decode and encode the tagged messages, one type per message, each named as
//!    the protocol documentation names it.
//!
//! No function here panics on bad input: every parser returns [`ProtocolError`].

pub mod backend;
mod cursor;
pub mod frame;
pub mod frontend;
pub mod startup;

pub use backend::BackendMessage;
pub use frame::{Frame, split_frame, split_startup};
pub use frontend::FrontendMessage;
pub use startup::StartupPacket;

/// The default cap on one message's length (1 GiB is PostgreSQL's own hard limit; proxies should use less).
pub const DEFAULT_MAX_MESSAGE_LEN: usize = 64 * 1024 * 1024;

/// PostgreSQL refuses startup packets longer than this (`MAX_STARTUP_PACKET_LENGTH` in the server).
pub const MAX_STARTUP_LEN: usize = 10_000;

/// PostgreSQL refuses a password, SASL or GSS message whose body is longer than 65,535 bytes
/// (`PG_MAX_AUTH_TOKEN_LENGTH`): this is that limit for a whole message (tag, length and body).
pub const MAX_AUTH_MESSAGE_LEN: usize = 65_535 + 5;

/// Why bytes could not be decoded as a protocol message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A message declared a length over the configured limit.
    #[error("message of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The length the message declared.
        len: usize,
        /// The limit in force.
        max: usize,
    },
    /// A message declared a length smaller than its own length field.
    #[error("invalid message length {0}")]
    BadLength(i64),
    /// The tag byte names no message of this direction.
    #[error("unknown {direction} message type {tag:?}")]
    UnknownTag {
        /// "frontend" or "backend".
        direction: &'static str,
        /// The offending tag, shown as a character.
        tag: char,
    },
    /// The body ended before a field was complete.
    #[error("{0}: message body is truncated")]
    Truncated(&'static str),
    /// The body has bytes left after the last field.
    #[error("{0}: unexpected bytes after the last field")]
    TrailingBytes(&'static str),
    /// A field holds a value the protocol does not allow.
    #[error("{message}: {reason}")]
    Invalid {
        /// The message being decoded.
        message: &'static str,
        /// What was wrong.
        reason: String,
    },
}

impl ProtocolError {
    /// An [`ProtocolError::Invalid`] for `message` with the given reason.
    pub fn invalid(message: &'static str, reason: impl Into<String>) -> Self {
        ProtocolError::Invalid { message, reason: reason.into() }
    }
}

/// The transaction status a ReadyForQuery message reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnStatus {
    /// `I`: not in a transaction block.
    Idle,
    /// `T`: in a transaction block.
    InTransaction,
    /// `E`: in a failed transaction block; queries are rejected until the block ends.
    Failed,
}

impl TxnStatus {
    /// The status byte on the wire.
    pub fn as_byte(self) -> u8 {
        match self {
            TxnStatus::Idle => b'I',
            TxnStatus::InTransaction => b'T',
            TxnStatus::Failed => b'E',
        }
    }

    /// Parses the status byte.
    pub fn from_byte(b: u8) -> Result<Self, ProtocolError> {
        match b {
            b'I' => Ok(TxnStatus::Idle),
            b'T' => Ok(TxnStatus::InTransaction),
            b'E' => Ok(TxnStatus::Failed),
            other => {
                Err(ProtocolError::invalid("ReadyForQuery", format!("unknown status byte {other:#04x}")))
            }
        }
    }
}

/// Whether a Describe or Close names a prepared statement or a portal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// `S`: a prepared statement.
    Statement,
    /// `P`: a portal.
    Portal,
}

impl Target {
    pub(crate) fn as_byte(self) -> u8 {
        match self {
            Target::Statement => b'S',
            Target::Portal => b'P',
        }
    }

    pub(crate) fn from_byte(message: &'static str, b: u8) -> Result<Self, ProtocolError> {
        match b {
            b'S' => Ok(Target::Statement),
            b'P' => Ok(Target::Portal),
            other => Err(ProtocolError::invalid(message, format!("unknown target {other:#04x}"))),
        }
    }
}

/// Shows protocol text (SQL, names, error messages) for logs: PostgreSQL strings are bytes in the client
/// encoding, almost always UTF-8; anything else is shown lossily.
pub fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}
