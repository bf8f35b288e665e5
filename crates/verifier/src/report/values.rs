//! Values in place of version ids in the text of a report (issue 18, item 2). A version id (`w…`) is a
//! hash a person cannot read; where the collector recorded the row behind a version, the text shows that
//! row instead (`⟨balance = '90'⟩`). The JSON report keeps the ids, and each op keeps its row.

use std::collections::HashMap;

use super::Report;

/// `text` with every recorded version id (`w` and digits) that `report` has a row for replaced by the row.
/// A write's own row (what it returned) is preferred to a read's (what a reader was shown).
pub(super) fn with_values(report: &Report, text: &str) -> String {
    let mut rows: HashMap<&str, &str> = HashMap::new();
    let ops = || report.transactions.iter().flat_map(|t| &t.ops);
    for (writes, o) in ops().map(|o| (true, o)).chain(ops().map(|o| (false, o))) {
        if let (Some(version), Some(row)) = (&o.version, &o.row)
            && o.text.starts_with("w(") == writes
            && is_version_id(version)
        {
            rows.entry(version).or_insert(row);
        }
    }
    if rows.is_empty() {
        return text.to_owned();
    }
    // Whole words only: the text is cut into runs of word characters and the rest.
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let word = rest.find(|c: char| !word_char(c)).unwrap_or(rest.len());
        let (token, after) = rest.split_at(word);
        match rows.get(token) {
            Some(row) => {
                out.push('⟨');
                out.push_str(row);
                out.push('⟩');
            }
            None => out.push_str(token),
        }
        let gap = after.find(word_char).unwrap_or(after.len());
        out.push_str(&after[..gap]);
        rest = &after[gap..];
    }
    out
}

fn word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '#' || c == '_'
}

/// Whether a version as a report names it identifies one version of one key, so its row can stand in its
/// place: a recorded write (`w` and digits), or a version the proxy tagged from its key and `xmin`
/// (`init#…`, `unrecorded#…`, `foreign#…`). Not `init` (tag 0) or `absent`, which every key shares.
pub(super) fn is_version_id(version: &str) -> bool {
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let tagged = ["init#", "unrecorded#", "foreign#"]
        .iter()
        .any(|p| version.strip_prefix(p).is_some_and(|d| digits(d) && d != "0"));
    tagged || version.strip_prefix('w').is_some_and(digits)
}

#[cfg(test)]
mod tests {
    use history::values::{OpRow, StatementRun, TxnValues, Value};
    use history::{HistoryBuilder, Observed, Op};

    use super::*;
    use crate::{Options, verify};

    /// A write skew whose reads and writes carry recorded rows.
    fn write_skew_with_values() -> history::History {
        let mut h = HistoryBuilder::new()
            .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
            .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
            .build();
        for t in &mut h.transactions {
            let mut values = TxnValues::default();
            values.runs.push(StatementRun {
                stmt: None,
                params: vec![Value::Text("7".into())],
                columns: vec!["on_call".into()],
                before_op: 0,
            });
            for (i, op) in t.ops.iter().enumerate() {
                let v = match op {
                    Op::Read { observed: Observed::PreHistory(_), .. } => "true",
                    _ => "false",
                };
                values.rows.push(OpRow { op: i as u32, run: 0, values: vec![Value::Text(v.into())] });
            }
            t.values = Some(Box::new(values));
        }
        h
    }

    #[test]
    fn a_reject_shows_the_rows_behind_versions_instead_of_their_ids() {
        let h = write_skew_with_values();
        let r = verify(&h, &Options::default()).unwrap();
        assert!(!r.is_accept());
        let plain = r.to_string();
        let text = r.render_text();
        let ids: Vec<String> = h
            .transactions
            .iter()
            .flat_map(|t| &t.ops)
            .filter_map(|o| match o {
                Op::Write { write, .. } => Some(write.to_string()),
                _ => None,
            })
            .collect();
        assert!(ids.iter().any(|w| plain.contains(w.as_str())), "the plain text names versions: {plain}");
        for w in &ids {
            assert!(!text.contains(&format!("{w} ")) && !text.contains(&format!("{w}\n")), "{w} in {text}");
        }
        assert!(text.contains("⟨on_call = 'false'⟩"), "{text}");
        // The JSON keeps ids, rows and parameters.
        let back = Report::from_json(&r.to_json()).unwrap();
        let op = &back.transactions[0].ops[0];
        assert_eq!(op.row.as_deref(), Some("on_call = 'true'"));
        assert_eq!(op.params.as_deref(), Some("$1 = '7'"));
        assert_eq!(op.version.as_deref(), Some("init"));
    }

    #[test]
    fn only_whole_recorded_version_ids_are_replaced() {
        let h = write_skew_with_values();
        let r = verify(&h, &Options::default()).unwrap();
        let w =
            r.transactions[0].ops.iter().find(|o| o.text.starts_with("w(")).unwrap().version.clone().unwrap();
        let text = format!("{w} x{w} {w}1 ({w}) init #{w}");
        let out = with_values(&r, &text);
        assert_eq!(out, format!("⟨on_call = 'false'⟩ x{w} {w}1 (⟨on_call = 'false'⟩) init #{w}"));
        assert!(is_version_id("init#12") && is_version_id("w7") && is_version_id("unrecorded#3"));
        assert!(!is_version_id("init") && !is_version_id("init#0") && !is_version_id("absent"));
    }
}
