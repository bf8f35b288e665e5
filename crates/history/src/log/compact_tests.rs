//! Tests of the compact encoding: texts, columns, cited rows and parameters, and the bounded tables.

use super::*;

/// Encodes one statement `text` with `table`, appending (here: numbering) any new definition; returns
/// the cited sequence number and the definitions appended.
fn cite(table: &mut TextTable, text: &str, next_seq: &mut u64, log: &mut Vec<(u64, LogRecord)>) -> u64 {
    let mut new = Vec::new();
    let ops = table.encode(Vec::new(), vec![text.to_owned()], *next_seq, &mut new);
    for n in new {
        table.defined(&n, *next_seq);
        log.push((*next_seq, n.record()));
        *next_seq += 1;
    }
    ops.statements[0]
}

/// The writer's table is bounded: once full it starts over, marks that in the log, and defines texts again
/// at their next use; the reader forgets the definitions before the mark, so a citation across it is
/// refused and the text's new definition resolves.
#[test]
fn a_full_text_table_starts_over_on_both_sides() {
    let (mut table, mut seq, mut log) = (TextTable::default(), 0, Vec::new());
    let a = cite(&mut table, "SELECT 1", &mut seq, &mut log);
    assert_eq!(
        log[0].1,
        LogRecord::Statement { text: "SELECT 1".into() },
        "a run's first table is not marked"
    );
    assert_eq!(cite(&mut table, "SELECT 1", &mut seq, &mut log), a, "a known text is not defined again");
    let big = "x".repeat(TEXT_TABLE_BYTES / 2 + 1);
    cite(&mut table, &format!("{big}1"), &mut seq, &mut log);
    cite(&mut table, &format!("{big}2"), &mut seq, &mut log);
    let again = cite(&mut table, "SELECT 1", &mut seq, &mut log);
    assert_ne!(again, a, "after the table filled, the text is defined anew");
    assert!(table.bytes <= "SELECT 1".len(), "the table started over");
    assert_eq!(log.iter().filter(|(_, r)| *r == LogRecord::TextsForgotten).count(), 1);

    let mut resolver = Resolver::new();
    for (s, r) in log {
        assert_eq!(resolver.resolve(s, r).unwrap(), None);
    }
    assert_eq!(resolver.statements.len(), 1, "the reader forgot the texts before the mark");
    let late = |cited: u64| {
        let ops = CompactOps { ops: Vec::new(), statements: vec![cited], namespaces: Vec::new() };
        LogRecord::CompactLateOps { txn: TxnId(1), ops }
    };
    match resolver.resolve(seq, late(again)).unwrap() {
        Some(LogRecord::LateOps { statements, .. }) => assert_eq!(statements, vec!["SELECT 1"]),
        other => panic!("{other:?}"),
    }
    let err = resolver.resolve(seq + 1, late(a)).unwrap_err();
    assert!(matches!(err, LogError::Inconsistent { .. }), "{err}");
}

/// Appends (here: numbers) a late-ops record of `rows` as the log does: new definitions first, then
/// the record, then its rows remembered. Returns the record's sequence number and ops.
fn append_rows(
    table: &mut TextTable,
    rows: &[Vec<Value>],
    next_seq: &mut u64,
    log: &mut Vec<(u64, LogRecord)>,
) -> (u64, Vec<CompactOp>) {
    let ops = rows.iter().map(|values| LoggedOp::Row { ops: 1, values: values.clone() }).collect();
    let mut new = Vec::new();
    let compact = table.encode(ops, Vec::new(), *next_seq, &mut new);
    append(table, new, compact.clone(), next_seq, log);
    (*next_seq - 1, compact.ops)
}

/// Appends (here: numbers) the definitions `new` and then a late-ops record of `compact`, as the log does.
fn append(
    table: &mut TextTable,
    new: Vec<NewText>,
    compact: CompactOps,
    next_seq: &mut u64,
    log: &mut Vec<(u64, LogRecord)>,
) {
    for n in new {
        table.defined(&n, *next_seq);
        log.push((*next_seq, n.record()));
        *next_seq += 1;
    }
    table.appended(*next_seq);
    log.push((*next_seq, LogRecord::CompactLateOps { txn: TxnId(1), ops: compact }));
    *next_seq += 1;
}

