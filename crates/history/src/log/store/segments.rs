//! [`SegmentStore`]: the log's own storage engine. Records are length-prefixed frames appended to segment
//! files; metadata are small files replaced by rename.
//!
//! # Layout of a log directory
//!
//! - `LOCK`: held with an exclusive `flock(2)` while the log is open; a reader's copy probe takes it shared.
//! - `segments/<first sequence number, 20 digits>.seg`: [`SEGMENT_MAGIC`], then frames: the record's length
//!   (u32, little-endian), then the record as [`crate::LogRecord::encode`] made it (version byte, CRC-32,
//!   payload). A segment holds consecutive records and the next one starts where it ends; a new segment is
//!   begun once the current one holds [`SEGMENT_BYTES`] (or as configured).
//! - `meta/<key>`: one file per metadata key, written as `<key>.tmp`, fsynced, renamed over the old one and
//!   its folder fsynced, so a key always holds either its old or its new value.
//!
//! # Why not sled
//!
//! A history log is appended at its end and read in order; sled is a B-tree with a page cache, and on the
//! proxy's path its inserts (page-cache work, node copies, its LRU) and its seven io threads were about a
//! tenth of the proxy's CPU, and its folder 3–4× the records it held (`docs/proxy-cost.md`). Here an append
//! is a copy into a buffer.
//!
//! # When bytes reach the disk
//!
//! Appends go to a buffer under the writer's lock, and reach the file when it fills ([`WRITE_OUT_BYTES`]),
//! when someone reads the records (so a tail sees every append), and when the group-commit flusher asks for an
//! fsync: [`Store::flush`] writes the buffer out under the lock and runs `fdatasync` after letting it go, so
//! appends go on during the fsync, which covers every record appended before the flush began. A segment is
//! fsynced when the next one begins, and the folder when a file is created in it.
//!
//! # What a crash can leave, and what opening does with it
//!
//! Only the end of the last segment can be torn: a crash stops the writer part way through a write, and what
//! an fsync covered stays whole. Opening reads every frame's length (building the index `records_from` seeks
//! with) and checks the checksum of the last frame. When the previous run did not close cleanly, an
//! incomplete last frame, or a last frame whose checksum fails, is cut ([`Store::recover_torn_tail`]):
//! under `strict` no such record was acknowledged, since an acknowledgement waits for the fsync that covers
//! it. In a log that was closed cleanly the same is damage, and opening fails saying where. A record whose
//! length is sound but whose checksum fails anywhere else is left in place, for readers to report
//! ([`LogError::Corrupt`]).

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{LockMode, SegmentInfo, Store, StoredRecords, lock_waiting};
use crate::log::LogError;
use crate::log::disk_log::{create_private_dir, open_error};
use crate::log::record::{HEADER_LEN, MAX_PAYLOAD_BYTES, header_checks_out};

/// The folder of segment files.
pub const SEGMENTS_DIR: &str = "segments";
/// The folder of metadata files.
pub const META_DIR: &str = "meta";
/// The file whose lock marks the log open.
pub const LOCK_FILE: &str = "LOCK";
/// What every segment file starts with.
pub const SEGMENT_MAGIC: &[u8; 16] = b"krait-segment 1\n";
/// A new segment is begun once the current one holds this many bytes, by default
/// ([`crate::log::LogOptions::segment_bytes`]).
pub const SEGMENT_BYTES: u64 = 64 << 20;
/// The buffer of appends is written to the file once it holds this many bytes.
pub const WRITE_OUT_BYTES: usize = 1 << 20;
/// `records_from` seeks to the nearest of every this many records, then reads forward.
const INDEX_EVERY: u64 = 128;
/// The largest frame a record can make: its header and the largest payload.
const MAX_FRAME: u64 = (HEADER_LEN + MAX_PAYLOAD_BYTES + 64) as u64;
const MAGIC_LEN: u64 = SEGMENT_MAGIC.len() as u64;

/// One segment file: the records from `first_seq` until the next segment's first.
#[derive(Clone, Debug)]
struct Segment {
    first_seq: u64,
    path: PathBuf,
}

