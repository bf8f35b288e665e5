//! [`LogReader`]: a log opened only to be read (`krait verify`, `krait history`), wherever it lies.
//!
//! A log has no read-only mode: opening it writes to its files (the run state; sled, for older logs, its
//! own recovery too), so on a full disk, a read-only filesystem or a directory this user may not write,
//! [`DiskLog::open`] fails. A reader does not need to write. Where the log cannot be opened in place,
//! [`LogReader::open`] copies the directory to a private temporary one (`$TMPDIR`) and reads the copy; the
//! copy goes when the reader does.
//!
//! A log that a live process holds (a proxy still running on it) is never copied: the copy could catch the
//! engine half way through a write. An open log is marked in use with an exclusive `flock(2)` on its lock
//! file ([`super::store::lock_file`]: the segment store's `LOCK`, sled's `db`), and a lock can be asked for
//! on a file opened only for reading, so the reader asks for a shared one first: refused, the log is
//! reported as [`LogError::Locked`], which is then a fact and not a guess; granted, it is held for the
//! whole copy, so no proxy can open the log meanwhile.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::disk_log::open_error;
use super::store::{LockMode, lock_file, lock_waiting};
use super::{DiskLog, Durability, HistoryLog, LogError};

/// A log opened to be read, in place or, where that is impossible, from a private copy.
pub struct LogReader {
    // Declared before `copy`, so it is closed before the copy's directory is removed.
    log: DiskLog,
    copy: Option<tempfile::TempDir>,
    why_copied: Option<String>,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader").field("copy", &self.copy_path()).finish_non_exhaustive()
    }
}

impl LogReader {
    /// Opens the log in `dir` to read it. In place when it can be (under `strict`, so that opening it records
    /// no gap of its own); from a copy when the disk is full, the filesystem read-only, or the directory not
    /// writable by this user.
    ///
    /// Fails with [`LogError::Locked`] when another process holds the log, and with
    /// [`LogError::Unwritable`] when it cannot be opened in place and cannot be copied either (a log this
    /// user may not read, or no room in `$TMPDIR`); the reason says which.
    pub fn open(dir: &Path) -> Result<Self, LogError> {
        let reason = match DiskLog::open(dir, Durability::Strict) {
            Ok(log) => return Ok(LogReader { log, copy: None, why_copied: None }),
            Err(LogError::Unwritable { reason, .. }) => reason,
            Err(e) => return Err(e),
        };
        let unreadable = |what: String| LogError::Unwritable {
            dir: dir.to_owned(),
            reason: format!("{reason}; and it cannot be read from a copy: {what}"),
        };
        let _shared = lock_shared(dir)?;
        let copy = tempfile::Builder::new()
            .prefix("krait-log-copy-")
            .tempdir()
            .map_err(|e| unreadable(format!("cannot create a directory in {}: {e}", temp_dir_name())))?;
        copy_dir(dir, copy.path()).map_err(|e| {
            unreadable(format!(
                "cannot copy it to {}: {e} (set TMPDIR to a disk with room)",
                copy.path().display()
            ))
        })?;
        let log = DiskLog::open(copy.path(), Durability::Strict)
            .map_err(|e| unreadable(format!("cannot open the copy in {}: {e}", copy.path().display())))?;
        Ok(LogReader { log, copy: Some(copy), why_copied: Some(reason) })
    }

    /// The log, to replay or tail.
    pub fn log(&self) -> &DiskLog {
        &self.log
    }

    /// Why the log is read from a copy, when it is: what stopped it opening in place.
    pub fn why_copied(&self) -> Option<&str> {
        self.why_copied.as_deref()
    }

    /// Where the copy is, when the log is read from one.
    pub fn copy_path(&self) -> Option<PathBuf> {
        self.copy.as_ref().map(|c| c.path().to_owned())
    }

    /// Closes the log, then removes the copy if there is one.
    pub fn close(self) -> Result<(), LogError> {
        self.log.close()
    }
}

fn temp_dir_name() -> String {
    std::env::temp_dir().display().to_string()
}

/// Takes a shared lock on the log's lock file, opened for reading only, waiting as [`DiskLog::open`] does
/// for a lock that a just-closed log may still hold. Refused past the wait, the log is in use.
fn lock_shared(dir: &Path) -> Result<File, LogError> {
    let path = lock_file(dir);
    let file = File::open(&path).map_err(|e| match open_error(dir, e) {
        LogError::Unwritable { dir, reason } => {
            LogError::Unwritable { reason: format!("{} cannot be read: {reason}", path.display()), dir }
        }
        other => other,
    })?;
    lock_waiting(&file, LockMode::Shared, dir, &path)?;
    Ok(file)
}

/// Copies the files and folders under `from` into `to`, which exists.
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            std::fs::create_dir(&target)?;
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LoggedTxn, Outcome, SessionId, TxnId};

    fn log_with_one_txn(dir: &Path) {
        let log = DiskLog::open(dir, Durability::Strict).expect("open");
        let txn = LoggedTxn::new(TxnId(1), SessionId(1), 0);
        log.append_finished(txn, Outcome::Committed, Some(1)).expect("append").wait().expect("durable");
        log.close().expect("close");
    }

    /// A log that can be opened in place is read there, not copied.
    #[test]
    fn a_writable_log_is_read_in_place() {
        let dir = tempfile::tempdir().expect("a temp dir");
        log_with_one_txn(dir.path());
        let reader = LogReader::open(dir.path()).expect("open to read");
        assert_eq!(reader.why_copied(), None);
        assert_eq!(reader.log().replay().expect("replay").transactions.len(), 1);
        reader.close().expect("close");
    }

    /// The probe that comes before a copy sees the lock of a log open elsewhere (here another open file in
    /// this process, which `flock` treats as another holder) and reports it in use, as the log's own open
    /// does.
    #[test]
    fn the_lock_probe_reports_a_log_held_open_as_in_use() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let held = DiskLog::open(dir.path(), Durability::Strict).expect("open");
        match lock_shared(dir.path()) {
            Err(e @ LogError::Locked { .. }) => assert!(e.to_string().contains("in use"), "{e}"),
            Err(e) => panic!("expected Locked, got {e}"),
            Ok(_) => panic!("a shared lock on a log held open was granted"),
        }
        held.close().expect("close");
        drop(held);
        // Once the holder is gone, the probe succeeds.
        assert!(lock_shared(dir.path()).is_ok());
    }

    #[test]
    fn a_copy_holds_every_file_and_folder() {
        let from = tempfile::tempdir().expect("a temp dir");
        std::fs::create_dir(from.path().join("blobs")).expect("mkdir");
        std::fs::write(from.path().join("db"), b"data").expect("write");
        std::fs::write(from.path().join("blobs").join("1"), b"blob").expect("write");
        let to = tempfile::tempdir().expect("a temp dir");
        copy_dir(from.path(), to.path()).expect("copy");
        assert_eq!(std::fs::read(to.path().join("db")).expect("read"), b"data");
        assert_eq!(std::fs::read(to.path().join("blobs").join("1")).expect("read"), b"blob");
    }
}
