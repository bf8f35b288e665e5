//! A bounds-checked reader over one message body, and the writer helpers that mirror it. Every read that would
//! run past the end returns [`ProtocolError::Truncated`] naming the message, so no parser can panic.

use bytes::{BufMut, Bytes, BytesMut};

use super::ProtocolError;

/// Reads the fields of one message body in order, handing out zero-copy slices of it.
pub(crate) struct Cursor {
    buf: Bytes,
    pos: usize,
    message: &'static str,
}

impl Cursor {
    pub(crate) fn new(message: &'static str, buf: &Bytes) -> Self {
        Cursor { buf: buf.clone(), pos: 0, message }
    }

    fn take(&mut self, n: usize) -> Result<Bytes, ProtocolError> {
        let (start, end) = self.advance(n)?;
        Ok(self.buf.slice(start..end))
    }

    /// The next `N` bytes, copied: a fixed-size field is read without a shared slice of the body (each
    /// [`Bytes`] slice counts a reference up and down again, per integer field of every message).
    fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtocolError> {
        let (start, end) = self.advance(N)?;
        let mut out = [0; N];
        out.copy_from_slice(&self.buf[start..end]);
        Ok(out)
    }

    /// Moves past the next `n` bytes; returns where they start and end.
    fn advance(&mut self, n: usize) -> Result<(usize, usize), ProtocolError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(ProtocolError::Truncated(self.message))?;
        let start = std::mem::replace(&mut self.pos, end);
        Ok((start, end))
    }

    pub(crate) fn u8(&mut self) -> Result<u8, ProtocolError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn i16(&mut self) -> Result<i16, ProtocolError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, ProtocolError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, ProtocolError> {
        Ok(self.i32()? as u32)
    }

    /// A count field (i16) that must not be negative.
    pub(crate) fn count16(&mut self) -> Result<usize, ProtocolError> {
        let n = self.i16()?;
        usize::try_from(n).map_err(|_| ProtocolError::invalid(self.message, format!("negative count {n}")))
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<Bytes, ProtocolError> {
        self.take(n)
    }

    /// A NUL-terminated string, without its terminator.
    pub(crate) fn cstr(&mut self) -> Result<Bytes, ProtocolError> {
        let rest = &self.buf[self.pos..];
        let nul = rest.iter().position(|&b| b == 0).ok_or(ProtocolError::Truncated(self.message))?;
        let s = self.take(nul)?;
        self.pos += 1;
        Ok(s)
    }

    /// A length-prefixed value where -1 means NULL (DataRow, Bind, FunctionCall).
    pub(crate) fn nullable(&mut self) -> Result<Option<Bytes>, ProtocolError> {
        let n = self.i32()?;
        if n == -1 {
            return Ok(None);
        }
        let n = usize::try_from(n)
            .map_err(|_| ProtocolError::invalid(self.message, format!("invalid value length {n}")))?;
        Ok(Some(self.take(n)?))
    }

    /// Everything not read yet.
    pub(crate) fn rest(&mut self) -> Bytes {
        let out = self.buf.slice(self.pos..);
        self.pos = self.buf.len();
        out
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Fails unless the whole body was consumed.
    pub(crate) fn finish(self) -> Result<(), ProtocolError> {
        if self.pos == self.buf.len() { Ok(()) } else { Err(ProtocolError::TrailingBytes(self.message)) }
    }
}

/// Writes a tagged message: the tag, a length placeholder, the body from `body`, then the real length.
pub(crate) fn write_tagged(dst: &mut BytesMut, tag: u8, body: impl FnOnce(&mut BytesMut)) {
    dst.put_u8(tag);
    write_untagged(dst, body);
}

/// Writes a length-prefixed message without a tag (the startup packets).
pub(crate) fn write_untagged(dst: &mut BytesMut, body: impl FnOnce(&mut BytesMut)) {
    let at = dst.len();
    dst.put_i32(0);
    body(dst);
    // Lengths beyond i32 cannot be produced by our own callers (bodies come from decoded, bounded frames).
    let len = i32::try_from(dst.len() - at).unwrap_or(i32::MAX);
    dst[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

pub(crate) fn put_cstr(dst: &mut BytesMut, s: &[u8]) {
    dst.put_slice(s);
    dst.put_u8(0);
}

pub(crate) fn put_nullable(dst: &mut BytesMut, v: &Option<Bytes>) {
    match v {
        None => dst.put_i32(-1),
        Some(b) => {
            dst.put_i32(i32::try_from(b.len()).unwrap_or(i32::MAX));
            dst.put_slice(b);
        }
    }
}

/// Writes an i16 count; the lists we encode come from decoded messages, whose counts were i16 already.
pub(crate) fn put_count16(dst: &mut BytesMut, n: usize) {
    dst.put_i16(i16::try_from(n).unwrap_or(i16::MAX));
}
