//! A reject report checked on its own: the history its transactions make (REPORT.md, "Checking a report
//! without its history").
//!
//! A reject report carries every transaction it cites, with all its ops (`carried` decides which, when the
//! report is built), so the history log it came from may be compacted, its old records deleted, without
//! losing the means to check the report. [`Report::cited_history`] rebuilds a [`History`] from the report's
//! `transactions`; [`check_cited`] runs the independent checker ([`check_report_detailed`]) on it.
//!
//! Keys. A report names a key by its index in the original history's key table (`key_id`), which may hold
//! millions of keys the report never mentions. The rebuilt history numbers only the keys it needs, from 0,
//! so [`CitedHistory`] also carries the report with every key id renumbered to match: the same facts, in
//! the rebuilt history's terms. Ops name their key by id from schema 4; in older reports an op's key is
//! found by its printed name among the keys the report's edges and derivations name.
//!
//! What the rebuilt history cannot show is what the whole history does *not* hold: a garbage read (or an
//! unowned version) claims that no recorded transaction wrote the version read, and a subset of the
//! transactions always agrees. [`CitedSummary::absences_unproved`] counts such anomalies.

use std::collections::{BTreeMap, HashMap, HashSet};

use history::{History, Key, KeyName, Observed, Op, StmtRef, Transaction, WriteId};
use thiserror::Error;

use super::{AnomalyClass, Basis, CycleEdge, OpReport, RefutationNode, Report, Verdict};
use crate::check::{CheckError, CheckSummary, check_report_detailed};

/// Why a report could not be re-checked against its own transactions, or does not hold against them.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CitedError {
    /// An accept report: its evidence is a serial order of the whole history, which it does not carry.
    #[error("an accept report carries no transactions; check it against the history it came from")]
    Accept,
    /// The report's transactions do not make a history (an op that does not parse, a transaction id used
    /// twice, a key named two ways): the report contradicts itself, so it does not hold.
    #[error("the report's transactions do not make a history: {0}")]
    Malformed(String),
    /// The rebuilt history does not bear the report out.
    #[error(transparent)]
    Refuted(#[from] CheckError),
    /// A report written before reports carried every transaction they cite (schema 4) does not hold
    /// against the transactions it carries; it may still hold against its whole history.
    #[error(
        "a report of schema {schema} carries only the transactions its anomalies name (from schema 4 it \
         carries every one it cites), and they do not bear it out ({source}): check it against its history"
    )]
    Incomplete {
        /// The report's schema version.
        schema: u32,
        /// Why it does not hold against what it carries.
        source: CheckError,
    },
}

/// The history a report's transactions make, and the report in its terms.
#[derive(Clone, Debug)]
pub struct CitedHistory {
    /// The report's transactions, in the report's order, with keys numbered from 0.
    pub history: History,
    /// The report, with every `key_id` renumbered to the rebuilt history's keys; nothing else changed.
    pub report: Report,
}

/// What re-checking a report against its own transactions covered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CitedSummary {
    /// What the checker covered.
    pub check: CheckSummary,
    /// How many transactions the report carries: the whole history it was checked against.
    pub transactions: usize,
    /// Anomalies whose claim is that no recorded transaction wrote some version (garbage reads, unowned
    /// versions): the report's transactions show the read but cannot show the absence, which only the
    /// whole history can.
    pub absences_unproved: usize,
}

impl Report {
    /// Rebuilds the history this reject report's `transactions` make, so that the report can be checked
    /// without the history log it came from (which may since have been compacted).
    pub fn cited_history(&self) -> Result<CitedHistory, CitedError> {
        if self.verdict == Verdict::Accept {
            return Err(CitedError::Accept);
        }
        let mut report = self.clone();
        let mut keys = Keys::default();
        for_each_key(&mut report, &mut |id, name| keys.note_name(*id, name));
        let mut history = History::default();
        let mut statements: HashMap<String, StmtRef> = HashMap::new();
        let mut ids = HashSet::new();
        for t in &self.transactions {
            if !ids.insert(t.id) {
                return Err(malformed(format!("{} is carried twice", t.id)));
            }
            let mut txn = Transaction::new(t.id, t.session, t.seq);
            txn.outcome = t.outcome;
            txn.start_ns = t.start_ns;
            txn.commit_ns = t.commit_ns;
            txn.collector = t.collector;
            txn.isolation = t.isolation;
            for (i, op) in t.ops.iter().enumerate() {
                if op.index != i {
                    return Err(malformed(format!("{} op {i} is numbered {}", t.id, op.index)));
                }
                let parsed = parse_op(op).map_err(|e| malformed(format!("{} op {i}: {e}", t.id)))?;
                let key_ref = match op.key_id {
                    Some(id) => KeyRef::Id(id),
                    None => {
                        keys.by_name(parsed.key).map_err(|e| malformed(format!("{} op {i}: {e}", t.id)))?
                    }
                };
                let key = keys
                    .intern(&mut history, key_ref, parsed.key, op)
                    .map_err(|e| malformed(format!("{} op {i}: {e}", t.id)))?;
                let stmt = op.sql.as_ref().map(|sql| {
                    *statements.entry(sql.clone()).or_insert_with(|| history.add_statement(sql.clone()))
                });
                txn.ops.push(match parsed.write {
                    Some(write) => Op::Write { key, write, stmt },
                    None => Op::Read { key, observed: parsed.observed, stmt },
                });
            }
            history.transactions.push(txn);
        }
        let mut failed = None;
        for_each_key(
            &mut report,
            &mut |id, name| match keys.intern_named(&mut history, KeyRef::Id(*id), name) {
                Ok(key) => *id = key.0,
                Err(e) => {
                    failed.get_or_insert(e);
                }
            },
        );
        match failed {
            Some(e) => Err(malformed(e)),
            None => Ok(CitedHistory { history, report }),
        }
    }
}

