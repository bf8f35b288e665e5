//! Splitting a byte stream into whole messages, before any decoding.
//!
//! A tagged message is one tag byte, then an i32 length that counts itself and the body but not the tag. The
//! splitter checks the length before waiting for the body, so an oversized message is refused as soon as its
//! header arrives, without buffering it. A frame keeps the original bytes: forwarding a message is a copy of
//! what the peer sent, never a re-encoding.

use bytes::{Bytes, BytesMut};

use super::ProtocolError;

/// One whole tagged message, as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    raw: Bytes,
}

impl Frame {
    /// Wraps the bytes of one whole message (tag, length, body). Fails if the length field disagrees.
    pub fn from_raw(raw: Bytes) -> Result<Self, ProtocolError> {
        if raw.len() < 5 {
            return Err(ProtocolError::Truncated("message header"));
        }
        let len = i32::from_be_bytes([raw[1], raw[2], raw[3], raw[4]]);
        if usize::try_from(len).ok() != Some(raw.len() - 1) {
            return Err(ProtocolError::BadLength(i64::from(len)));
        }
        Ok(Frame { raw })
    }

    /// The message type byte.
    pub fn tag(&self) -> u8 {
        self.raw[0]
    }

    /// The body, after the tag and length.
    pub fn body(&self) -> Bytes {
        self.raw.slice(5..)
    }

    /// The whole message as it arrived, ready to forward.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The whole message's length in bytes, tag included.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Always false: a frame holds at least its tag and length. Present for API symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }
}

/// Takes one whole tagged message off the front of `buf`.
///
/// Returns `Ok(None)` when `buf` holds only part of a message: read more and call again. Returns an error when
/// the declared length is below 4 or the message would exceed `max_len` bytes; the stream cannot be
/// resynchronised after that, so the caller must close the connection.
pub fn split_frame(buf: &mut BytesMut, max_len: usize) -> Result<Option<Frame>, ProtocolError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let declared = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    let body_and_len = usize::try_from(declared)
        .ok()
        .filter(|&n| n >= 4)
        .ok_or(ProtocolError::BadLength(i64::from(declared)))?;
    let total = body_and_len + 1;
    if total > max_len {
        return Err(ProtocolError::TooLarge { len: total, max: max_len });
    }
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    Ok(Some(Frame { raw: buf.split_to(total).freeze() }))
}

/// Takes one whole untagged startup packet (length, then body) off the front of `buf`, returning the body
/// after the length field. Same contract as [`split_frame`], with `max_len` covering the length field.
pub fn split_startup(buf: &mut BytesMut, max_len: usize) -> Result<Option<Bytes>, ProtocolError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let declared = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    // The shortest packet is the 8-byte SSLRequest: length plus a request code.
    let total = usize::try_from(declared)
        .ok()
        .filter(|&n| n >= 8)
        .ok_or(ProtocolError::BadLength(i64::from(declared)))?;
    if total > max_len {
        return Err(ProtocolError::TooLarge { len: total, max: max_len });
    }
    if buf.len() < total {
        return Ok(None);
    }
    let mut packet = buf.split_to(total).freeze();
    Ok(Some(packet.split_off(4)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_input_is_incomplete_not_an_error() {
        let whole = b"Q\0\0\0\x0dselect 1\0";
        for cut in 0..whole.len() {
            let mut buf = BytesMut::from(&whole[..cut]);
            assert_eq!(split_frame(&mut buf, 1024), Ok(None), "cut at {cut}");
            assert_eq!(buf.len(), cut, "an incomplete frame must not consume input");
        }
        let mut buf = BytesMut::from(&whole[..]);
        let frame = split_frame(&mut buf, 1024).unwrap().unwrap();
        assert_eq!(frame.tag(), b'Q');
        assert_eq!(&frame.body()[..], b"select 1\0");
        assert_eq!(frame.raw().as_ref(), whole);
        assert!(buf.is_empty());
    }

    #[test]
    fn two_messages_in_one_read_split_in_order() {
        let mut buf = BytesMut::from(&b"S\0\0\0\x04H\0\0\0\x04X"[..]);
        assert_eq!(split_frame(&mut buf, 64).unwrap().unwrap().tag(), b'S');
        assert_eq!(split_frame(&mut buf, 64).unwrap().unwrap().tag(), b'H');
        assert_eq!(split_frame(&mut buf, 64).unwrap(), None);
        assert_eq!(&buf[..], b"X");
    }

    #[test]
    fn oversized_message_is_refused_from_its_header_alone() {
        let mut buf = BytesMut::from(&b"d\x7f\xff\xff\xff"[..]);
        assert_eq!(
            split_frame(&mut buf, 1 << 20),
            Err(ProtocolError::TooLarge { len: 0x7fff_ffff + 1, max: 1 << 20 })
        );
    }

    #[test]
    fn length_below_four_is_an_error() {
        for len in [-1i32, 0, 3] {
            let mut buf = BytesMut::from(&b"Q"[..]);
            buf.extend_from_slice(&len.to_be_bytes());
            assert_eq!(split_frame(&mut buf, 64), Err(ProtocolError::BadLength(i64::from(len))));
        }
    }

    #[test]
    fn startup_packet_split_and_limits() {
        let mut buf = BytesMut::from(&b"\0\0\0\x08\x04\xd2\x16\x2f"[..]);
        assert_eq!(split_startup(&mut buf, 10_000).unwrap().unwrap().as_ref(), b"\x04\xd2\x16\x2f");
        let mut buf = BytesMut::from(&b"\0\0\x30\x00"[..]);
        assert!(matches!(split_startup(&mut buf, 10_000), Err(ProtocolError::TooLarge { .. })));
        let mut buf = BytesMut::from(&b"\0\0\0\x07"[..]);
        assert_eq!(split_startup(&mut buf, 10_000), Err(ProtocolError::BadLength(7)));
        let mut buf = BytesMut::from(&b"\0\0\0\x09abcd"[..]);
        assert_eq!(split_startup(&mut buf, 10_000), Ok(None));
    }
}