fn row(text: &str) -> Vec<Value> {
    vec![Value::Text(text.to_owned()), Value::Null]
}

/// A row seen again is cited, not repeated, and reads back as the same row; a small row is always
/// written inline.
#[test]
fn a_row_seen_again_cites_the_record_that_holds_it() {
    let (mut table, mut seq, mut log) = (TextTable::default(), 0, Vec::new());
    let (big, small) = (row("a row worth citing, long enough"), row("x"));
    let (first, ops) = append_rows(&mut table, &[small.clone(), big.clone()], &mut seq, &mut log);
    assert!(matches!(ops[..], [CompactOp::Row { .. }, CompactOp::Row { .. }]), "{ops:?}");
    assert_eq!(log[0].1, LogRecord::RowsForgotten, "a new table of rows is marked first");
    let (_, ops) = append_rows(&mut table, &[big.clone(), small.clone()], &mut seq, &mut log);
    assert_eq!(ops[0], CompactOp::CitedRow { ops: 1, record: first, row: 1 });
    assert!(matches!(&ops[1], CompactOp::Row { values, .. } if *values == small));
    assert_eq!(log.iter().filter(|(_, r)| *r == LogRecord::RowsForgotten).count(), 1);

    let resolved: Vec<_> = resolved(log.into_iter().map(Ok)).collect::<Result<_, _>>().unwrap();
    let rows = |r: &LogRecord| match r {
        LogRecord::LateOps { ops, .. } => ops.clone(),
        other => panic!("{other:?}"),
    };
    let expect = |a: &Vec<Value>, b: &Vec<Value>| {
        vec![LoggedOp::Row { ops: 1, values: a.clone() }, LoggedOp::Row { ops: 1, values: b.clone() }]
    };
    assert_eq!(rows(&resolved[0].1), expect(&small, &big));
    assert_eq!(rows(&resolved[1].1), expect(&big, &small));
}

/// The table of rows is bounded on both sides: once full, the writer marks a new table and writes rows
/// inline again, and the reader forgets the old ones, so a citation across the mark is refused.
#[test]
fn a_full_row_table_starts_over_on_both_sides() {
    let (mut table, mut seq, mut log) = (TextTable::default(), 0, Vec::new());
    let a = row("the first row, to be cited later");
    let (first, _) = append_rows(&mut table, std::slice::from_ref(&a), &mut seq, &mut log);
    let filler: Vec<_> = (0..ROW_TABLE_BYTES / 1000 + 1).map(|i| row(&format!("{i:01000}"))).collect();
    append_rows(&mut table, &filler, &mut seq, &mut log);
    assert!(table.row_bytes > ROW_TABLE_BYTES);
    let (_, ops) = append_rows(&mut table, std::slice::from_ref(&a), &mut seq, &mut log);
    assert!(matches!(&ops[0], CompactOp::Row { values, .. } if *values == a), "written inline again");
    assert_eq!(log.iter().filter(|(_, r)| *r == LogRecord::RowsForgotten).count(), 2);
    assert!(table.row_bytes < 100, "the writer's table started over");

    let mut resolver = Resolver::new();
    for (s, r) in log {
        resolver.resolve(s, r).unwrap();
    }
    assert_eq!(resolver.rows.len(), 1, "the reader forgot the rows before the mark");
    let stale = CompactOps {
        ops: vec![CompactOp::CitedRow { ops: 1, record: first, row: 0 }],
        ..CompactOps::default()
    };
    let err = resolver.resolve(seq, LogRecord::CompactLateOps { txn: TxnId(1), ops: stale }).unwrap_err();
    assert!(err.to_string().contains(&format!("row 0 of record {first}")), "{err}");
}

