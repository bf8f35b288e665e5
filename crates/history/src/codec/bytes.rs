//! LEB128 varints and a byte cursor that knows its absolute offset, so that every decoding error can name the
//! byte where it happened.

/// Appends `v` as an unsigned LEB128 varint (7 bits a byte, low bits first).
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The number of bytes [`put_varint`] writes for `v`.
pub(crate) fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Maps a signed delta to an unsigned one so that small magnitudes of either sign stay short.
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Why a cursor could not read what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CursorError {
    /// The input ended `needed` bytes short while reading `what`.
    End { what: &'static str, needed: usize, left: usize },
    /// A varint ran past 64 bits.
    VarintOverflow,
}

/// Reads from a byte slice that starts at absolute offset `base` of the file.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Cursor<'a> {
    /// A cursor over `buf`, whose first byte is at absolute offset `base`.
    pub(crate) fn new(buf: &'a [u8], base: u64) -> Self {
        Cursor { buf, pos: 0, base }
    }

    /// The absolute offset of the next byte.
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Whether every byte was consumed.
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// How many bytes are left.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes.
    pub(crate) fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], CursorError> {
        let left = self.remaining();
        if n > left {
            return Err(CursorError::End { what, needed: n, left });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// The next byte.
    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, CursorError> {
        Ok(self.bytes(1, what)?[0])
    }

    /// A fixed-width little-endian u64.
    pub(crate) fn u64_le(&mut self, what: &'static str) -> Result<u64, CursorError> {
        let b = self.bytes(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// An unsigned LEB128 varint of at most 64 bits.
    pub(crate) fn varint(&mut self, what: &'static str) -> Result<u64, CursorError> {
        let mut v: u64 = 0;
        let mut shift = 0u32;
        loop {
            let b = self.u8(what)?;
            let low = u64::from(b & 0x7f);
            // The tenth byte may only carry the 64th bit.
            if shift == 63 && low > 1 {
                return Err(CursorError::VarintOverflow);
            }
            v |= low << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err(CursorError::VarintOverflow);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_roundtrip_at_the_edges() {
        for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX - 1, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            let mut c = Cursor::new(&out, 0);
            assert_eq!(c.varint("v"), Ok(v));
            assert!(c.is_empty());
        }
    }

    #[test]
    fn overlong_varint_is_an_error() {
        let bytes = [0xff; 11];
        assert_eq!(Cursor::new(&bytes, 0).varint("v"), Err(CursorError::VarintOverflow));
        let bytes = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(Cursor::new(&bytes, 0).varint("v"), Err(CursorError::VarintOverflow));
    }

    #[test]
    fn zigzag_roundtrips() {
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }
}
