//! [`SledStore`]: a [`Store`] on sled 0.34, for logs written before Krait had its own segment store.
//!
//! Two sled trees: `records` maps a sequence number (8 bytes, big-endian, so key order is append order) to a
//! record value, and `meta` holds the metadata keys.
//!
//! sled's `flush` writes its dirty buffers and syncs them with `sync_file_range(2)` on Linux, and its
//! recovery restores a prefix of its own log. So a process crash loses nothing flushed; whether a power loss
//! does depends on `sync_file_range`, which flushes neither file metadata nor the drive's write cache.

use std::path::Path;

use super::{LOCK_WAIT, Store, StoredRecords};
use crate::log::LogError;
use crate::log::disk_log::open_error;

/// The sled tree that holds the records.
pub const RECORDS_TREE: &str = "records";
/// The sled tree that holds the log's metadata.
pub const META_TREE: &str = "meta";

/// A log's records and metadata in sled.
pub struct SledStore {
    db: sled::Db,
    records: sled::Tree,
    meta: sled::Tree,
    next_seq: std::sync::atomic::AtomicU64,
}

impl SledStore {
    /// Opens the sled store in `dir`, with a page cache of `cache_bytes`.
    pub fn open(dir: &Path, cache_bytes: u64) -> Result<Self, LogError> {
        let config = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            // The log fsyncs itself, so it can count fsyncs and share them; sled's own timer would add
            // uncounted ones.
            .flush_every_ms(None);
        // Opening writes (sled's recovery): an I/O error in it says what is wrong with the directory.
        let opening = |e: sled::Error| match e {
            sled::Error::Io(io) => open_error(dir, io),
            other => LogError::from(other),
        };
        let db = open_waiting_for_lock(&config).map_err(opening)?;
        let records = db.open_tree(RECORDS_TREE).map_err(opening)?;
        let meta = db.open_tree(META_TREE).map_err(opening)?;
        let next_seq = match records.last()? {
            None => 0,
            Some((key, _)) => parse_key(&key, None)?.saturating_add(1),
        };
        Ok(SledStore { db, records, meta, next_seq: next_seq.into() })
    }
}

impl Store for SledStore {
    fn append(&self, bytes: &[u8]) -> Result<u64, LogError> {
        // One writer at a time (the log's append lock), so nothing moves `next_seq` between these.
        let seq = self.next_seq.load(std::sync::atomic::Ordering::Acquire);
        self.records.insert(seq.to_be_bytes(), bytes)?;
        self.next_seq.store(seq + 1, std::sync::atomic::Ordering::Release);
        Ok(seq)
    }

    fn next_seq(&self) -> u64 {
        self.next_seq.load(std::sync::atomic::Ordering::Acquire)
    }

    fn records_from(&self, from_seq: u64) -> StoredRecords<'_> {
        let mut last = None;
        Box::new(self.records.range(from_seq.to_be_bytes()..).map(move |item| {
            let (key, value) = item?;
            let seq = parse_key(&key, last)?;
            last = Some(seq);
            Ok((seq, value.to_vec()))
        }))
    }

    fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, LogError> {
        Ok(self.meta.get(key)?.map(|v| v.to_vec()))
    }

    fn put_meta(&self, key: &str, value: &[u8]) -> Result<(), LogError> {
        self.meta.insert(key, value)?;
        Ok(())
    }

    fn flush(&self) -> Result<(), LogError> {
        self.db.flush()?;
        Ok(())
    }

    fn recover_torn_tail(&self, _crashed: bool) -> Result<(), LogError> {
        // sled's own recovery already cut its log to a prefix of whole writes.
        Ok(())
    }
}

fn parse_key(key: &[u8], after: Option<u64>) -> Result<u64, LogError> {
    <[u8; 8]>::try_from(key)
        .map(u64::from_be_bytes)
        .map_err(|_| LogError::BadKey { key_hex: hex(key), after })
}

/// `bytes` in lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Opens the sled store, waiting briefly when its directory lock is still held. sled 0.34 releases the lock
/// only when its background flusher thread exits, which `Db::drop` does not wait for (spacejam/sled#1234), so
/// reopening a log right after closing it can see the lock for a few milliseconds. A log that another live
/// process holds stays locked past the wait, and that error is returned.
fn open_waiting_for_lock(config: &sled::Config) -> Result<sled::Db, sled::Error> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match config.open() {
            // sled reports the lock as a plain `Other` error, so its text is all there is to go on.
            Err(sled::Error::Io(e))
                if e.to_string().starts_with("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}