/// A row's values that repeat its run's parameters are written as their indices, read back as the
/// values, and the row can still be cited later; a citation of a parameter the run lacks is refused.
#[test]
fn a_row_packs_its_runs_parameters_and_its_integers() {
    let (mut table, mut seq, mut log) = (TextTable::default(), 0, Vec::new());
    let params = vec![Value::Text("12345".into()), Value::Text("a value set by the statement".into())];
    let run = |params: &Vec<Value>| LoggedOp::Run { stmt: None, params: params.clone(), columns: vec![] };
    let row = vec![params[1].clone(), params[0].clone(), Value::Text("own".into()), Value::Null];
    let logged = vec![run(&params), LoggedOp::Row { ops: 0, values: row.clone() }];
    let mut new = Vec::new();
    let compact = table.encode(logged.clone(), Vec::new(), seq, &mut new);
    let expect = CompactOp::PackedRow {
        ops: 0,
        values: vec![
            RowValue::Param(1),
            RowValue::Param(0),
            RowValue::Own(Value::Text("own".into())),
            RowValue::Own(Value::Null),
        ],
    };
    assert_eq!(compact.ops[1], expect);
    append(&mut table, new, compact, &mut seq, &mut log);
    // The same row under another run is cited whole.
    let (_, ops) = append_rows(&mut table, std::slice::from_ref(&row), &mut seq, &mut log);
    assert_eq!(ops[0], CompactOp::CitedRow { ops: 1, record: seq - 2, row: 0 });

    let mut resolver = Resolver::new();
    let mut back = Vec::new();
    for (s, r) in log {
        back.extend(resolver.resolve(s, r).unwrap());
    }
    assert!(matches!(&back[0], LogRecord::LateOps { ops, .. } if *ops == logged), "{back:?}");
    assert!(matches!(&back[1], LogRecord::LateOps { ops, .. }
        if *ops == [LoggedOp::Row { ops: 1, values: row.clone() }]));
    let beyond = CompactOps {
        ops: vec![
            CompactOp::Run { stmt: None, params: params[..1].to_vec(), columns: vec![] },
            CompactOp::PackedRow { ops: 0, values: vec![RowValue::Param(1)] },
        ],
        ..CompactOps::default()
    };
    let err = resolver.resolve(seq, LogRecord::CompactLateOps { txn: TxnId(2), ops: beyond }).unwrap_err();
    assert!(err.to_string().contains("parameter 1 of its run, which has 1"), "{err}");
}

/// After a stretch of records was skipped, a row citing a record the reader never saw is left out and
/// counted, and its transaction kept; before any hole, the same citation is an inconsistency.
#[test]
fn after_a_hole_a_row_citing_the_lost_stretch_is_left_out_not_its_transaction() {
    let read = LoggedOp::Read {
        key: KeyName { namespace: "t".into(), bytes: b"k".to_vec() },
        observed: Observed::PreHistory(1),
        stmt: None,
    };
    let ops = CompactOps {
        ops: vec![
            CompactOp::Read { ns: 0, key: b"k".to_vec(), observed: Observed::PreHistory(1), stmt: None },
            CompactOp::CitedRow { ops: 1, record: 3, row: 0 },
        ],
        statements: vec![],
        namespaces: vec![0],
    };
    let record = || LogRecord::CompactLateOps { txn: TxnId(1), ops: ops.clone() };
    let mut resolver = Resolver::new();
    resolver.resolve(0, LogRecord::Namespace { name: "t".into() }).unwrap();
    assert!(resolver.resolve(9, record()).is_err(), "no hole: the citation contradicts the log");
    resolver.after_hole();
    match resolver.resolve(10, record()).unwrap() {
        Some(LogRecord::LateOps { ops, .. }) => assert_eq!(ops, [read]),
        other => panic!("{other:?}"),
    }
    assert_eq!(resolver.values_lost(), 1);
}

