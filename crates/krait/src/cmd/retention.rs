//! Retention under `krait serve` (issue 20, item 5; `history::log::retention`): every
//! [`RETAIN_EVERY`], the version book's checkpoint moves to the log's latest cut, and the oldest segments
//! below what every reader still needs go, as far as `[log.retain]` asks.
//!
//! The readers, and the record each still needs:
//! - the online verifier: the first record its last stored checkpoint does not cover (published as
//!   `krait_verifier_checkpoint_covers`; nothing goes before it stores one);
//! - the proxy's next start: the version book's checkpoint;
//! - the shipper, where `[ship]` is on: the first record not yet acknowledged by the stream.

use std::sync::Arc;
use std::time::Duration;

use history::log::HistoryLog;
use history::log::retention::{Compaction, Retain};
use proxy::Metrics;

/// How often retention runs.
pub const RETAIN_EVERY: Duration = Duration::from_secs(5);

/// The first record some reader still needs: the smallest of what each says it needs; 0 while one of them
/// has not said (the verifier before its first checkpoint, a log whose book checkpoint does not decode).
pub fn needed_from(log: &dyn HistoryLog, metrics: &Metrics) -> Result<u64, history::LogError> {
    let Some(book) = proxy::interpret::versions::seed::advance_to_cut(log)? else { return Ok(0) };
    let verifier = Metrics::get(&metrics.verifier.checkpoint_covers);
    let shipper = metrics.shipping.get().map_or(u64::MAX, |c| ship::Counters::get(&c.shipped_below));
    Ok(book.min(verifier).min(shipper))
}

/// One pass: what went, counted in `metrics`.
pub fn retain_once(
    log: &dyn HistoryLog,
    metrics: &Metrics,
    policy: &Retain,
) -> Result<Compaction, history::LogError> {
    let keep_from = needed_from(log, metrics)?;
    proxy::metrics::VerifierMetrics::set(&metrics.retention.needed_from, keep_from);
    let done = log.compact(keep_from, policy)?;
    metrics.retention.segments_deleted.fetch_add(done.segments as u64, std::sync::atomic::Ordering::Relaxed);
    metrics.retention.bytes_deleted.fetch_add(done.bytes, std::sync::atomic::Ordering::Relaxed);
    Ok(done)
}

/// Runs [`retain_once`] every [`RETAIN_EVERY`] until the task is dropped or aborted. A failed pass is said
/// once per distinct error and tried again at the next; it deletes nothing it has not planned.
pub async fn run(log: Arc<dyn HistoryLog>, metrics: Arc<Metrics>, policy: Retain) {
    let mut every = tokio::time::interval(RETAIN_EVERY);
    let mut last_error = None;
    loop {
        every.tick().await;
        let (log, metrics) = (log.clone(), metrics.clone());
        let pass = tokio::task::spawn_blocking(move || retain_once(log.as_ref(), &metrics, &policy)).await;
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
                    eprintln!(
                        "krait serve: retention could not run, the log keeps everything meanwhile: {e}"
                    );
                    last_error = Some(e);
                }
            }
            Err(_) => return,
        }
    }
}
