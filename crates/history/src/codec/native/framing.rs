//! Chunk framing, both ways: the writer's chunk builder and the reader's checksummed chunk walker, with the
//! cursor wrapper that turns short or malformed bytes into [`NativeError`]s at their offsets.

use super::{CHUNK_TARGET, MAGIC, NativeError, NativeErrorKind, OLDEST_VERSION, TAG_END, VERSION};
use crate::codec::bytes::{Cursor, CursorError, put_varint};

fn cursor_error(offset: u64, e: CursorError) -> NativeError {
    match e {
        CursorError::End { what, needed, left } => {
            NativeError::at(offset, NativeErrorKind::Truncated { what, needed, left })
        }
        CursorError::VarintOverflow => NativeError::at(offset, NativeErrorKind::VarintOverflow),
    }
}

/// Reads through a [`Cursor`] and turns its errors into [`NativeError`]s at the offset of the failed read.
pub(super) struct Rd<'a> {
    pub(super) c: Cursor<'a>,
}

impl<'a> Rd<'a> {
    pub(super) fn offset(&self) -> u64 {
        self.c.offset()
    }
    pub(super) fn varint(&mut self, what: &'static str) -> Result<u64, NativeError> {
        let at = self.c.offset();
        self.c.varint(what).map_err(|e| cursor_error(at, e))
    }
    pub(super) fn u8(&mut self, what: &'static str) -> Result<u8, NativeError> {
        let at = self.c.offset();
        self.c.u8(what).map_err(|e| cursor_error(at, e))
    }
    pub(super) fn u64_le(&mut self, what: &'static str) -> Result<u64, NativeError> {
        let at = self.c.offset();
        self.c.u64_le(what).map_err(|e| cursor_error(at, e))
    }
    pub(super) fn bytes(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], NativeError> {
        let at = self.c.offset();
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        self.c.bytes(n, what).map_err(|e| cursor_error(at, e))
    }
    pub(super) fn string(&mut self, what: &'static str) -> Result<String, NativeError> {
        let len = self.varint(what)?;
        let at = self.c.offset();
        let bytes = self.bytes(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| NativeError::invalid(at, format!("{what} is not valid UTF-8")))
    }
    /// A varint that must fit a u32.
    pub(super) fn varint_u32(&mut self, what: &'static str) -> Result<u32, NativeError> {
        let at = self.c.offset();
        let v = self.varint(what)?;
        u32::try_from(v).map_err(|_| NativeError::invalid(at, format!("{what} {v} does not fit 32 bits")))
    }
}

/// Collects items into chunks of about [`CHUNK_TARGET`] bytes.
pub(super) struct ChunkWriter {
    pub(super) out: Vec<u8>,
    pub(super) buf: Vec<u8>,
    /// The format version the checksums are computed for.
    pub(super) version: u8,
}

/// The checksum of a chunk in a file of format `version`.
fn chunk_checksum(version: u8, tag: u8, payload: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    if version >= 3 {
        crc.update(&[version]);
    }
    crc.update(&[tag]);
    crc.update(payload);
    crc.finalize()
}

impl ChunkWriter {
    pub(super) fn flush(&mut self, tag: u8) {
        self.out.push(tag);
        put_varint(&mut self.out, self.buf.len() as u64);
        let crc = chunk_checksum(self.version, tag, &self.buf);
        self.out.extend_from_slice(&self.buf);
        self.out.extend_from_slice(&crc.to_le_bytes());
        self.buf.clear();
    }
    pub(super) fn item_done(&mut self, tag: u8) {
        if self.buf.len() >= CHUNK_TARGET {
            self.flush(tag);
        }
    }
    pub(super) fn section_done(&mut self, tag: u8) {
        if !self.buf.is_empty() {
            self.flush(tag);
        }
    }
}

/// Walks the chunks of a native file.
pub(super) struct Chunks<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
    /// The file's format version, which the checksums cover from version 3.
    pub(super) version: u8,
}

impl<'a> Chunks<'a> {
    pub(super) fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// The next chunk, which must carry `expected`; its checksum is verified before its payload is read.
    /// Errors in the chunk's framing name the offset where the chunk starts.
    pub(super) fn next(&mut self, expected: u8) -> Result<Rd<'a>, NativeError> {
        let start = self.pos;
        let at_start = |e: NativeError| NativeError { offset: start as u64, ..e };
        let mut head = Rd { c: Cursor::new(&self.data[start..], start as u64) };
        let tag = head.u8("a chunk tag")?;
        if tag != expected {
            return Err(NativeError::at(
                start as u64,
                NativeErrorKind::UnexpectedChunk { expected: char::from(expected), found: tag },
            ));
        }
        let len = head.varint("a chunk length").map_err(at_start)?;
        let payload_at = head.offset();
        let payload = head.bytes(len, "the chunk starting here").map_err(at_start)?;
        let stored = head.bytes(4, "the chunk's checksum").map_err(at_start)?;
        let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
        let computed = chunk_checksum(self.version, tag, payload);
        if stored != computed && (OLDEST_VERSION..=VERSION).any(|v| chunk_checksum(v, tag, payload) == stored)
        {
            // The chunk is whole under another version's rule: the version byte is what changed.
            return Err(NativeError::invalid(
                MAGIC.len() as u64,
                format!(
                    "the format version byte says {}, but the chunks were written by another version: the file \
                     is corrupt",
                    self.version
                ),
            ));
        }
        if stored != computed {
            return Err(NativeError::at(
                start as u64,
                NativeErrorKind::Checksum { tag: char::from(tag), len, stored, computed },
            ));
        }
        self.pos = head.offset() as usize;
        Ok(Rd { c: Cursor::new(payload, payload_at) })
    }

    /// Reads a section of `count` items spread over chunks tagged `tag`. `item` decodes one or more items
    /// from the front of a chunk and says how many.
    pub(super) fn section(
        &mut self,
        tag: u8,
        count: u64,
        mut item: impl FnMut(&mut Rd<'a>, u64) -> Result<u64, NativeError>,
    ) -> Result<(), NativeError> {
        let mut done = 0u64;
        while done < count {
            let mut chunk = self.next(tag)?;
            if chunk.c.is_empty() {
                return Err(NativeError::invalid(chunk.offset(), "an empty chunk"));
            }
            while !chunk.c.is_empty() {
                let at = chunk.offset();
                let n = item(&mut chunk, count - done)?;
                done += n;
                if done > count {
                    return Err(NativeError::invalid(
                        at,
                        format!("the '{}' section holds more items than the {count} announced", tag as char),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Builds a file from raw chunk payloads, each framed with a valid checksum and followed by the end chunk.
/// The checksums make random bytes fail early; this lets fuzzers and tests reach the checks behind them.
pub fn frame_chunks(chunks: &[(u8, &[u8])]) -> Vec<u8> {
    frame_chunks_as(VERSION, chunks)
}

/// As [`frame_chunks`], for a file that says it is of format `version` (to test that older versions
/// still read).
pub fn frame_chunks_as(version: u8, chunks: &[(u8, &[u8])]) -> Vec<u8> {
    let mut w = ChunkWriter { out: MAGIC.to_vec(), buf: Vec::new(), version };
    w.out.push(version);
    for (tag, payload) in chunks {
        w.buf.extend_from_slice(payload);
        w.flush(*tag);
    }
    w.flush(TAG_END);
    w.out
}
