//! Scenario tests for reply matching and transaction tracking: each feeds the exact message sequence a client
//! and PostgreSQL exchange, and checks the queue and the transactions that come out.

use bytes::{Bytes, BytesMut};
use history::Outcome;
use wire::pg::backend::{BackendMessage, CopyFormat, ErrorFields};
use wire::pg::{FrontendMessage, Target, TxnStatus, split_frame};

use super::*;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

struct Harness {
    m: SessionMachine,
    clock: u64,
    ended: Vec<TxnEnd>,
    intents: Vec<TxnSnapshot>,
}

impl Harness {
    fn new() -> Self {
        Harness { m: SessionMachine::new(), clock: 0, ended: Vec::new(), intents: Vec::new() }
    }

    /// Offers a frontend message; panics unless it is forwarded.
    fn send(&mut self, msg: FrontendMessage) {
        self.clock += 1;
        match self.m.on_frontend(&msg, self.clock) {
            FrontendStep::Forward { intent, .. } => self.intents.extend(intent),
            FrontendStep::Wait | FrontendStep::LearnXid => panic!("{msg:?} had to wait"),
        }
    }

    fn query(&mut self, sql: &str) {
        self.send(FrontendMessage::Query { sql: b(sql) });
    }

    fn extended(&mut self, sql: &str) {
        self.send(FrontendMessage::Parse { name: b(""), query: b(sql), param_types: vec![] });
        self.send(bind(""));
        self.send(FrontendMessage::Execute { portal: b(""), max_rows: 0 });
    }

    fn reply(&mut self, msg: BackendMessage) -> Result<(), Desync> {
        self.clock += 1;
        let mut buf = BytesMut::from(&msg.to_bytes()[..]);
        let frame = split_frame(&mut buf, 1 << 20).unwrap().unwrap();
        let ends = self.m.on_backend(frame.tag(), &frame.body(), self.clock)?.ends;
        self.ended.extend(ends);
        Ok(())
    }

    fn replies(&mut self, msgs: impl IntoIterator<Item = BackendMessage>) {
        for m in msgs {
            self.reply(m.clone()).unwrap_or_else(|e| panic!("{m:?}: {e}"));
        }
    }

    fn outcomes(&self) -> Vec<(Outcome, bool, Vec<String>)> {
        self.ended.iter().map(|e| (e.outcome, e.intent_written, e.txn.statements.clone())).collect()
    }
}

fn bind(portal: &str) -> FrontendMessage {
    FrontendMessage::Bind {
        portal: b(portal),
        statement: b(""),
        param_formats: vec![],
        params: vec![],
        result_formats: vec![],
    }
}

fn cc(tag: &str) -> BackendMessage {
    BackendMessage::CommandComplete { tag: b(tag) }
}

fn rfq(s: TxnStatus) -> BackendMessage {
    BackendMessage::ReadyForQuery(s)
}

fn err() -> BackendMessage {
    BackendMessage::ErrorResponse(ErrorFields::error("22012", "division by zero"))
}

fn row() -> BackendMessage {
    BackendMessage::DataRow { values: vec![Some(b("1"))] }
}

fn rowdesc() -> BackendMessage {
    BackendMessage::RowDescription { fields: vec![] }
}

use TxnStatus::{Failed as E, Idle as I, InTransaction as T};

#[test]
fn autocommit_query_logs_intent_then_commits_at_ready_for_query() {
    let mut h = Harness::new();
    h.query("insert into t values (1)");
    assert_eq!(h.intents.len(), 1, "an implicit transaction commits at the end of the query");
    h.replies([cc("INSERT 0 1")]);
    assert!(h.ended.is_empty(), "the commit is only known at ReadyForQuery");
    h.replies([rfq(I)]);
    assert_eq!(h.outcomes(), vec![(Outcome::Committed, true, vec!["insert into t values (1)".into()])]);
    assert_eq!(h.m.outstanding(), 0);
}

