//! What a report says it did not check: reads it could not judge and why ([`Unverifiable`]), statements
//! recorded without row operations ([`NotChecked`]), and how an accept reached in rounds was reached
//! ([`InRounds`]). A verdict never claims what was not checked.

use history::TxnId;
use serde::{Deserialize, Serialize};

use super::OpRef;

/// A read the verifier could not judge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unverifiable {
    /// The read.
    pub op: OpRef,
    /// Why, by kind (reports written before causes were recorded read as `unknown`).
    #[serde(default)]
    pub cause: UnverifiableCause,
    /// Why, in words.
    pub reason: String,
}

/// Why a read could not be judged. Each is counted in the report, and none is ever evidence of an anomaly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnverifiableCause {
    /// It observed a version written after recording began by a writer Krait did not record: a SQL function
    /// or trigger, a statement it could not map, a session whose replies it lost track of, a crash window
    /// or a client that bypassed the proxy (DESIGN.md §3, "every version has an owner").
    UnrecordedWriter,
    /// It observed a write id that no transaction wrote, after a log gap: its writer may have been lost.
    LogGap,
    /// It observed a write id that two transactions wrote.
    DuplicateWriteId,
    /// Its writer is not among the included transactions.
    WriterNotIncluded,
    /// Verified in rounds: it read a version that collection had deleted (Cobra §4.3) and its session's
    /// fences do not cover it (it came before its session's first fence, or it is held to less than
    /// serializability), so the Guarantee (Cobra §4.2) does not say whether the read was stale.
    NotCovered,
    /// Verified in rounds: a later read revealed its writer's write (DESIGN.md §3) after a round had
    /// verified and collected with the writer as recorded, without that write.
    DiscoveredLate,
    /// Verified in rounds: its writer was taken out of verification after a reject named it.
    WriterRejected,
    /// A report written before causes were recorded.
    #[default]
    Unknown,
}

impl UnverifiableCause {
    /// The cause's name in reports and on `/metrics`.
    pub fn as_str(self) -> &'static str {
        match self {
            UnverifiableCause::UnrecordedWriter => "unrecorded_writer",
            UnverifiableCause::LogGap => "log_gap",
            UnverifiableCause::DuplicateWriteId => "duplicate_write_id",
            UnverifiableCause::WriterNotIncluded => "writer_not_included",
            UnverifiableCause::NotCovered => "not_covered",
            UnverifiableCause::DiscoveredLate => "discovered_late",
            UnverifiableCause::WriterRejected => "writer_rejected",
            UnverifiableCause::Unknown => "unknown",
        }
    }
}

/// One kind of statement the verifier could not check in full (DESIGN.md §3: opaque ops), summarised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotChecked {
    /// Why the collector could not map it (`aggregate`, `predicate`, `ddl`, …).
    pub kind: String,
    /// How many such statements.
    pub statements: u64,
    /// In how many distinct transactions.
    pub transactions: u64,
    /// The first one's text, if logged.
    pub example: Option<String>,
    /// What of these statements was checked, per [`NotChecked::coverage`]; `None` when nothing was (and in
    /// reports written before this field existed).
    #[serde(default)]
    pub checked: Option<String>,
    /// What of these statements was not checked, per [`NotChecked::coverage`]; `None` in reports written
    /// before this field existed, which [`NotChecked::coverage`] then answers from the kind.
    #[serde(default)]
    pub unchecked: Option<String>,
}

/// What the verifier checked of one kind of statement, and what it did not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coverage {
    /// What was checked, or `None` when the statements were recorded without any row operation.
    pub checked: Option<&'static str>,
    /// What was not checked.
    pub unchecked: &'static str,
}

impl Coverage {
    /// What the verifier checked of statements of `kind`, as the proxy labels them. A `predicate` statement
    /// is one whose rows were recorded (the rows a SELECT returned, the rows an INSERT, UPDATE or DELETE
    /// wrote), with some part of what it depended on missing; every other kind, and any kind this version
    /// does not know, was recorded without row operations, so nothing of it was checked.
    pub fn of(kind: &str) -> Coverage {
        match kind {
            "predicate" => Coverage {
                checked: Some("the rows it returned or wrote, as reads and writes of their versions"),
                unchecked: "rows it did not return: ones a concurrent insert could have added (phantoms), a \
                            row a point read found missing when its key could not be read from the \
                            parameters, and rows read only to decide what to write (INSERT … SELECT, UPDATE … \
                            FROM, DELETE … USING, the row an ON CONFLICT found)",
            },
            _ => Coverage {
                checked: None,
                unchecked: "could not be mapped to row reads and writes, so its effects were not verified",
            },
        }
    }
}

impl NotChecked {
    /// A summary of `statements` statements of `kind` in `transactions` transactions, with what of them
    /// was checked.
    pub fn new(kind: &str, statements: u64, transactions: u64, example: Option<String>) -> NotChecked {
        let coverage = Coverage::of(kind);
        NotChecked {
            kind: kind.to_owned(),
            statements,
            transactions,
            example,
            checked: coverage.checked.map(str::to_owned),
            unchecked: Some(coverage.unchecked.to_owned()),
        }
    }

    /// What of these statements was checked and what was not: as the report says, or, for a report
    /// written before it said so, from the kind.
    pub fn coverage(&self) -> (Option<&str>, &str) {
        match &self.unchecked {
            Some(unchecked) => (self.checked.as_deref(), unchecked),
            None => {
                let c = Coverage::of(&self.kind);
                (c.checked, c.unchecked)
            }
        }
    }

    /// Groups a history's unchecked statements by kind, in the order each kind first appears.
    pub fn summarize(unchecked: &[history::UncheckedStatement]) -> Vec<NotChecked> {
        let mut out: Vec<(NotChecked, std::collections::HashSet<TxnId>)> = Vec::new();
        for u in unchecked {
            let at = match out.iter().position(|(n, _)| n.kind == u.kind) {
                Some(at) => at,
                None => {
                    let first = NotChecked::new(&u.kind, 0, 0, u.statement.clone());
                    out.push((first, Default::default()));
                    out.len() - 1
                }
            };
            let (n, txns) = &mut out[at];
            n.statements += 1;
            txns.insert(u.txn);
            n.transactions = txns.len() as u64;
        }
        out.into_iter().map(|(n, _)| n).collect()
    }
}

/// How an accept was reached round by round, with garbage collection between rounds (Cobra §4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InRounds {
    /// Transactions per round (the last one it used, when the size adapted).
    pub round_size: u64,
    /// Rounds run.
    pub rounds: u64,
    /// Transactions garbage collection deleted.
    pub collected: u64,
    /// The most transactions live after any round's collection.
    pub max_live: u64,
}

impl InRounds {
    /// How many unjudged reads verification in rounds lists one by one; the rest are counted by cause.
    pub const UNVERIFIABLE_LISTED: usize = 100;
}
