//! Short labels for the text of a report: `T1`, `T2`, … for transactions in the order the text first names
//! them, `S1`, `S2`, … for sessions, each listed once at the end with its real id and wall-clock times. Only
//! when the real ids are long (the proxy's are 16 digits) and the report is a reject: a person reads a cycle
//! of `T1 -> T2 -> T1` at a glance, and the JSON report keeps the real ids.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use super::Report;

/// Ids with fewer digits than this are printed as they are.
const LONG_ID_DIGITS: usize = 6;

/// Before this (in ns since the Unix epoch: 2001-09-09) a timestamp is not wall-clock time (an importer's
/// counter, say) and is printed as a number.
const WALL_CLOCK_FROM_NS: u64 = 1_000_000_000 * 1_000_000_000;

/// A timestamp in RFC 3339 (UTC, with nanoseconds), or as nanoseconds when it is not wall-clock time.
pub(super) fn wall_clock(ns: u64) -> String {
    let formatted = (ns >= WALL_CLOCK_FROM_NS)
        .then(|| time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns)).ok())
        .flatten()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok());
    formatted.unwrap_or_else(|| format!("{ns} ns"))
}

/// The short labels of one report: which ids are shortened, and the label each got, in the order the text
/// first named them. The text report and the HTML page share them, so `T1` is the same transaction in both.
#[derive(Debug)]
pub struct Labels {
    /// Long transaction ids that get a label (empty when none is long, or on accept).
    txns: HashSet<u64>,
    /// Long session ids that get a label.
    sessions: HashSet<u64>,
    /// `(b'T' or b'S', id)` to its label.
    labels: HashMap<(u8, u64), String>,
    /// The labelled ids, in the order they were first named.
    order: Vec<(u8, u64)>,
}

impl Labels {
    /// The ids `report` names that are worth shortening, with no label given yet.
    fn empty(report: &Report) -> Labels {
        let txns: HashSet<u64> = report
            .transactions
            .iter()
            .map(|t| t.id.0)
            .chain(report.anomalies.iter().flat_map(|a| a.cycle.iter().flat_map(|e| [e.from.0, e.to.0])))
            .chain(report.anomalies.iter().flat_map(|a| a.ops.iter().map(|o| o.txn.0)))
            .collect();
        let sessions: HashSet<u64> = report.transactions.iter().map(|t| t.session.0).collect();
        // Each kind is shortened only when some of its ids are long.
        let long = |id: &u64| id.to_string().len() >= LONG_ID_DIGITS;
        let txns = if txns.iter().any(long) && !report.is_accept() { txns } else { HashSet::new() };
        let sessions =
            if sessions.iter().any(long) && !report.is_accept() { sessions } else { HashSet::new() };
        Labels { txns, sessions, labels: HashMap::new(), order: Vec::new() }
    }

    /// The labels `report`'s text report uses: given in the order that text first names each id.
    pub fn of(report: &Report) -> Labels {
        let mut labels = Labels::empty(report);
        labels.assign(&report.to_string());
        labels
    }

    /// Gives a label to every shortened id of `text` that has none yet, and returns `text` with the labels
    /// in place of the ids.
    fn assign(&mut self, text: &str) -> String {
        replace_ids(text, |kind, id| {
            let known = if kind == b'T' { self.txns.contains(&id) } else { self.sessions.contains(&id) };
            if !known {
                return None;
            }
            let order = &mut self.order;
            let label = self.labels.entry((kind, id)).or_insert_with(|| {
                order.push((kind, id));
                let same_kind = order.iter().filter(|(k, _)| *k == kind).count();
                format!("{}{same_kind}", char::from(kind))
            });
            Some(label.clone())
        })
    }

    /// `text` with every labelled id replaced by its label; ids without one stay as they are.
    pub(super) fn rewrite(&self, text: &str) -> String {
        if self.order.is_empty() {
            return text.to_owned();
        }
        replace_ids(text, |kind, id| self.labels.get(&(kind, id)).cloned())
    }

    /// A transaction's label: `T1`, … when shortened, else `T` and its id.
    pub fn txn(&self, id: u64) -> String {
        self.labels.get(&(b'T', id)).cloned().unwrap_or_else(|| format!("T{id}"))
    }

    /// A session's label: `S1`, … when shortened, else `S` and its id.
    pub fn session(&self, id: u64) -> String {
        self.labels.get(&(b'S', id)).cloned().unwrap_or_else(|| format!("S{id}"))
    }

    /// Whether any id was shortened (then a legend must say what the labels stand for).
    pub(super) fn any(&self) -> bool {
        !self.order.is_empty()
    }
}

impl Report {
    /// The one-line verdict with the short labels [`Report::render_text`] gives (`T1`, `S1`, …, in the
    /// order the full text first names them, so both agree) in place of long ids: for lists of reports a
    /// person reads, each beside a way to show the report in full with its legend.
    pub fn labelled_verdict_line(&self) -> String {
        Labels::empty(self).assign(&self.verdict_line())
    }