#[test]
fn explicit_block_logs_one_intent_at_commit_with_all_statements() {
    let mut h = Harness::new();
    for (sql, tag, status) in [("BEGIN", "BEGIN", T), ("update t set v = 2", "UPDATE 1", T)] {
        h.query(sql);
        h.replies([cc(tag), rfq(status)]);
    }
    assert!(h.intents.is_empty() && h.ended.is_empty());
    h.query("commit");
    assert_eq!(h.intents.len(), 1);
    assert_eq!(h.intents[0].statements, vec!["BEGIN", "update t set v = 2", "commit"]);
    h.replies([cc("COMMIT")]);
    assert_eq!(h.outcomes()[0].0, Outcome::Committed, "the COMMIT tag ends it, before ReadyForQuery");
    h.replies([rfq(I)]);
    assert_eq!(h.ended.len(), 1);
    assert_eq!(h.ended[0].txn.seq, 0);
}

#[test]
fn rollback_is_aborted_without_an_intent() {
    let mut h = Harness::new();
    h.query("begin");
    h.replies([cc("BEGIN"), rfq(T)]);
    h.query("delete from t");
    h.replies([cc("DELETE 3"), rfq(T)]);
    h.query("rollback");
    h.replies([cc("ROLLBACK"), rfq(I)]);
    assert!(h.intents.is_empty());
    assert_eq!(
        h.outcomes(),
        vec![(Outcome::Aborted, false, vec!["begin".into(), "delete from t".into(), "rollback".into()])]
    );
}

#[test]
fn rollback_to_savepoint_keeps_the_block_open_and_commit_of_a_failed_block_aborts() {
    let mut h = Harness::new();
    h.query("begin");
    h.replies([cc("BEGIN"), rfq(T)]);
    h.query("savepoint a");
    h.replies([cc("SAVEPOINT"), rfq(T)]);
    h.query("select 1/0");
    h.replies([err(), rfq(E)]);
    h.query("rollback to savepoint a");
    h.replies([cc("ROLLBACK"), rfq(T)]);
    assert!(h.ended.is_empty(), "ROLLBACK TO shares the ROLLBACK tag but does not end the block");
    h.query("select 1/0");
    h.replies([err(), rfq(E)]);
    h.query("commit");
    assert_eq!(h.intents.len(), 1);
    h.replies([cc("ROLLBACK"), rfq(I)]);
    assert_eq!(h.ended.len(), 1);
    assert_eq!(h.ended[0].outcome, Outcome::Aborted, "COMMIT of a failed block answers ROLLBACK");
    assert!(h.ended[0].intent_written);
}

#[test]
fn error_in_an_implicit_transaction_aborts_it() {
    let mut h = Harness::new();
    h.query("insert into t values (1); select 1/0");
    h.replies([cc("INSERT 0 1"), err(), rfq(I)]);
    assert_eq!(h.outcomes()[0].0, Outcome::Aborted);
}

#[test]
fn multi_statement_query_with_commit_inside_makes_two_transactions() {
    let mut h = Harness::new();
    h.query("begin; insert into t values (1); commit; insert into t values (2)");
    assert_eq!(h.intents.len(), 1);
    h.replies([cc("BEGIN"), cc("INSERT 0 1"), cc("COMMIT"), cc("INSERT 0 1"), rfq(I)]);
    let o = h.outcomes();
    assert_eq!(o.len(), 2);
    assert_eq!((o[0].0, o[0].1), (Outcome::Committed, true));
    assert_eq!((o[1].0, o[1].1), (Outcome::Committed, false));
    assert_eq!(h.ended[1].txn.seq, 1);
}

#[test]
fn extended_batch_commits_at_sync_and_the_next_batch_waits_for_it() {
    let mut h = Harness::new();
    h.extended("insert into t values ($1)");
    assert!(h.intents.is_empty(), "an implicit extended transaction commits at Sync, not at Execute");
    h.send(FrontendMessage::Sync);
    assert_eq!(h.intents.len(), 1);
    // A pipelining client sends the next batch before the replies arrive.
    h.send(FrontendMessage::Parse { name: b(""), query: b("select 1"), param_types: vec![] });
    h.send(bind(""));
    let exec = FrontendMessage::Execute { portal: b(""), max_rows: 0 };
    assert_eq!(
        h.m.on_frontend(&exec, 100),
        FrontendStep::Wait,
        "it must not join the committing transaction"
    );
    h.replies([BackendMessage::ParseComplete, BackendMessage::BindComplete, cc("INSERT 0 1"), rfq(I)]);
    assert_eq!(h.outcomes()[0].0, Outcome::Committed);
    h.send(exec);
    h.send(FrontendMessage::Sync);
    h.replies([BackendMessage::ParseComplete, BackendMessage::BindComplete, row(), cc("SELECT 1"), rfq(I)]);
    assert_eq!(h.ended.len(), 2);
    assert_eq!(h.ended[1].txn.statements, vec!["select 1"]);
    assert_eq!(h.m.outstanding(), 0);
}

