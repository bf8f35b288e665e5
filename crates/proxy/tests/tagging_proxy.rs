//! Version tagging through the real proxy (`[tagging] strategy = "xmin"`) in front of the real PostgreSQL on
//! 127.0.0.1:5432; the database decides every outcome.
//! - The client sees byte for byte what it sees without Krait (simple and extended protocol, prepared
//!   statements reused across Binds, Describe), apart from BackendKeyData and ParameterStatus.
//! - pgbench tpcb-like at SERIALIZABLE, 16 clients, 4000 transactions, retries of serialization failures:
//!   the log replays into a history `verifier::verify` accepts, with every op mapped, no opaque statement,
//!   the failed tries recorded as aborts, and fences in it.
//! - Two sessions interleaved step by step: write skew at REPEATABLE READ and a lost update at READ
//!   COMMITTED are rejected and named.

mod tagging_support;

use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use history::log::{DiskLog, Durability, HistoryLog};
use history::{History, Op, Outcome};
use proxy::{Config, ProxyHandle};
use tagging_support::{Msg, Raw, error_code, rows};
use verifier::{AnomalyClass, Level, Options, Verdict, verify};
use wire::pg::backend::tag as btag;
use wire::pg::{FrontendMessage, Target};

struct Proxy {
    handle: ProxyHandle,
    dir: tempfile::TempDir,
}

async fn start(fence_every: u64) -> Proxy {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let toml = format!(
        "[listen]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:5432\"\n\
         [log]\npath = \"{}\"\ndurability = \"group\"\n[admin]\naddress = \"127.0.0.1:0\"\n\
         [tagging]\nstrategy = \"xmin\"\n[fence]\nevery = {fence_every}\n",
        dir.path().join("log").display()
    );
    let config = Config::parse(&toml, std::path::Path::new("<test>")).unwrap_or_else(|e| panic!("{e}"));
    let handle = proxy::start(config).await.unwrap_or_else(|e| panic!("{e}"));
    Proxy { handle, dir }
}

impl Proxy {
    fn addr(&self) -> String {
        self.handle.listen_addr().to_string()
    }