/// Where a record's frame starts, for every [`INDEX_EVERY`]th record and each segment's first.
#[derive(Clone, Copy, Debug)]
struct Mark {
    seq: u64,
    segment: usize,
    offset: u64,
}

/// What opening found half-written at the end of the last segment.
#[derive(Debug)]
struct Torn {
    /// The sequence number the torn record would have had.
    seq: u64,
    /// Where its frame starts.
    offset: u64,
    /// What is wrong with it.
    what: String,
}

struct Writer {
    segments: Vec<Segment>,
    /// The last segment, which appends go to.
    file: Arc<File>,
    /// Bytes of the last segment already in its file.
    written: u64,
    /// Appends not yet written to the file.
    buffer: Vec<u8>,
    next_seq: u64,
    index: Vec<Mark>,
    torn: Option<Torn>,
    /// Why appends stopped: a write failed part way, so the file's end is unknown.
    failed: Option<String>,
}

/// A log's records in segment files and its metadata in small files (see the module documentation).
pub struct SegmentStore {
    dir: PathBuf,
    segment_bytes: u64,
    writer: Mutex<Writer>,
    /// Held for the store's life: the `flock` that marks the log open.
    _lock: File,
}

impl SegmentStore {
    /// Opens (or creates) the segment store in `dir`, which exists. Fails with [`LogError::Locked`] when
    /// another process holds it. A new segment is begun once the current one holds `segment_bytes`.
    pub fn open(dir: &Path, segment_bytes: u64) -> Result<Self, LogError> {
        let io = |e: std::io::Error| open_error(dir, e);
        let lock = lock_exclusive(dir)?;
        let segments_dir = dir.join(SEGMENTS_DIR);
        for sub in [&segments_dir, &dir.join(META_DIR)] {
            if !sub.is_dir() {
                create_private_dir(sub).map_err(io)?;
                sync_dir(dir).map_err(io)?;
            }
        }
        let mut segments = list_segments(&segments_dir)?;
        if segments.is_empty() {
            let path = segment_path(&segments_dir, 0);
            drop(create_segment(&path).map_err(io)?);
            sync_dir(&segments_dir).map_err(io)?;
            segments.push(Segment { first_seq: 0, path });
        }
        let mut index = Vec::new();
        let mut torn = None;
        let mut next_seq = 0;
        let last = segments.len() - 1;
        for (i, segment) in segments.iter().enumerate() {
            let walk = walk_segment(segment, i, &mut index)?;
            let end = segment.first_seq + walk.records;
            match (walk.torn, segments.get(i + 1)) {
                (Some(t), Some(_)) => {
                    return Err(LogError::Inconsistent {
                        seq: t.seq,
                        reason: format!(
                            "{} has {} at byte {}, before the last segment",
                            path(segment),
                            t.what,
                            t.offset
                        ),
                    });
                }
                (_, Some(next)) if next.first_seq != end => {
                    return Err(LogError::Inconsistent {
                        seq: end,
                        reason: format!(
                            "{} ends before record {end}, but the next segment starts at {}",
                            path(segment),
                            next.first_seq
                        ),
                    });
                }
                (t, _) => torn = t,
            }
            if i == last {
                next_seq = end;
            }
        }
        let current = &segments[last];
        let file = OpenOptions::new().read(true).append(true).open(&current.path).map_err(io)?;
        let written = file.metadata().map_err(io)?.len();
        Ok(SegmentStore {
            dir: dir.to_owned(),
            segment_bytes,
            writer: Mutex::new(Writer {
                segments,
                file: Arc::new(file),
                written,
                buffer: Vec::with_capacity(WRITE_OUT_BYTES + (64 << 10)),
                next_seq,
                index,
                torn,
                failed: None,
            }),
            _lock: lock,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Writer> {
        // The writer's fields are updated only after the bytes they describe went in (or `failed` is set).
        self.writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The file that holds metadata key `key`: its `/` becomes `.`; other than that only letters, digits,
    /// `-` and `_` may appear.
    fn meta_path(&self, key: &str) -> Result<PathBuf, LogError> {
        let ok =
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/'));
        match ok {
            true => Ok(self.dir.join(META_DIR).join(key.replace('/', "."))),
            false => Err(LogError::Refused(format!(
                "metadata key {key:?}: only letters, digits, '-', '_' and '/' may appear in one"
            ))),
        }
    }
}

impl Writer {
    /// Writes the buffer to the last segment's file. A failed write may have written part of it, so the
    /// store takes no more appends.
    fn write_out(&mut self) -> Result<(), LogError> {
        if let Some(why) = &self.failed {
            return Err(LogError::Storage(why.clone()));
        }
        if self.buffer.is_empty() {
            return Ok(());
        }
        if let Err(source) = (&*self.file).write_all(&self.buffer) {
            let context = format!("cannot write to {}", self.current().path.display());
            self.failed = Some(format!("{context}: {source}"));
            return Err(LogError::Io { context, source });
        }
        self.written += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    fn current(&self) -> &Segment {
        // `open` makes sure there is always one.
        &self.segments[self.segments.len() - 1]
    }

    /// Closes the last segment (written out and fsynced) and begins a new one at `next_seq`.
    fn roll(&mut self) -> Result<(), LogError> {
        self.write_out()?;
        let fail = |w: &mut Writer, what: String| {
            w.failed = Some(what.clone());
            LogError::Storage(what)
        };
        if let Err(e) = self.file.sync_data() {
            return Err(fail(self, format!("cannot fsync {}: {e}", self.current().path.display())));
        }
        let folder = self.current().path.parent().map(Path::to_owned).unwrap_or_default();
        let path = segment_path(&folder, self.next_seq);
        let file = match create_segment(&path).and_then(|f| sync_dir(&folder).map(|()| f)) {
            Ok(file) => file,
            Err(e) => return Err(fail(self, format!("cannot begin segment {}: {e}", path.display()))),
        };
        self.segments.push(Segment { first_seq: self.next_seq, path });
        self.index.push(Mark { seq: self.next_seq, segment: self.segments.len() - 1, offset: MAGIC_LEN });
        self.file = Arc::new(file);
        self.written = MAGIC_LEN;
        Ok(())
    }

    /// The mark to start reading at for records from `seq` on.
    fn mark_for(&self, seq: u64) -> Mark {
        let after = self.index.partition_point(|m| m.seq <= seq);
        // `open` marks the first segment's start, so there is one at or below any seq in the log.
        self.index[after.saturating_sub(1)]
    }
}

impl Store for SegmentStore {
    fn append(&self, bytes: &[u8]) -> Result<u64, LogError> {
        let mut w = self.lock();
        if let Some(why) = &w.failed {
            return Err(LogError::Storage(why.clone()));
        }
        let seq = w.next_seq;
        let len = u32::try_from(bytes.len())
            .ok()
            .filter(|&l| u64::from(l) <= MAX_FRAME)
            .ok_or_else(|| LogError::Refused(format!("a record of {} bytes", bytes.len())))?;
        let frame = 4 + u64::from(len);
        let end = w.written + w.buffer.len() as u64;
        if end + frame > self.segment_bytes && w.next_seq > w.current().first_seq {
            w.roll()?;
        }
        if seq.is_multiple_of(INDEX_EVERY) {
            let offset = w.written + w.buffer.len() as u64;
            let segment = w.segments.len() - 1;
            w.index.push(Mark { seq, segment, offset });
        }
        w.buffer.extend_from_slice(&len.to_le_bytes());
        w.buffer.extend_from_slice(bytes);
        if w.buffer.len() >= WRITE_OUT_BYTES {
            w.write_out()?;
        }
        // Only now: a record whose append failed gets no number, as the trait promises.
        w.next_seq += 1;
        Ok(seq)
    }

    fn next_seq(&self) -> u64 {
        self.lock().next_seq
    }

    fn records_from(&self, from_seq: u64) -> StoredRecords<'_> {
        let mut w = self.lock();
        if let Err(e) = w.write_out() {
            return Box::new(std::iter::once(Err(e)));
        }
        let first = w.segments[0].first_seq;
        if from_seq < first {
            return Box::new(std::iter::once(Err(LogError::Compacted { from: from_seq, first })));
        }
        let start = w.mark_for(from_seq);
        Box::new(SegmentReader {
            segments: w.segments[start.segment..].to_vec(),
            segment: 0,
            reader: None,
            offset: start.offset,
            seq: start.seq,
            from_seq,
            end: w.next_seq,
            done: false,
        })
    }

    fn first_seq(&self) -> u64 {
        self.lock().segments[0].first_seq
    }

    fn segments(&self) -> Result<Vec<SegmentInfo>, LogError> {
        let w = self.lock();
        let last = w.segments.len() - 1;
        w.segments
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let meta = std::fs::metadata(&s.path)
                    .map_err(|source| LogError::Io { context: format!("cannot stat {}", path(s)), source })?;
                Ok(SegmentInfo {
                    first_seq: s.first_seq,
                    end_seq: w.segments.get(i + 1).map_or(w.next_seq, |n| n.first_seq),
                    // The last file's appends may still be in the buffer.
                    bytes: meta.len() + if i == last { w.buffer.len() as u64 } else { 0 },
                    modified: meta.modified().unwrap_or_else(|_| std::time::SystemTime::now()),
                    current: i == last,
                })
            })
            .collect()
    }

    fn remove_before(&self, first_kept: u64) -> Result<(), LogError> {
        let mut w = self.lock();
        let Some(count) = w.segments.iter().position(|s| s.first_seq == first_kept) else {
            return Err(LogError::Refused(format!("no segment starts at record {first_kept}")));
        };
        if count == 0 {
            return Ok(());
        }
        // Oldest first, so that a crash or a failure part way leaves a log that starts at a later file,
        // never one with a hole; the list and the index then drop exactly the files that went. Readers
        // already past these files hold their own handles.
        let mut deleted = 0;
        let mut failed = None;
        for segment in &w.segments[..count] {
            if let Err(source) = std::fs::remove_file(&segment.path) {
                failed = Some(LogError::Io { context: format!("cannot delete {}", path(segment)), source });
                break;
            }
            deleted += 1;
        }
        w.segments.drain(..deleted);
        w.index.retain(|m| m.segment >= deleted);
        for mark in &mut w.index {
            mark.segment -= deleted;
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let folder = self.dir.join(SEGMENTS_DIR);
        sync_dir(&folder)
            .map_err(|source| LogError::Io { context: format!("cannot fsync {}", folder.display()), source })
    }

    fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, LogError> {
        let path = self.meta_path(key)?;
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(LogError::Io { context: format!("cannot read {}", path.display()), source }),
        }
    }

    fn put_meta(&self, key: &str, value: &[u8]) -> Result<(), LogError> {
        let path = self.meta_path(key)?;
        replace_file(&path, value)
            .map_err(|source| LogError::Io { context: format!("cannot write {}", path.display()), source })
    }

    fn flush(&self) -> Result<(), LogError> {
        let (file, path) = {
            let mut w = self.lock();
            w.write_out()?;
            (Arc::clone(&w.file), w.current().path.clone())
        };
        // Outside the lock: appends go on meanwhile. They are not covered, and the caller does not claim them.
        file.sync_data()
            .map_err(|source| LogError::Io { context: format!("cannot fsync {}", path.display()), source })
    }

    fn recover_torn_tail(&self, crashed: bool) -> Result<(), LogError> {
        let mut w = self.lock();
        let Some(torn) = w.torn.take() else { return Ok(()) };
        let segment = path(w.current());
        if !crashed {
            let error = LogError::Inconsistent {
                seq: torn.seq,
                reason: format!(
                    "{segment} ends in {} at byte {}, but the log was closed cleanly: the file is damaged, \
                     not torn by a crash",
                    torn.what, torn.offset
                ),
            };
            w.torn = Some(torn);
            return Err(error);
        }
        let cut = |source| LogError::Io { context: format!("cannot cut the torn end of {segment}"), source };
        let mut keep = torn.offset;
        if keep < MAGIC_LEN {
            // Torn while it was being begun: begin it again.
            w.file.set_len(0).map_err(cut)?;
            (&*w.file).write_all(SEGMENT_MAGIC).map_err(cut)?;
            keep = MAGIC_LEN;
        }
        w.file.set_len(keep).map_err(cut)?;
        w.file.sync_all().map_err(cut)?;
        tracing::warn!(
            segment,
            offset = torn.offset,
            cut_bytes = w.written.saturating_sub(keep),
            "the previous run crashed part way through writing record {}: {}; cut it",
            torn.seq,
            torn.what
        );
        w.written = keep;
        Ok(())
    }
}

impl Drop for SegmentStore {
    fn drop(&mut self) {
        // Like a process that exits: what was appended reaches the file (not the disk). Errors have nowhere
        // to go; a caller who cares flushes first.
        let _ = self.lock().write_out();
    }
}

/// Reads records in order from a snapshot of the segment list, up to the end it had.
struct SegmentReader {
    segments: Vec<Segment>,
    segment: usize,
    reader: Option<BufReader<File>>,
    /// Where the next frame starts in `segments[segment]`.
    offset: u64,
    /// The sequence number of the next frame.
    seq: u64,
    from_seq: u64,
    end: u64,
    done: bool,
}

impl SegmentReader {
    fn read_next(&mut self) -> Result<Vec<u8>, LogError> {
        if self.segments.get(self.segment + 1).is_some_and(|s| s.first_seq == self.seq) {
            self.segment += 1;
            self.offset = MAGIC_LEN;
            self.reader = None;
        }
        let segment = &self.segments[self.segment];
        let failed =
            |source| LogError::Io { context: format!("cannot read {}", segment.path.display()), source };
        let reader = match &mut self.reader {
            Some(r) => r,
            None => {
                let mut file = File::open(&segment.path).map_err(failed)?;
                file.seek(SeekFrom::Start(self.offset)).map_err(failed)?;
                self.reader.insert(BufReader::with_capacity(64 << 10, file))
            }
        };
        let mut len = [0; 4];
        reader.read_exact(&mut len).map_err(failed)?;
        let len = u32::from_le_bytes(len);
        if u64::from(len) > MAX_FRAME {
            return Err(LogError::Inconsistent {
                seq: self.seq,
                reason: format!("{} has a frame of {len} bytes at byte {}", path(segment), self.offset),
            });
        }
        let mut bytes = vec![0; len as usize];
        reader.read_exact(&mut bytes).map_err(failed)?;
        self.offset += 4 + u64::from(len);
        Ok(bytes)
    }
}

impl Iterator for SegmentReader {
    type Item = Result<(u64, Vec<u8>), LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done && self.seq < self.end {
            let seq = self.seq;
            match self.read_next() {
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Ok(bytes) => {
                    self.seq += 1;
                    if seq >= self.from_seq {
                        return Some(Ok((seq, bytes)));
                    }
                }
            }
        }
        None
    }
}

/// What reading a segment's frames found.
struct Walk {
    records: u64,
    torn: Option<Torn>,
}

/// Reads every frame length in `segment` (number `number`), marking where records start in `index`; checks
/// the last frame's checksum.
fn walk_segment(segment: &Segment, number: usize, index: &mut Vec<Mark>) -> Result<Walk, LogError> {
    let failed = |source| LogError::Io { context: format!("cannot read {}", segment.path.display()), source };
    let file = File::open(&segment.path).map_err(failed)?;
    let size = file.metadata().map_err(failed)?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let torn = |offset, what: &str, records| {
        Ok(Walk { records, torn: Some(Torn { seq: segment.first_seq + records, offset, what: what.into() }) })
    };
    index.push(Mark { seq: segment.first_seq, segment: number, offset: MAGIC_LEN });
    let mut magic = [0; SEGMENT_MAGIC.len()];
    if size < MAGIC_LEN {
        return torn(0, "an incomplete segment header", 0);
    }
    reader.read_exact(&mut magic).map_err(failed)?;
    if &magic != SEGMENT_MAGIC {
        return Err(LogError::Meta {
            key: "segment",
            reason: format!("{} is not a Krait log segment", path(segment)),
        });
    }
    let mut offset = MAGIC_LEN;
    let mut records = 0u64;
    while offset < size {
        let seq = segment.first_seq + records;
        if size - offset < 4 {
            return torn(offset, "an incomplete frame length", records);
        }
        let mut len = [0; 4];
        reader.read_exact(&mut len).map_err(failed)?;
        let len = u64::from(u32::from_le_bytes(len));
        // No record is empty: a zero length is where a crash left zeros (a file extended, its data never
        // written), not a record for readers to report.
        if len == 0 || len > MAX_FRAME {
            return torn(offset, &format!("a frame length of {len} bytes"), records);
        }
        let end = offset + 4 + len;
        if end > size {
            return torn(offset, &format!("a frame of {len} bytes that runs past the file's end"), records);
        }
        if end == size {
            let mut last = vec![0; len as usize];
            reader.read_exact(&mut last).map_err(failed)?;
            if !header_checks_out(&last) {
                return torn(offset, "a last record whose checksum fails", records);
            }
        } else {
            reader.seek_relative(len as i64).map_err(failed)?;
        }
        if seq.is_multiple_of(INDEX_EVERY) {
            index.push(Mark { seq, segment: number, offset });
        }
        records += 1;
        offset = end;
    }
    Ok(Walk { records, torn: None })
}

/// The segments in `folder`, by first sequence number. Files that are not segments are refused: the folder
/// is the log's, and a stray file in it is a sign of a mistake worth hearing about.
fn list_segments(folder: &Path) -> Result<Vec<Segment>, LogError> {
    let failed = |source| LogError::Io { context: format!("cannot list {}", folder.display()), source };
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(folder).map_err(failed)? {
        let entry = entry.map_err(failed)?;
        let name = entry.file_name();
        let first_seq = name
            .to_str()
            .and_then(|n| n.strip_suffix(".seg"))
            .filter(|n| n.len() == 20)
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| LogError::Meta {
                key: "segment",
                reason: format!("{} is not a segment file (<20 digits>.seg)", entry.path().display()),
            })?;
        segments.push(Segment { first_seq, path: entry.path() });
    }
    segments.sort_by_key(|s| s.first_seq);
    Ok(segments)
}

