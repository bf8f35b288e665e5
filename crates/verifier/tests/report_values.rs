//! A reject report shows each op with its own recorded row and parameters, also after online verification
//! dropped some of a transaction's ops: here a read of a version whose writer an earlier reject quarantined
//! (never evidence, so dropped at admission). Before, the rows stayed where they were and slid onto the
//! wrong ops, so a report showed a read of one key with another key's row.

use history::values::{OpRow, StatementRun, TxnValues, Value};
use history::{HistoryBuilder, Op};
use verifier::{RoundOptions, Verdict, verify_in_rounds};

#[test]
fn ops_keep_their_own_rows_after_admission_drops_a_read_of_a_quarantined_write() {
    let (b, select) = HistoryBuilder::new().statement("SELECT k FROM kv WHERE k = $1");
    let mut h = b
        // Round 1: a write skew on x and y, rejected; both transactions are quarantined.
        .txn(1, |t| t.stmt(select).read_init("x").read_init("y").write("x", 1))
        .txn(2, |t| t.stmt(select).read_init("x").read_init("y").write("y", 2))
        // Round 2: the first reads T1's x (dropped: its writer is quarantined), then a write skew on z and w.
        .txn(3, |t| t.stmt(select).read("x", 1).read_init("z").read_init("w").write("z", 3))
        .txn(4, |t| t.stmt(select).read_init("z").read_init("w").write("w", 4))
        .build();
    // Each op ran a statement run of its own, bound to its key, and returned the row `k = key`.
    for t in &mut h.transactions {
        let mut values = TxnValues::default();
        for (i, op) in t.ops.iter().enumerate() {
            let (Op::Read { key, stmt, .. } | Op::Write { key, stmt, .. }) = *op;
            let name = String::from_utf8_lossy(&h.keys.name(key).expect("a named key").bytes).into_owned();
            values.runs.push(StatementRun {
                stmt,
                params: vec![Value::Text(name.clone())],
                columns: vec!["k".into()],
                before_op: i as u32,
            });
            values.rows.push(OpRow { op: i as u32, run: i as u32, values: vec![Value::Text(name)] });
        }
        t.values = Some(Box::new(values));
    }
    let options = RoundOptions { round_size: 2, round_interval: None, ..RoundOptions::default() };
    let outcome = verify_in_rounds(&h, &options).expect("verifies");
    assert_eq!(outcome.verdict, Verdict::Reject);
    let mut shown = 0;
    for report in &outcome.reports {
        for t in &report.transactions {
            for op in &t.ops {
                let key =
                    op.text.split_once('(').and_then(|(_, rest)| rest.split_once(')')).expect("r(key)").0;
                assert_eq!(op.row.as_deref(), Some(format!("k = '{key}'").as_str()), "{}: {op:?}", t.id);
                assert_eq!(op.params.as_deref(), Some(format!("$1 = '{key}'").as_str()), "{}: {op:?}", t.id);
                shown += 1;
            }
        }
    }
    let third = outcome.reports.iter().flat_map(|r| &r.transactions).find(|t| t.ops.len() == 3);
    assert!(third.is_some(), "the second report shows the third transaction without its dropped read");
    assert!(shown >= 12, "both reports show their ops: {shown}");
}
