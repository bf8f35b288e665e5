//! Which statements change which level, and the levels the machine gives transactions as a client and
//! PostgreSQL exchange the exact messages.

use bytes::{Bytes, BytesMut};
use history::IsolationLevel::{
    ReadCommitted as RC, ReadUncommitted as RU, RepeatableRead as RR, Serializable as S,
};
use wire::pg::backend::{BackendMessage, ErrorFields};
use wire::pg::{FrontendMessage, TxnStatus, split_frame};

use super::*;
use crate::machine::{FrontendStep, SessionMachine, TxnEnd, TxnSnapshot};
use crate::sql::classify;

fn one(sql: &str) -> Option<LevelEffect> {
    effect_of_one(sql.as_bytes())
}

use Asked::{Default as Dflt, Level, Unknown};
use LevelEffect::{Begin, Chain, SessionDefault, Transaction};

#[test]
fn begin_and_start_transaction_read_their_modes_in_any_order() {
    assert_eq!(one("BEGIN"), None, "no mention of isolation: not even parsed");
    assert_eq!(one("begin work isolation level repeatable read"), Some(Begin(Level(RR))));
    assert_eq!(
        one("BEGIN TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY, DEFERRABLE"),
        Some(Begin(Level(S)))
    );
    assert_eq!(
        one("START TRANSACTION READ ONLY ISOLATION LEVEL SERIALIZABLE DEFERRABLE"),
        Some(Begin(Level(S)))
    );
    assert_eq!(
        one("start transaction not deferrable, isolation level read uncommitted"),
        Some(Begin(Level(RU)))
    );
    assert_eq!(one("BEGIN /* isolation */ READ WRITE"), Some(Begin(Dflt)));
    assert_eq!(one("BEGIN ISOLATION LEVEL SNAPSHOT"), Some(Begin(Unknown)));
}

#[test]
fn set_forms_change_the_transaction_or_the_session_default() {
    assert_eq!(one("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"), Some(Transaction(Level(S))));
    assert_eq!(one("SET TRANSACTION READ ONLY"), None);
    assert_eq!(one("set transaction_isolation = 'repeatable read'"), Some(Transaction(Level(RR))));
    assert_eq!(
        one("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY, ISOLATION LEVEL REPEATABLE READ"),
        Some(SessionDefault(Level(RR)))
    );
    assert_eq!(one("SET default_transaction_isolation = 'repeatable read'"), Some(SessionDefault(Level(RR))));
    assert_eq!(
        one("SET SESSION default_transaction_isolation TO serializable"),
        Some(SessionDefault(Level(S)))
    );
    assert_eq!(
        one("set default_transaction_isolation to \"read committed\""),
        Some(SessionDefault(Level(RC)))
    );
    assert_eq!(one("SET Default_Transaction_Isolation TO DEFAULT"), Some(SessionDefault(Dflt)));
    assert_eq!(one("SET default_transaction_isolation = 'bogus'"), Some(SessionDefault(Unknown)));
    assert_eq!(one("SET LOCAL default_transaction_isolation TO serializable"), None, "lasts one transaction");
    assert_eq!(one("RESET default_transaction_isolation"), Some(SessionDefault(Dflt)));
    assert_eq!(one("RESET ALL"), Some(SessionDefault(Dflt)));
    assert_eq!(one("DISCARD ALL"), Some(SessionDefault(Dflt)));
    assert_eq!(one("RESET search_path"), None);
    assert_eq!(one("SHOW default_transaction_isolation"), None);
    assert_eq!(
        one("SELECT set_config('default_transaction_isolation', 'serializable', false)"),
        Some(SessionDefault(Unknown))
    );
    assert_eq!(one("commit and chain"), Some(Chain));
    assert_eq!(one("ROLLBACK AND NO CHAIN"), None);
}

