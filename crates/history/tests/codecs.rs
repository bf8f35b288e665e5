//! The codecs on made-up histories: exact roundtrips of random histories, and malformed input that must
//! fail with an error that names where.

use history::codec::cobra::{self, CobraErrorKind, CobraOptions};
use history::codec::native::{self, NativeErrorKind};
use history::codec::{self, Format, jsonl, polysi};
use history::{
    CollectorId, History, HistoryBuilder, IsolationLevel, KeyName, LogGap, Observed, Op, Outcome,
    RecordingHorizon, SessionId, StmtRef, Transaction, TxnId, WriteId,
};
use proptest::prelude::*;

fn sample() -> History {
    let (b, stmt) = HistoryBuilder::new().statement("UPDATE t SET v = v + 1 WHERE k = 'x'");
    let mut h = b
        .txn(1, |t| t.read_init("x").stmt(stmt).write("x", 1))
        .txn(2, |t| t.read("x", 1).write("y", 2))
        .at(1_000, 2_000)
        .aborted(1, |t| t.read_absent("z").write("z", 3))
        .indeterminate(2, |t| t.read("y", 2).read("y", 2))
        .txn(3, |t| t.write("fence", 4))
        .fence()
        .build();
    h.keys.intern(KeyName { namespace: "accounts".into(), bytes: vec![0, 0xff, 7] });
    h.gaps.push(LogGap { after_txns: 3 });
    h
}

fn roundtrip_both(h: &History) {
    let bytes = native::encode(h).expect("native encodes");
    let back = native::decode(&bytes).expect("native decodes");
    assert_eq!(&back, h);
    let text = jsonl::encode_to_vec(h).expect("jsonl encodes");
    let back = jsonl::decode_bytes(&text).expect("jsonl decodes");
    assert_eq!(&back, h);
}

#[test]
fn sample_history_roundtrips_in_both_formats() {
    roundtrip_both(&sample());
    roundtrip_both(&History::default());
}