/// Re-checks a reject report against the transactions it carries, and nothing else: what
/// [`check_report_detailed`] says of the report and its [`Report::cited_history`].
///
/// ```
/// use history::HistoryBuilder;
/// use verifier::{Options, check_cited, verify};
///
/// let h = HistoryBuilder::new()
///     .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
///     .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
///     .build();
/// let report = verify(&h, &Options::default()).unwrap();
/// drop(h); // the report alone
/// let covered = check_cited(&report).unwrap();
/// assert_eq!(covered.transactions, 2);
/// ```
pub fn check_cited(report: &Report) -> Result<CitedSummary, CitedError> {
    let cited = report.cited_history()?;
    let check = check_report_detailed(&cited.history, &cited.report).map_err(|source| {
        match report.schema_version < SELF_CONTAINED_SINCE {
            true => CitedError::Incomplete { schema: report.schema_version, source },
            false => CitedError::Refuted(source),
        }
    })?;
    let absences_unproved = report
        .anomalies
        .iter()
        .filter(|a| matches!(a.class, AnomalyClass::GarbageRead | AnomalyClass::UnownedVersion))
        .count();
    Ok(CitedSummary { check, transactions: report.transactions.len(), absences_unproved })
}

/// The first schema whose reject reports carry every transaction they cite.
const SELF_CONTAINED_SINCE: u32 = 4;

fn malformed(why: impl Into<String>) -> CitedError {
    CitedError::Malformed(why.into())
}

/// A key as the report names it: by its index in the original history's key table, or, in an op of a
/// report written before ops carried that index, by its printed name alone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum KeyRef {
    Id(u32),
    Name(String),
}

/// The rebuilt history's keys, and what the report calls each.
#[derive(Default)]
struct Keys {
    /// Each key met so far, its new key and its printed name.
    known: HashMap<KeyRef, (Key, String)>,
    /// The original ids the report's edges, derivations and choices give each printed name.
    ids_by_name: BTreeMap<String, HashSet<u32>>,
}

impl Keys {
    fn note_name(&mut self, id: u32, name: &str) {
        if !name.is_empty() {
            self.ids_by_name.entry(name.to_owned()).or_default().insert(id);
        }
    }

    /// An op's key in a report whose ops do not carry key ids: the one id the report gives its name, or,
    /// when no edge names it, the name itself (such a key is only compared with other ops' keys).
    fn by_name(&self, name: &str) -> Result<KeyRef, String> {
        match self.ids_by_name.get(name) {
            None => Ok(KeyRef::Name(name.to_owned())),
            Some(ids) if ids.len() == 1 => Ok(KeyRef::Id(*ids.iter().next().expect("one id"))),
            Some(_) => Err(format!("several keys are named {name}, and the op does not say which")),
        }
    }

    /// The key of an op: its name as the history's key table would hold it, from the op's SQL row key
    /// where it has one.
    fn intern(&mut self, h: &mut History, key: KeyRef, printed: &str, op: &OpReport) -> Result<Key, String> {
        let name = match &op.key {
            Some(row) => KeyName { namespace: row.table.clone(), bytes: row.pk.join("\u{1f}").into_bytes() },
            None => KeyName { namespace: String::new(), bytes: printed.as_bytes().to_vec() },
        };
        self.intern_as(h, key, printed, name)
    }

    /// The key an edge, derivation or choice names.
    fn intern_named(&mut self, h: &mut History, key: KeyRef, printed: &str) -> Result<Key, String> {
        let name = KeyName { namespace: String::new(), bytes: printed.as_bytes().to_vec() };
        self.intern_as(h, key, printed, name)
    }

