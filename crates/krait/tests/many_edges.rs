//! Many edges, one verifier (issue 21): three `krait proxy` processes in front of the machine's PostgreSQL
//! ship their logs to a real NATS server (Debian's `nats-server`, JetStream on a temporary store), and one
//! `krait serve --verify-only` merges and verifies them.
//!
//! - Clients of two different proxies make a write skew at REPEATABLE READ: the verifier, checking
//!   serializability, rejects with a report that names both collectors.
//! - The same at SERIALIZABLE is accepted; a client of the third proxy, connecting for the first time
//!   afterwards, then reads and overwrites what the others wrote. That proxy never saw those writes and takes
//!   them for pre-history; only the merge joins its reads to them (without it, the overwrite looks like a
//!   lost update).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::free_port;
use ship::local::LocalNats;
use tokio_postgres::NoTls;

/// A child process killed when dropped, so a failing test leaves nothing running.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start listening on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `krait proxy` with collector id `collector`, shipping to NATS at `nats_port`; returns it and its port.
fn start_proxy(dir: &Path, collector: u32, nats_port: u16) -> (Running, u16) {
    let port = free_port();
    (proxy_on(dir, collector, nats_port, port), port)
}

/// A `krait proxy` with collector id `collector` on `port` (again, after a kill: same log, same config).
fn proxy_on(dir: &Path, collector: u32, nats_port: u16, port: u16) -> Running {
    proxy_with(dir, collector, nats_port, port, "[admin]\nenabled = false\n")
}

/// [`proxy_on`], with `more` in its configuration after the `[log]` section's `collector` line: more of
/// `[log]`, then sections of its own (`[admin]` among them).
fn proxy_with(dir: &Path, collector: u32, nats_port: u16, port: u16, more: &str) -> Running {
    let dir = dir.join(format!("proxy{collector}"));
    std::fs::create_dir_all(&dir).expect("creates the proxy's directory");
    let config = dir.join("krait.toml");
    std::fs::write(
        &config,
        format!(
            "[listen]\naddress = \"127.0.0.1:{port}\"\n[upstream]\naddress = \"127.0.0.1:5432\"\n\
             [log]\npath = \"{}\"\ncollector = {collector}\n{more}\
             [ship]\nnats = \"nats://127.0.0.1:{nats_port}\"\n",
            dir.join("log").display()
        ),
    )
    .expect("writes the config");
    let child = Command::new(env!("CARGO_BIN_EXE_krait"))
        .args(["proxy", "--config", config.to_str().expect("utf-8 path")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts krait proxy");
    let running = Running(child);
    wait_for_port(port, "krait proxy");
    running
}

/// `krait serve --verify-only` on NATS at `nats_port`, and its stderr lines.
struct Verifier {
    child: Running,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Verifier {
    fn start(nats_port: u16, data: &Path) -> Verifier {
        Verifier::start_with(nats_port, data, &[])
    }

    fn start_with(nats_port: u16, data: &Path, more: &[&str]) -> Verifier {
        Verifier::start_for(nats_port, data, "1,2,3", more)
    }

    /// A verifier of the proxies `collectors` (comma-separated ids).
    fn start_for(nats_port: u16, data: &Path, collectors: &str, more: &[&str]) -> Verifier {
        let mut child = Command::new(env!("CARGO_BIN_EXE_krait"))
            .args(["serve", "--verify-only", "--source", &format!("nats://127.0.0.1:{nats_port}")])
            .args(["--collectors", collectors, "--level", "serializable", "--drift-ms", "50"])
            .args(["--data-dir", data.to_str().expect("utf-8 path"), "--status-every", "1"])
            .args(["--round-interval-ms", "200"])
            .args(more)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts krait serve --verify-only");
        let (tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Verifier { child: Running(child), lines, seen: Vec::new() }
    }

    /// Waits (bounded) until a status line says at least `n` transactions were verified.
    fn wait_verified(&mut self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                let verified = line
                    .split_once("verified ")
                    .and_then(|(_, rest)| rest.split(',').next())
                    .and_then(|n| n.trim().parse::<u64>().ok());
                self.seen.push(line);
                if verified.is_some_and(|v| v >= n) {
                    return;
                }
            }
        }
        panic!("the verifier never verified {n} transactions:\n{}", self.seen.join("\n"));
    }

    /// Waits (bounded by `within`) until a status line says at least `n` client transactions committed.
    fn wait_committed(&mut self, n: u64, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                let committed = committed_in(&line);
                self.seen.push(line);
                if committed.is_some_and(|c| c >= n) {
                    return;
                }
            }
        }
        panic!("the verifier never saw {n} committed transactions:\n{}", self.seen.join("\n"));
    }

    /// SIGTERM, a clean exit, and every stderr line.
    fn stop(mut self) -> Vec<String> {
        let pid = self.child.0.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("runs kill").success());
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = self.child.0.try_wait().expect("waits") {
                break status;
            }
            assert!(Instant::now() < deadline, "the verifier did not stop after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        };
        self.seen.extend(self.lines.try_iter());
        assert!(status.success(), "the verifier failed ({status}):\n{}", self.seen.join("\n"));
        self.seen
    }
}

