//! The rewriter against the real PostgreSQL on 127.0.0.1:5432 (trust auth for `postgres`): for random
//! SELECT/UPDATE/INSERT/DELETE shapes, the rewritten SQL parses, the database accepts it, and its stripped
//! replies equal the original statement's replies byte for byte, in the simple and the extended protocol
//! (a prepared statement reused across several Binds, Describe of statement and portal). Each statement
//! runs in a transaction that is rolled back, so original and rewritten see the same rows.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
use proxy::interpret::strip::{ClientReply, data_row_for_client, row_description_for_client};
use proxy::interpret::{Catalog, StmtPlan, VersionBook, VersionStrategy, XminStrategy, plan_query};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::pg::backend::tag as btag;
use wire::pg::{FrontendMessage, StartupPacket, Target, split_frame};

/// A bare protocol-3 connection: sends frontend messages, collects raw backend messages.
struct Raw {
    s: TcpStream,
    buf: BytesMut,
}

type Msg = (u8, Bytes);

/// The client's view of a reply stream, and the extra values of every row.
type Stripped = (Vec<Msg>, Vec<Vec<Option<Bytes>>>);

impl Raw {
    async fn connect() -> Raw {
        let s = TcpStream::connect("127.0.0.1:5432").await.unwrap_or_else(|e| {
            panic!("this test needs PostgreSQL on 127.0.0.1:5432 (trust auth for postgres): {e}")
        });
        let mut raw = Raw { s, buf: BytesMut::new() };
        let mut out = BytesMut::new();
        StartupPacket::Startup {
            major: 3,
            minor: 0,
            params: vec![
                (Bytes::from_static(b"user"), Bytes::from_static(b"postgres")),
                (Bytes::from_static(b"database"), Bytes::from_static(b"postgres")),
            ],
        }
        .encode(&mut out);
        raw.s.write_all(&out).await.unwrap_or_else(|e| panic!("{e}"));
        let msgs = raw.until_ready().await;
        assert!(msgs.iter().all(|(t, _)| *t != btag::ERROR_RESPONSE), "startup failed: {msgs:?}");
        raw
    }

    async fn send(&mut self, msgs: &[FrontendMessage]) {
        let mut out = BytesMut::new();
        for m in msgs {
            m.encode(&mut out);
        }
        self.s.write_all(&out).await.unwrap_or_else(|e| panic!("{e}"));
    }

    async fn next(&mut self) -> Msg {
        loop {
            if let Some(f) = split_frame(&mut self.buf, 1 << 26).unwrap_or_else(|e| panic!("{e}")) {
                return (f.tag(), f.body());
            }
            let n = self.s.read_buf(&mut self.buf).await.unwrap_or_else(|e| panic!("{e}"));
            assert!(n > 0, "server closed the connection");
        }
    }

    async fn until_ready(&mut self) -> Vec<Msg> {
        let mut out = Vec::new();
        loop {
            let m = self.next().await;
            let done = m.0 == btag::READY_FOR_QUERY;
            if m.0 != btag::PARAMETER_STATUS && m.0 != btag::NOTICE_RESPONSE && m.0 != b'K' && m.0 != b'R' {
                out.push(m);
            }
            if done {
                return out;
            }
        }
    }

    async fn simple(&mut self, sql: &str) -> Vec<Msg> {
        self.send(&[FrontendMessage::Query { sql: Bytes::copy_from_slice(sql.as_bytes()) }]).await;
        self.until_ready().await
    }
}

/// Only the SQLSTATE of an error is compared: the message may name an internal column.
fn normalise(msgs: Vec<Msg>) -> Vec<Msg> {
    let mut out: Vec<Msg> = msgs
        .into_iter()
        .map(|(t, b)| {
            if t == btag::ERROR_RESPONSE {
                let code = b.split(|&c| c == 0).find(|f| f.first() == Some(&b'C')).unwrap_or(b"");
                (t, Bytes::copy_from_slice(code))
            } else {
                (t, b)
            }
        })
        .collect();
    // Rows of one result set may come back in any order without ORDER BY: sort runs of DataRows.
    let mut i = 0;
    while i < out.len() {
        let start = i;
        while i < out.len() && out[i].0 == btag::DATA_ROW {
            i += 1;
        }
        out[start..i].sort();
        i = i.max(start + 1);
    }
    out
}