    fn intern_as(
        &mut self,
        h: &mut History,
        key: KeyRef,
        printed: &str,
        name: KeyName,
    ) -> Result<Key, String> {
        if let Some((k, known)) = self.known.get(&key) {
            // One key, one name: a report whose ops and edges name one key two ways contradicts itself.
            if !printed.is_empty() && !known.is_empty() && printed != known {
                return Err(format!("one key is named both {known} and {printed}"));
            }
            return Ok(*k);
        }
        // Two keys may print alike (hashed keys, or a `:` in a name); the rebuilt table must keep them
        // apart, so a taken name gets a suffix.
        let mut candidate = name.clone();
        let mut n = 0u32;
        let k = loop {
            if h.keys.get(&candidate).is_none() {
                break h.keys.intern(candidate);
            }
            n += 1;
            candidate = KeyName {
                namespace: name.namespace.clone(),
                bytes: [&name.bytes[..], b"#", n.to_string().as_bytes()].concat(),
            };
        };
        self.known.insert(key, (k, printed.to_owned()));
        Ok(k)
    }
}

/// Calls `f` on every key id the report's anomalies, refutations and derivations hold, with the key's
/// printed name (empty where the report gives none).
fn for_each_key(report: &mut Report, f: &mut dyn FnMut(&mut u32, &str)) {
    for a in &mut report.anomalies {
        edges(&mut a.cycle, f);
        if let Some(r) = &mut a.refutation {
            for c in &mut r.choices {
                f(&mut c.key_id, &c.key);
            }
            node(&mut r.tree, f);
        }
    }
    for d in &mut report.derivations {
        f(&mut d.key_id, &d.key);
        if let Basis::OtherOrderCycle { cycle } = &mut d.basis {
            edges(cycle, f);
        }
    }
}

fn edges(cycle: &mut [CycleEdge], f: &mut dyn FnMut(&mut u32, &str)) {
    for e in cycle {
        if let Some(id) = &mut e.key_id {
            f(id, e.key.as_deref().unwrap_or(""));
        }
    }
}

fn node(n: &mut RefutationNode, f: &mut dyn FnMut(&mut u32, &str)) {
    match n {
        RefutationNode::Cycle { cycle } => edges(cycle, f),
        RefutationNode::Split { first_before_second, second_before_first, .. } => {
            node(first_before_second, f);
            node(second_before_first, f);
        }
    }
}

/// An op as its report text gives it.
struct ParsedOp<'a> {
    /// The key's printed name.
    key: &'a str,
    /// For a write, the version it wrote.
    write: Option<WriteId>,
    /// For a read, the version it returned.
    observed: Observed,
}

/// Reads `r(key) = version` or `w(key) = version` (what `certificate::txn_report` writes), checking it
/// against the op's `version` and `write` fields where the report has them.
fn parse_op(op: &OpReport) -> Result<ParsedOp<'_>, String> {
    let (is_write, rest) = match (op.text.strip_prefix("r("), op.text.strip_prefix("w(")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => return Err(format!("{:?} is neither r(key) = version nor w(key) = version", op.text)),
    };
    let Some((key, version)) = rest.rsplit_once(") = ") else {
        return Err(format!("{:?} is neither r(key) = version nor w(key) = version", op.text));
    };
    if op.version.as_deref().is_some_and(|v| v != version) {
        return Err(format!("its text says {version} and its version {:?}", op.version));
    }
    if op.write && !is_write {
        return Err("it is a write whose text is a read".to_owned());
    }
    let observed = parse_version(version).ok_or_else(|| format!("{version:?} is not a version"))?;
    let write = match (is_write, observed) {
        (false, _) => None,
        (true, Observed::Version(w)) => Some(w),
        (true, _) => return Err(format!("a write of {version}, which is not a write id")),
    };
    Ok(ParsedOp { key, write, observed })
}

/// The inverse of `normalize::show`: `w7`, `init`, `init#3`, `absent`, `unrecorded#2`, `foreign#9`.
fn parse_version(text: &str) -> Option<Observed> {
    let number = |prefix: &str| {
        let digits = text.strip_prefix(prefix)?;
        (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| digits.parse::<u64>().ok())?
    };
    match text {
        "init" => Some(Observed::PreHistory(0)),
        "absent" => Some(Observed::Absent),
        _ => number("w")
            .map(|w| Observed::Version(WriteId(w)))
            .or_else(|| number("init#").map(Observed::PreHistory))
            .or_else(|| number("unrecorded#").map(Observed::Unrecorded))
            .or_else(|| number("foreign#").map(Observed::Foreign)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_version_the_report_prints_reads_back() {
        use crate::normalize::show;
        for o in [
            Observed::Version(WriteId(7)),
            Observed::PreHistory(0),
            Observed::PreHistory(3),
            Observed::Absent,
            Observed::Unrecorded(2),
            Observed::Foreign(9),
        ] {
            assert_eq!(parse_version(&show(o)), Some(o));
        }
        for bad in ["", "w", "w+1", "w-1", "init#", "x7", "w7 ", "absent#1"] {
            assert_eq!(parse_version(bad), None, "{bad:?}");
        }
    }
}