fn segment_path(folder: &Path, first_seq: u64) -> PathBuf {
    folder.join(format!("{first_seq:020}.seg"))
}

fn path(segment: &Segment) -> String {
    segment.path.display().to_string()
}

/// Creates a segment file holding only [`SEGMENT_MAGIC`], open for appends.
fn create_segment(path: &Path) -> std::io::Result<File> {
    let mut file = private_file().create_new(true).read(true).append(true).open(path)?;
    file.write_all(SEGMENT_MAGIC)?;
    Ok(file)
}

/// Options that create a file readable and writable by its owner only: records hold what clients read and
/// wrote.
fn private_file() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

/// Writes `bytes` to `path` so that a crash leaves either the old file or the new one whole: into a file
/// beside it, fsynced, renamed over it, and its folder fsynced so that the rename lasts. The file is
/// readable by its owner only (see [`private_file`]).
pub fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = private_file().write(true).truncate(true).open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => sync_dir(dir),
        _ => sync_dir(Path::new(".")),
    }
}

/// Fsyncs a folder, so that the files created, renamed or removed in it stay so.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Takes the exclusive lock on the log's [`LOCK_FILE`] (see [`lock_waiting`]).
fn lock_exclusive(dir: &Path) -> Result<File, LogError> {
    let path = dir.join(LOCK_FILE);
    let file = private_file().write(true).truncate(false).open(&path).map_err(|e| open_error(dir, e))?;
    lock_waiting(&file, LockMode::Exclusive, dir, &path)?;
    Ok(file)
}
