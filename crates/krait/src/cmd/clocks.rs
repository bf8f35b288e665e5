//! `--clock-error-ms COLLECTOR=MS,…`: clocks with an error bound of their own, for `krait verify` and
//! `krait serve --verify-only` ([`history::ClockBounds`]).

use std::collections::BTreeMap;
use std::str::FromStr;

use history::CollectorId;

/// One collector's clock is within `ms` milliseconds of true time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockError {
    /// The collector (its `[log] collector`).
    pub collector: CollectorId,
    /// The bound.
    pub ms: u64,
}

impl FromStr for ClockError {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wrong =
            || format!("{s:?} is not COLLECTOR=MS (a collector id and its clock's error bound, as in 3=200)");
        let (collector, ms) = s.split_once('=').ok_or_else(wrong)?;
        let collector = collector.trim().parse().map_err(|_| wrong())?;
        let ms = ms.trim().parse().map_err(|_| wrong())?;
        Ok(ClockError { collector: CollectorId(collector), ms })
    }
}

/// The bounds as verifier options take them; a collector named twice keeps its last bound.
pub fn clock_errors(list: &[ClockError]) -> BTreeMap<CollectorId, u64> {
    list.iter().map(|e| (e.collector, e.ms)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_reads_and_a_malformed_one_says_what_is_expected() {
        assert_eq!("3=200".parse(), Ok(ClockError { collector: CollectorId(3), ms: 200 }));
        for bad in ["3", "x=1", "3=-1", "=5"] {
            let err = bad.parse::<ClockError>().unwrap_err();
            assert!(err.contains("COLLECTOR=MS"), "{err}");
        }
    }
}