/// A run that passes back values of the row read before it (read a row, write it back changed) writes
/// them as that row's indices, its integers as integers, and reads back as the same run; a citation of a
/// value the row lacks is refused.
#[test]
fn a_run_packs_the_values_of_the_row_before_it() {
    let (mut table, mut seq, mut log) = (TextTable::default(), 0, Vec::new());
    let read = vec![Value::Text("17".into()), Value::Text("a name, long enough".into()), Value::Null];
    let params = vec![
        Value::Text("a name, long enough".into()),
        Value::Text("-42".into()),
        Value::Text("007".into()),
        Value::Text("17".into()),
    ];
    let logged = vec![
        LoggedOp::Run { stmt: None, params: vec![Value::Text("17".into())], columns: vec!["id".into()] },
        LoggedOp::Row { ops: 0, values: read.clone() },
        LoggedOp::Run { stmt: None, params: params.clone(), columns: vec![] },
    ];
    let mut new = Vec::new();
    let compact = table.encode(logged.clone(), Vec::new(), seq, &mut new);
    let expect = CompactOp::PackedRun {
        stmt: None,
        params: vec![
            ParamValue::LastRow(1),
            ParamValue::Int(-42),
            ParamValue::Own(Value::Text("007".into())),
            ParamValue::LastRow(0),
        ],
        columns: None,
    };
    assert_eq!(compact.ops[2], expect);
    assert!(
        matches!(&compact.ops[0], CompactOp::PackedRun { params, columns: Some(_), .. }
            if *params == [ParamValue::Int(17)]),
        "no row before it: only its integer packs, and its columns are cited: {:?}",
        compact.ops[0]
    );
    append(&mut table, new, compact, &mut seq, &mut log);

    let mut resolver = Resolver::new();
    let mut back = Vec::new();
    for (s, r) in log {
        back.extend(resolver.resolve(s, r).unwrap());
    }
    assert!(matches!(&back[0], LogRecord::LateOps { ops, .. } if *ops == logged), "{back:?}");
    let beyond = CompactOps {
        ops: vec![
            CompactOp::Row { ops: 0, values: vec![Value::Null] },
            CompactOp::PackedRun { stmt: None, params: vec![ParamValue::LastRow(1)], columns: None },
        ],
        ..CompactOps::default()
    };
    let err = resolver.resolve(seq, LogRecord::CompactLateOps { txn: TxnId(2), ops: beyond }).unwrap_err();
    assert!(err.to_string().contains("value 1 of the row before it, which has 1"), "{err}");
}

/// A row that is its run's parameters, in order, is written as just that and reads back as them; such a
/// row after a run without parameters is refused.
#[test]
fn a_row_made_of_its_runs_parameters_is_written_as_that() {
    let params = vec![Value::Text("9118".into()), Value::Text("23730589087460".into())];
    let logged = vec![
        LoggedOp::Run { stmt: None, params: params.clone(), columns: vec![] },
        LoggedOp::Row { ops: 0, values: params.clone() },
        LoggedOp::Row { ops: 0, values: params[..1].to_vec() },
    ];
    let mut new = Vec::new();
    let compact = TextTable::default().encode(logged.clone(), Vec::new(), 0, &mut new);
    assert_eq!(compact.ops[1], CompactOp::RowOfParams { ops: 0 });
    assert!(
        matches!(compact.ops[2], CompactOp::PackedRow { .. }),
        "a part of them is not: {:?}",
        compact.ops[2]
    );
    let mut resolver = Resolver::new();
    let back = resolver.resolve(1, LogRecord::CompactLateOps { txn: TxnId(1), ops: compact }).unwrap();
    assert!(matches!(back, Some(LogRecord::LateOps { ops, .. }) if ops == logged));
    let none = CompactOps {
        ops: vec![
            CompactOp::Run { stmt: None, params: vec![], columns: vec![] },
            CompactOp::RowOfParams { ops: 0 },
        ],
        ..CompactOps::default()
    };
    let err = resolver.resolve(2, LogRecord::CompactLateOps { txn: TxnId(2), ops: none }).unwrap_err();
    assert!(err.to_string().contains("the run has none"), "{err}");
}