    /// Stops the proxy and replays its log directory, as `krait verify` does.
    async fn stop_and_replay(self) -> History {
        let Proxy { handle, dir } = self;
        handle.shutdown().await.unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("log");
        let log = DiskLog::open(&path, Durability::Strict).unwrap_or_else(|e| panic!("{e}"));
        let h = log.replay().unwrap_or_else(|e| panic!("{e}"));
        let _ = log.close();
        h
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Backend-specific messages differ between two connections; drop them.
fn comparable(msgs: Vec<Msg>) -> Vec<Msg> {
    msgs.into_iter().filter(|(t, _)| !matches!(*t, btag::PARAMETER_STATUS | btag::NOTICE_RESPONSE)).collect()
}

async fn extended(c: &mut Raw, sql: &str, params: &[&str], columns: usize, binds: usize) -> Vec<Msg> {
    let mut out = bytes::BytesMut::new();
    FrontendMessage::Parse {
        name: Bytes::from_static(b"st"),
        query: Bytes::copy_from_slice(sql.as_bytes()),
        param_types: vec![],
    }
    .encode(&mut out);
    FrontendMessage::Describe { target: Target::Statement, name: Bytes::from_static(b"st") }.encode(&mut out);
    for i in 0..binds {
        FrontendMessage::Bind {
            portal: Bytes::new(),
            statement: Bytes::from_static(b"st"),
            param_formats: vec![],
            params: params.iter().map(|p| Some(Bytes::copy_from_slice(p.as_bytes()))).collect(),
            // Per-column formats on the first Bind (text), none on the others.
            result_formats: if i == 0 { vec![0; columns] } else { vec![] },
        }
        .encode(&mut out);
        FrontendMessage::Describe { target: Target::Portal, name: Bytes::new() }.encode(&mut out);
        FrontendMessage::Execute { portal: Bytes::new(), max_rows: 0 }.encode(&mut out);
    }
    FrontendMessage::Close { target: Target::Statement, name: Bytes::from_static(b"st") }.encode(&mut out);
    FrontendMessage::Sync.encode(&mut out);
    c.write(&out).await;
    c.until_ready().await
}

#[test]
fn the_client_sees_the_same_bytes_with_and_without_krait() {
    rt().block_on(async {
        let t = "ktagp_same";
        let mut direct = Raw::connect().await;
        let setup = format!(
            "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (id int PRIMARY KEY, a int, b text, c int, d int, e int, \
             f int, g int); INSERT INTO {t} SELECT g, g, 'x' || g, 1, 2, 3, 4, 5 FROM generate_series(1, 20) g"
        );
        assert_eq!(error_code(&direct.simple(&setup).await), None);
        let p = start(3).await;
        let mut via = Raw::connect_to(&p.addr()).await;
        let simple = [
            "BEGIN",
            &format!("SELECT * FROM {t} WHERE id = 3"),
            &format!("SELECT a, b FROM {t} WHERE id > 15 ORDER BY id"),
            &format!("SELECT * FROM {t} WHERE id = 99"),
            &format!("UPDATE {t} SET a = a + 1 WHERE id = 3"),
            &format!("UPDATE {t} SET a = 0 WHERE id = 4 RETURNING b, a"),
            &format!("INSERT INTO {t} (id, a) VALUES (100, 1), (101, 2)"),
            &format!("INSERT INTO {t} (id, a) VALUES (100, 1) ON CONFLICT (id) DO UPDATE SET a = 7 RETURNING *"),
            &format!("DELETE FROM {t} WHERE id = 101"),
            &format!("DELETE FROM {t} WHERE id = 100 RETURNING id"),
            &format!("SELECT count(*) FROM {t}"),
            &format!("SELECT * FROM {t} WHERE nope = 1"),
            "ROLLBACK",
            &format!("BEGIN; SELECT b FROM {t} WHERE id = 1; UPDATE {t} SET c = c WHERE id < 3; ROLLBACK"),
            "SELECT 1",
        ];
        let ext: [(&str, &[&str], usize); 5] = [
            (&format!("SELECT * FROM {t} WHERE id = $1"), &["5"], 8),
            (&format!("SELECT a, id FROM {t} WHERE id > $1 ORDER BY id"), &["17"], 2),
            // A wrong number of result formats: the error names the client's counts, not the widened ones.
            (&format!("SELECT a, id FROM {t} WHERE id > $1"), &["17"], 8),
            (&format!("UPDATE {t} SET a = a + $1 WHERE id = $2"), &["1", "6"], 0),
            (&format!("UPDATE {t} SET a = a + $1 WHERE id = $2 RETURNING a"), &["1", "7"], 1),
        ];
        // One connection after the other: both run the same transactions, which take the same row locks.
        let mut seen = Vec::new();
        for c in [&mut direct, &mut via] {
            let mut replies = Vec::new();
            for sql in simple {
                replies.push(comparable(c.simple(sql).await));
            }
            for (sql, params, columns) in ext {
                c.simple("BEGIN").await;
                replies.push(comparable(extended(c, sql, params, columns, 3).await));
                c.simple("ROLLBACK").await;
            }
            seen.push(replies);
        }
        let statements = simple.iter().chain(ext.iter().map(|(s, _, _)| s));
        for ((sql, a), b) in statements.zip(&seen[0]).zip(&seen[1]) {
            assert_eq!(a, b, "{sql}");
        }
        direct.simple(&format!("DROP TABLE {t}")).await;
        drop(via);
        let h = p.stop_and_replay().await;
        assert!(h.transactions.iter().any(|t| !t.ops.is_empty()), "tagging recorded ops");
    });
}

fn pgbench(args: &[&str]) -> (bool, String) {
    let out = Command::new("pgbench")
        .args(args)
        .env("PGUSER", "postgres")
        .output()
        .unwrap_or_else(|e| panic!("this test needs pgbench: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn pgbench_at_serializable_through_krait_is_accepted_with_every_op_mapped() {
    rt().block_on(async {
        let db = "krait_tag_pgbench";
        let mut admin = Raw::connect().await;
        admin.simple(&format!("DROP DATABASE IF EXISTS {db}")).await;
        assert_eq!(error_code(&admin.simple(&format!("CREATE DATABASE {db}")).await), None);
        let (ok, text) = pgbench(&["-h", "127.0.0.1", "-p", "5432", "-i", "-q", "-s", "1", db]);
        assert!(ok, "pgbench -i: {text}");
        // pgbench_history has no primary key; give it one so its inserts are verifiable too.
        let mut d = Raw::connect_db("127.0.0.1:5432", db).await;
        let r = d.simple("ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY").await;
        assert_eq!(error_code(&r), None);
        drop(d);

        let p = start(20).await;
        let port = p.handle.listen_addr().port().to_string();
        let (ok, text) = tokio::task::spawn_blocking(move || {
            let mut cmd = Command::new("pgbench");
            cmd.args([
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-c",
                "16",
                "-j",
                "2",
                "-t",
                "250",
                "--max-tries",
                "1000",
                "-n",
                db,
            ])
            .env("PGUSER", "postgres")
            .env("PGOPTIONS", "-c default_transaction_isolation=serializable");
            let out = cmd.output().unwrap_or_else(|e| panic!("pgbench: {e}"));
            let text =
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            (out.status.success(), text)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(ok, "pgbench through krait: {text}");
        assert!(text.contains("number of transactions actually processed: 4000/4000"), "{text}");
        let metrics = p.handle.admin_addr().map(|a| a.to_string());
        let tagging_metrics = match metrics {
            Some(a) => http_get(&a, "/metrics").await,
            None => String::new(),
        };
        let h = p.stop_and_replay().await;
        admin.simple(&format!("DROP DATABASE IF EXISTS {db}")).await;

        let client: Vec<_> = h.transactions.iter().filter(|t| !t.fence).collect();
        let committed: Vec<_> =
            client.iter().filter(|t| t.outcome == Outcome::Committed && !t.ops.is_empty()).collect();
        assert_eq!(committed.len(), 4000, "every committed tpcb transaction is recorded with its ops");
        for t in &committed {
            let writes = t.ops.iter().filter(|o| matches!(o, Op::Write { .. })).count();
            // Three updated rows and one history row.
            assert_eq!(writes, 4, "{t:?}");
        }
        let aborted = client.iter().filter(|t| t.outcome == Outcome::Aborted).count();
        let retried = text
            .lines()
            .find_map(|l| l.strip_prefix("number of transactions retried: "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0);
        assert!(aborted >= retried, "{aborted} aborts recorded, pgbench retried {retried}: {text}");
        assert!(h.transactions.iter().any(|t| t.fence && t.outcome == Outcome::Committed), "fences ran");
        // Nothing opaque but pgbench's own start-up queries outside the benchmark transactions
        // (`select count(*) from pgbench_branches` and its partitioning check, both aggregates).
        for line in tagging_metrics.lines().filter(|l| l.starts_with("krait_tagging_opaque_total")) {
            let n: u64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
            let allowed = if line.contains("kind=\"aggregate\"") { 2 } else { 0 };
            assert!(n <= allowed, "opaque statements: {line}");
        }
        // pgbench's start-up aggregates run in autocommit: their (opaque) ops come after the intent, and
        // still reach the history.
        assert_eq!(h.unchecked.iter().filter(|u| u.kind == "aggregate").count(), 2, "{:?}", h.unchecked);
        let r = verify(&h, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.verdict, Verdict::Accept, "{:?}", r.anomalies);
        assert!(r.unverifiable.is_empty(), "{:?}", r.unverifiable);
    });
}

/// Connects to the database directly and (re)creates table `t` (id int primary key, v int) holding `rows`
/// (for example `(1, 10), (2, 20)`). Returns the connection, with which the test drops the table.
async fn kv_table(t: &str, rows: &str) -> Raw {
    let mut admin = Raw::connect().await;
    let r = admin
        .simple(&format!(
            "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (id int PRIMARY KEY, v int NOT NULL); \
             INSERT INTO {t} VALUES {rows}"
        ))
        .await;
    assert_eq!(error_code(&r), None);
    admin
}

async fn http_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("{e}"));
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut out = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await;
    out
}

async fn doctors_through_krait(level: &str, t: &str) -> (History, Vec<Option<String>>) {
    let mut admin = Raw::connect().await;
    let r = admin
        .simple(&format!(
            "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (id int PRIMARY KEY, on_call bool NOT NULL); \
             INSERT INTO {t} VALUES (1, true), (2, true)"
        ))
        .await;
    assert_eq!(error_code(&r), None);
    let p = start(20).await;
    let mut a = Raw::connect_to(&p.addr()).await;
    let mut b = Raw::connect_to(&p.addr()).await;
    for s in [&mut a, &mut b] {
        s.simple(&format!("BEGIN ISOLATION LEVEL {level}")).await;
    }
    for s in [&mut a, &mut b] {
        for id in [1, 2] {
            let r = s.simple(&format!("SELECT on_call FROM {t} WHERE id = {id}")).await;
            assert_eq!(rows(&r), vec![vec![Some("t".to_owned())]]);
        }
    }
    let ua = a.simple(&format!("UPDATE {t} SET on_call = false WHERE id = 1")).await;
    let ub = b.simple(&format!("UPDATE {t} SET on_call = false WHERE id = 2")).await;
    assert_eq!(error_code(&ua), None);
    let ca = a.simple("COMMIT").await;
    let cb = b.simple(if error_code(&ub).is_some() { "ROLLBACK" } else { "COMMIT" }).await;
    let codes = vec![error_code(&ca), error_code(&ub).or(error_code(&cb))];
    drop((a, b));
    let h = p.stop_and_replay().await;
    admin.simple(&format!("DROP TABLE {t}")).await;
    (h, codes)
}

/// The doctors' write skew is rejected, with the two rows in its cycle and every read checked.
fn assert_write_skew(h: &History, codes: &[Option<String>], t: &str) {
    assert_eq!(codes, [None, None]);
    let r = verify(h, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.unverifiable.is_empty(), "every read is evidence: {:?}", r.unverifiable);
    assert_eq!(r.verdict, Verdict::Reject);
    let a = &r.anomalies[0];
    assert_eq!(a.class, AnomalyClass::WriteSkew, "{a:?}");
    let keys: Vec<String> = a.cycle.iter().filter_map(|e| e.key.clone()).collect();
    assert!(keys.iter().all(|k| k.contains(t)) && keys.len() == 2, "{keys:?}");
    assert_ne!(keys[0], keys[1], "the two doctors' rows");
    // Write skew is allowed below serializability.
    for level in [Level::ReadCommitted, Level::ReadAtomic, Level::Causal] {
        let r = verify(h, &Options { level, ..Options::default() }).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.is_accept(), "{}: {}", level.name(), r.render_text());
    }
}

#[test]
fn write_skew_at_repeatable_read_through_krait_is_rejected() {
    rt().block_on(async {
        let (h, codes) = doctors_through_krait("REPEATABLE READ", "ktagp_ws").await;
        assert_write_skew(&h, &codes, "ktagp_ws");
    });
}

/// A transaction that took an id and stays open (another test, an idle-in-transaction client) holds the
/// database's oldest running id back. Rows committed after it began, before recording began, are still
/// pre-history: the horizon is the whole snapshot, not its xmin. With only the xmin, the doctors' rows
/// looked written by an unrecorded writer, every read was dropped, and the write skew was accepted.
#[test]
fn a_transaction_open_before_recording_began_hides_no_older_row() {
    rt().block_on(async {
        let mut idle = Raw::connect().await;
        let r = idle.simple("BEGIN; SELECT pg_current_xact_id()").await;
        assert_eq!(error_code(&r), None);
        let (h, codes) = doctors_through_krait("REPEATABLE READ", "ktagp_ws_idle").await;
        idle.simple("ROLLBACK").await;
        let horizon = h.horizon.clone().expect("a recording horizon");
        assert!(horizon.xmin < horizon.xmax, "the open transaction holds xmin back: {horizon:?}");
        assert_write_skew(&h, &codes, "ktagp_ws_idle");
    });
}

#[test]
fn lost_update_at_read_committed_through_krait_is_rejected() {
    rt().block_on(async {
        let t = "ktagp_lu";
        let mut admin = kv_table(t, "(1, 10)").await;
        let p = start(20).await;
        let mut a = Raw::connect_to(&p.addr()).await;
        let mut b = Raw::connect_to(&p.addr()).await;
        for s in [&mut a, &mut b] {
            s.simple("BEGIN ISOLATION LEVEL READ COMMITTED").await;
            let r = s.simple(&format!("SELECT v FROM {t} WHERE id = 1")).await;
            assert_eq!(rows(&r), vec![vec![Some("10".to_owned())]]);
        }
        a.simple(&format!("UPDATE {t} SET v = 11 WHERE id = 1")).await;
        assert_eq!(error_code(&a.simple("COMMIT").await), None);
        b.simple(&format!("UPDATE {t} SET v = 11 WHERE id = 1")).await;
        assert_eq!(error_code(&b.simple("COMMIT").await), None);
        drop((a, b));
        let h = p.stop_and_replay().await;
        admin.simple(&format!("DROP TABLE {t}")).await;
        let r = verify(&h, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.verdict, Verdict::Reject);
        // b's UPDATE replaced a's version, which the proxy records as read (DESIGN.md §3, "what a write
        // replaced"), while b's SELECT had read the one before: the evidence is that non-repeatable read.
        assert_eq!(r.anomalies[0].class, AnomalyClass::NonRepeatableRead, "{:?}", r.anomalies);
        assert!(format!("{:?}", r.anomalies[0]).contains(t));
        // PostgreSQL kept what READ COMMITTED promises: a lost update, and reading two versions of a key, are
        // allowed there. Read atomic forbids the second (Cerone et al.'s INT axiom), which READ COMMITTED
        // never promised.
        let at =
            |level| verify(&h, &Options { level, ..Options::default() }).unwrap_or_else(|e| panic!("{e}"));
        let r = at(Level::ReadCommitted);
        assert!(r.is_accept(), "{}", r.render_text());
        verifier::check_report(&h, &r).unwrap_or_else(|e| panic!("{e}"));
        let r = at(Level::ReadAtomic);
        assert_eq!(
            r.anomalies.first().map(|a| a.class),
            Some(AnomalyClass::NonRepeatableRead),
            "{}",
            r.render_text()
        );
    });
}

/// An autocommit statement commits as it runs, so its intent is logged before it is forwarded and its rows
/// arrive after: they must still reach the history (a late-ops record before the outcome), as must those of
/// statements sent in one query string with their COMMIT.
#[test]
fn ops_of_autocommit_statements_and_of_statements_sent_with_commit_are_recorded() {
    rt().block_on(async {
        let t = "ktagp_autocommit";
        let mut admin = kv_table(t, "(1, 10), (2, 20)").await;
        let p = start(0).await;
        let mut c = Raw::connect_to(&p.addr()).await;
        let steps = [
            format!("UPDATE {t} SET v = 11 WHERE id = 1"),
            format!("SELECT v FROM {t} WHERE id = 1"),
            format!("BEGIN; UPDATE {t} SET v = 21 WHERE id = 2; COMMIT"),
            format!("SELECT v FROM {t} WHERE id = 2"),
            format!("SELECT count(*) FROM {t}"),
        ];
        for step in &steps {
            assert_eq!(error_code(&c.simple(step).await), None, "{step}");
        }
        drop(c);
        let h = p.stop_and_replay().await;
        admin.simple(&format!("DROP TABLE {t}")).await;

        let committed: Vec<_> = h.transactions.iter().filter(|x| x.outcome == Outcome::Committed).collect();
        let ops: Vec<(usize, usize)> = committed
            .iter()
            .map(|x| {
                let writes = x.ops.iter().filter(|o| matches!(o, Op::Write { .. })).count();
                (x.ops.len() - writes, writes)
            })
            .collect();
        // (reads, writes) of each: two updates, each with the version it replaced and read back by the next
        // autocommit SELECT.
        assert_eq!(ops, vec![(1, 1), (1, 0), (1, 1), (1, 0), (0, 0)], "{committed:?}");
        for (writer, reader) in [(0, 1), (2, 3)] {
            let Some(Op::Write { write, .. }) = committed[writer].ops.get(1) else { unreachable!() };
            assert!(
                matches!(committed[reader].ops.first(), Some(Op::Read { observed: history::Observed::Version(w), .. }) if w == write),
                "the autocommit read sees the recorded write: {:?}",
                committed[reader].ops
            );
        }
        assert_eq!(h.unchecked.len(), 1, "the count(*) is not checked: {:?}", h.unchecked);
        assert_eq!(h.unchecked[0].kind, "aggregate");
        let r = verify(&h, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.verdict, Verdict::Accept, "{:?}", r.anomalies);
    });
}

/// A transaction that wrote nothing has no durability to wait for: lost in a crash, it can hide an
/// anomaly, never fake one. Its commit reaches the client without waiting for the log's fsync; a writer's,
/// or one with a statement that may have written unseen (an aggregate here), still waits. Every one of them
/// is in the log all the same.
#[test]
fn commits_that_wrote_nothing_do_not_wait_for_the_log() {
    rt().block_on(async {
        let t = "ktagp_read_only";
        let mut admin = kv_table(t, "(1, 10)").await;
        let p = start(0).await;
        let mut c = Raw::connect_to(&p.addr()).await;
        for sql in [
            format!("SELECT v FROM {t} WHERE id = 1"),
            format!("BEGIN; SELECT v FROM {t} WHERE id = 1; COMMIT"),
            format!("UPDATE {t} SET v = 11 WHERE id = 1"),
            format!("SELECT count(*) FROM {t}"),
        ] {
            assert_eq!(error_code(&c.simple(&sql).await), None, "{sql}");
        }
        let admin_addr = p.handle.admin_addr().map(|a| a.to_string()).expect("an admin address");
        let metrics = http_get(&admin_addr, "/metrics").await;
        let unwaited = metrics
            .lines()
            .find_map(|l| l.strip_prefix("krait_read_only_commits_unwaited_total "))
            .and_then(|v| v.trim().parse::<u64>().ok());
        assert_eq!(unwaited, Some(2), "{metrics}");
        drop(c);
        let h = p.stop_and_replay().await;
        admin.simple(&format!("DROP TABLE {t}")).await;
        let committed = h.transactions.iter().filter(|x| !x.fence && x.outcome == Outcome::Committed).count();
        assert_eq!(committed, 4, "{:?}", h.transactions);
    });
}

/// A connection loads the catalog as it starts, if it is stale; another connection's schema change can make
/// it stale again before the first connection's first message, which then waits for a reload, and for the
/// connection's opening fence too: its first transaction follows a fence (the verifier judges its reads of
/// collected versions), and its last is followed by one. One injection per client message used to leave
/// the opening fence for the second transaction.
#[test]
fn a_connection_fences_before_its_first_transaction_even_after_a_catalog_reload() {
    rt().block_on(async {
        let t = "ktagp_first_fence";
        let mut admin = kv_table(t, "(1, 10)").await;
        admin.simple(&format!("DROP TABLE IF EXISTS {t}_new")).await;
        let p = start(20).await;
        let mut c = Raw::connect_to(&p.addr()).await;
        let mut ddl = Raw::connect_to(&p.addr()).await;
        let create = format!("CREATE TABLE {t}_new (id int PRIMARY KEY)");
        assert_eq!(error_code(&ddl.simple(&create).await), None);
        for sql in [format!("SELECT v FROM {t} WHERE id = 1"), format!("UPDATE {t} SET v = 11 WHERE id = 1")]
        {
            assert_eq!(error_code(&c.simple(&sql).await), None, "{sql}");
        }
        c.terminate().await;
        ddl.terminate().await;
        let h = p.stop_and_replay().await;
        admin.simple(&format!("DROP TABLE {t}; DROP TABLE {t}_new")).await;
        let mut sessions: std::collections::BTreeMap<history::SessionId, Vec<&history::Transaction>> =
            Default::default();
        for x in h.transactions.iter().filter(|x| x.outcome == Outcome::Committed) {
            sessions.entry(x.session).or_default().push(x);
        }
        let reader = sessions
            .values_mut()
            .find(|txns| txns.iter().filter(|x| !x.fence).count() == 2)
            .unwrap_or_else(|| panic!("no session with the two transactions: {:?}", h.transactions));
        reader.sort_by_key(|x| x.seq);
        let fences: Vec<bool> = reader.iter().map(|x| x.fence).collect();
        assert_eq!(fences, [true, false, false, true], "{:?}", h.transactions);
    });
}

/// At READ COMMITTED an UPDATE acts on the latest committed version of each row after waiting for its lock
/// (EvalPlanQual), which need not be the version its snapshot shows. Where no one updated the row in between,
/// the snapshot's version is the one replaced, and it is recorded as read (DESIGN.md §3, "what a write
/// replaced"): here three reads and three writes, nothing listed as not checked. Where a concurrent
/// transaction did, the replaced version is not known: no read is recorded, and a SET that reads the row is
/// listed as not checked, once per statement however many rows it updated; a blind SET is a plain write.
#[test]
fn an_update_at_read_committed_records_what_it_replaced_unless_another_updated_the_row_first() {
    rt().block_on(async {
        let t = "ktagp_rc_update";
        let mut admin = kv_table(t, "(1, 10), (2, 20), (3, 30)").await;
        let p = start(0).await;
        let mut c = Raw::connect_to(&p.addr()).await;
        let update = format!("BEGIN ISOLATION LEVEL READ COMMITTED; UPDATE {t} SET v = v + 1 WHERE id <= 3; COMMIT");
        assert_eq!(error_code(&c.simple(&update).await), None);

        // The same UPDATE, and a blind one, each queued behind a direct transaction that updates the rows.
        let blind = format!("BEGIN ISOLATION LEVEL READ COMMITTED; UPDATE {t} SET v = 7 WHERE id <= 3; COMMIT");
        for sql in [update, blind] {
            let mut other = Raw::connect().await;
            let r = other.simple(&format!("BEGIN; UPDATE {t} SET v = v + 100 WHERE id <= 3")).await;
            assert_eq!(error_code(&r), None);
            let queued = tokio::spawn(async move {
                let r = c.simple(&sql).await;
                (c, r)
            });
            let waits = format!(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%{t} SET v = %'"
            );
            let mut waited = false;
            for _ in 0..200 {
                if rows(&admin.simple(&waits).await) == vec![vec![Some("1".to_owned())]] {
                    waited = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(waited, "the proxied UPDATE never waited for the row locks");
            assert_eq!(error_code(&other.simple("COMMIT").await), None);
            let (back, r) = queued.await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(error_code(&r), None);
            c = back;
        }
        drop(c);
        let h = p.stop_and_replay().await;
        admin.simple(&format!("DROP TABLE {t}")).await;
        let committed: Vec<_> = h.transactions.iter().filter(|x| !x.fence && x.outcome == Outcome::Committed).collect();
        assert_eq!(committed.len(), 3, "{committed:?}");
        let count = |x: &history::Transaction, read: bool| {
            x.ops.iter().filter(|o| matches!(o, Op::Read { .. }) == read).count()
        };
        let shape: Vec<(usize, usize)> = committed.iter().map(|x| (count(x, true), count(x, false))).collect();
        assert_eq!(shape, vec![(3, 3), (0, 3), (0, 3)], "{committed:?}");
        let not_checked = h.unchecked.iter().filter(|u| u.kind == "read_committed_update").count();
        assert_eq!(not_checked, 1, "{:?}", h.unchecked);
    });
}

/// An unqualified name means the first schema on the session's search_path that has the table, as
/// PostgreSQL resolves it. With `ktagp_sp` in both `ktagp_app` and `public`, a session that set its path to
/// `ktagp_app` writes `ktagp_app.ktagp_sp`'s rows, and must be recorded so: before, the proxy recorded them
/// as `public`'s, two tables' versions under one key. A path the proxy cannot follow (`set_config`) makes
/// the name ambiguous: its statement is listed as not checked, never guessed.
#[test]
fn unqualified_names_follow_the_sessions_search_path() {
    rt().block_on(async {
        let mut admin = Raw::connect().await;
        table_in_two_schemas(&mut admin, "ktagp").await;
        let p = start(0).await;
        let mut app = Raw::connect_to(&p.addr()).await;
        for sql in [
            "SET search_path = ktagp_app, public",
            "BEGIN; UPDATE ktagp_sp SET v = 11 WHERE id = 1; COMMIT",
            "RESET search_path",
            "BEGIN; UPDATE ktagp_sp SET v = 12 WHERE id = 1; COMMIT",
            "SELECT set_config('search_path', 'ktagp_app', false)",
            "BEGIN; UPDATE ktagp_sp SET v = 13 WHERE id = 1; COMMIT",
        ] {
            assert_eq!(error_code(&app.simple(sql).await), None, "{sql}");
        }
        drop(app);
        let h = p.stop_and_replay().await;
        admin.simple("DROP SCHEMA ktagp_app CASCADE; DROP TABLE ktagp_sp").await;
        let written = written_namespaces(&h);
        assert_eq!(
            written,
            vec!["ktagp_app.ktagp_sp".to_owned(), "ktagp_sp".to_owned()],
            "{:?}",
            h.unchecked
        );
        assert!(h.unchecked.iter().any(|u| u.kind == "ambiguous_table"), "{:?}", h.unchecked);
    });
}

/// PostgreSQL undoes the `SET search_path` of a block that rolls back (by ROLLBACK, or by COMMIT of a
/// failed block) and of a savepoint rolled back to; a committed block keeps it. Before, the proxy kept every
/// SET it saw, and after `BEGIN; SET search_path = app; ROLLBACK` recorded `public.t`'s rows as `app.t`'s:
/// two tables' versions under one key, which can fake a stale read.
#[test]
fn a_rolled_back_set_search_path_is_undone_as_the_database_undoes_it() {
    rt().block_on(async {
        let update = |v: i32| format!("UPDATE ktagr_sp SET v = {v} WHERE id = 1");
        let steps: Vec<(String, Option<&str>)> = vec![
            // A block that rolls back.
            ("BEGIN".into(), None),
            ("SET search_path = ktagr_app, public".into(), None),
            ("ROLLBACK".into(), None),
            (update(11), None),
            // A failed block, ended by COMMIT (which rolls it back).
            ("BEGIN".into(), None),
            ("SET search_path = ktagr_app, public".into(), None),
            ("SELECT 1/0".into(), Some("22012")),
            ("COMMIT".into(), None),
            (update(12), None),
            // A savepoint rolled back to, in a block that commits.
            ("BEGIN".into(), None),
            ("SAVEPOINT s".into(), None),
            ("SET search_path = ktagr_app, public".into(), None),
            ("ROLLBACK TO SAVEPOINT s".into(), None),
            (update(13), None),
            ("COMMIT".into(), None),
            // A block that commits keeps its SET.
            ("BEGIN".into(), None),
            ("SET search_path = ktagr_app, public".into(), None),
            ("COMMIT".into(), None),
            (update(14), None),
        ];
        let (mut admin, h) = in_one_session_over_two_schemas("ktagr", &steps).await;
        let (public, app_v) = {
            let r = rows(&admin.simple("SELECT v FROM ktagr_sp").await);
            let s = rows(&admin.simple("SELECT v FROM ktagr_app.ktagr_sp").await);
            (format!("{r:?}"), format!("{s:?}"))
        };
        admin.simple("DROP SCHEMA ktagr_app CASCADE; DROP TABLE ktagr_sp").await;
        let written = written_namespaces(&h);
        let public_t = "ktagr_sp".to_owned();
        assert_eq!(
            written,
            vec![public_t.clone(), public_t.clone(), public_t, "ktagr_app.ktagr_sp".to_owned()],
            "the database wrote public's row three times ({public}) and app's once ({app_v}); unchecked: {:?}",
            h.unchecked
        );
        assert!(!h.unchecked.iter().any(|u| u.kind == "ambiguous_table"), "{:?}", h.unchecked);
    });
}

/// `SET LOCAL search_path` holds until its transaction ends, committed or rolled back, and then the
/// session's own path is back; a session-level `SET` in the same block outlives it. Before, the proxy
/// called the path unknown after any `SET LOCAL`, for the rest of the session: a schema-per-tenant
/// application that sets its tenant's path in each transaction had every later statement on a name in two
/// schemas listed as not checked.
#[test]
fn set_local_search_path_lasts_until_the_transaction_ends() {
    rt().block_on(async {
        let update = |v: i32| format!("UPDATE ktagl_sp SET v = {v} WHERE id = 1");
        let steps: Vec<String> = vec![
            "BEGIN".into(),
            "SET LOCAL search_path = ktagl_app, public".into(),
            update(11),
            "COMMIT".into(),
            update(12),
            "BEGIN".into(),
            "SET LOCAL search_path = ktagl_app, public".into(),
            "ROLLBACK".into(),
            update(13),
            "BEGIN".into(),
            "SET search_path = ktagl_app, public".into(),
            "SET LOCAL search_path = public".into(),
            update(14),
            "COMMIT".into(),
            update(15),
        ];
        let steps: Vec<(String, Option<&str>)> = steps.into_iter().map(|sql| (sql, None)).collect();
        let (mut admin, h) = in_one_session_over_two_schemas("ktagl", &steps).await;
        admin.simple("DROP SCHEMA ktagl_app CASCADE; DROP TABLE ktagl_sp").await;
        let (app_t, public_t) = ("ktagl_app.ktagl_sp".to_owned(), "ktagl_sp".to_owned());
        assert_eq!(
            written_namespaces(&h),
            vec![app_t.clone(), public_t.clone(), public_t.clone(), public_t, app_t],
            "unchecked: {:?}",
            h.unchecked
        );
        assert!(!h.unchecked.iter().any(|u| u.kind == "ambiguous_table"), "{:?}", h.unchecked);
    });
}

/// Runs `steps` (each statement with the error code it must end with, if any) in one session through a
/// proxy, over [`table_in_two_schemas`]`(prefix)`; returns the admin connection (whose caller drops the
/// tables) and the history the proxy recorded.
async fn in_one_session_over_two_schemas(prefix: &str, steps: &[(String, Option<&str>)]) -> (Raw, History) {
    let mut admin = Raw::connect().await;
    table_in_two_schemas(&mut admin, prefix).await;
    let p = start(0).await;
    let mut app = Raw::connect_to(&p.addr()).await;
    for (sql, code) in steps {
        assert_eq!(error_code(&app.simple(sql).await).as_deref(), *code, "{sql}");
    }
    drop(app);
    (admin, p.stop_and_replay().await)
}

/// Creates `<prefix>_app.<prefix>_sp` and `public.<prefix>_sp` (both `id int PRIMARY KEY, v int`, with a row
/// 1), so that the unqualified name means one or the other by the session's `search_path`.
async fn table_in_two_schemas(admin: &mut Raw, prefix: &str) {
    let r = admin
        .simple(&format!(
            "DROP SCHEMA IF EXISTS {prefix}_app CASCADE; DROP TABLE IF EXISTS {prefix}_sp; \
             CREATE SCHEMA {prefix}_app; \
             CREATE TABLE {prefix}_app.{prefix}_sp (id int PRIMARY KEY, v int NOT NULL); \
             CREATE TABLE {prefix}_sp (id int PRIMARY KEY, v int NOT NULL); \
             INSERT INTO {prefix}_app.{prefix}_sp VALUES (1, 10); INSERT INTO {prefix}_sp VALUES (1, 10)"
        ))
        .await;
    assert_eq!(error_code(&r), None);
}

/// The key namespace of every write the clients made (fences left out), in history order.
fn written_namespaces(h: &History) -> Vec<String> {
    h.transactions
        .iter()
        .filter(|t| !t.fence)
        .flat_map(|t| &t.ops)
        .filter(|o| matches!(o, Op::Write { .. }))
        .filter_map(|o| h.keys.name(o.key()).map(|k| k.namespace.clone()))
        .collect()
}
