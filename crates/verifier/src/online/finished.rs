//! A finished history log verified in rounds, from its first record to its last (`krait verify --rounds`
//! on a log folder).
//!
//! It runs the [`Feeder`] that `krait serve` runs online, reading as fast as it can instead of as the log
//! grows, so it verifies what the online verifier would have, and holds what that holds: the live
//! transactions, the tombstones and the log reader's tables, never the whole history. Replaying a log into
//! one [`history::History`] first held all of it: 6.5 GB for a 10-minute `krait serve` log of 1.6 million
//! transactions. At the end of the records, intents still waiting for an outcome finish as Indeterminate, as
//! one-shot replay has them ([`Feeder::end_of_log`]).

use std::time::Instant;

use history::log::HistoryLog;

use super::{Feeder, MAX_RECORDS_PER_TICK, OnlineError, Status};
use crate::{RoundOptions, RoundsOutcome};

/// What verifying a finished log in rounds found.
#[derive(Debug)]
pub struct LogRounds {
    /// The verdict, the reports and the rounds, as [`crate::verify_in_rounds`] gives them.
    pub outcome: RoundsOutcome,
    /// What was read: transactions, committed ones without timestamps, statements not checked.
    pub status: Status,
}

/// Verifies the records of `log` in rounds, as `krait serve`'s verifier would have online; stops at the
/// first reject when `options` say so ([`RoundOptions::stop_at_first_reject`]).
///
/// After a gap (a proxy run that crashed under `group` or `none` durability), reads of versions no
/// transaction is known to have written are not judged, as `krait serve` and one-shot verification have
/// them: their writers may be transactions the gap lost.
pub fn verify_log_in_rounds(log: &dyn HistoryLog, options: &RoundOptions) -> Result<LogRounds, OnlineError> {
    let start = Instant::now();
    let mut feeder = Feeder::new(options.clone(), None);
    loop {
        let read = feeder.read_log(log, MAX_RECORDS_PER_TICK)?;
        if read == 0 || feeder.verifier.stopped() {
            break;
        }
    }
    feeder.end_of_log()?;
    let status = feeder.status();
    let transactions = usize::try_from(status.txns_read).unwrap_or(usize::MAX);
    Ok(LogRounds { outcome: RoundsOutcome::of(&feeder.verifier, transactions, start), status })
}