/// A run citing a column list no record defined is refused, packed or not.
#[test]
fn a_run_citing_an_undefined_column_list_is_refused() {
    let mut resolver = Resolver::new();
    resolver.resolve(0, LogRecord::Columns { names: vec!["id".into()] }).unwrap();
    for run in [
        CompactOp::RunCitingColumns { stmt: None, params: vec![], columns: 5 },
        CompactOp::PackedRun { stmt: None, params: vec![ParamValue::Int(1)], columns: Some(5) },
    ] {
        let ops = CompactOps { ops: vec![run], ..CompactOps::default() };
        let err = resolver.resolve(6, LogRecord::CompactLateOps { txn: TxnId(1), ops }).unwrap_err();
        assert!(err.to_string().contains("cites record 5 as a column list"), "{err}");
    }
}

/// A read or write whose key is its run's first parameters, joined as the proxy joins a key's columns,
/// names them instead of repeating the key, and reads back the same; after a run packed against the row
/// before it, the key is written whole (a hole could take that row, and a key decides the verdict); a
/// citation of more parameters than the run has is refused.
#[test]
fn a_key_made_of_its_runs_parameters_names_them() {
    let key = |bytes: &[u8]| KeyName { namespace: "t".into(), bytes: bytes.to_vec() };
    let text = |t: &str| Value::Text(t.into());
    let row = vec![text("1"), text("9"), text("a district name")];
    let logged = vec![
        LoggedOp::Run { stmt: None, params: vec![text("1"), text("9")], columns: vec![] },
        LoggedOp::Read { key: key(b"1\x1f9"), observed: Observed::PreHistory(1), stmt: None },
        LoggedOp::Row { ops: 1, values: row.clone() },
        LoggedOp::Run {
            stmt: None,
            params: vec![text("1"), text("9"), text("a district name")],
            columns: vec![],
        },
        LoggedOp::Write { key: key(b"1\x1f9"), write: WriteId(7), stmt: None },
        LoggedOp::Run { stmt: None, params: vec![text("12"), text("x")], columns: vec![] },
        LoggedOp::Write { key: key(b"12"), write: WriteId(8), stmt: None },
        LoggedOp::Read { key: key(b"12\x1fy"), observed: Observed::PreHistory(2), stmt: None },
    ];
    let mut new = Vec::new();
    let compact = TextTable::default().encode(logged.clone(), Vec::new(), 0, &mut new);
    assert!(matches!(compact.ops[1], CompactOp::ReadOfParams { params: 2, .. }), "{:?}", compact.ops[1]);
    assert!(matches!(compact.ops[3], CompactOp::PackedRun { .. }), "{:?}", compact.ops[3]);
    assert!(matches!(compact.ops[4], CompactOp::Write { .. }), "after a packed run: {:?}", compact.ops[4]);
    assert!(matches!(compact.ops[6], CompactOp::WriteOfParams { params: 1, .. }), "{:?}", compact.ops[6]);
    assert!(matches!(compact.ops[7], CompactOp::Read { .. }), "not its parameters: {:?}", compact.ops[7]);
    let mut resolver = Resolver::new();
    let (defined, namespace) = (new.len() as u64, compact.namespaces[0]);
    for (seq, n) in new.into_iter().enumerate() {
        resolver.resolve(seq as u64, n.record()).unwrap();
    }
    let back = resolver.resolve(defined, LogRecord::CompactLateOps { txn: TxnId(1), ops: compact }).unwrap();
    assert!(matches!(back, Some(LogRecord::LateOps { ops, .. }) if ops == logged));
    let beyond = CompactOps {
        ops: vec![
            CompactOp::Run { stmt: None, params: vec![text("1")], columns: vec![] },
            CompactOp::ReadOfParams { ns: 0, params: 2, observed: Observed::PreHistory(1), stmt: None },
        ],
        statements: vec![],
        namespaces: vec![namespace],
    };
    let err =
        resolver.resolve(defined + 1, LogRecord::CompactLateOps { txn: TxnId(2), ops: beyond }).unwrap_err();
    assert!(err.to_string().contains("first 2 parameters"), "{err}");
}