#[test]
fn a_query_string_gets_one_effect_per_statement() {
    let sql = b"SELECT 'isolation;'; BEGIN ISOLATION LEVEL SERIALIZABLE; -- ;\n; COMMIT; RESET ALL";
    let kinds = classify(sql);
    assert_eq!(effects(sql, &kinds), vec![None, Some(Begin(Level(S))), None, Some(SessionDefault(Dflt))]);
    assert!(effects(b"insert into t values (1)", &classify(b"insert into t values (1)")).is_empty());
    // Statements that do not line up with the keyword split leave the default unknown, never guessed.
    let odd = b"SET default_transaction_isolation = 'serializable'; SELECT 'unterminated";
    let kinds = classify(odd);
    assert_eq!(effects(odd, &kinds).last(), Some(&Some(SessionDefault(Unknown))));
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// A machine that started at `start`, fed whole round trips.
struct Session {
    m: SessionMachine,
    clock: u64,
    intents: Vec<TxnSnapshot>,
    ended: Vec<TxnEnd>,
}

impl Session {
    fn new(start: Option<history::IsolationLevel>) -> Self {
        let mut m = SessionMachine::new();
        m.learnt_default_isolation(start);
        Session { m, clock: 0, intents: Vec::new(), ended: Vec::new() }
    }

    fn send(&mut self, msg: FrontendMessage) -> bool {
        self.clock += 1;
        match self.m.on_frontend(&msg, self.clock) {
            FrontendStep::Forward { intent, .. } => {
                self.intents.extend(intent);
                true
            }
            FrontendStep::Wait | FrontendStep::LearnXid => false,
        }
    }

    fn reply(&mut self, msg: BackendMessage) {
        self.clock += 1;
        let mut buf = BytesMut::from(&msg.to_bytes()[..]);
        let frame = split_frame(&mut buf, 1 << 20).unwrap().unwrap();
        let reply = self.m.on_backend(frame.tag(), &frame.body(), self.clock).unwrap();
        self.ended.extend(reply.ends);
    }

    /// A simple Query and its replies: one CommandComplete per tag (`ERROR` for an error), then
    /// ReadyForQuery with `status`.
    fn query(&mut self, sql: &str, tags: &[&str], status: TxnStatus) {
        assert!(self.send(FrontendMessage::Query { sql: b(sql) }), "{sql} had to wait");
        for tag in tags {
            self.reply(match *tag {
                "ERROR" => BackendMessage::ErrorResponse(ErrorFields::error("25001", "no")),
                tag => BackendMessage::CommandComplete { tag: b(tag) },
            });
        }
        self.reply(BackendMessage::ReadyForQuery(status));
    }

    /// The level each ended transaction recorded, in order.
    fn levels(&self) -> Vec<Option<history::IsolationLevel>> {
        self.ended.iter().map(|e| e.txn.isolation).collect()
    }
}

use TxnStatus::{Idle as I, InTransaction as T};

#[test]
fn autocommit_and_blocks_run_at_the_default_unless_they_ask() {
    let mut s = Session::new(Some(RC));
    s.query("insert into t values (1)", &["INSERT 0 1"], I);
    s.query("BEGIN ISOLATION LEVEL REPEATABLE READ", &["BEGIN"], T);
    s.query("select 1", &["SELECT 1"], T);
    s.query("COMMIT", &["COMMIT"], I);
    s.query("begin", &["BEGIN"], T);
    s.query("set transaction isolation level serializable", &["SET"], T);
    s.query("commit", &["COMMIT"], I);
    s.query("select 2", &["SELECT 1"], I);
    assert_eq!(s.levels(), vec![Some(RC), Some(RR), Some(S), Some(RC)]);
}

#[test]
fn an_intent_written_before_the_reply_carries_the_level_asked_for() {
    let mut s = Session::new(Some(RC));
    s.query(
        "BEGIN ISOLATION LEVEL SERIALIZABLE; UPDATE t SET v = 1; COMMIT",
        &["BEGIN", "UPDATE 1", "COMMIT"],
        I,
    );
    assert_eq!(s.intents[0].isolation, Some(S));
    assert_eq!(s.levels(), vec![Some(S)]);
}

#[test]
fn a_failed_set_transaction_changes_nothing() {
    let mut s = Session::new(Some(RC));
    s.query("begin", &["BEGIN"], T);
    s.query("select 1", &["SELECT 1"], T);
    s.query("set transaction isolation level serializable", &["ERROR"], TxnStatus::Failed);
    s.query("rollback", &["ROLLBACK"], I);
    // Outside a block, PostgreSQL only warns.
    s.query(
        "set transaction isolation level serializable; insert into t values (1)",
        &["SET", "INSERT 0 1"],
        I,
    );
    assert_eq!(s.levels(), vec![Some(RC), Some(RC)]);
}

#[test]
fn a_session_default_holds_from_the_commit_of_the_transaction_that_set_it() {
    let mut s = Session::new(Some(RC));
    s.query("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE", &["SET"], I);
    s.query("insert into t values (1)", &["INSERT 0 1"], I);
    // Rolled back: undone.
    s.query("begin; set default_transaction_isolation = 'read uncommitted'", &["BEGIN", "SET"], T);
    s.query("rollback", &["ROLLBACK"], I);
    s.query("select 1", &["SELECT 1"], I);
    // Set in an implicit transaction: that one already runs, the next runs at the new default.
    s.query("set default_transaction_isolation = 'repeatable read'; select 2", &["SET", "SELECT 1"], I);
    s.query("select 3", &["SELECT 1"], I);
    // An implicit transaction that fails undoes it.
    s.query("set default_transaction_isolation = 'read committed'; select 1/0", &["SET", "ERROR"], I);
    s.query("select 4", &["SELECT 1"], I);
    // SET LOCAL lasts until the end of its block.
    s.query("begin; set local default_transaction_isolation = 'read committed'", &["BEGIN", "SET"], T);
    s.query("commit", &["COMMIT"], I);
    s.query("select 5", &["SELECT 1"], I);
    // RESET goes back to the default the session started with.
    s.query("RESET ALL", &["RESET"], I);
    s.query("select 6", &["SELECT 1"], I);
    // insert, the rolled-back block, select 1, the implicit SET's own; select 3, the failed one, select 4,
    // the SET LOCAL block, select 5; select 6.
    let expected = [S, S, S, S, RR, RR, RR, RR, RR, RC];
    assert_eq!(s.levels(), expected.map(Some).to_vec());
}

#[test]
fn an_unknown_start_leaves_levels_unknown_until_the_client_sets_one() {
    let mut s = Session::new(None);
    s.query("select 1", &["SELECT 1"], I);
    s.query("begin isolation level serializable", &["BEGIN"], T);
    s.query("commit", &["COMMIT"], I);
    s.query("reset default_transaction_isolation", &["RESET"], I);
    s.query("select 1", &["SELECT 1"], I);
    s.query("set default_transaction_isolation to 'repeatable read'", &["SET"], I);
    s.query("select 1", &["SELECT 1"], I);
    assert_eq!(s.levels(), vec![None, Some(S), None, Some(RR)]);
}

#[test]
fn commit_and_chain_keeps_the_level() {
    let mut s = Session::new(Some(RC));
    s.query("begin isolation level repeatable read", &["BEGIN"], T);
    s.query("select 1", &["SELECT 1"], T);
    s.query("commit and chain", &["COMMIT"], T);
    s.query("select 2", &["SELECT 1"], T);
    s.query("commit", &["COMMIT"], I);
    s.query("select 3", &["SELECT 1"], I);
    assert_eq!(s.levels(), vec![Some(RR), Some(RR), Some(RC)]);
}

fn parse(sql: &str) -> FrontendMessage {
    FrontendMessage::Parse { name: b(""), query: b(sql), param_types: vec![] }
}

fn bind() -> FrontendMessage {
    FrontendMessage::Bind {
        portal: b(""),
        statement: b(""),
        param_formats: vec![],
        params: vec![],
        result_formats: vec![],
    }
}

fn execute() -> FrontendMessage {
    FrontendMessage::Execute { portal: b(""), max_rows: 0 }
}

#[test]
fn the_extended_protocol_follows_the_same_rules() {
    let mut s = Session::new(Some(RC));
    let complete = [BackendMessage::ParseComplete, BackendMessage::BindComplete];
    for (sql, tag, status) in [
        ("START TRANSACTION ISOLATION LEVEL REPEATABLE READ", "BEGIN", T),
        ("select 1", "SELECT 1", T),
        ("commit", "COMMIT", I),
        ("SET default_transaction_isolation = serializable", "SET", I),
    ] {
        for m in [parse(sql), bind(), execute(), FrontendMessage::Sync] {
            assert!(s.send(m));
        }
        for m in complete
            .iter()
            .cloned()
            .chain([BackendMessage::CommandComplete { tag: b(tag) }, BackendMessage::ReadyForQuery(status)])
        {
            s.reply(m);
        }
    }
    // A statement pipelined behind the SET's Sync waits for it: it runs at the new default.
    for m in [parse("SET default_transaction_isolation = 'read uncommitted'"), bind(), execute()] {
        assert!(s.send(m));
    }
    assert!(s.send(FrontendMessage::Sync));
    assert!(s.send(parse("insert into t values (1)")) && s.send(bind()));
    assert!(!s.send(execute()), "it must wait for the Sync that ends the SET's transaction");
    for m in complete
        .iter()
        .cloned()
        .chain([BackendMessage::CommandComplete { tag: b("SET") }, BackendMessage::ReadyForQuery(I)])
    {
        s.reply(m);
    }
    assert!(s.send(execute()) && s.send(FrontendMessage::Sync));
    for m in complete
        .iter()
        .cloned()
        .chain([BackendMessage::CommandComplete { tag: b("INSERT 0 1") }, BackendMessage::ReadyForQuery(I)])
    {
        s.reply(m);
    }
    assert_eq!(s.levels(), vec![Some(RR), Some(RU)]);
}
