//! Retention (issue 20, item 5; `history::log::retention`): every [`RETAIN_EVERY`], the version book's
//! checkpoint moves to the log's latest cut, and the oldest segments below what every reader still needs
//! go, as far as `[log.retain]` asks.
//!
//! The readers, and the record each still needs:
//! - a co-located online verifier (`krait serve`): the first record its last stored checkpoint does not
//!   cover (published as `krait_verifier_checkpoint_covers`; nothing goes before it stores one);
//! - the proxy's next start: the version book's checkpoint;
//! - the shipper, where `[ship]` is on: the first record the stream has not acknowledged.
//!
//! A proxy with neither a verifier nor a shipper deletes nothing: its log is the only copy of a history
//! nobody has verified yet, for `krait verify` to read whole.

use std::sync::Arc;
use std::time::Duration;

use history::log::HistoryLog;
use history::log::retention::{Compaction, Retain};
use tokio::task::JoinHandle;

use crate::Metrics;
use crate::metrics::VerifierMetrics;

/// How often retention runs.
pub const RETAIN_EVERY: Duration = Duration::from_secs(5);

/// Who reads the log besides the proxy's own next start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readers {
    /// A co-located online verifier, which publishes its checkpoint in [`crate::metrics::VerifierMetrics`].
    pub local_verifier: bool,
    /// A shipper, whose counters are in [`Metrics::shipping`].
    pub shipper: bool,
}

/// The first record some reader still needs: the smallest of what each says it needs; 0 while one of them
/// has not said (the verifier before its first checkpoint, a log whose book checkpoint does not decode).
/// `book` is what the version book's checkpoint covered at the last call: the checkpoint (every recorded
/// write id) is read and advanced again only once the log has a later cut.
pub fn needed_from(
    log: &dyn HistoryLog,
    metrics: &Metrics,
    readers: Readers,
    book: &mut Option<u64>,
) -> Result<u64, history::LogError> {
    let moved = log.clean_cut().is_some_and(|cut| book.is_none_or(|covers| cut.seq > covers));
    if moved || book.is_none() {
        *book = crate::interpret::versions::seed::advance_to_cut(log)?;
    }
    let Some(book) = *book else { return Ok(0) };
    let verifier = match readers.local_verifier {
        true => Metrics::get(&metrics.verifier.checkpoint_covers),
        false => u64::MAX,
    };
    let shipper = match (readers.shipper, metrics.shipping.get()) {
        (false, _) => u64::MAX,
        (true, None) => 0,
        (true, Some(c)) => ship::Counters::get(&c.shipped_below),
    };
    Ok(book.min(verifier).min(shipper))
}

/// One pass: what went, counted in `metrics`; `book` as for [`needed_from`].
pub fn retain_once(
    log: &dyn HistoryLog,
    metrics: &Metrics,
    policy: &Retain,
    readers: Readers,
    book: &mut Option<u64>,
) -> Result<Compaction, history::LogError> {
    let keep_from = needed_from(log, metrics, readers, book)?;
    VerifierMetrics::set(&metrics.retention.needed_from, keep_from);
    let done = log.compact(keep_from, policy)?;
    metrics.retention.segments_deleted.fetch_add(done.segments as u64, std::sync::atomic::Ordering::Relaxed);
    metrics.retention.bytes_deleted.fetch_add(done.bytes, std::sync::atomic::Ordering::Relaxed);
    Ok(done)
}

/// Starts [`retain_once`] every [`RETAIN_EVERY`], until the returned task is aborted; `None` (nothing
/// started) when no reader but the proxy's next start reads the log (see the module documentation).
pub fn spawn(
    log: Arc<dyn HistoryLog>,
    metrics: Arc<Metrics>,
    policy: Retain,
    readers: Readers,
) -> Option<JoinHandle<()>> {
    (readers.local_verifier || readers.shipper).then(|| tokio::spawn(run(log, metrics, policy, readers)))
}