/// After a hole, a run packed against a row the hole took is kept without its parameters, a row packed
/// against those parameters is left out, and both are counted; values that do not depend on the hole
/// still read back.
#[test]
fn after_a_hole_values_packed_against_a_lost_row_are_left_out() {
    let name = Value::Text("a name, long enough".into());
    let ops = CompactOps {
        ops: vec![
            CompactOp::CitedRow { ops: 0, record: 3, row: 0 },
            CompactOp::PackedRun { stmt: None, params: vec![ParamValue::LastRow(0)], columns: None },
            CompactOp::PackedRow { ops: 0, values: vec![RowValue::Param(0)] },
            CompactOp::RowOfParams { ops: 0 },
            CompactOp::PackedRow { ops: 0, values: vec![RowValue::Int(5)] },
            CompactOp::PackedRun { stmt: None, params: vec![ParamValue::LastRow(0)], columns: None },
            CompactOp::Row { ops: 0, values: vec![name.clone()] },
            CompactOp::PackedRun { stmt: None, params: vec![ParamValue::LastRow(0)], columns: None },
        ],
        ..CompactOps::default()
    };
    let record = || LogRecord::CompactLateOps { txn: TxnId(1), ops: ops.clone() };
    let mut resolver = Resolver::new();
    assert!(resolver.resolve(9, record()).is_err(), "no hole: the citation contradicts the log");
    resolver.after_hole();
    let five = Value::Text("5".into());
    let run = |params: Vec<Value>| LoggedOp::Run { stmt: None, params, columns: vec![] };
    match resolver.resolve(10, record()).unwrap() {
        Some(LogRecord::LateOps { ops, .. }) => assert_eq!(
            ops,
            [
                run(vec![]),
                LoggedOp::Row { ops: 0, values: vec![five.clone()] },
                run(vec![five]),
                LoggedOp::Row { ops: 0, values: vec![name.clone()] },
                run(vec![name]),
            ]
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        resolver.values_lost(),
        4,
        "the cited row, the first run's parameters, the two rows made of them"
    );
}

/// A value from a small pool, so that rows and parameters repeat one another as an application's do.
fn arb_value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    prop_oneof![
        Just(Value::Null),
        (-3i64..300).prop_map(|n| Value::Text(n.to_string())),
        proptest::sample::select(vec![
            "007",
            "-0",
            "x",
            "a name, long enough",
            "another value, longer still"
        ])
        .prop_map(|s| Value::Text(s.to_owned())),
        Just(Value::Truncated { prefix: "a long text, cut".into(), len: 900 }),
        Just(Value::Redacted("5e884898da280471".into())),
    ]
}

/// The `ops` of a marker row in [`arb_op`].
const ROW_OF_PARAMS: u32 = u32::MAX;

/// The key bytes of a marker op in [`arb_op`]: a key made of the last run's parameters.
const KEY_OF_PARAMS: u8 = 9;

/// `ops` with each marker row replaced by a row of the last run's parameters (an `INSERT … RETURNING`),
/// and each marker key by the last run's parameters joined as a key (`… WHERE a = $1 AND b = $2`).
fn with_rows_of_params(ops: Vec<LoggedOp>) -> Vec<LoggedOp> {
    let mut last_params = Vec::new();
    let key_of = |params: &[Value]| {
        let texts: Option<Vec<&str>> =
            params.iter().map(|p| if let Value::Text(t) = p { Some(t.as_str()) } else { None }).collect();
        texts.filter(|t| !t.is_empty()).map(|t| t.join("\x1f").into_bytes())
    };
    ops.into_iter()
        .map(|op| match op {
            LoggedOp::Run { ref params, .. } => {
                last_params.clone_from(params);
                op
            }
            LoggedOp::Row { ops: ROW_OF_PARAMS, .. } => LoggedOp::Row { ops: 1, values: last_params.clone() },
            LoggedOp::Read { mut key, observed, stmt } if key.bytes == [KEY_OF_PARAMS] => {
                key.bytes = key_of(&last_params).unwrap_or(key.bytes);
                LoggedOp::Read { key, observed, stmt }
            }
            LoggedOp::Write { mut key, write, stmt } if key.bytes == [KEY_OF_PARAMS] => {
                key.bytes = key_of(&last_params).unwrap_or(key.bytes);
                LoggedOp::Write { key, write, stmt }
            }
            op => op,
        })
        .collect()
}