#[test]
fn error_mid_pipeline_skips_replies_until_sync() {
    let mut h = Harness::new();
    h.query("begin");
    h.replies([cc("BEGIN"), rfq(T)]);
    h.extended("insert into t values (1)");
    h.extended("select 1/0");
    h.extended("insert into t values (2)");
    h.send(FrontendMessage::Sync);
    h.replies([BackendMessage::ParseComplete, BackendMessage::BindComplete, cc("INSERT 0 1")]);
    h.replies([BackendMessage::ParseComplete, BackendMessage::BindComplete, err()]);
    assert_eq!(h.m.expected(), vec![Expect::Sync], "the third statement's replies never come");
    h.replies([rfq(E)]);
    assert!(h.ended.is_empty());
    h.query("rollback");
    h.replies([cc("ROLLBACK"), rfq(I)]);
    assert_eq!(h.outcomes()[0].0, Outcome::Aborted);
}

#[test]
fn error_before_the_client_sent_sync_discards_later_messages_until_it_does() {
    let mut h = Harness::new();
    h.extended("select 1/0");
    h.send(FrontendMessage::Flush);
    h.replies([BackendMessage::ParseComplete, BackendMessage::BindComplete, err()]);
    assert!(h.m.expected().is_empty());
    // The server discards these; no replies may be expected for them.
    h.extended("select 2");
    h.send(FrontendMessage::Sync);
    assert_eq!(h.m.expected(), vec![Expect::Sync]);
    h.replies([rfq(I)]);
    assert_eq!(h.outcomes()[0].0, Outcome::Aborted);
    assert_eq!(h.m.outstanding(), 0);
}

#[test]
fn suspended_portal_is_one_statement_however_often_it_is_executed() {
    let mut h = Harness::new();
    h.query("begin");
    h.replies([cc("BEGIN"), rfq(T)]);
    h.send(FrontendMessage::Parse { name: b("s"), query: b("select * from big"), param_types: vec![] });
    h.send(FrontendMessage::Bind {
        portal: b("c1"),
        statement: b("s"),
        param_formats: vec![],
        params: vec![],
        result_formats: vec![],
    });
    h.send(FrontendMessage::Describe { target: Target::Portal, name: b("c1") });
    h.send(FrontendMessage::Execute { portal: b("c1"), max_rows: 2 });
    h.send(FrontendMessage::Sync);
    h.replies([BackendMessage::ParseComplete, BackendMessage::BindComplete, rowdesc()]);
    h.replies([row(), row(), BackendMessage::PortalSuspended, rfq(T)]);
    h.send(FrontendMessage::Execute { portal: b("c1"), max_rows: 2 });
    h.send(FrontendMessage::Sync);
    h.replies([row(), cc("SELECT 1"), rfq(T)]);
    h.query("commit");
    h.replies([cc("COMMIT"), rfq(I)]);
    assert_eq!(h.ended[0].txn.statements, vec!["begin", "select * from big", "commit"]);
}

#[test]
fn describe_statement_expects_parameter_description_then_row_description_or_no_data() {
    let mut h = Harness::new();
    h.send(FrontendMessage::Parse { name: b("s1"), query: b("select $1"), param_types: vec![] });
    h.send(FrontendMessage::Describe { target: Target::Statement, name: b("s1") });
    h.send(FrontendMessage::Parse {
        name: b("s2"),
        query: b("insert into t values ($1)"),
        param_types: vec![],
    });
    h.send(FrontendMessage::Describe { target: Target::Statement, name: b("s2") });
    h.send(FrontendMessage::Sync);
    h.replies([
        BackendMessage::ParseComplete,
        BackendMessage::ParameterDescription { types: vec![25] },
        rowdesc(),
        BackendMessage::ParseComplete,
        BackendMessage::ParameterDescription { types: vec![23] },
        BackendMessage::NoData,
        rfq(I),
    ]);
    assert!(h.ended.is_empty(), "Parse and Describe run no statement");
    assert_eq!(h.m.outstanding(), 0);
}