/// Strips a reply stream the way the session does, for the simple protocol (one statement per Query) and
/// the extended one (`describe` marks which RowDescriptions answer a Describe). Returns the client's view
/// and every row's extra values.
fn strip(plan: &StmtPlan, msgs: Vec<Msg>) -> Result<Stripped, String> {
    let mut out = Vec::new();
    let mut extras = Vec::new();
    let mut described = false;
    for (t, b) in msgs {
        match t {
            btag::PARAMETER_DESCRIPTION => {
                described = true;
                out.push((t, b));
            }
            btag::ROW_DESCRIPTION => {
                match row_description_for_client(plan, &b, described).map_err(|e| e.to_string())? {
                    ClientReply::Keep(k) => out.push((t, k)),
                    ClientReply::Drop => {}
                    ClientReply::NoData => out.push((btag::NO_DATA, Bytes::new())),
                }
                described = false;
            }
            btag::BIND_COMPLETE => {
                // A portal Describe follows Bind in our extended runs.
                described = true;
                out.push((t, b));
            }
            btag::DATA_ROW => {
                let (kept, ex) = data_row_for_client(plan, &b).map_err(|e| e.to_string())?;
                if let Some(k) = kept {
                    out.push((t, k));
                }
                extras.push(ex);
            }
            _ => out.push((t, b)),
        }
    }
    Ok((out, extras))
}

const T: &str = "kpt_t";
const P: &str = "kpt_p";

fn catalog_rows(msgs: &[Msg]) -> Catalog {
    let mut rows = Vec::new();
    for (t, b) in msgs {
        if *t != btag::DATA_ROW {
            continue;
        }
        let (_, vals) = proxy::interpret::strip::split_data_row(b, 3).unwrap_or_else(|e| panic!("{e}"));
        let s = |v: &Option<Bytes>| v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
        rows.push((s(&vals[0]).unwrap_or_default(), s(&vals[1]).unwrap_or_default(), s(&vals[2])));
    }
    Catalog::from_rows(rows)
}

/// Random statement shapes over two keyed tables, with `$n` parameters given as text.
fn statement() -> impl Strategy<Value = (String, Vec<String>)> {
    let k = 0i32..12;
    let pred = prop_oneof![
        k.clone().prop_map(|k| format!("id = {k}")),
        k.clone().prop_map(|k| format!("id > {k}")),
        k.clone().prop_map(|k| format!("a < {k} AND id <> 3")),
        Just("true".to_owned()),
        (k.clone(), k.clone()).prop_map(|(x, y)| format!("id IN ({x}, {y})")),
    ];
    let cols = prop_oneof![
        Just("*".to_owned()),
        Just("a".to_owned()),
        Just("b, id".to_owned()),
        Just("a + 1 AS z, b".to_owned()),
        Just("id AS xmin".to_owned()),
    ];
    let select =
        (cols.clone(), pred.clone(), any::<bool>(), any::<bool>()).prop_map(|(c, p, order, lock)| {
            let mut s = format!("SELECT {c} FROM {T} WHERE {p}");
            if order {
                s.push_str(" ORDER BY id DESC");
            }
            if lock {
                s.push_str(" FOR UPDATE");
            }
            (s, vec![])
        });
    let point_param = (cols.clone(), k.clone())
        .prop_map(|(c, k)| (format!("SELECT {c} FROM {T} WHERE id = $1"), vec![k.to_string()]));
    let join = (k.clone(), any::<bool>()).prop_map(|(k, left)| {
        let j = if left { "LEFT JOIN" } else { "JOIN" };
        (
            format!(
                "SELECT t.a, q.v FROM {T} t {j} {P} q ON q.x = t.id WHERE t.id >= {k} ORDER BY t.id, q.y"
            ),
            vec![],
        )
    });
    let ret =
        prop_oneof![Just(""), Just(" RETURNING *"), Just(" RETURNING a, id"), Just(" RETURNING 1 AS one")];
    let update = (pred.clone(), k.clone(), ret.clone(), any::<bool>()).prop_map(|(p, d, r, blind)| {
        let set = if blind { format!("a = {d}") } else { format!("a = a + {d}, b = b || 'x'") };
        (format!("UPDATE {T} SET {set} WHERE {p}{r}"), vec![])
    });
    let update_param = (k.clone(), k.clone()).prop_map(|(d, id)| {
        (format!("UPDATE {T} SET a = a + $1 WHERE id = $2"), vec![d.to_string(), id.to_string()])
    });
    let insert = (10i32..20, k.clone(), ret.clone(), 0..3u8).prop_map(|(id, a, r, conflict)| {
        let on = match conflict {
            0 => "",
            1 => " ON CONFLICT (id) DO NOTHING",
            _ => " ON CONFLICT (id) DO UPDATE SET a = excluded.a + kpt_t.a",
        };
        (format!("INSERT INTO {T} (id, a, b) VALUES ({id}, {a}, 'n'), ({}, 1, 'm'){on}{r}", id + 1), vec![])
    });
    let delete = (pred, ret).prop_map(|(p, r)| (format!("DELETE FROM {T} WHERE {p}{r}"), vec![]));
    prop_oneof![select, point_param, join, update, update_param, insert, delete]
}