/// The body of `GET path` from the verifier's status server on `port`.
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects to the status server");
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .expect("sends the request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("reads the response");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "GET {path}: {head}");
    body.to_owned()
}

/// `GET /api/status` of the verifier's status server on `port`.
fn api_status(port: u16) -> serde_json::Value {
    serde_json::from_str(&http_get(port, "/api/status")).expect("a JSON status")
}

/// The value of the sample `name` (labels included) in `/metrics` of the status server on `port`.
fn metric(port: u16, name: &str) -> Option<f64> {
    let body = http_get(port, "/metrics");
    body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The client transactions a status line says were committed.
fn committed_in(line: &str) -> Option<u64> {
    let (before, _) = line.split_once(" client transactions committed")?;
    before.rsplit(' ').next()?.parse().ok()
}

async fn connect(port: u16) -> tokio_postgres::Client {
    let url = format!("host=127.0.0.1 port={port} user=postgres dbname=test");
    let (client, conn) = tokio_postgres::connect(&url, NoTls).await.expect("connects through the proxy");
    tokio::spawn(conn);
    client
}

/// A table of two rows made directly in the database, before the proxies see any traffic.
async fn two_rows(name: &str) {
    let direct = connect(5432).await;
    direct
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {name}; CREATE TABLE {name} (k int PRIMARY KEY, v int NOT NULL); \
             INSERT INTO {name} VALUES (1, 0), (2, 0);"
        ))
        .await
        .expect("creates the table");
}

async fn drop_table(name: &str) {
    let direct = connect(5432).await;
    let _ = direct.batch_execute(&format!("DROP TABLE IF EXISTS {name}")).await;
}

/// Two clients of two proxies each read both rows and write the row the other did not: write skew unless
/// the database refuses one. Returns how many committed.
async fn write_skew(
    table: &str,
    level: &str,
    a: &tokio_postgres::Client,
    b: &tokio_postgres::Client,
) -> usize {
    for c in [a, b] {
        c.batch_execute(&format!("BEGIN ISOLATION LEVEL {level}")).await.expect("begins");
        for k in [1, 2] {
            c.query_one(&format!("SELECT v FROM {table} WHERE k = {k}"), &[]).await.expect("reads");
        }
    }
    let mut committed = 0;
    for (c, k) in [(a, 1), (b, 2)] {
        let wrote = c.batch_execute(&format!("UPDATE {table} SET v = v + 1 WHERE k = {k}")).await;
        match wrote.and(c.batch_execute("COMMIT").await) {
            Ok(()) => committed += 1,
            Err(e) => {
                assert_eq!(e.code().map(|c| c.code()), Some("40001"), "only a serialization failure: {e}");
                let _ = c.batch_execute("ROLLBACK").await;
            }
        }
    }
    committed
}

