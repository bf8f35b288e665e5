//! Retention (issue 20, item 5): deleting the oldest records once nothing needs them, so that the log's
//! folder stays bounded however long the proxy runs.
//!
//! # What may go, and why nothing is lost
//!
//! Records are deleted a whole segment file at a time, oldest first, and only below `keep_from`: the
//! smallest position any reader of the log still starts from. The caller (`krait serve`) takes the
//! smallest of
//! - the online verifier's checkpoint: a restart resumes from it, and everything verification derived from
//!   the records below it (the live transactions, the collected write ids, the log reader's tables) is in
//!   the checkpoint, so the records themselves are no longer read;
//! - the proxy's version-book checkpoint, which is advanced to a [`Cut`]: a restart seeds the book from it
//!   and the records after it;
//! - what a shipper has shipped, where the log is shipped to NATS.
//!
//! Reports do not depend on the log: each carries the transactions it cites, and re-checks from them alone
//! (`krait report check`).
//!
//! # Cuts
//!
//! A [`Cut`] is a position that the records after it can be read from with nothing read before: no intent
//! before it waits for its outcome (so nothing after it continues a transaction begun before it), and the
//! writer's table of statement texts and rows starts afresh there (so nothing after it cites a definition
//! before it, see [`super::compact`]). The log takes one at every open (the start of a run) and then at the
//! first append with no intent pending after [`super::LogOptions::cut_every_bytes`] of records. The proxy's version book can
//! only be checkpointed at a cut; the online verifier's checkpoint holds the log reader's tables and open
//! intents, so it can be anywhere.
//!
//! # The bound
//!
//! Of the segments below `keep_from`, the oldest are deleted while the folder holds more than
//! [`Retain::max_bytes`] or the segment was last written more than [`Retain::max_age`] ago: records stay an
//! hour, or until the folder reaches 1 GiB, whichever comes first (the defaults). Records the readers still
//! need are never deleted, whatever their age or the folder's size: a verifier that falls behind holds the
//! log, and `/metrics` shows by how much (`krait_log_bytes`, `krait_log_retained_by`).

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::store::SegmentInfo;
use crate::TxnId;

/// How long, and how much, the log keeps of the records no reader needs any more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retain {
    /// Records older than this go.
    pub max_age: Duration,
    /// While the folder holds more than this, the oldest records go.
    pub max_bytes: u64,
}

impl Default for Retain {
    /// An hour, or 1 GiB, whichever is reached first.
    fn default() -> Self {
        Retain { max_age: Duration::from_secs(3_600), max_bytes: 1 << 30 }
    }
}

/// A position the records after it can be read from alone (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cut {
    /// The first record after the cut.
    pub seq: u64,
    /// One more than the largest transaction id appended before it.
    pub txns_below: TxnId,
}

/// What one [`super::HistoryLog::compact`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compaction {
    /// Segment files deleted.
    pub segments: usize,
    /// Their bytes.
    pub bytes: u64,
    /// The first record the log holds now.
    pub first_kept: u64,
}

/// The first record to keep of `segments` (oldest first): segments entirely below `keep_from` and not the
/// current one go, oldest first, while `folder_bytes` (the whole folder, these segments included) is over
/// `retain.max_bytes` or the segment is older than `retain.max_age` at `now`. `None` when nothing goes.
pub fn plan(
    segments: &[SegmentInfo],
    keep_from: u64,
    folder_bytes: u64,
    retain: &Retain,
    now: SystemTime,
) -> Option<u64> {
    let mut bytes = folder_bytes;
    let mut first_kept = None;
    for (i, segment) in segments.iter().enumerate() {
        let old = now.duration_since(segment.modified).is_ok_and(|age| age > retain.max_age);
        let needed = segment.current || segment.end_seq > keep_from;
        if needed || !(old || bytes > retain.max_bytes) {
            break;
        }
        bytes = bytes.saturating_sub(segment.bytes);
        first_kept = segments.get(i + 1).map(|next| next.first_seq);
    }
    first_kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(sizes: &[(u64, u64)], now: SystemTime) -> Vec<SegmentInfo> {
        let mut first = 0;
        let n = sizes.len();
        sizes
            .iter()
            .enumerate()
            .map(|(i, &(records, age_s))| {
                let s = SegmentInfo {
                    first_seq: first,
                    end_seq: first + records,
                    bytes: 100,
                    modified: now - Duration::from_secs(age_s),
                    current: i + 1 == n,
                };
                first += records;
                s
            })
            .collect()
    }

    #[test]
    fn the_oldest_segments_go_while_the_folder_is_over_its_bytes() {
        let now = SystemTime::now();
        let s = segments(&[(10, 5), (10, 4), (10, 3), (10, 0)], now);
        let retain = Retain { max_age: Duration::from_secs(3_600), max_bytes: 250 };
        // 400 bytes: two segments must go to get to 200.
        assert_eq!(plan(&s, 40, 400, &retain, now), Some(20));
        // Within the bound: nothing goes.
        assert_eq!(plan(&s, 40, 250, &retain, now), None);
    }

    #[test]
    fn old_segments_go_whatever_the_size() {
        let now = SystemTime::now();
        let s = segments(&[(10, 100), (10, 90), (10, 5), (10, 0)], now);
        let retain = Retain { max_age: Duration::from_secs(60), max_bytes: 1 << 30 };
        assert_eq!(plan(&s, 40, 400, &retain, now), Some(20));
    }

    #[test]
    fn what_a_reader_needs_and_the_current_segment_stay() {
        let now = SystemTime::now();
        let s = segments(&[(10, 100), (10, 90), (10, 80), (10, 70)], now);
        let retain = Retain { max_age: Duration::from_secs(1), max_bytes: 0 };
        // A reader starts at record 15, inside the second segment: only the first may go.
        assert_eq!(plan(&s, 15, 400, &retain, now), Some(10));
        assert_eq!(plan(&s, 5, 400, &retain, now), None);
        // Nothing needed at all: still the current segment stays.
        assert_eq!(plan(&s, u64::MAX, 400, &retain, now), Some(30));
    }
}
