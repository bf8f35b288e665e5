//! The reads verification in rounds could not judge: counted by cause, and the first few kept with the op
//! and the reason, so that an accept can say what it did not check (a verdict never claims what was not
//! checked) and a person can look at examples.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::report::{InRounds, OpRef, Unverifiable, UnverifiableCause};

/// Unjudged reads, by cause, with the first [`InRounds::UNVERIFIABLE_LISTED`] listed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NotJudged {
    /// The listed reads, in the order found.
    listed: Vec<Unverifiable>,
    /// The reads found beyond those listed, or without an op to cite, by cause.
    unlisted: BTreeMap<UnverifiableCause, u64>,
}

impl NotJudged {
    /// Notes `op`'s read, unjudged for `cause`; `reason` is only worded for a read that is listed.
    pub(super) fn read(&mut self, op: OpRef, cause: UnverifiableCause, reason: impl FnOnce() -> String) {
        if self.listed.len() < InRounds::UNVERIFIABLE_LISTED {
            self.listed.push(Unverifiable { op, cause, reason: reason() });
        } else {
            *self.unlisted.entry(cause).or_default() += 1;
        }
    }

    /// Notes `n` reads unjudged for `cause` that have no op to cite (their op numbers changed when the
    /// reads before them were dropped).
    pub(super) fn uncited(&mut self, cause: UnverifiableCause, n: u64) {
        if n > 0 {
            *self.unlisted.entry(cause).or_default() += n;
        }
    }

    /// How many reads were not judged.
    pub fn total(&self) -> u64 {
        self.listed.len() as u64 + self.unlisted.values().sum::<u64>()
    }

    /// The reads listed one by one.
    pub fn listed(&self) -> &[Unverifiable] {
        &self.listed
    }

    /// The reads counted but not listed, by cause.
    pub fn unlisted(&self) -> &BTreeMap<UnverifiableCause, u64> {
        &self.unlisted
    }

    /// Every unjudged read counted by cause, listed or not.
    pub fn by_cause(&self) -> BTreeMap<UnverifiableCause, u64> {
        let mut counts = self.unlisted.clone();
        for u in &self.listed {
            *counts.entry(u.cause).or_default() += 1;
        }
        counts
    }
}
