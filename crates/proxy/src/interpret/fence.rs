//! Fence transactions without client changes (DESIGN.md §3 "Fences without client changes", Cobra §4.2).
//!
//! Every `fence.every` committed client transactions on a connection, the session runs one fence
//! transaction on that same connection, between two client transactions (never while the client has one
//! open), and swallows every reply. The fence reads and rewrites the single row of `krait_fence`, so all
//! fences form one read-modify-write chain; session order then places every client transaction between two
//! fences, which gives the verifier its epochs.
//!
//! The fence runs at READ COMMITTED with `SELECT ... FOR UPDATE`: the lock makes the read return the
//! latest committed version (the one the UPDATE then replaces), whatever the session's default isolation,
//! and two concurrent fences queue on the row lock instead of failing with serialization errors.

use bytes::Bytes;
use history::log::LoggedOp;

use super::versions::{VersionBook, key_name, version_id};

/// The fence table's name (also its key namespace).
pub const FENCE_TABLE: &str = "krait_fence";

/// Creates the fence table and its single row if missing. Safe to run from several sessions: a lost race
/// on CREATE fails harmlessly and the next fence retries.
pub const SETUP_SQL: &str = "CREATE TABLE IF NOT EXISTS krait_fence (id int PRIMARY KEY, epoch bigint NOT NULL); \
     INSERT INTO krait_fence VALUES (0, 0) ON CONFLICT (id) DO NOTHING";

/// One fence transaction as one simple-protocol query string. Replies: BEGIN, the read row (xmin, id), the
/// written row (xmin, id), COMMIT, ReadyForQuery.
pub const FENCE_SQL: &str = "BEGIN ISOLATION LEVEL READ COMMITTED; \
     SELECT xmin::text, id::text FROM krait_fence WHERE id = 0 FOR UPDATE; \
     UPDATE krait_fence SET epoch = epoch + 1 WHERE id = 0 RETURNING xmin::text, id::text; \
     COMMIT";

/// Counts committed client transactions on one connection and says when a fence is due.
#[derive(Debug, Clone)]
pub struct FenceCounter {
    every: u64,
    since: u64,
}

impl FenceCounter {
    /// A counter that asks for a fence every `every` commits; 0 disables fences.
    pub fn new(every: u64) -> Self {
        FenceCounter { every, since: 0 }
    }

    /// Notes one committed client transaction.
    pub fn committed(&mut self) {
        self.since = self.since.saturating_add(1);
    }

    /// Whether a fence is due now.
    pub fn due(&self) -> bool {
        self.every > 0 && self.since >= self.every
    }

    /// Notes that a fence ran (whatever its outcome: an aborted fence is simply retried next time).
    pub fn fenced(&mut self) {
        self.since = 0;
    }
}

/// The ops of a fence: the read of the version it found and the write of the next one. `read` and
/// `written` are the (xmin, id) values of the two result rows.
pub fn fence_ops(read: [&[u8]; 2], written: [&[u8]; 2], book: &VersionBook) -> Vec<LoggedOp> {
    let key = key_name(FENCE_TABLE, &[read[1]]);
    let old = version_id(&key, read[0]);
    let new_key = key_name(FENCE_TABLE, &[written[1]]);
    let new = version_id(&new_key, written[0]);
    book.insert(new);
    vec![
        LoggedOp::Read { key, observed: book.observed(old), stmt: Some(1) },
        LoggedOp::Write { key: new_key, write: new, stmt: Some(2) },
    ]
}

/// The statement texts a fence transaction records, so its op `stmt` indices resolve.
pub fn fence_statements() -> Vec<String> {
    FENCE_SQL.split("; ").map(|s| s.trim().to_owned()).collect()
}

/// Reads the two (xmin, id) rows of a fence's replies from their DataRow values.
pub fn fence_row(values: &[Option<Bytes>]) -> Option<[Bytes; 2]> {
    match values {
        [Some(a), Some(b)] => Some([a.clone(), b.clone()]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::Observed;

    #[test]
    fn counter_fires_every_n_commits_and_zero_disables() {
        let mut c = FenceCounter::new(3);
        for _ in 0..2 {
            c.committed();
            assert!(!c.due());
        }
        c.committed();
        assert!(c.due());
        c.fenced();
        assert!(!c.due());
        let mut off = FenceCounter::new(0);
        for _ in 0..100 {
            off.committed();
        }
        assert!(!off.due());
    }

    #[test]
    fn fences_chain_through_the_book() {
        let book = VersionBook::new();
        let first = fence_ops([b"5", b"0"], [b"9", b"0"], &book);
        assert!(matches!(first[0], LoggedOp::Read { observed: Observed::PreHistory(_), .. }));
        let second = fence_ops([b"9", b"0"], [b"12", b"0"], &book);
        let (LoggedOp::Write { write, .. }, LoggedOp::Read { observed, .. }) = (&first[1], &second[0]) else {
            panic!("shape")
        };
        assert_eq!(*observed, Observed::Version(*write));
        assert_eq!(fence_statements().len(), 4);
    }
}
