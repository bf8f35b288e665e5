//! Forgetting the statement texts of collected transactions (issue 20, bounded memory). Not one of Fig. 3's
//! stages: it runs after collection, when the round is over.
//!
//! Transactions cite their statements by [`StmtRef`], an index into the residual history's table of texts,
//! which only grows: a client that puts its values in its statements (the simple protocol) adds a text per
//! statement run, and collection deletes the transactions but not their texts. So, once the table is large
//! and at least half of it is cited by no transaction held (live or waiting for admission), the table is
//! rebuilt from the texts still cited, and those transactions renumbered.
//!
//! Whoever hands the verifier [`StmtRef`]s must know when that happened: the online feeder keeps a map
//! from its reader's numbering to the verifier's, and clears it when [`OnlineVerifier::statements_renumbered`]
//! moves. So the verifier forgets only when asked to ([`OnlineVerifier::forgetting_statements`]); a caller
//! that pushes transactions citing a table of its own (`verify --rounds`, which hands over the whole
//! history's) never asks. The rule depends only on the state a checkpoint stores, so a verifier restored
//! from one renumbers exactly where one that never stopped does.

use history::{StmtRef, Transaction};

use super::OnlineVerifier;
use crate::FastMap;

/// The table is looked at only from this many texts on: below it, forgetting saves too little to matter.
pub(super) const FORGET_FROM: usize = 4_096;

impl OnlineVerifier {
    /// Lets the verifier forget the texts of collected transactions after a round, renumbering the
    /// statements of those it holds (see the module documentation); the caller then translates its own
    /// statements again whenever [`OnlineVerifier::statements_renumbered`] moves.
    pub fn forgetting_statements(&mut self) {
        self.forget_statements = true;
    }

    /// The residual history: the transactions held after the last round's collection and admitted since,
    /// with the keys and statement texts they cite.
    pub fn residual(&self) -> &history::History {
        &self.work
    }

    /// How many times the statements were renumbered since this verifier was made or restored.
    pub fn statements_renumbered(&self) -> u64 {
        self.statements_renumbered
    }

    /// After a round: rebuilds the table of texts from those still cited, if asked to and worth it.
    pub(super) fn forget_collected_statements(&mut self) {
        if !self.forget_statements || self.work.statements.len() < FORGET_FROM {
            return;
        }
        let mut renumbered: FastMap<StmtRef, StmtRef> = FastMap::default();
        let held = self.work.transactions.iter().chain(self.waiting.values().flatten());
        for stmt in held.flat_map(Transaction::cited_statements) {
            let next = StmtRef(renumbered.len() as u32);
            renumbered.entry(stmt).or_insert(next);
        }
        if renumbered.len() * 2 > self.work.statements.len() {
            return;
        }
        let mut texts = vec![String::new(); renumbered.len()];
        for (&old, &new) in &renumbered {
            texts[new.0 as usize] = std::mem::take(&mut self.work.statements[old.0 as usize]);
        }
        self.work.statements = texts;
        let held = self.work.transactions.iter_mut().chain(self.waiting.values_mut().flatten());
        for t in held {
            t.renumber_statements(|s| renumbered[&s]);
        }
        self.statements_renumbered += 1;
    }
}