/// One op of a random record: a run (with or without columns), a row, or a read.
fn arb_op() -> impl proptest::strategy::Strategy<Value = LoggedOp> {
    use proptest::prelude::*;
    let values = |n| proptest::collection::vec(arb_value(), 0..n);
    prop_oneof![
        (values(5), any::<bool>()).prop_map(|(params, named)| LoggedOp::Run {
            stmt: None,
            params,
            columns: if named { vec!["id".into(), "v".into()] } else { vec![] },
        }),
        (values(5), 0u32..2).prop_map(|(values, ops)| LoggedOp::Row { ops, values }),
        // A marker the test turns into a row of the last run's parameters (see `with_rows_of_params`).
        Just(LoggedOp::Row { ops: ROW_OF_PARAMS, values: vec![] }),
        (0u8..3).prop_map(|k| LoggedOp::Read {
            key: KeyName { namespace: "t".into(), bytes: vec![k] },
            observed: Observed::PreHistory(u64::from(k)),
            stmt: None,
        }),
        Just(LoggedOp::Read {
            key: KeyName { namespace: "t".into(), bytes: vec![KEY_OF_PARAMS] },
            observed: Observed::PreHistory(0),
            stmt: None,
        }),
        Just(LoggedOp::Write {
            key: KeyName { namespace: "t".into(), bytes: vec![KEY_OF_PARAMS] },
            write: WriteId(3),
            stmt: None,
        }),
    ]
}

proptest::proptest! {
    /// Whatever the writer packs or cites (rows seen before, values of the row before a run, a run's
    /// parameters in its rows, integers), the reader gives back exactly the records the proxy appended.
    #[test]
    fn any_records_read_back_exactly_as_appended(
        records in proptest::collection::vec(proptest::collection::vec(arb_op(), 0..12), 1..8)
    ) {
        let records: Vec<Vec<LoggedOp>> = records.into_iter().map(with_rows_of_params).collect();
        let (mut table, mut seq, mut log) = (TextTable::default(), 0u64, Vec::new());
        for (i, ops) in records.iter().enumerate() {
            let mut new = Vec::new();
            let compact = table.encode(ops.clone(), Vec::new(), seq, &mut new);
            for n in new {
                table.defined(&n, seq);
                log.push((seq, n.record()));
                seq += 1;
            }
            table.appended(seq);
            log.push((seq, LogRecord::CompactLateOps { txn: TxnId(i as u64), ops: compact }));
            seq += 1;
        }
        let back: Vec<Vec<LoggedOp>> = resolved(log.into_iter().map(Ok))
            .map(|r| match r {
                Ok((_, LogRecord::LateOps { ops, .. })) => ops,
                other => panic!("{other:?}"),
            })
            .collect();
        proptest::prop_assert_eq!(back, records);
    }
}

/// `int_form` takes exactly the texts an integer prints as: checked against printing the integer again.
#[test]
fn an_integer_form_is_exactly_a_text_an_i64_prints_as() {
    let oracle = |t: &str| t.parse::<i64>().ok().filter(|n| n.to_string() == t);
    let mut texts: Vec<String> = [
        "",
        "0",
        "-0",
        "00",
        "01",
        "-01",
        "+1",
        "1",
        "-1",
        "10",
        " 1",
        "1 ",
        "1.0",
        "1e3",
        "x",
        "-",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "09223372036854775807",
        "٣",
    ]
    .iter()
    .map(|t| t.to_string())
    .collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..20_000 {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let len = (state >> 60) as usize;
        let alphabet = b"0123456789-+ 0";
        texts.push(
            (0..len)
                .map(|i| alphabet[((state >> (i * 4)) & 0xf) as usize % alphabet.len()] as char)
                .collect(),
        );
    }
    for t in texts {
        assert_eq!(int_form(&Value::Text(t.clone())), oracle(&t), "{t:?}");
    }
    assert_eq!(int_form(&Value::Null), None);
}