#[test]
fn copy_in_via_simple_query() {
    let mut h = Harness::new();
    h.query("copy t from stdin");
    h.replies([BackendMessage::CopyInResponse(CopyFormat { overall: 0, columns: vec![0] })]);
    h.send(FrontendMessage::CopyData(b("1\n")));
    h.send(FrontendMessage::CopyDone);
    h.replies([cc("COPY 1"), rfq(I)]);
    assert_eq!(h.outcomes()[0].0, Outcome::Committed);
}

#[test]
fn copy_in_via_extended_query_ignores_the_pipelined_sync() {
    let mut h = Harness::new();
    h.extended("copy t from stdin");
    h.send(FrontendMessage::Sync);
    h.replies([BackendMessage::ParseComplete, BackendMessage::BindComplete]);
    h.replies([BackendMessage::CopyInResponse(CopyFormat { overall: 0, columns: vec![0] })]);
    assert_eq!(h.m.outstanding(), 1, "the server ignores Sync during COPY FROM STDIN");
    h.send(FrontendMessage::CopyData(b("1\n")));
    h.send(FrontendMessage::Sync); // libpq-style: ignored too, not queued
    h.send(FrontendMessage::CopyDone);
    h.send(FrontendMessage::Sync);
    h.replies([cc("COPY 1"), rfq(I)]);
    assert_eq!(h.m.outstanding(), 0);
    assert_eq!(h.outcomes()[0].0, Outcome::Committed);
}

#[test]
fn copy_out_and_notifications_pass_through() {
    let mut h = Harness::new();
    h.query("listen jobs");
    h.replies([cc("LISTEN"), rfq(I)]);
    h.replies([BackendMessage::NotificationResponse { pid: 1, channel: b("jobs"), payload: b("x") }]);
    h.query("copy t to stdout");
    h.replies([
        BackendMessage::CopyOutResponse(CopyFormat { overall: 0, columns: vec![0] }),
        BackendMessage::CopyData(b("1\n")),
        BackendMessage::CopyDone,
        BackendMessage::NoticeResponse(ErrorFields::with_severity("NOTICE", "00000", "hi")),
        cc("COPY 1"),
        rfq(I),
    ]);
    // LISTEN outside a block touches no data and is not recorded; the COPY is.
    assert_eq!(h.ended.len(), 1);
}

#[test]
fn unexpected_reply_desyncs_and_ends_the_open_transaction_as_indeterminate() {
    let mut h = Harness::new();
    h.query("begin");
    h.replies([cc("BEGIN"), rfq(T)]);
    h.query("update t set v = 1");
    let e = h.reply(BackendMessage::ParseComplete).unwrap_err();
    assert_eq!(e.ends.len(), 1);
    assert_eq!(e.ends[0].outcome, Outcome::Indeterminate);
    assert!(h.m.is_passthrough());
    // Afterwards everything is relayed without tracking.
    assert!(h.reply(BackendMessage::BindComplete).is_ok());
}

#[test]
fn lost_connection_mid_block_is_aborted_and_during_commit_is_indeterminate() {
    let mut h = Harness::new();
    h.query("begin");
    h.replies([cc("BEGIN"), rfq(T)]);
    h.query("update t set v = 1");
    h.replies([cc("UPDATE 1"), rfq(T)]);
    assert_eq!(h.m.on_disconnect(9).map(|e| e.outcome), Some(Outcome::Aborted));

    let mut h = Harness::new();
    h.query("begin");
    h.replies([cc("BEGIN"), rfq(T)]);
    h.query("commit");
    assert_eq!(h.m.on_disconnect(9).map(|e| e.outcome), Some(Outcome::Indeterminate));

    let mut h = Harness::new();
    h.query("select pg_sleep(10)");
    assert_eq!(h.m.on_disconnect(9).map(|e| e.outcome), Some(Outcome::Indeterminate));

    let mut h = Harness::new();
    assert_eq!(h.m.on_disconnect(9), None, "no transaction, nothing to record");
}

#[test]
fn prepare_transaction_is_in_doubt() {
    let mut h = Harness::new();
    h.query("begin");
    h.replies([cc("BEGIN"), rfq(T)]);
    h.query("prepare transaction 'g1'");
    assert_eq!(h.intents.len(), 1);
    h.replies([cc("PREPARE TRANSACTION"), rfq(I)]);
    assert_eq!(h.outcomes()[0].0, Outcome::Indeterminate);
}

