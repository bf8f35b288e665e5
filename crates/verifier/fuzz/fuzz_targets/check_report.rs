//! Fuzzes the `--check-report` reader: a report is untrusted input (a file a person hands over), so any
//! bytes must either fail to parse or be re-checked against the history to a yes or a no, never a panic.
//! Most inputs are edits of a genuine reject report (its JSON with bytes overwritten), so that the fuzzer
//! reaches the evidence checks; the rest are parsed as they are.
//! Run with `cargo +nightly fuzz run check_report` from `crates/verifier`.
#![no_main]

use std::sync::OnceLock;

use history::{Observed, Op, SessionId, Transaction, TxnId, WriteId};
use libfuzzer_sys::fuzz_target;
use verifier::{Options, Report, check_report, verify};

/// A write skew (T1 and T2 each read x and y at their initial versions and write one of them), T3 reading
/// both writes, and its reject report as JSON.
fn skew() -> &'static (history::History, Vec<u8>) {
    static SKEW: OnceLock<(history::History, Vec<u8>)> = OnceLock::new();
    SKEW.get_or_init(|| {
        let mut h = history::History::default();
        let (x, y) = (h.keys.intern_str("x"), h.keys.intern_str("y"));
        let read = |key, observed| Op::Read { key, observed, stmt: None };
        let write = |key, w| Op::Write { key, write: WriteId(w), stmt: None };
        let txn =
            |id: u64, ops: Vec<Op>| Transaction { ops, ..Transaction::new(TxnId(id), SessionId(id), 0) };
        h.transactions = vec![
            txn(1, vec![read(x, Observed::PreHistory(0)), read(y, Observed::PreHistory(0)), write(x, 11)]),
            txn(2, vec![read(x, Observed::PreHistory(0)), read(y, Observed::PreHistory(0)), write(y, 12)]),
            txn(3, vec![read(x, Observed::Version(WriteId(11))), read(y, Observed::Version(WriteId(12)))]),
        ];
        let report = verify(&h, &Options::default()).expect("the skew verifies");
        let json = serde_json::to_vec(&report).expect("a report serializes");
        (h, json)
    })
}

fuzz_target!(|data: &[u8]| {
    let (history, genuine) = skew();
    let Some((&mode, rest)) = data.split_first() else { return };
    let bytes = if mode % 4 == 0 {
        rest.to_vec()
    } else {
        // Three bytes per edit: a position (two bytes) and the byte to put there.
        let mut json = genuine.clone();
        for edit in rest.chunks_exact(3) {
            let at = usize::from(u16::from_be_bytes([edit[0], edit[1]])) % json.len();
            json[at] = edit[2];
        }
        json
    };
    if let Ok(report) = serde_json::from_slice::<Report>(&bytes) {
        let _ = check_report(history, &report);
    }
});