#[test]
fn rewritten_statements_give_the_client_the_same_bytes() {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let mut c = rt.block_on(Raw::connect());
    let setup = format!(
        "DROP TABLE IF EXISTS {T}, {P}; CREATE TABLE {T} (id int PRIMARY KEY, a int NOT NULL, b text); \
         CREATE TABLE {P} (x int, y int, v int, PRIMARY KEY (x, y)); \
         INSERT INTO {T} SELECT g, g * 3 % 7, 'r' || g FROM generate_series(0, 11) g; \
         INSERT INTO {P} SELECT g % 5, g, g * 10 FROM generate_series(0, 9) g"
    );
    let r = rt.block_on(c.simple(&setup));
    assert!(r.iter().all(|(t, _)| *t != btag::ERROR_RESPONSE), "setup: {r:?}");
    let cat = catalog_rows(&rt.block_on(c.simple(proxy::interpret::PK_QUERY)));
    assert!(matches!(cat.lookup(&sqlparser_name(T)), proxy::interpret::Lookup::Keyed(_)));
    let state = std::cell::RefCell::new((c, 0usize));
    let mut runner = TestRunner::new(PtConfig { cases: 120, ..PtConfig::default() });
    let result = runner.run(&statement(), |(sql, params)| {
        let mut st = state.borrow_mut();
        let (c, checked) = &mut *st;
        let out = rt.block_on(check_one(c, &cat, &sql, &params));
        if out.is_ok() {
            *checked += 1;
        }
        out
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (mut c, checked) = state.into_inner();
    assert!(checked >= 120, "only {checked} cases ran");
    rt.block_on(c.simple(&format!("DROP TABLE IF EXISTS {T}, {P}")));
}

fn sqlparser_name(t: &str) -> sqlparser::ast::ObjectName {
    sqlparser::ast::ObjectName::from(vec![sqlparser::ast::Ident::new(t)])
}

async fn check_one(c: &mut Raw, cat: &Catalog, sql: &str, params: &[String]) -> Result<(), TestCaseError> {
    let planned = plan_query(sql, cat);
    let [plan] = planned.stmts.as_slice() else { return Err(TestCaseError::fail("one statement expected")) };
    let StmtPlan::Rows(rows) = plan else {
        return Err(TestCaseError::fail(format!("{sql}: not mapped to rows: {plan:?}")));
    };
    let rewritten =
        planned.rewritten.clone().ok_or_else(|| TestCaseError::fail(format!("{sql}: no rewrite")))?;
    // The rewritten SQL parses again, to the same plan.
    let again = plan_query(&rewritten, &Catalog::new());
    prop_assert!(again.aligned, "rewritten SQL does not parse: {rewritten}");

    // Simple protocol (parameters inlined as literals).
    let mut inline = sql.to_owned();
    let mut inline_rw = rewritten.clone();
    for (i, p) in params.iter().enumerate().rev() {
        inline = inline.replace(&format!("${}", i + 1), p);
        inline_rw = inline_rw.replace(&format!("${}", i + 1), p);
    }
    let direct = c.simple(&format!("BEGIN; {inline}; ROLLBACK")).await;
    c.simple("ROLLBACK").await; // when an error skipped the ROLLBACK above
    let tagged = c.simple(&format!("BEGIN; {inline_rw}; ROLLBACK")).await;
    c.simple("ROLLBACK").await;
    let plans = vec![StmtPlan::Control, plan.clone(), StmtPlan::Control];
    let (seen, extras) = strip_simple(&plans, tagged).map_err(TestCaseError::fail)?;
    prop_assert_eq!(
        normalise(direct.clone()),
        normalise(seen),
        "simple protocol: {} vs {}",
        inline,
        inline_rw
    );
    let failed = direct.iter().any(|(t, _)| *t == btag::ERROR_RESPONSE);
    if !failed {
        let book = VersionBook::new();
        for ex in &extras {
            let ops = XminStrategy::default().row_ops(rows, ex, Some(0), &book, &[]);
            prop_assert!(ops.is_ok(), "{}: {:?}", rewritten, ops);
        }
    }

    // Extended protocol: one named statement, Describe S, then two Bind/Describe P/Execute rounds.
    let text = |s: &str| Some(Bytes::copy_from_slice(s.as_bytes()));
    let bind = |portal: &'static [u8]| FrontendMessage::Bind {
        portal: Bytes::from_static(portal),
        statement: Bytes::from_static(b"s"),
        param_formats: vec![],
        params: params.iter().map(|p| text(p)).collect(),
        result_formats: vec![],
    };
    let run = |q: &str| {
        vec![
            FrontendMessage::Query { sql: Bytes::from_static(b"BEGIN") },
            FrontendMessage::Parse {
                name: Bytes::from_static(b"s"),
                query: Bytes::copy_from_slice(q.as_bytes()),
                param_types: vec![],
            },
            FrontendMessage::Describe { target: Target::Statement, name: Bytes::from_static(b"s") },
            bind(b"p1"),
            FrontendMessage::Describe { target: Target::Portal, name: Bytes::from_static(b"p1") },
            FrontendMessage::Execute { portal: Bytes::from_static(b"p1"), max_rows: 0 },
            bind(b"p2"),
            FrontendMessage::Execute { portal: Bytes::from_static(b"p2"), max_rows: 0 },
            FrontendMessage::Sync,
        ]
    };
    let mut ext = HashMap::new();
    for (label, q) in [("direct", sql), ("tagged", rewritten.as_str())] {
        c.send(&run(q)).await;
        let mut msgs = c.until_ready().await; // BEGIN
        msgs.extend(c.until_ready().await); // the batch
        c.simple("ROLLBACK").await;
        // Prepared statements outlive ROLLBACK; an error may have skipped a Close in the batch.
        c.send(&[
            FrontendMessage::Close { target: Target::Statement, name: Bytes::from_static(b"s") },
            FrontendMessage::Sync,
        ])
        .await;
        c.until_ready().await;
        ext.insert(label, msgs);
    }
    let direct = ext.remove("direct").unwrap_or_default();
    let (seen, _) = strip(plan, ext.remove("tagged").unwrap_or_default()).map_err(TestCaseError::fail)?;
    prop_assert_eq!(normalise(direct), normalise(seen), "extended protocol: {} vs {}", sql, rewritten);
    Ok(())
}

/// Strips a simple-protocol reply with one plan per statement, advancing at each CommandComplete.
fn strip_simple(plans: &[StmtPlan], msgs: Vec<Msg>) -> Result<Stripped, String> {
    let mut out = Vec::new();
    let mut extras = Vec::new();
    let mut at = 0;
    let mut current = Vec::new();
    for m in msgs {
        let end = matches!(m.0, btag::COMMAND_COMPLETE | btag::EMPTY_QUERY_RESPONSE | btag::ERROR_RESPONSE);
        current.push(m);
        if end {
            let plan = plans.get(at).cloned().unwrap_or(StmtPlan::Control);
            let (o, e) = strip(&plan, std::mem::take(&mut current))?;
            out.extend(o);
            extras.extend(e);
            at += 1;
        }
    }
    out.extend(current);
    Ok((out, extras))
}