#[test]
fn extended_explicit_block_like_pgbench_prepared() {
    let mut h = Harness::new();
    for sql in ["BEGIN", "UPDATE a SET v = v + 1", "SELECT v FROM a", "END"] {
        h.send(FrontendMessage::Bind {
            portal: b(""),
            statement: b(sql),
            param_formats: vec![],
            params: vec![],
            result_formats: vec![],
        });
        // pgbench -M prepared parses each statement once, by name; emulate with a Parse first.
        let prepared = Prepared::parsed(sql.as_bytes(), None);
        h.m.statements.insert(b(sql), prepared.clone());
        h.m.portals.insert(b(""), Portal { prepared, tagging: None });
        h.send(FrontendMessage::Execute { portal: b(""), max_rows: 0 });
        h.send(FrontendMessage::Sync);
        let status = if sql == "END" { I } else { T };
        let tag = match sql {
            "BEGIN" => "BEGIN",
            "END" => "COMMIT",
            "SELECT v FROM a" => "SELECT 1",
            _ => "UPDATE 1",
        };
        h.replies([BackendMessage::BindComplete, cc(tag), rfq(status)]);
    }
    assert_eq!(h.intents.len(), 1);
    assert_eq!(h.intents[0].statements.len(), 4);
    assert_eq!(h.outcomes()[0].0, Outcome::Committed);
}

mod arbitrary_streams {
    //! The machine is fed whatever a client sends and whatever the server answers, so no sequence of
    //! messages, however wrong, may make it panic (a panic would kill the session's task).

    use proptest::prelude::*;

    use super::*;

    fn frontend() -> impl Strategy<Value = FrontendMessage> {
        let sql = prop::sample::select(vec![
            "begin",
            "commit",
            "rollback",
            "savepoint a",
            "rollback to a",
            "select 1",
            "insert into t values (1)",
            "copy t from stdin",
            "call p()",
            "prepare transaction 'x'",
            "",
            "select 1; commit; select 2",
        ]);
        let name = prop::sample::select(vec!["", "a", "b"]);
        prop_oneof![
            sql.clone().prop_map(|s| FrontendMessage::Query { sql: b(s) }),
            (name.clone(), sql).prop_map(|(n, s)| FrontendMessage::Parse {
                name: b(n),
                query: b(s),
                param_types: vec![]
            }),
            (name.clone(), name.clone()).prop_map(|(p, s)| FrontendMessage::Bind {
                portal: b(p),
                statement: b(s),
                param_formats: vec![],
                params: vec![],
                result_formats: vec![]
            }),
            (name.clone(), 0..3i32).prop_map(|(p, m)| FrontendMessage::Execute { portal: b(p), max_rows: m }),
            name.clone().prop_map(|n| FrontendMessage::Describe { target: Target::Statement, name: b(n) }),
            name.clone().prop_map(|n| FrontendMessage::Describe { target: Target::Portal, name: b(n) }),
            name.prop_map(|n| FrontendMessage::Close { target: Target::Portal, name: b(n) }),
            Just(FrontendMessage::Sync),
            Just(FrontendMessage::Flush),
            Just(FrontendMessage::CopyData(b("1\n"))),
            Just(FrontendMessage::CopyDone),
            Just(FrontendMessage::CopyFail { message: b("no") }),
            Just(FrontendMessage::FunctionCall {
                oid: 1,
                arg_formats: vec![],
                args: vec![],
                result_format: 0
            }),
        ]
    }