    /// A reject in a few words, for one line of a list: the first anomaly's class and its cycle with keys
    /// (`write skew: T1 -rw(kv:0)-> T2 -rw(kv:1)-> T1`), labelled as [`Report::render_text`] labels it, or
    /// the first sentence of its summary when it has no cycle. An accept is its verdict line.
    pub fn labelled_summary_line(&self) -> String {
        let Some(a) = self.anomalies.first() else { return self.labelled_verdict_line() };
        let mut line = format!("{}: ", a.class.name());
        match a.cycle.first() {
            Some(first) => {
                line.push_str(&format!("T{}", first.from.0));
                for e in &a.cycle {
                    let key = e.key.as_deref().map(|k| format!("({k})")).unwrap_or_default();
                    line.push_str(&format!(" -{}{key}-> T{}", e.kind.name(), e.to.0));
                }
            }
            None => line.push_str(a.summary.split(". ").next().unwrap_or(&a.summary)),
        }
        if self.anomalies.len() > 1 {
            line.push_str(&format!(" (and {} more anomalies)", self.anomalies.len() - 1));
        }
        Labels::empty(self).assign(&line)
    }
}

/// Calls `label` on every whole-word `T<digits>` and `S<digits>` of `text` and puts what it returns, if
/// anything, in the word's place.
fn replace_ids(text: &str, mut label: impl FnMut(u8, u64) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let boundary = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if boundary && (c == b'T' || c == b'S') {
            let digits = bytes[i + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
            let end = i + 1 + digits;
            let whole = digits > 0 && bytes.get(end).is_none_or(|b| !b.is_ascii_alphanumeric());
            let id = whole.then(|| text[i + 1..end].parse::<u64>().ok()).flatten();
            if let Some(l) = id.and_then(|id| label(c, id)) {
                out.push_str(&l);
                i = end;
                continue;
            }
        }
        // Copy one whole character (the text is UTF-8; only ASCII bytes start a label).
        let len = text[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&text[i..i + len]);
        i += len;
    }
    out
}

/// Replaces every long transaction and session id that `report` names in `text` by a short label, and
/// appends the legend. Returns `text` unchanged when there is nothing to shorten.
pub(super) fn shorten(report: &Report, text: &str) -> String {
    let mut labels = Labels::empty(report);
    let mut out = labels.assign(text);
    if !labels.any() {
        return out;
    }
    let by_id: HashMap<u64, &super::TxnReport> = report.transactions.iter().map(|t| (t.id.0, t)).collect();
    let _ = writeln!(out, "Labels in this text (the JSON report uses the real ids):");
    for (kind, id) in &labels.order {
        let label = &labels.labels[&(*kind, *id)];
        if *kind == b'S' {
            let _ = writeln!(out, "  {label} = S{id}");
            continue;
        }
        let mut line = format!("  {label} = T{id}");
        if let Some(t) = by_id.get(id) {
            if let Some(s) = t.start_ns {
                let _ = write!(line, ", started {}", wall_clock(s));
                if let Some(c) = t.commit_ns {
                    let _ = write!(line, ", committed {:.3} ms later", c.saturating_sub(s) as f64 / 1e6);
                }
            } else if let Some(c) = t.commit_ns {
                let _ = write!(line, ", committed {}", wall_clock(c));
            }
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use history::HistoryBuilder;

    use super::*;
    use crate::{Options, verify};

    #[test]
    fn long_ids_get_short_labels_in_cycle_order_with_a_legend() {
        // Long transaction ids (as the proxy's), short session ids.
        let (a, b) = (1_796_131_098_927_487u64, 1_796_131_098_927_499u64);
        let mut h = HistoryBuilder::new()
            .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
            .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
            .build();
        h.transactions[0].id = history::TxnId(a);
        h.transactions[1].id = history::TxnId(b);
        let r = verify(&h, &Options::default()).unwrap();
        let text = r.render_text();
        let first = r.anomalies[0].cycle[0].from;
        assert!(text.contains("Cycle: T1 -> T2 -> T1"), "{text}");
        assert!(text.contains(&format!("  T1 = {first}")), "{text}");
        assert!(!text.lines().take_while(|l| !l.starts_with("Labels")).any(|l| l.contains(&a.to_string())));
        assert!(text.contains("session S1,") && !text.contains("= S1"), "short session ids stay: {text}");
        // The labelled verdict line is the full text's first line: the same labels for the same ids.
        let line = r.labelled_verdict_line();
        assert_eq!(text.lines().next(), Some(line.as_str()));
        assert!(line.contains("T1 -rw-> T2") && !line.contains(&a.to_string()), "{line}");
        let summary = r.labelled_summary_line();
        assert!(summary.starts_with("write skew: T1 -rw(") && summary.ends_with("-> T1"), "{summary}");
        assert!(summary.contains(")-> T2 -rw("), "{summary}");
        // Short ids stay as they are.
        let h = HistoryBuilder::new()
            .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
            .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
            .build();
        let r = verify(&h, &Options::default()).unwrap();
        assert_eq!(r.render_text(), r.to_string());
    }

    #[test]
    fn wall_clock_times_are_rfc_3339_and_counters_stay_numbers() {
        assert_eq!(wall_clock(1_796_131_098_927_487_123), "2026-12-01T13:18:18.927487123Z");
        assert_eq!(wall_clock(5_000), "5000 ns");
    }
}
