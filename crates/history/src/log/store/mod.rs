//! Where a [`super::DiskLog`] keeps its bytes: numbered record values and a few metadata keys.
//!
//! The log decides what the bytes mean (records, the run state, checkpoints); a [`Store`] only keeps them in
//! order and makes them durable. Two engines:
//! - [`segments::SegmentStore`], the log's own: records as length-prefixed frames appended to segment files.
//!   New logs use it.
//! - [`sled_store::SledStore`], sled 0.34, which logs written before the segment store existed still use;
//!   they keep reading and taking appends as they are.

pub mod segments;
pub mod sled_store;

use std::path::Path;

use super::LogError;

/// Record values from some sequence number on, in order; an item is an error where one cannot be read.
pub type StoredRecords<'a> = Box<dyn Iterator<Item = Result<(u64, Vec<u8>), LogError>> + Send + 'a>;

/// An ordered store of record values, with metadata beside them. Appends come from one writer at a time
/// (the log's append lock); reads and `flush` may come from any thread.
pub trait Store: Send + Sync {
    /// Appends `bytes` as the next record; returns its sequence number ([`Store::next_seq`] before the call).
    /// An error means the store cannot take appends any more (an I/O error): the log stops; `next_seq` then
    /// still names the record that failed.
    fn append(&self, bytes: &[u8]) -> Result<u64, LogError>;

    /// The sequence number of the next append: one more than the last record's, or 0.
    fn next_seq(&self) -> u64;

    /// The records from `from_seq` on, as far as they were appended when this was called.
    fn records_from(&self, from_seq: u64) -> StoredRecords<'_>;

    /// The metadata value under `key`.
    fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, LogError>;

    /// Sets the metadata value under `key`; durable once the next [`Store::flush`] returns.
    fn put_meta(&self, key: &str, value: &[u8]) -> Result<(), LogError>;

    /// Makes every append and metadata change so far durable.
    fn flush(&self) -> Result<(), LogError>;

    /// The first record the store holds: 0, unless retention deleted the oldest ([`Store::remove_before`]).
    fn first_seq(&self) -> u64 {
        0
    }

    /// The files records are kept in, oldest first, for retention to choose from; empty where the engine
    /// cannot delete records (sled).
    fn segments(&self) -> Result<Vec<SegmentInfo>, LogError> {
        Ok(Vec::new())
    }

    /// Deletes the files of every record below `first_kept`, which must be where a file
    /// ([`Store::segments`]) starts, and not the last file's start: the file appends go to stays.
    fn remove_before(&self, first_kept: u64) -> Result<(), LogError> {
        Err(LogError::Refused(format!("this log's engine cannot delete records (below {first_kept})")))
    }

    /// Deals with what a crash may have left half-written at the end of the records, before the log reads
    /// them: cuts it when `crashed` (the previous run did not close cleanly), and reports it as damage when
    /// not (a cleanly closed log has nothing half-written).
    fn recover_torn_tail(&self, crashed: bool) -> Result<(), LogError>;
}

/// One file of records, as retention sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Its first record.
    pub first_seq: u64,
    /// One more than its last record (the next file's first).
    pub end_seq: u64,
    /// Its size on disk.
    pub bytes: u64,
    /// When it was last written: when its newest record went in, for a file no longer appended to.
    pub modified: std::time::SystemTime,
    /// Whether appends go to it (the last file), so that it is never deleted.
    pub current: bool,
}

/// Which engine holds the log in `dir`: sled's where sled's files are and no segments, else the segment store
/// (a new log included).
pub fn is_sled(dir: &Path) -> bool {
    dir.join("db").is_file() && !dir.join(segments::SEGMENTS_DIR).exists()
}

/// Whether `dir` holds a history log: segment files, or sled's files (`conf` and `db`).
pub fn holds_log(dir: &Path) -> bool {
    dir.join(segments::SEGMENTS_DIR).is_dir() || (dir.join("conf").is_file() && dir.join("db").is_file())
}

/// How long `open` waits for a directory lock that a just-closed log may still hold.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How a log's lock file is locked: exclusively by the log that has it open, shared by a reader about to
/// copy it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// The log is open: no one else may open or copy it.
    Exclusive,
    /// A copy is being made: no one may open the log meanwhile.
    Shared,
}

/// Takes a `flock(2)` on `file`, the lock file at `path` of the log in `dir`, waiting [`LOCK_WAIT`] for a
/// holder that is going away (a log just closed); a holder that stays is reported as [`LogError::Locked`].
pub fn lock_waiting(file: &std::fs::File, mode: LockMode, dir: &Path, path: &Path) -> Result<(), LogError> {
    use fs2::FileExt;
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        // The trait's methods, not std's (newer than this crate's minimum Rust).
        let taken = match mode {
            LockMode::Exclusive => FileExt::try_lock_exclusive(file),
            LockMode::Shared => FileExt::try_lock_shared(file),
        };
        match taken {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == fs2::lock_contended_error().kind() => {
                if std::time::Instant::now() >= deadline {
                    return Err(LogError::Locked { dir: dir.to_owned() });
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(source) => {
                return Err(LogError::Io { context: format!("cannot lock {}", path.display()), source });
            }
        }
    }
}

/// The file whose `flock(2)` marks the log in `dir` as open: the segment store's lock file, or sled's `db`.
pub fn lock_file(dir: &Path) -> std::path::PathBuf {
    match is_sled(dir) {
        true => dir.join("db"),
        false => dir.join(segments::LOCK_FILE),
    }
}