    fn backend() -> impl Strategy<Value = BackendMessage> {
        let fmt = CopyFormat { overall: 0, columns: vec![] };
        prop_oneof![
            Just(BackendMessage::ParseComplete),
            Just(BackendMessage::BindComplete),
            Just(BackendMessage::CloseComplete),
            Just(BackendMessage::NoData),
            Just(BackendMessage::PortalSuspended),
            Just(BackendMessage::EmptyQueryResponse),
            Just(BackendMessage::ParameterDescription { types: vec![] }),
            Just(rowdesc()),
            Just(row()),
            Just(err()),
            prop::sample::select(vec![
                "COMMIT",
                "ROLLBACK",
                "BEGIN",
                "INSERT 0 1",
                "PREPARE TRANSACTION",
                "SELECT 1"
            ])
            .prop_map(cc),
            prop::sample::select(vec![I, T, E]).prop_map(rfq),
            Just(BackendMessage::CopyInResponse(fmt.clone())),
            Just(BackendMessage::CopyOutResponse(fmt.clone())),
            Just(BackendMessage::CopyBothResponse(fmt)),
            Just(BackendMessage::CopyData(b("x"))),
            Just(BackendMessage::CopyDone),
            Just(BackendMessage::FunctionCallResponse { value: None }),
            Just(BackendMessage::Authentication(wire::pg::backend::Authentication::Ok)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn no_message_sequence_makes_the_machine_panic(
            events in prop::collection::vec(prop_oneof![frontend().prop_map(Ok), backend().prop_map(Err)], 0..60)
        ) {
            let mut m = SessionMachine::new();
            let mut clock = 0;
            for e in events {
                clock += 1;
                match e {
                    Ok(f) => {
                        let _ = m.on_frontend(&f, clock);
                    }
                    Err(bmsg) => {
                        let mut buf = BytesMut::from(&bmsg.to_bytes()[..]);
                        let frame = split_frame(&mut buf, 1 << 20).unwrap().unwrap();
                        let _ = m.on_backend(frame.tag(), &frame.body(), clock);
                    }
                }
                prop_assert_eq!(m.outstanding(), m.expected().len());
            }
            let _ = m.on_disconnect(clock + 1);
            prop_assert!(m.on_disconnect(clock + 2).is_none(), "a transaction is ended once");
        }

        #[test]
        fn the_keyword_reader_never_panics(sql in prop::collection::vec(any::<u8>(), 0..80)) {
            let _ = crate::sql::classify(&sql);
        }
    }
}

/// The order the differential oracle caught (seed 175): an extended COMMIT and its Sync, then the client's
/// next batch opens a block. The next Execute may go as soon as the COMMIT's CommandComplete is in, before
/// the Sync's ReadyForQuery `I`; that `I` answers the Sync sent before the new block and must not end it
/// (it used to, recording the block's statements as a committed transaction the server never committed).
#[test]
fn a_ready_for_query_does_not_end_a_transaction_opened_after_its_sync() {
    let mut h = Harness::new();
    h.query("begin");
    h.replies([cc("BEGIN"), rfq(TxnStatus::InTransaction)]);
    h.extended("commit");
    h.send(FrontendMessage::Sync);
    h.send(FrontendMessage::Parse { name: b(""), query: b("begin"), param_types: vec![] });
    h.send(bind(""));
    let exec = FrontendMessage::Execute { portal: b(""), max_rows: 0 };
    assert_eq!(h.m.on_frontend(&exec, 0), FrontendStep::Wait, "the COMMIT is unanswered");
    h.replies([BackendMessage::ParseComplete, BackendMessage::BindComplete, cc("COMMIT")]);
    h.send(exec);
    h.send(FrontendMessage::Sync);
    h.query("insert into t values (3)");
    h.replies([rfq(I)]);
    assert_eq!(h.outcomes(), vec![(Outcome::Committed, true, vec!["begin".into(), "commit".into()])]);
    assert!(h.m.in_transaction(), "the block opened after the first Sync is still open");
    h.replies([
        BackendMessage::ParseComplete,
        BackendMessage::BindComplete,
        cc("BEGIN"),
        rfq(T),
        cc("INSERT 0 1"),
        rfq(T),
    ]);
    h.query("rollback");
    h.replies([cc("ROLLBACK"), rfq(I)]);
    assert_eq!(h.outcomes().len(), 2);
    assert_eq!(
        h.outcomes()[1],
        (Outcome::Aborted, false, vec!["begin".into(), "insert into t values (3)".into(), "rollback".into()])
    );
    assert_eq!(h.m.outstanding(), 0);
}

/// A statement after COMMIT in the same query string opens a transaction that the string's own
/// ReadyForQuery ends.
#[test]
fn a_statement_after_commit_in_one_query_string_ends_at_its_ready_for_query() {
    let mut h = Harness::new();
    h.query("begin; insert into t values (1); commit; insert into t values (2)");
    h.replies([cc("BEGIN"), cc("INSERT 0 1"), cc("COMMIT"), cc("INSERT 0 1"), rfq(I)]);
    let outcomes = h.outcomes();
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
    assert_eq!(outcomes[0].0, Outcome::Committed);
    assert_eq!(outcomes[1].0, Outcome::Committed);
    assert!(!h.m.in_transaction());
}

#[test]
fn passwords_are_redacted_before_a_statement_is_recorded_or_a_desync_is_told() {
    let mut h = Harness::new();
    h.query("ALTER ROLE alice PASSWORD 'pw-secret'");
    h.replies([cc("ALTER ROLE"), rfq(TxnStatus::Idle)]);
    h.extended("CREATE USER bob ENCRYPTED PASSWORD 'pw-secret'");
    h.send(FrontendMessage::Sync);
    h.replies([
        BackendMessage::ParseComplete,
        BackendMessage::BindComplete,
        cc("CREATE ROLE"),
        rfq(TxnStatus::Idle),
    ]);
    let statements: Vec<String> = h.ended.iter().flat_map(|e| e.txn.statements.clone()).collect();
    assert_eq!(
        statements,
        vec!["ALTER ROLE alice PASSWORD '<redacted>'", "CREATE USER bob ENCRYPTED PASSWORD '<redacted>'"]
    );
    // A desync's reason names what was expected, never the query's text.
    h.query("ALTER ROLE alice PASSWORD 'pw-secret'");
    let desync = h.reply(BackendMessage::BindComplete).expect_err("BindComplete does not answer a Query");
    assert!(!desync.reason.contains("pw-secret"), "{}", desync.reason);
}

/// A bare SET (or SHOW, RESET, …) and a lone COMMIT or ROLLBACK outside a block touch no data: they are
/// not recorded as transactions, by either protocol. The next real statement is, as session position 0.
#[test]
fn session_statements_and_a_lone_commit_outside_a_block_are_not_transactions() {
    let mut h = Harness::new();
    for (sql, tag) in [("SET search_path = public", "SET"), ("SHOW TimeZone", "SHOW"), ("COMMIT", "COMMIT")] {
        h.query(sql);
        h.replies([cc(tag), rfq(TxnStatus::Idle)]);
    }
    h.extended("ROLLBACK");
    h.send(FrontendMessage::Sync);
    h.replies([
        BackendMessage::ParseComplete,
        BackendMessage::BindComplete,
        cc("ROLLBACK"),
        rfq(TxnStatus::Idle),
    ]);
    h.extended("SET application_name = 'x'");
    h.send(FrontendMessage::Sync);
    h.replies([BackendMessage::ParseComplete, BackendMessage::BindComplete, cc("SET"), rfq(TxnStatus::Idle)]);
    assert!(h.ended.is_empty() && h.intents.is_empty(), "{:?}", h.outcomes());
    // Inside a block a SET belongs to the transaction; with data, so does a SET in the same query.
    h.query("BEGIN; SET LOCAL work_mem = '8MB'; SELECT 1; COMMIT");
    h.replies([cc("BEGIN"), cc("SET"), cc("SELECT 1"), cc("COMMIT"), rfq(TxnStatus::Idle)]);
    h.query("SET x.y = 1; SELECT 1");
    h.replies([cc("SET"), cc("SELECT 1"), rfq(TxnStatus::Idle)]);
    let ended: Vec<(u64, Outcome)> = h.ended.iter().map(|e| (e.txn.seq, e.outcome)).collect();
    assert_eq!(ended, vec![(0, Outcome::Committed), (1, Outcome::Committed)], "{:?}", h.outcomes());
}

#[test]
fn tracked_names_do_not_keep_the_read_buffer_they_arrived_in() {
    let mut h = Harness::new();
    let mut buf = BytesMut::with_capacity(1 << 20);
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.capacity();
    FrontendMessage::Parse { name: b("s1"), query: b("select 1"), param_types: vec![] }.encode(&mut buf);
    FrontendMessage::Bind {
        portal: b("p1"),
        statement: b("s1"),
        param_formats: vec![],
        params: vec![],
        result_formats: vec![],
    }
    .encode(&mut buf);
    while let Some(frame) = split_frame(&mut buf, 1 << 20).unwrap() {
        h.send(FrontendMessage::decode(&frame).unwrap());
    }
    let keys = h.m.statements.keys().chain(h.m.portals.keys()).collect::<Vec<_>>();
    assert_eq!(keys.len(), 2);
    for key in keys {
        assert!(!range.contains(&(key.as_ptr() as usize)), "{key:?} is a slice of the read buffer");
    }
}