/// A NATS server (scripts/test installs Debian's nats-server package) and three proxies shipping to it.
struct Edges {
    nats: Option<LocalNats>,
    nats_port: u16,
    proxies: Vec<(Running, u16)>,
    dir: tempfile::TempDir,
}

fn edges() -> Edges {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = dir.path().join("nats");
    std::fs::create_dir_all(&store).expect("creates the NATS store");
    let nats = LocalNats::start(&store).unwrap_or_else(|e| panic!("{e}"));
    let nats_port = nats.port();
    let proxies = (1..=3).map(|c| start_proxy(dir.path(), c, nats_port)).collect();
    Edges { nats: Some(nats), nats_port, proxies, dir }
}

impl Edges {
    fn nats_port(&self) -> u16 {
        self.nats_port
    }

    fn proxy(&self, collector: usize) -> u16 {
        self.proxies[collector - 1].1
    }

    fn reports(&self) -> Vec<PathBuf> {
        let dir = self.dir.path().join("data").join("reports");
        let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "json")).collect()
            })
            .unwrap_or_default();
        found.sort();
        found
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_skew_across_two_proxies_is_rejected_with_both_collectors_named() {
    let edges = edges();
    let table = format!("edges_rr_{}", std::process::id());
    two_rows(&table).await;
    let (a, b) = (connect(edges.proxy(1)).await, connect(edges.proxy(2)).await);
    assert_eq!(write_skew(&table, "REPEATABLE READ", &a, &b).await, 2, "REPEATABLE READ allows write skew");
    drop((a, b));
    let data = edges.dir.path().join("data");
    let mut verifier = Verifier::start(edges.nats_port(), &data);
    verifier.wait_verified(2);
    let lines = verifier.stop();
    drop_table(&table).await;
    let reports = edges.reports();
    assert!(!reports.is_empty(), "no reject report:\n{}", lines.join("\n"));
    let text = std::fs::read_to_string(&reports[0]).expect("reads the report");
    let report: serde_json::Value = serde_json::from_str(&text).expect("a JSON report");
    let collectors: std::collections::BTreeSet<u64> = report["transactions"]
        .as_array()
        .expect("the report lists its transactions")
        .iter()
        .filter_map(|t| t["collector"].as_u64())
        .collect();
    assert_eq!(collectors, [1, 2].into(), "the report names both collectors: {text}");
    let id = reports[0].file_stem().and_then(|s| s.to_str()).expect("a report id");
    let shown = common::krait(&["report", "show", id, "--data-dir", data.to_str().expect("utf-8 path")]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("collector 1") && shown.contains("collector 2"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serializable_across_three_proxies_is_accepted_with_reads_joined_to_other_proxies_writes() {
    let edges = edges();
    let table = format!("edges_ser_{}", std::process::id());
    two_rows(&table).await;
    let (a, b) = (connect(edges.proxy(1)).await, connect(edges.proxy(2)).await);
    let committed = write_skew(&table, "SERIALIZABLE", &a, &b).await;
    assert_eq!(committed, 1, "SERIALIZABLE lets one of the two commit");
    // The third proxy's first client: it learns its recording horizon now, after the others committed, so
    // their versions are pre-history to it. It reads them and writes over them.
    let c = connect(edges.proxy(3)).await;
    for k in [1, 2] {
        c.batch_execute(&format!(
            "BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT v FROM {table} WHERE k = {k}; \
             UPDATE {table} SET v = v + 10 WHERE k = {k}; COMMIT"
        ))
        .await
        .expect("the third proxy's client reads and overwrites");
    }
    drop((a, b, c));
    let data = edges.dir.path().join("data");
    let admin = free_port();
    let admin_address = format!("127.0.0.1:{admin}");
    let mut verifier = Verifier::start_with(edges.nats_port(), &data, &["--admin", &admin_address]);
    verifier.wait_verified(4);
    let status = api_status(admin);
    assert_eq!(status["verifier"]["rejects"], 0, "{status}");
    let heard: Vec<u64> = status["collectors"]
        .as_array()
        .expect("collectors")
        .iter()
        .filter_map(|c| c["collector"].as_u64())
        .collect();
    assert_eq!(heard, [1, 2, 3], "{status}");
    assert!(metric(admin, "krait_verifier_verified_total").is_some_and(|v| v >= 4.0), "/metrics");
    assert_eq!(metric(admin, "krait_verifier_rejects_total"), Some(0.0));
    assert!(metric(admin, "krait_collector_records_total{collector=\"3\"}").is_some_and(|r| r > 0.0));
    // The third proxy goes away: its shipper falls silent, and the status server says that it holds back the
    // other two.
    let mut edges = edges;
    let _ = edges.proxies[2].0.0.kill();
    let deadline = Instant::now() + Duration::from_secs(15);
    let silent = loop {
        let status = api_status(admin);
        let holds_back = |c: usize| status["collectors"][c]["holds_back_others"].as_bool();
        if holds_back(2) == Some(true) {
            assert_eq!((holds_back(0), holds_back(1)), (Some(false), Some(false)), "{status}");
            break status;
        }
        assert!(Instant::now() < deadline, "collector 3 never shown silent: {status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(silent["collectors"][2]["silent_s"].as_f64().is_some_and(|s| s > 2.0), "{silent}");
    assert_eq!(metric(admin, "krait_collector_holds_back_others{collector=\"3\"}"), Some(1.0));
    assert_eq!(metric(admin, "krait_collector_holds_back_others{collector=\"1\"}"), Some(0.0));
    let lines = verifier.stop();
    drop_table(&table).await;
    let last = lines.iter().rev().find(|l| l.contains("stopped; verifier:")).expect("a final status line");
    assert!(last.contains(" 0 rejects"), "accepted:\n{}", lines.join("\n"));
    assert!(edges.reports().is_empty(), "no report:\n{}", lines.join("\n"));
}

/// Creates `table` with rows 0 to 7 at 0, directly; returns the direct connection, to drop it with.
async fn eight_rows(table: &str) -> tokio_postgres::Client {
    let direct = connect(5432).await;
    direct
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k int PRIMARY KEY, v int NOT NULL); \
             INSERT INTO {table} SELECT g, 0 FROM generate_series(0, 7) g;"
        ))
        .await
        .expect("creates the table");
    direct
}

/// Increments random rows through one proxy, at SERIALIZABLE, until `until`; reconnects when the proxy or
/// the connection goes away. Returns how many commits were acknowledged.
async fn increments(port: u16, table: String, until: Instant, seed: u64) -> u64 {
    let mut acked = 0;
    let mut client: Option<tokio_postgres::Client> = None;
    let mut n = seed;
    while Instant::now() < until {
        let url = format!("host=127.0.0.1 port={port} user=postgres dbname=test");
        let c = match client.take() {
            Some(c) if !c.is_closed() => c,
            _ => match tokio_postgres::connect(&url, NoTls).await {
                Ok((c, conn)) => {
                    tokio::spawn(conn);
                    c
                }
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let k = (n >> 33) % 8;
        let txn = format!(
            "BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT v FROM {table} WHERE k = {k}; \
             UPDATE {table} SET v = v + 1 WHERE k = {k}; COMMIT"
        );
        match c.batch_execute(&txn).await {
            Ok(()) => acked += 1,
            Err(_) => {
                let _ = c.batch_execute("ROLLBACK").await;
            }
        }
        client = Some(c);
    }
    acked
}

/// Load through three proxies while NATS is killed and restarted twice and one proxy is killed -9 and
/// restarted: afterwards the verifier has every acknowledged commit, and accepts. The load lasts
/// `KRAIT_EDGES_FAULT_SECONDS` (12 by default; `scripts/edges-faults` runs it for 60).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_and_proxy_kills_lose_no_acknowledged_commit() {
    let seconds: u64 =
        std::env::var("KRAIT_EDGES_FAULT_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(12).max(6);
    let mut edges = edges();
    let nats_port = edges.nats_port();
    let table = format!("edges_faults_{}", std::process::id());
    let direct = eight_rows(&table).await;
    let data = edges.dir.path().join("data");
    let mut verifier = Verifier::start(nats_port, &data);
    let start = Instant::now();
    let until = start + Duration::from_secs(seconds);
    let load: Vec<_> =
        (1..=3).map(|c| tokio::spawn(increments(edges.proxy(c), table.clone(), until, c as u64))).collect();
    let at = |fraction: u64| start + Duration::from_millis(seconds * 1000 * fraction / 12);
    let sleep_until = |t: Instant| tokio::time::sleep_until(tokio::time::Instant::from_std(t));
    for (kill, restart) in [(2, 4), (7, 9)] {
        sleep_until(at(kill)).await;
        let store = edges.nats.take().expect("NATS runs").kill();
        if kill == 7 {
            // The proxy dies too, while NATS is down: what it logged ships after both are back.
            let (proxy, port) = &mut edges.proxies[1];
            let _ = proxy.0.kill();
            let _ = proxy.0.wait();
            *proxy = proxy_on(edges.dir.path(), 2, nats_port, *port);
        }
        sleep_until(at(restart)).await;
        edges.nats = Some(LocalNats::start_on(&store, nats_port).unwrap_or_else(|e| panic!("{e}")));
    }
    let mut acked = 0;
    for task in load {
        acked += task.await.expect("the load task");
    }
    assert!(acked > 0, "no commit was acknowledged");
    verifier.wait_committed(acked, Duration::from_secs(60));
    let lines = verifier.stop();
    let _ = direct.batch_execute(&format!("DROP TABLE IF EXISTS {table}")).await;
    let last = lines.iter().rev().find(|l| l.contains("stopped; verifier:")).expect("a final status line");
    assert!(last.contains(" 0 rejects"), "accepted:\n{}", lines.join("\n"));
    assert!(committed_in(last).is_some_and(|c| c >= acked), "{acked} acknowledged:\n{last}");
    assert!(edges.reports().is_empty(), "no report:\n{}", lines.join("\n"));
    eprintln!("{acked} commits acknowledged through three proxies over {seconds} s; verifier: {last}");
}

/// A stretch of collector 1's shipped log never arrives: record 1, whose transaction wrote x = w2, is
/// missing, and record 2 reads w2. With `--skip-holes-after 1` the verifier gives up on record 1 after a
/// second, verifies on, counts the read as unverifiable (otherwise the online verifier waits for ever for
/// the writer of w2, and one-shot verification calls it a garbage read), accepts, and its status lists the
/// hole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stretch_that_never_arrives_is_skipped_and_nothing_it_held_is_evidence() {
    use history::log::merge::Heartbeat;
    use history::{
        CollectorId, KeyName, LogRecord, LoggedOp, LoggedTxn, Observed, Outcome, SessionId, TxnId, WriteId,
        now_ns,
    };
    use ship::message;

    let dir = tempfile::tempdir().expect("a temp dir");
    let nats = LocalNats::start(&dir.path().join("nats")).unwrap_or_else(|e| panic!("{e}"));
    let x = || KeyName { namespace: "kv".into(), bytes: b"x".to_vec() };
    let finished = |id: u64, op: LoggedOp| {
        let mut txn = LoggedTxn::new(TxnId(id), SessionId(id), 0);
        txn.ops.push(op);
        LogRecord::Finished { txn, outcome: Outcome::Committed, commit_ns: Some(id) }
    };
    let one = CollectorId(1);
    let records = [
        (0, finished(1, LoggedOp::Write { key: x(), write: WriteId(1_001), stmt: None })),
        // Record 1, never published: finished(2, a write of x = 1_002).
        (
            2,
            finished(3, LoggedOp::Read { key: x(), observed: Observed::Version(WriteId(1_002)), stmt: None }),
        ),
    ];
    let mut shipped = Vec::new();
    for (seq, record) in &records {
        let (headers, payload) = message::record_message(one, *seq, record).expect("encodes");
        shipped.push((message::subject(one), headers, payload));
    }
    let beats = [(1, 3), (2, 0), (3, 0)];
    for (c, below) in beats {
        let beat =
            Heartbeat { below, appended_before_ns: now_ns() + 3_600_000_000_000, read_at_ns: now_ns() };
        let (headers, payload) = message::heartbeat_message(&beat).expect("encodes");
        shipped.push((message::beat_subject(CollectorId(c)), headers, payload));
    }
    nats.publish(ship::DEFAULT_STREAM, shipped).await.unwrap_or_else(|e| panic!("{e}"));

    let mut verifier =
        Verifier::start_with(nats.port(), &dir.path().join("data"), &["--skip-holes-after", "1"]);
    verifier.wait_verified(2);
    let lines = verifier.stop();
    let all = lines.join("\n");
    assert!(all.contains("collector 1: records 1–1 never arrived"), "the hole is announced:\n{all}");
    let last = lines.iter().rev().find(|l| l.contains("stopped; verifier:")).expect("a final status line");
    assert!(last.contains(" 0 rejects"), "accepted:\n{all}");
    assert!(last.contains("1 hole (1 records never arrived"), "the verdict says it rests on a hole:\n{last}");
}

/// `krait serve --verify-only` stops and starts again: the second run resumes from the checkpoint the first
/// stored at its stop (after the last stream message it took, not from the stream's first), and verifies on
/// with what the first learnt: clients of proxy 2 read and overwrite versions that proxy 1's clients wrote
/// before the restart, and the verdict is accept with every commit counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_verifier_resumes_from_its_checkpoint_after_the_messages_it_took() {
    let edges = edges();
    let table = format!("edges_resume_{}", std::process::id());
    two_rows(&table).await;
    let increment = |k: u32| {
        format!(
            "BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT v FROM {table} WHERE k = {k}; \
             UPDATE {table} SET v = v + 1 WHERE k = {k}; COMMIT"
        )
    };
    let a = connect(edges.proxy(1)).await;
    for i in 0..6 {
        a.batch_execute(&increment(1 + i % 2)).await.expect("proxy 1's client increments");
    }
    let data = edges.dir.path().join("data");
    let mut first = Verifier::start(edges.nats_port(), &data);
    first.wait_committed(6, Duration::from_secs(30));
    let lines = first.stop();
    let all = lines.join("\n");
    assert!(all.contains("reads the stream from its first message (it has no checkpoint yet)"), "{all}");
    assert!(data.join("verifier.checkpoint").is_file(), "the stop stores a checkpoint:\n{all}");

    let b = connect(edges.proxy(2)).await;
    for i in 0..6 {
        b.batch_execute(&increment(1 + i % 2)).await.expect("proxy 2's client increments");
    }
    a.batch_execute(&increment(1)).await.expect("proxy 1's client increments again");
    drop((a, b));
    let admin = free_port();
    let admin_address = format!("127.0.0.1:{admin}");
    let mut second = Verifier::start_with(edges.nats_port(), &data, &["--admin", &admin_address]);
    second.wait_committed(13, Duration::from_secs(30));
    let resumed_at = second
        .seen
        .iter()
        .find_map(|l| l.split_once("resumed from its checkpoint at stream message ").map(|(_, rest)| rest))
        .and_then(|rest| rest.split(' ').next()?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("the second run resumes:\n{}", second.seen.join("\n")));
    assert!(resumed_at > 1, "it resumes after the messages the first run took: {resumed_at}");
    let status = api_status(admin);
    assert_eq!(status["verifier"]["committed"], 13, "every commit counted once: {status}");
    let (next, this_run) = (&status["position"]["next_message"], &status["position"]["messages_this_run"]);
    let (next, this_run) = (next.as_u64().expect("a position"), this_run.as_u64().expect("a count"));
    assert!(this_run <= next - resumed_at, "it read only the messages after its checkpoint: {status}");
    let lines = second.stop();
    drop_table(&table).await;
    let all = lines.join("\n");
    let last = lines.iter().rev().find(|l| l.contains("stopped; verifier:")).expect("a final status line");
    assert!(last.contains(" 0 rejects"), "accepted:\n{all}");
    assert!(edges.reports().is_empty(), "no report:\n{all}");
    println!("the second run resumed at stream message {resumed_at}");
}

/// Retention on a shipping proxy (issues 20 and 21) deletes only what the stream has acknowledged: while
/// NATS is down the proxy records on, keeps every segment, however old, and shows the backlog growing;
/// once NATS is up and the backlog shipped, the old segments go; and the verifier then reads every acknowledged commit from the
/// stream, none lost with the deleted segments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_only_what_the_stream_has_acknowledged() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (port, admin_port, nats_port) = (free_port(), free_port(), free_port());
    let more = format!(
        "segment_bytes = 65536\n[log.retain]\nmax_age_s = 0\n\
         [admin]\nenabled = true\naddress = \"127.0.0.1:{admin_port}\"\n"
    );
    let _proxy = proxy_with(dir.path(), 1, nats_port, port, &more);
    wait_for_port(admin_port, "the proxy's admin server");
    let first_record = || api_status(admin_port)["log"]["first_record"].as_u64().expect("log.first_record");
    let table = format!("edges_retain_{}", std::process::id());
    let direct = eight_rows(&table).await;

    // NATS is down: traffic until the log has sealed segments, then two retention passes.
    let mut acked = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(admin_port, "krait_log_bytes").is_none_or(|b| b < 3.0 * 65_536.0) {
        assert!(Instant::now() < deadline, "the log never filled three segments");
        let until = Instant::now() + Duration::from_secs(1);
        acked += increments(port, table.clone(), until, acked).await;
    }
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(first_record(), 0, "nothing is deleted before it is shipped: {}", api_status(admin_port));
    assert_eq!(metric(admin_port, "krait_log_segments_deleted_total"), Some(0.0));
    let backlog = || metric(admin_port, "krait_ship_backlog_records").expect("the backlog metric");
    assert!(backlog() > 1_000.0, "the backlog grows while NATS is down: {}", api_status(admin_port));

    // NATS comes up: the backlog ships, and then the old segments go.
    let store = dir.path().join("nats");
    std::fs::create_dir_all(&store).expect("creates the NATS store");
    let _nats = LocalNats::start_on(&store, nats_port).unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while first_record() == 0 || backlog() > 0.0 {
        assert!(
            Instant::now() < deadline,
            "retention deleted nothing once shipped: {}",
            api_status(admin_port)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut verifier = Verifier::start_for(nats_port, &dir.path().join("data"), "1", &[]);
    verifier.wait_committed(acked, Duration::from_secs(60));
    let lines = verifier.stop();
    let _ = direct.batch_execute(&format!("DROP TABLE IF EXISTS {table}")).await;
    let last = lines.iter().rev().find(|l| l.contains("stopped; verifier:")).expect("a final status line");
    assert!(last.contains(" 0 rejects"), "accepted:\n{}", lines.join("\n"));
    eprintln!("{acked} commits acknowledged, log deleted below record {}; verifier: {last}", first_record());
}