#[test]
fn json_lines_show_one_transaction_a_line_with_keys_by_name() {
    let (b, stmt) = HistoryBuilder::new().statement("UPDATE t SET v = 2");
    let mut h = b.txn(1, |t| t.read_init("x").stmt(stmt).write("x", 2)).at(5, 9).build();
    h.keys.intern(KeyName { namespace: "t".into(), bytes: vec![0xff, 1] });
    let text = String::from_utf8(jsonl::encode_to_vec(&h).unwrap()).unwrap();
    let expected = [
        r#"{"krait_history":{"version":1,"statements":1,"keys":2,"transactions":1,"gaps":0}}"#,
        r#"{"stmt":"UPDATE t SET v = 2"}"#,
        r#"{"key":{"name":"x","ns":"","utf8":"x"}}"#,
        r#"{"key":{"name":"t:ff01","ns":"t","hex":"ff01"}}"#,
        r#"{"txn":{"id":1,"session":1,"seq":0,"outcome":"committed","start_ns":5,"commit_ns":9,"ops":[{"r":"x","pre":0},{"w":"x","v":2,"stmt":0}]}}"#,
    ];
    assert_eq!(text.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn keys_that_display_alike_keep_distinct_names_in_json_lines() {
    let mut h = History::default();
    // "00ab" as text and [0x00, 0xab] as bytes both display as 00ab; "a#1" holds the label separator.
    let a = h.keys.intern_str("00ab");
    let b = h.keys.intern(KeyName { namespace: String::new(), bytes: vec![0x00, 0xab] });
    let c = h.keys.intern_str("a#1");
    let d = h.keys.intern_str("a");
    let mut t = Transaction::new(TxnId(1), SessionId(0), 0);
    for (i, key) in [a, b, c, d].into_iter().enumerate() {
        t.ops.push(Op::Write { key, write: WriteId(i as u64 + 1), stmt: None });
    }
    h.transactions.push(t);
    roundtrip_both(&h);
    let text = String::from_utf8(jsonl::encode_to_vec(&h).unwrap()).unwrap();
    assert!(text.contains(r#"{"w":"a","v":4}"#), "{text}");
}

fn arb_history() -> impl Strategy<Value = History> {
    let key_names = prop::collection::vec(
        (prop::sample::select(vec!["", "t", "orders", "a:b"]), prop::collection::vec(any::<u8>(), 0..6)),
        0..12,
    );
    let statements = prop::collection::vec(".{0,12}", 0..4);
    (key_names, statements).prop_flat_map(|(names, statements)| {
        let mut keys = history::KeyTable::default();
        for (ns, bytes) in names {
            keys.intern(KeyName { namespace: ns.to_owned(), bytes });
        }
        let n_keys = keys.len() as u32;
        let n_stmts = statements.len() as u32;
        let write_id = prop_oneof![0u64..8, any::<u64>(), Just(u64::MAX)];
        let stmt = if n_stmts == 0 {
            Just(None).boxed()
        } else {
            prop::option::of((0..n_stmts).prop_map(StmtRef)).boxed()
        };
        let observed = prop_oneof![
            write_id.clone().prop_map(|w| Observed::Version(WriteId(w))),
            Just(Observed::Absent),
            prop_oneof![Just(0u64), any::<u64>()].prop_map(Observed::PreHistory),
            prop_oneof![Just(0u64), any::<u64>()].prop_map(Observed::Unrecorded),
            prop_oneof![Just(0u64), any::<u64>()].prop_map(Observed::Foreign),
        ];
        let op = if n_keys == 0 {
            Just(None).boxed()
        } else {
            (0..n_keys, any::<bool>(), observed, write_id, stmt)
                .prop_map(|(k, is_read, observed, w, stmt)| {
                    let key = history::Key(k);
                    Some(if is_read {
                        Op::Read { key, observed, stmt }
                    } else {
                        Op::Write { key, write: WriteId(w), stmt }
                    })
                })
                .boxed()
        };
        let outcome =
            prop_oneof![Just(Outcome::Committed), Just(Outcome::Aborted), Just(Outcome::Indeterminate)];
        let txn = (
            prop_oneof![0u64..50, any::<u64>()],
            prop_oneof![0u64..3, any::<u64>()],
            prop_oneof![0u64..4, any::<u64>()],
            prop::collection::vec(op, 0..6),
            outcome,
            prop::option::of(any::<u64>()),
            prop::option::of(any::<u64>()),
            prop_oneof![Just(0u32), any::<u32>()],
            any::<bool>(),
            prop::option::of(prop::sample::select(IsolationLevel::ALL.to_vec())),
        )
            .prop_map(
                |(id, session, seq, ops, outcome, start_ns, commit_ns, collector, fence, isolation)| {
                    Transaction {
                        id: TxnId(id),
                        session: SessionId(session),
                        seq,
                        ops: ops.into_iter().flatten().collect(),
                        outcome,
                        start_ns,
                        commit_ns,
                        collector: CollectorId(collector),
                        fence,
                        isolation,
                        values: None,
                    }
                },
            );
        let gaps = prop::collection::vec(any::<u64>().prop_map(|after_txns| LogGap { after_txns }), 0..3);
        let horizon = prop::option::of(
            (prop_oneof![Just(0u64), any::<u64>()], any::<u64>(), prop::collection::vec(any::<u64>(), 0..4))
                .prop_map(|(xmin, xmax, running)| RecordingHorizon { xmin, xmax, running }),
        );
        (Just(keys), Just(statements), prop::collection::vec(txn, 0..10), gaps, horizon).prop_map(
            |(keys, statements, transactions, gaps, horizon)| History {
                keys,
                statements,
                transactions,
                gaps,
                unchecked: Vec::new(),
                horizon,
            },
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_histories_roundtrip_exactly(h in arb_history()) {
        let bytes = native::encode(&h).unwrap();
        prop_assert_eq!(&native::decode(&bytes).unwrap(), &h);
        let text = jsonl::encode_to_vec(&h).unwrap();
        prop_assert_eq!(&jsonl::decode_bytes(&text).unwrap(), &h);
    }

    #[test]
    fn native_decoder_never_panics_on_mangled_files(h in arb_history(), cut in any::<prop::sample::Index>(), flip in any::<u8>()) {
        let mut bytes = native::encode(&h).unwrap();
        let at = cut.index(bytes.len());
        bytes[at] ^= flip | 1;
        prop_assert!(native::decode(&bytes).is_err());
        prop_assert!(native::decode(&bytes[..at]).is_err());
    }
}

#[test]
fn every_truncation_of_a_native_file_is_an_error_at_or_before_the_cut() {
    let bytes = native::encode(&sample()).unwrap();
    for len in 0..bytes.len() {
        let err = native::decode(&bytes[..len]).expect_err("a truncated file must not decode");
        assert!(err.offset <= len as u64, "cut at {len}, error at {}: {err}", err.offset);
        assert!(err.to_string().contains(&format!("byte offset {}", err.offset)));
        if len > native::MAGIC.len() {
            assert!(matches!(err.kind, NativeErrorKind::Truncated { .. }), "cut at {len}: {err}");
        }
    }
}

#[test]
fn every_corrupted_byte_of_a_native_file_is_detected() {
    let bytes = native::encode(&sample()).unwrap();
    for at in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = bytes.clone();
            bad[at] ^= flip;
            let err = native::decode(&bad).expect_err("a corrupt file must not decode");
            assert!(err.offset <= at as u64, "flip at {at}, error at {}: {err}", err.offset);
        }
    }
}

#[test]
fn a_corrupt_payload_byte_is_reported_as_a_checksum_mismatch_in_its_chunk() {
    let bytes = native::encode(&sample()).unwrap();
    let mut bad = bytes.clone();
    let at = bytes.len() - 20;
    bad[at] ^= 0x10;
    let err = native::decode(&bad).unwrap_err();
    assert!(matches!(err.kind, NativeErrorKind::Checksum { tag: 'T', .. }), "{err}");
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
}

#[test]
fn native_rejects_foreign_files_and_trailing_bytes() {
    let err = native::decode(b"{\"krait_history\":{}}").unwrap_err();
    assert_eq!((err.offset, err.kind), (0, NativeErrorKind::BadMagic));
    let mut bytes = native::encode(&sample()).unwrap();
    bytes[native::MAGIC.len()] = 9;
    assert_eq!(native::decode(&bytes).unwrap_err().kind, NativeErrorKind::UnsupportedVersion(9));
    let mut bytes = native::encode(&sample()).unwrap();
    let len = bytes.len() as u64;
    bytes.push(0);
    let err = native::decode(&bytes).unwrap_err();
    assert_eq!((err.offset, err.kind), (len, NativeErrorKind::TrailingBytes(1)));
}

#[test]
fn writers_refuse_histories_that_name_missing_keys() {
    let mut h = sample();
    h.transactions[0].ops.push(Op::Write { key: history::Key(99), write: WriteId(9), stmt: None });
    assert!(native::encode(&h).is_err());
    assert!(jsonl::encode_to_vec(&h).is_err());
}

#[test]
fn json_lines_errors_name_the_line() {
    let text = String::from_utf8(jsonl::encode_to_vec(&sample()).unwrap()).unwrap();
    let lines: Vec<&str> = text.lines().collect();

    // Dropping the last transaction is caught by the header's counts.
    let mut short: Vec<&str> = lines.clone();
    short.retain(|l| !l.starts_with("{\"gap\""));
    short.pop();
    let err = jsonl::decode(&short.join("\n")).unwrap_err();
    assert_eq!(err.line, short.len() + 1, "{err}");
    assert!(err.message.contains("truncated"), "{err}");

    // Broken JSON on line 4 names line 4 and a column.
    let mut broken: Vec<String> = lines.iter().map(|s| (*s).to_owned()).collect();
    let keep = broken[3].len() - 3;
    broken[3].truncate(keep);
    let err = jsonl::decode(&broken.join("\n")).unwrap_err();
    assert_eq!(err.line, 4, "{err}");
    assert!(
        err.column.is_some() && err.to_string().starts_with("JSON Lines history, line 4, column"),
        "{err}"
    );

    // An op naming an unknown key.
    let bad = text.replacen("\"w\":\"x\"", "\"w\":\"nope\"", 1);
    let err = jsonl::decode(&bad).unwrap_err();
    assert!(err.message.contains("unknown key \"nope\""), "{err}");
    let line_of_bad = bad.lines().position(|l| l.contains("nope")).unwrap() + 1;
    assert_eq!(err.line, line_of_bad);

    // Hex key bytes take hex digits only (no sign, as integer parsing would allow).
    let bad = text.replacen("\"hex\":\"00ff07\"", "\"hex\":\"+0ff07\"", 1);
    assert_ne!(bad, text);
    assert!(jsonl::decode(&bad).unwrap_err().message.contains("not an even-length hex string"));

    assert_eq!(jsonl::decode("").unwrap_err().line, 1);
    assert!(jsonl::decode_bytes(b"{\"krait_history\"\xff").unwrap_err().message.contains("not UTF-8"));
}

/// Builds a Cobra log from records.
#[derive(Default)]
struct CobraLog(Vec<u8>);

impl CobraLog {
    fn rec(mut self, tag: u8, fields: &[u64]) -> Self {
        self.0.push(tag);
        for f in fields {
            self.0.extend_from_slice(&f.to_be_bytes());
        }
        self
    }
}

#[test]
fn cobra_records_map_to_ops() {
    let log = CobraLog::default()
        .rec(b'S', &[10])
        .rec(b'R', &[cobra::INIT_MARKER, cobra::INIT_MARKER, 0xaa, 1])
        .rec(b'W', &[100, 0xaa, 2])
        .rec(b'C', &[10])
        .rec(b'S', &[11])
        .rec(b'R', &[10, 100, 0xaa, 2])
        .rec(b'R', &[cobra::NULL_MARKER, cobra::NULL_MARKER, 0xbb, 3])
        .rec(b'W', &[101, cobra::FENCE_KEY_HASH, 4])
        .rec(b'C', &[11]);
    let h = cobra::import_bytes(&log.0, CobraOptions::default()).unwrap();
    assert_eq!(h.transactions.len(), 2);
    let (t0, t1) = (&h.transactions[0], &h.transactions[1]);
    assert_eq!((t0.id, t0.seq, t0.fence, t1.id, t1.seq, t1.fence), (TxnId(10), 0, false, TxnId(11), 1, true));
    let key_aa =
        h.keys.get(&KeyName { namespace: String::new(), bytes: 0xaa_u64.to_be_bytes().to_vec() }).unwrap();
    assert_eq!(t0.ops[0], Op::Read { key: key_aa, observed: Observed::PreHistory(0), stmt: None });
    assert_eq!(t0.ops[1], Op::Write { key: key_aa, write: WriteId(100), stmt: None });
    assert_eq!(t1.ops[0], Op::Read { key: key_aa, observed: Observed::Version(WriteId(100)), stmt: None });
    assert!(matches!(t1.ops[1], Op::Read { observed: Observed::PreHistory(0), .. }));
    assert_eq!(h.keys.name(key_aa).unwrap().to_string(), "00000000000000aa");
}

#[test]
fn cobra_timestamped_layout_fills_the_timestamps() {
    let log = CobraLog::default().rec(b'S', &[7, 1_000]).rec(b'W', &[1, 2, 3]).rec(b'C', &[7, 2_500]);
    let h = cobra::import_bytes(&log.0, CobraOptions { timestamped: true }).unwrap();
    assert_eq!((h.transactions[0].start_ns, h.transactions[0].commit_ns), (Some(1_000), Some(2_500)));
    // Read as the plain layout, the timestamp is taken for a record tag.
    let err = cobra::import_bytes(&log.0, CobraOptions::default()).unwrap_err();
    assert_eq!(err.offset, Some(9), "{err}");
}

#[test]
fn cobra_truncated_final_record_names_file_and_offset() {
    let log = CobraLog::default().rec(b'S', &[7]).rec(b'W', &[1, 2, 3]).rec(b'C', &[7]);
    let cut = &log.0[..log.0.len() - 3];
    let err = cobra::import_bytes(cut, CobraOptions::default()).unwrap_err();
    assert_eq!(err.offset, Some(34));
    assert!(matches!(err.kind, CobraErrorKind::Truncated { tag: 'C', needed: 9, left: 6 }), "{err}");
    assert_eq!(
        err.to_string(),
        "Cobra log <memory>, byte offset 34: truncated 'C' record: it needs 9 bytes, 6 left in the file"
    );

    let open = &log.0[..34];
    let err = cobra::import_bytes(open, CobraOptions::default()).unwrap_err();
    assert_eq!((err.offset, err.kind), (Some(0), CobraErrorKind::Unterminated { txn: 7 }));
}

#[test]
fn cobra_malformed_records_are_errors() {
    let e = |log: CobraLog| cobra::import_bytes(&log.0, CobraOptions::default()).unwrap_err();
    let err = e(CobraLog::default().rec(b'X', &[]));
    assert_eq!((err.offset, err.kind), (Some(0), CobraErrorKind::UnknownTag(b'X')));
    let err = e(CobraLog::default().rec(b'W', &[1, 2, 3]));
    assert_eq!(err.kind, CobraErrorKind::OutsideTransaction('W'));
    let err = e(CobraLog::default().rec(b'S', &[1]).rec(b'S', &[2]));
    assert_eq!(
        (err.offset, err.kind),
        (Some(9), CobraErrorKind::NestedStart { started: 2, open: 1, open_at: 0 })
    );
    let err = e(CobraLog::default().rec(b'S', &[1]).rec(b'C', &[2]));
    assert_eq!(err.kind, CobraErrorKind::CommitMismatch { committed: 2, open: Some(1) });
    let err =
        e(CobraLog::default().rec(b'S', &[1]).rec(b'R', &[cobra::INIT_MARKER, 5, 1, 1]).rec(b'C', &[1]));
    assert_eq!(err.kind, CobraErrorKind::HalfMarker { writer: cobra::INIT_MARKER, write: 5 });
    let err = e(CobraLog::default().rec(b'S', &[1]).rec(b'C', &[1]).rec(b'S', &[1]).rec(b'C', &[1]));
    assert!(matches!(err.kind, CobraErrorKind::DuplicateTxn { txn: 1, .. }), "{err}");
}

#[test]
fn cobra_read_naming_the_wrong_writer_is_an_import_error() {
    let base = || CobraLog::default().rec(b'S', &[1]).rec(b'W', &[100, 5, 0]).rec(b'C', &[1]).rec(b'S', &[2]);
    // The read names txn 3 as the writer of write id 100, which txn 1 wrote.
    let log = base().rec(b'R', &[3, 100, 5, 0]).rec(b'C', &[2]);
    let err = cobra::import_bytes(&log.0, CobraOptions::default()).unwrap_err();
    assert_eq!(err.offset, Some(52));
    assert_eq!(
        err.kind,
        CobraErrorKind::WriterMismatch { reader: 2, write: 100, claimed: 3, actual: Some(1) }
    );
    // The read names txn 1, which never wrote write id 200.
    let log = base().rec(b'R', &[1, 200, 5, 0]).rec(b'C', &[2]);
    let err = cobra::import_bytes(&log.0, CobraOptions::default()).unwrap_err();
    assert_eq!(err.kind, CobraErrorKind::WriterMismatch { reader: 2, write: 200, claimed: 1, actual: None });
    // A read of an unlogged writer's write is kept for the verifier.
    let log = base().rec(b'R', &[9, 200, 5, 0]).rec(b'C', &[2]);
    let h = cobra::import_bytes(&log.0, CobraOptions::default()).unwrap();
    assert!(matches!(h.transactions[1].ops[0], Op::Read { observed: Observed::Version(WriteId(200)), .. }));
}

#[test]
fn polysi_lines_map_to_transactions() {
    let text = "w(1,5,0,0)\nr(2,0,0,0)\nr(1,5,1,1)\nw(2,7,1,-1)\nw(3,7,1,-1)\nr(1,5,0,2)\nw(2,8,1,-1)\n";
    let h = polysi::import(text).unwrap();
    let ids: Vec<(u64, u64, u64, Outcome)> =
        h.transactions.iter().map(|t| (t.id.0, t.session.0, t.seq, t.outcome)).collect();
    // Adjacent -1 lines of a session are one aborted txn; the -1 line after another session's line starts
    // a new one. Aborted txns get ids above every id in the file.
    assert_eq!(
        ids,
        [
            (0, 0, 0, Outcome::Committed),
            (1, 1, 0, Outcome::Committed),
            (3, 1, 1, Outcome::Aborted),
            (2, 0, 1, Outcome::Committed),
            (4, 1, 2, Outcome::Aborted),
        ]
    );
    let k1 = h.keys.get(&KeyName { namespace: String::new(), bytes: b"1".to_vec() }).unwrap();
    assert_eq!(h.transactions[0].ops[0], Op::Write { key: k1, write: WriteId(1), stmt: None });
    assert!(matches!(h.transactions[0].ops[1], Op::Read { observed: Observed::PreHistory(0), .. }));
    assert_eq!(
        h.transactions[1].ops[0],
        Op::Read { key: k1, observed: Observed::Version(WriteId(1)), stmt: None }
    );
    assert_eq!(h.transactions[2].ops.len(), 2);
}

#[test]
fn polysi_errors_name_the_line() {
    let err = |text: &str| polysi::import(text).unwrap_err();
    assert_eq!(err("w(1,5,0,0)\nx(1,5,0,0)\n").line, 2);
    assert_eq!(err("w(1,5,0,0)\nw(1,5,0)\n").line, 2);
    assert_eq!(err("w(1,5,0,0)\n\nw(1,6,0,0)").line, 2);
    let e = err("w(1,5,0,0)\nw(1,0,0,1)\n");
    assert_eq!(e.line, 2);
    assert!(e.message.contains("value 0"), "{e}");
    let e = err("w(1,5,0,0)\nr(1,5,1,0)\n");
    assert_eq!(
        e.to_string(),
        "PolySI history, line 2: txn 0 is in session 0, but this line puts it in session 1"
    );
    assert_eq!(err("r(1,-5,0,0)").line, 1);
    assert_eq!(err("r(1,99999999999999999999,0,0)").line, 1);
}

/// The largest id a line can hold, with an aborted transaction after it: aborted ones are numbered from one
/// past the largest id (found by `scripts/fuzz-smoke`: that addition overflowed an i64).
#[test]
fn polysi_aborted_transactions_follow_the_largest_id() {
    let h = polysi::import("w(55,4,0,9223372036854775807)\nw(56,4,0,-1)\n").unwrap();
    let ids: Vec<u64> = h.transactions.iter().map(|t| t.id.0).collect();
    assert_eq!(ids, [9_223_372_036_854_775_807, 9_223_372_036_854_775_808]);
}

/// IsoVista's `TextHistorySerializer` output: transactions sorted by id, txn 0 in session 0 writing 0 to
/// every key the history touched (in hash-set order), then IsoVista's own sessions and txns, counted from 1.
const ISOVISTA: &str = "w(2,0,0,0)\nw(1,0,0,0)\nw(3,0,0,0)\n\
                        r(1,0,1,1)\nw(1,1,1,1)\n\
                        r(1,1,1,2)\n\
                        r(2,0,2,3)\nw(2,1,2,3)\nr(3,0,2,3)\n";

#[test]
fn isovista_initial_transaction_becomes_the_state_before_the_history() {
    let h = polysi::import(ISOVISTA).unwrap();
    let ids: Vec<(u64, u64, u64)> = h.transactions.iter().map(|t| (t.id.0, t.session.0, t.seq)).collect();
    assert_eq!(ids, [(1, 1, 0), (2, 1, 1), (3, 2, 0)], "txn 0 is the initial state, not a transaction");
    assert_eq!(h.keys.len(), 3);
    let pre_history_reads = h
        .transactions
        .iter()
        .flat_map(|t| &t.ops)
        .filter(|op| matches!(op, Op::Read { observed: Observed::PreHistory(0), .. }))
        .count();
    assert_eq!(pre_history_reads, 3);
    assert!(matches!(h.transactions[1].ops[0], Op::Read { observed: Observed::Version(WriteId(1)), .. }));
}

#[test]
fn a_value_0_write_outside_isovista_initial_transaction_is_refused_with_the_reason() {
    let err = |text: &str| polysi::import(text).unwrap_err();
    // A later transaction writes 0: a read of it could not be told from a read of the initial state.
    let e = err(&format!("{ISOVISTA}w(3,0,2,4)\n"));
    assert_eq!(e.line, 10);
    assert!(e.message.contains("value 0 is the initial value, which only the initial transaction"), "{e}");
    // The file opens with another transaction, so there is no initial transaction.
    let e = err("r(1,0,1,1)\nw(1,0,0,0)\n");
    assert_eq!((e.line, e.message.contains("only the initial transaction")), (2, true), "{e}");
    // The initial transaction reads, writes another value, comes back late, or shares its session.
    let e = err("w(1,0,0,0)\nr(2,0,0,0)\n");
    assert!(e.message.contains("may only write value 0, but this line reads value 0 of key 2"), "{e}");
    let e = err("w(1,0,0,0)\nw(2,5,0,0)\n");
    assert!(e.message.contains("but this line writes value 5 of key 2"), "{e}");
    let e = err("w(1,0,0,0)\nw(1,1,1,1)\nw(2,0,0,0)\n");
    assert_eq!(e.line, 3);
    assert!(e.message.contains("must come before any other transaction's"), "{e}");
    let e = err("w(1,0,0,0)\nw(1,1,0,1)\n");
    assert!(e.message.contains("must be alone in its session"), "{e}");
    let e = err("w(1,0,0,0)\nw(1,1,0,-1)\n");
    assert!(e.message.contains("must be alone in its session"), "{e}");
}

#[test]
fn formats_are_detected_from_first_bytes_and_named_for_the_command_line() {
    let native_bytes = native::encode(&sample()).unwrap();
    assert_eq!(codec::detect_bytes(&native_bytes), Some(Format::Native));
    assert_eq!(codec::detect_bytes(b"  {\"krait_history\""), Some(Format::Jsonl));
    assert_eq!(codec::detect_bytes(b"r(1,2,3,4)\n"), Some(Format::Polysi));
    assert_eq!(codec::detect_bytes(b"w(1,2,3,4)\n"), Some(Format::Polysi));
    assert_eq!(codec::detect_bytes(b"S\0\0"), None);
    for f in Format::ALL {
        assert_eq!(f.name().parse::<Format>().unwrap(), f);
    }
    assert!("dbcop".parse::<Format>().is_err());
}

#[test]
fn files_roundtrip_through_read_and_write_with_detection() {
    let dir = tempfile::tempdir().unwrap();
    let h = sample();
    for (name, f) in [("h.krh", Format::Native), ("h.jsonl", Format::Jsonl)] {
        let path = dir.path().join(name);
        codec::write_history(&h, &path, f).unwrap();
        assert_eq!(codec::detect_format(&path).unwrap(), f);
        assert_eq!(codec::read_history(&path, None).unwrap(), h);
    }
    assert!(matches!(
        codec::write_history(&h, &dir.path().join("x"), Format::Polysi),
        Err(codec::CodecError::NotWritable(Format::Polysi))
    ));
    let cobra_dir = dir.path().join("cobra");
    std::fs::create_dir(&cobra_dir).unwrap();
    let log = CobraLog::default().rec(b'S', &[7]).rec(b'W', &[1, 2, 3]).rec(b'C', &[7]);
    std::fs::write(cobra_dir.join("T3.log"), &log.0).unwrap();
    let other = CobraLog::default().rec(b'S', &[8]).rec(b'W', &[4, 2, 3]).rec(b'C', &[8]);
    std::fs::write(cobra_dir.join("T12.log"), &other.0[..other.0.len() - 1]).unwrap();
    assert_eq!(codec::detect_format(&cobra_dir).unwrap(), Format::Cobra);
    let err = codec::read_history(&cobra_dir, None).unwrap_err().to_string();
    assert!(err.contains("T12.log, byte offset 34: truncated 'C' record"), "{err}");
    let err = codec::detect_format(&cobra_dir.join("T3.log")).unwrap_err().to_string();
    assert!(err.contains("a Cobra history is the folder"), "{err}");
    let err = codec::read_history(&dir.path().join("missing"), None).unwrap_err();
    assert!(matches!(err, codec::CodecError::Io { .. }));
}

/// Horizons written before whole snapshots were kept (native version 2, a bare number in JSON Lines) still
/// read, as an xmin with nothing known above it.
#[test]
fn horizons_of_older_files_read_as_an_xmin() {
    // Version 2's checksums do not cover the version byte: tag + payload only.
    let chunk = |tag: u8, payload: &[u8]| {
        let mut out = vec![tag, payload.len() as u8];
        out.extend_from_slice(payload);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&out[..1]);
        crc.update(payload);
        out.extend_from_slice(&crc.finalize().to_le_bytes());
        out
    };
    let mut v2 = native::MAGIC.to_vec();
    v2.push(2);
    v2.extend(chunk(b'H', &[0, 0, 0, 0, 0, 1, 100]));
    v2.extend(chunk(b'E', &[]));
    assert_eq!(native::decode(&v2).expect("v2 decodes").horizon, Some(RecordingHorizon::from_xmin(100)));

    let header_v3: &[u8] = &[0, 0, 0, 0, 0, 1, 100, 110, 1, 105];
    let v3 = native::decode(&native::frame_chunks_as(3, &[(b'H', header_v3)])).expect("v3 decodes");
    assert_eq!(v3.horizon, Some(RecordingHorizon { xmin: 100, xmax: 110, running: vec![105] }));
    // A running count the chunk cannot hold is corrupt, not an allocation.
    let corrupt: &[u8] = &[0, 0, 0, 0, 0, 1, 100, 110, 0x7f];
    assert!(native::decode(&native::frame_chunks_as(3, &[(b'H', corrupt)])).is_err());
    // Version 4 adds the count of isolation-level runs; without it the header is short.
    assert!(native::decode(&native::frame_chunks(&[(b'H', header_v3)])).is_err());

    let h = History {
        horizon: Some(RecordingHorizon { xmin: 7, xmax: 9, running: vec![8] }),
        ..History::default()
    };
    let text = String::from_utf8(jsonl::encode_to_vec(&h).unwrap()).unwrap();
    assert!(text.contains(r#""horizon":{"xmin":7,"xmax":9,"running":[8]}"#), "{text}");
    let old = text.replace(r#""horizon":{"xmin":7,"xmax":9,"running":[8]}"#, r#""horizon":7"#);
    assert_eq!(jsonl::decode(&old).expect("old header").horizon, Some(RecordingHorizon::from_xmin(7)));
}

#[test]
fn snapshots_parse_as_postgresql_prints_them() {
    let h = RecordingHorizon::parse_snapshot("748:752:748,750").unwrap();
    assert_eq!(h, RecordingHorizon { xmin: 748, xmax: 752, running: vec![748, 750] });
    assert!(h.had_ended(747) && h.had_ended(749) && h.had_ended(751));
    assert!(!h.had_ended(748) && !h.had_ended(750) && !h.had_ended(752));
    assert_eq!(RecordingHorizon::parse_snapshot("5:5:").unwrap().running, Vec::<u64>::new());
    for bad in ["", "5", "5:4:", "5:9:3", "5:9:9", "a:b:", "5:9:6,x"] {
        assert!(RecordingHorizon::parse_snapshot(bad).is_err(), "{bad:?}");
    }
}
