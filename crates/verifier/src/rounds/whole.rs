//! A whole recorded history verified in rounds (`krait verify --rounds` on a file, `krait bench rounds`, the
//! differential tests), and what such a run found: the algorithm the online verifier runs, fed from memory.

use std::time::Instant;

use history::History;

use super::{OnlineVerifier, RoundOptions, RoundStats, RoundsError};
use crate::{Report, Verdict};

/// What verifying in rounds found ([`verify_in_rounds`], [`crate::online::verify_log_in_rounds`]).
#[derive(Clone, Debug)]
pub struct RoundsOutcome {
    /// Reject if any round or admission rejected.
    pub verdict: Verdict,
    /// The reject reports, in the order found.
    pub reports: Vec<Report>,
    /// Every round.
    pub rounds: Vec<RoundStats>,
    /// Transactions in the history.
    pub transactions: usize,
    /// Transactions garbage collection deleted.
    pub deleted: u64,
    /// The most transactions held after any round's collection.
    pub max_live: usize,
    /// Transactions held at the end.
    pub live_at_end: usize,
    /// Tombstones at the end.
    pub tombstones: usize,
    /// Why collection was off, if it was.
    pub gc_disabled: Option<String>,
    /// Link reads added to keep orderings across collection (`gc` rule 6).
    pub links_added: u64,
    /// Reads admission could not judge and dropped: of a version no recorded transaction wrote, of a write
    /// discovered after its writer was verified, or of a collected version by a transaction its session's
    /// first fence does not cover yet (see the module documentation).
    pub unverifiable_reads: u64,
    /// Wall-clock milliseconds for the whole run.
    pub elapsed_ms: f64,
}

impl RoundsOutcome {
    /// What the finished verifier `v` did with the `transactions` it was given, since `start`.
    pub(crate) fn of(v: &OnlineVerifier, transactions: usize, start: Instant) -> Self {
        RoundsOutcome {
            verdict: if v.rejects_found() == 0 { Verdict::Accept } else { Verdict::Reject },
            reports: v.rejects().to_vec(),
            rounds: v.rounds().to_vec(),
            transactions,
            deleted: v.deleted(),
            max_live: v.max_live(),
            live_at_end: v.live_transactions(),
            tombstones: v.tombstones(),
            gc_disabled: v.gc_disabled().map(str::to_owned),
            links_added: v.links_added(),
            unverifiable_reads: v.unverifiable_reads(),
            elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
        }
    }

    /// Whether the history was accepted.
    pub fn is_accept(&self) -> bool {
        self.verdict == Verdict::Accept
    }

    /// Transactions verified per second over the whole run.
    pub fn throughput(&self) -> f64 {
        self.transactions as f64 / (self.elapsed_ms / 1e3).max(1e-9)
    }
}

/// Verifies a recorded history with the same round-by-round algorithm the online verifier uses, so that it
/// can be compared with one-shot verification and benchmarked (Cobra §6.2). Sessions are fed round-robin
/// (the i-th transaction of every session, then the (i+1)-th), as collectors would deliver them; a session
/// ends when its last transaction is admitted.
pub fn verify_in_rounds(history: &History, options: &RoundOptions) -> Result<RoundsOutcome, RoundsError> {
    if !history.gaps.is_empty() {
        return Err(RoundsError::NotImplemented(
            "round-by-round verification of a history with log gaps (use one-shot verification)".into(),
        ));
    }
    let mut v = OnlineVerifier::new(history.keys.clone(), history.statements.clone(), options.clone());
    // Timed from here: copying the key table is this function's set-up (`krait serve` hands the verifier
    // the keys it reads instead), and on TPC-C's 700k keys it was a twentieth of the run.
    let start = Instant::now();
    v.note_unchecked(&history.unchecked);
    let sessions = history.sessions();
    for &s in sessions.keys() {
        v.session_started(s);
    }
    let longest = sessions.values().map(Vec::len).max().unwrap_or(0);
    'feed: for i in 0..longest {
        for (&s, txns) in &sessions {
            if let Some(t) = txns.get(i) {
                v.push((*t).clone())?;
                if i + 1 == txns.len() {
                    v.session_ended(s);
                }
                if v.stopped() {
                    break 'feed;
                }
            }
        }
    }
    v.finish()?;
    Ok(RoundsOutcome::of(&v, history.transactions.len(), start))
}
