//! A whole recorded history verified in rounds (`krait verify --rounds` on a file, `krait bench rounds`, the
//! differential tests), and what such a run found: the algorithm the online verifier runs, fed from memory.

use std::collections::HashSet;
use std::time::Instant;

use history::{History, TxnId};

use super::{NotJudged, OnlineVerifier, RoundOptions, RoundStats, RoundsError};
use crate::report::{Counts, InRounds, NotChecked, Timings};
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
    /// The reads admission could not judge and dropped, by cause, with the first few listed: of a version
    /// no recorded transaction wrote, of a write discovered after a round verified its writer, or of a
    /// collected version by a transaction its session's fences do not cover (see the module documentation).
    pub not_judged: NotJudged,
    /// Statements recorded without row operations, by kind.
    pub not_checked: Vec<NotChecked>,
    /// Rounds run (`rounds` may keep only the last ones online).
    pub rounds_run: u64,
    /// The round size at the end (it moves when adaptive).
    pub round_size: usize,
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
            not_judged: v.not_judged().clone(),
            not_checked: v.not_checked(),
            rounds_run: v.rounds_done(),
            round_size: v.round_size(),
            elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
        }
    }

    /// Whether the history was accepted.
    pub fn is_accept(&self) -> bool {
        self.verdict == Verdict::Accept
    }

    /// What the rounds found, as one report: the first reject's report; or, on accept, a report of what was
    /// checked, `committed` transactions of which `without_timestamps` had no timestamps, and of the reads
    /// that were not. An accept in rounds has no serial order: collection deleted what each round settled.
    pub fn into_report(
        self,
        options: &RoundOptions,
        committed: u64,
        without_timestamps: u64,
    ) -> Result<Report, RoundsError> {
        if let Some(reject) = self.reports.into_iter().next() {
            return Ok(reject);
        }
        // An empty history's accept carries the options and the level's parts; what it says of its
        // (empty) run goes.
        let mut report = crate::verify(&History::default(), &options.verify)?;
        report.serial_order = None;
        report.timings = Timings::default();
        report.counts = Counts {
            transactions: self.transactions as u64,
            committed,
            vertices: committed,
            ..Counts::default()
        };
        if let Some(rt) = &mut report.real_time {
            rt.without_timestamps = without_timestamps;
        }
        report.unverifiable = self.not_judged.listed().to_vec();
        report.unverifiable_unlisted = self.not_judged.unlisted().clone();
        report.not_checked = self.not_checked;
        report.rounds = Some(InRounds {
            round_size: self.round_size as u64,
            rounds: self.rounds_run,
            collected: self.deleted,
            max_live: self.max_live as u64,
        });
        Ok(report)
    }

    /// How many reads admission could not judge and dropped ([`RoundsOutcome::not_judged`]).
    pub fn unverifiable_reads(&self) -> u64 {
        self.not_judged.total()
    }

    /// Transactions verified per second over the whole run.
    pub fn throughput(&self) -> f64 {
        self.transactions as f64 / (self.elapsed_ms / 1e3).max(1e-9)
    }
}

/// Verifies a recorded history with the same round-by-round algorithm the online verifier uses, so that it
/// can be compared with one-shot verification and benchmarked (Cobra §6.2). Sessions are fed round-robin
/// (the i-th transaction of every session, then the (i+1)-th), as collectors would deliver them; a session
/// ends when its last transaction is admitted. The transactions after the history's first log gap are
/// pushed as recorded after it ([`OnlineVerifier::push_after_log_gap`]).
pub fn verify_in_rounds(history: &History, options: &RoundOptions) -> Result<RoundsOutcome, RoundsError> {
    let past_gap: HashSet<TxnId> = match history.gaps.iter().map(|g| g.after_txns).min() {
        Some(first) => {
            let first = usize::try_from(first).unwrap_or(usize::MAX);
            history.transactions.iter().skip(first).map(|t| t.id).collect()
        }
        None => HashSet::new(),
    };
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
                if past_gap.contains(&t.id) {
                    v.push_after_log_gap((*t).clone())?;
                } else {
                    v.push((*t).clone())?;
                }
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