/// The loop [`spawn`] starts. A failed pass is said once per distinct error and tried again at the next;
/// it deletes nothing it has not planned.
async fn run(log: Arc<dyn HistoryLog>, metrics: Arc<Metrics>, policy: Retain, readers: Readers) {
    let mut every = tokio::time::interval(RETAIN_EVERY);
    let mut last_error = None;
    let mut book = None;
    loop {
        every.tick().await;
        let (log, metrics) = (log.clone(), metrics.clone());
        let pass = tokio::task::spawn_blocking(move || {
            let done = retain_once(log.as_ref(), &metrics, &policy, readers, &mut book);
            (done, book)
        })
        .await;
        let pass = pass.map(|(done, covers)| {
            book = covers;
            done
        });
        match pass {
            Ok(Ok(done)) => {
                last_error = None;
                if done.segments > 0 {
                    tracing::info!(
                        segments = done.segments,
                        bytes = done.bytes,
                        first_record = done.first_kept,
                        "retention deleted the oldest log segments"
                    );
                }
            }
            Ok(Err(e)) => {
                let e = e.to_string();
                if last_error.as_ref() != Some(&e) {
                    tracing::warn!("retention could not run, the log keeps everything meanwhile: {e}");
                    last_error = Some(e);
                }
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use history::log::{DiskLog, Durability, LogOptions, LoggedTxn};
    use history::{Outcome, SessionId, TxnId};

    use super::*;
    use crate::interpret::VersionBook;
    use crate::interpret::versions::seed;

    #[test]
    fn what_is_needed_is_the_least_any_reader_needs() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = LogOptions::new(Durability::None);
        options.cut_every_bytes = 1;
        let log = DiskLog::open_with(dir.path(), options).unwrap();
        seed::seed(&VersionBook::new(), &log).unwrap();
        for id in 0..50 {
            let txn = LoggedTxn::new(TxnId(id), SessionId(1), id);
            drop(log.append_finished(txn, Outcome::Committed, None).unwrap());
        }
        log.sync().unwrap();
        let cut = log.clean_cut().unwrap().seq;
        assert!(cut > 40, "{cut}");
        let metrics = Metrics::default();
        let alone = Readers { local_verifier: false, shipper: false };
        let serve = Readers { local_verifier: true, shipper: false };
        // The book's checkpoint moves to the cut; with no other reader, that is what is needed.
        assert_eq!(needed_from(&log, &metrics, alone, &mut None).unwrap(), cut);
        // A verifier that has stored no checkpoint holds everything; one that has, from its checkpoint on.
        assert_eq!(needed_from(&log, &metrics, serve, &mut None).unwrap(), 0);
        VerifierMetrics::set(&metrics.verifier.checkpoint_covers, 7);
        assert_eq!(needed_from(&log, &metrics, serve, &mut None).unwrap(), 7);
        VerifierMetrics::set(&metrics.verifier.checkpoint_covers, cut + 100);
        assert_eq!(needed_from(&log, &metrics, serve, &mut None).unwrap(), cut);
        // A shipper whose counters are not there yet holds everything.
        let shipping = Readers { local_verifier: true, shipper: true };
        assert_eq!(needed_from(&log, &metrics, shipping, &mut None).unwrap(), 0);
        // Remembered between passes, the book's position moves only when the log has a later cut.
        let mut book = None;
        assert_eq!(needed_from(&log, &metrics, alone, &mut book).unwrap(), cut);
        assert_eq!(book, Some(cut));
        for id in 50..100 {
            let txn = LoggedTxn::new(TxnId(id), SessionId(1), id);
            drop(log.append_finished(txn, Outcome::Committed, None).unwrap());
        }
        log.sync().unwrap();
        let later = log.clean_cut().unwrap().seq;
        assert!(later > cut);
        assert_eq!(needed_from(&log, &metrics, alone, &mut book).unwrap(), later);
        assert_eq!(book, Some(later));
        // With no reader but the next start, nothing runs at all.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let log: Arc<dyn HistoryLog> = Arc::new(log);
        let policy = Retain::default();
        runtime.block_on(async {
            assert!(spawn(log.clone(), Arc::new(Metrics::default()), policy, alone).is_none());
            spawn(log, Arc::new(Metrics::default()), policy, serve).expect("a task").abort();
        });
    }
}
