//! Shared helpers for the proxy's end-to-end tests: start a proxy in-process in front of the real PostgreSQL
//! on 127.0.0.1:5432, connect through it, and read back what it recorded. Every test uses its own proxy, log
//! directory, ephemeral port and table names, so tests run in parallel without meeting.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use history::log::{LogRecord, LoggedOp, LoggedTxn};
use history::{Outcome, TxnId};
use proxy::{Config, ProxyHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::pg::backend::BackendMessage;
use wire::pg::{StartupPacket, split_frame};

/// The database the tests use, directly.
pub const PG_ADDR: &str = "127.0.0.1:5432";
/// The user the tests connect as (trust auth on loopback).
pub const PG_USER: &str = "postgres";
/// The database the tests connect to.
pub const PG_DB: &str = "postgres";

/// A running proxy and the directory its log lives in.
pub struct TestProxy {
    pub handle: ProxyHandle,
    pub dir: tempfile::TempDir,
}

/// Options for [`start_proxy_with`].
#[derive(Default)]
pub struct Opts {
    /// `(cert, key)` PEM paths and the mode ("prefer" or "require").
    pub tls: Option<(PathBuf, PathBuf, &'static str)>,
    /// Upstream address, if not the real database.
    pub upstream: Option<String>,
    /// "strict" (default), "group" or "none".
    pub durability: Option<&'static str>,
    /// `listen.max_message_bytes`.
    pub max_message_bytes: Option<usize>,
    /// `tagging.strategy` ("xmin" or "off"); the proxy's default when unset.
    pub tagging: Option<&'static str>,
    /// `fence.every`, with no time floor (`fence.min_interval_ms = 0`); the proxy's defaults when unset.
    pub fence_every: Option<u64>,
    /// `record.exclusive`.
    pub exclusive: bool,
    /// More settings of `[record]`, as TOML lines.
    pub record: Option<&'static str>,
    /// The history log's path, if not a fresh one in the proxy's temporary directory.
    pub log_path: Option<PathBuf>,
    /// `admin.timeout_ms` and `admin.max_connections`, when set.
    pub admin_limits: Option<(u64, usize)>,
    /// `ship.nats`: the proxy ships its log there (or keeps trying to).
    pub ship: Option<String>,
    /// `upstream.database`: the one database recorded.
    pub database: Option<&'static str>,
}

pub async fn start_proxy() -> TestProxy {
    start_proxy_with(Opts::default()).await
}

pub async fn start_proxy_with(opts: Opts) -> TestProxy {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = test_config(&opts, dir.path());
    let handle = proxy::start(config).await.expect("proxy starts");
    TestProxy { handle, dir }
}

/// The configuration [`start_proxy_with`] starts a proxy with; its log goes under `dir` unless `opts` says
/// where.
pub fn test_config(opts: &Opts, dir: &Path) -> Config {
    let mut toml = format!(
        "[listen]\naddress = \"127.0.0.1:0\"\nmax_message_bytes = {}\nstartup_timeout_ms = 5000\n\
         [upstream]\naddress = \"{}\"\nconnect_timeout_ms = 2000\n{}\
         [log]\npath = \"{}\"\ndurability = \"{}\"\n\
         [admin]\naddress = \"127.0.0.1:0\"\n{}",
        opts.max_message_bytes.unwrap_or(1 << 20),
        opts.upstream.as_deref().unwrap_or(PG_ADDR),
        opts.database.map_or(String::new(), |d| format!("database = \"{d}\"\n")),
        opts.log_path.clone().unwrap_or_else(|| dir.join("log")).display(),
        opts.durability.unwrap_or("strict"),
        opts.admin_limits
            .map_or(String::new(), |(t, n)| format!("timeout_ms = {t}\nmax_connections = {n}\n")),
    );
    if let Some((cert, key, mode)) = &opts.tls {
        toml.push_str(&format!(
            "[tls]\nmode = \"{mode}\"\ncert = \"{}\"\nkey = \"{}\"\n",
            cert.display(),
            key.display()
        ));
    }
    // KRAIT_TEST_TAGGING runs the suite under another strategy than the default, to compare.
    let env_tagging = std::env::var("KRAIT_TEST_TAGGING").ok();
    if let Some(strategy) = opts.tagging.or(env_tagging.as_deref()) {
        toml.push_str(&format!("[tagging]\nstrategy = \"{strategy}\"\n"));
    }
    if let Some(every) = opts.fence_every {
        // Exactly every `every` commits, without the time floor, so that tests see the fences they ask for.
        toml.push_str(&format!("[fence]\nevery = {every}\nmin_interval_ms = 0\n"));
    }
    if opts.exclusive || opts.record.is_some() {
        toml.push_str("[record]\n");
    }
    if opts.exclusive {
        toml.push_str("exclusive = true\n");
    }
    if let Some(lines) = opts.record {
        toml.push_str(lines);
        toml.push('\n');
    }
    if let Some(nats) = &opts.ship {
        toml.push_str(&format!("[ship]\nnats = \"{nats}\"\n"));
    }
    Config::parse(&toml, Path::new("<test>")).expect("test config")
}

impl TestProxy {
    /// Replays the proxy's log, asserts that serializability accepts it (`what` names the run in the
    /// failure), and returns how many writes the committed transactions recorded as row operations.
    pub async fn assert_accepted_with_writes(&self, what: &str) -> usize {
        let log = self.handle.log().clone();
        let h = tokio::task::spawn_blocking(move || log.replay()).await.expect("join").expect("replay");
        let report = verifier::verify(&h, &verifier::Options::default()).expect("verify");
        assert!(report.is_accept(), "{what}: the database did nothing wrong, yet:\n{report}");
        h.transactions
            .iter()
            .filter(|tx| tx.outcome == Outcome::Committed)
            .flat_map(|tx| &tx.ops)
            .filter(|op| matches!(op, history::Op::Write { .. }))
            .count()
    }

    /// A libpq-style connection string through the proxy.
    pub fn conn_str(&self) -> String {
        let a = self.handle.listen_addr();
        format!("host={} port={} user={PG_USER} dbname={PG_DB} connect_timeout=10", a.ip(), a.port())
    }

    /// Connects tokio-postgres through the proxy (no TLS) and drives the connection in the background.
    pub async fn connect(&self) -> tokio_postgres::Client {
        connect(&self.conn_str()).await
    }

    /// Every transaction in the log, as the proxy logged it (intent or finished record, with the outcome once
    /// it is known), in log order. Read from the raw records, because replay keeps only the statements that
    /// ops cite, and this issue records statements without ops.
    pub fn recorded(&self) -> Vec<Recorded> {
        let mut out: Vec<Recorded> = Vec::new();
        let mut index: HashMap<TxnId, usize> = HashMap::new();
        // Resolved: the log writes transaction records compactly, citing texts defined once.
        for item in history::log::resolved(self.handle.log().tail(0)) {
            let (_, record) = item.expect("readable log record");
            match record {
                LogRecord::Intent(txn) => {
                    index.insert(txn.id, out.len());
                    out.push(Recorded { txn, outcome: None, commit_ns: None });
                }
                LogRecord::Outcome { txn, outcome, commit_ns } => {
                    let i = index[&txn];
                    out[i].outcome = Some(outcome);
                    out[i].commit_ns = commit_ns;
                }
                LogRecord::Finished { txn, outcome, commit_ns } => {
                    index.insert(txn.id, out.len());
                    out.push(Recorded { txn, outcome: Some(outcome), commit_ns });
                }
                LogRecord::DiscoveredWrite { txn, key, write } => {
                    let op = LoggedOp::Write { key, write, stmt: None };
                    let ops = &mut out[index[&txn]].txn.ops;
                    if !ops.contains(&op) {
                        ops.push(op);
                    }
                }
                LogRecord::LateOps { txn, ops, statements } => {
                    let i = index[&txn];
                    out[i].txn.ops.extend(ops);
                    out[i].txn.statements = statements;
                }
                LogRecord::Resolved { txn, outcome } => {
                    if let Some(&i) = index.get(&txn) {
                        out[i].outcome = Some(outcome);
                    }
                }
                LogRecord::Recovery { .. }
                | LogRecord::Xids { .. }
                | LogRecord::SessionEnded { .. }
                | LogRecord::SessionsOpen { .. }
                | LogRecord::Horizon { .. }
                | LogRecord::HorizonSnapshot(_)
                | LogRecord::Isolation { .. }
                | LogRecord::IsolationUnknown { .. } => {}
                LogRecord::Statement { .. }
                | LogRecord::Namespace { .. }
                | LogRecord::Columns { .. }
                | LogRecord::RowsForgotten
                | LogRecord::TextsForgotten
                | LogRecord::CompactIntent(_)
                | LogRecord::CompactFinished { .. }
                | LogRecord::CompactLateOps { .. } => unreachable!("resolved records are expanded"),
            }
        }
        out
    }

    /// Recorded transactions any of whose statements mention `needle` (a test's unique table name), in
    /// session order.
    pub fn txns_mentioning(&self, needle: &str) -> Vec<Recorded> {
        let mut out: Vec<Recorded> = self
            .recorded()
            .into_iter()
            .filter(|r| r.txn.statements.iter().any(|s| s.contains(needle)))
            .collect();
        out.sort_by_key(|r| (r.txn.session, r.txn.seq));
        out
    }

    /// Waits (bounded) until `count` transactions mentioning `needle` have an outcome; a session's last
    /// outcome may be logged just after its client has gone.
    pub async fn wait_for(&self, needle: &str, count: usize) -> Vec<Recorded> {
        for _ in 0..100 {
            let txns = self.txns_mentioning(needle);
            if txns.iter().filter(|r| r.outcome.is_some()).count() >= count {
                return txns;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.txns_mentioning(needle)
    }

    /// Asserts what a driver's run must leave on `/metrics`: no desync, and exactly `cancels` cancel
    /// requests relayed.
    pub async fn assert_in_step_with_cancels(&self, cancels: u64) {
        let m = self.admin_get("/metrics").await;
        let value = |name: &str| m.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_owned());
        assert_eq!(value("krait_desyncs_total "), Some("0".to_owned()), "{m}");
        assert_eq!(value("krait_cancels_relayed_total "), Some(cancels.to_string()), "{m}");
    }

    /// GETs a path from the admin server and returns the body.
    pub async fn admin_get(&self, path: &str) -> String {
        let (status, body) = self.admin_request(path).await;
        assert_eq!(status, 200, "admin {path}: {body}");
        body
    }

    /// GETs a path from the admin server and returns the status code and the body.
    pub async fn admin_request(&self, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.handle.admin_addr().expect("admin enabled");
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("admin connect");
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .expect("admin write");
        let mut resp = String::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut resp))
            .await
            .expect("admin reply in time")
            .expect("admin read");
        let status = resp.get(9..12).and_then(|code| code.parse().ok()).unwrap_or(0);
        (status, resp.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
    }
}

/// One transaction as the log holds it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// What the proxy logged.
    pub txn: LoggedTxn,
    /// Its outcome; `None` while only the intent is logged.
    pub outcome: Option<Outcome>,
    /// When the commit was acknowledged.
    pub commit_ns: Option<u64>,
}

/// Connects tokio-postgres with `conn` and drives the connection in the background.
pub async fn connect(conn: &str) -> tokio_postgres::Client {
    let (client, connection) =
        tokio::time::timeout(Duration::from_secs(10), tokio_postgres::connect(conn, tokio_postgres::NoTls))
            .await
            .expect("connect in time")
            .unwrap_or_else(|e| panic!("connect {conn}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Connects directly to the database, bypassing the proxy.
pub async fn direct() -> tokio_postgres::Client {
    connect(&format!("host=127.0.0.1 port=5432 user={PG_USER} dbname={PG_DB}")).await
}

/// Waits, watching from a direct connection, until a statement that names `table` waits for a lock: so
/// that a test can commit the transaction that holds the row lock only once the other's UPDATE is queued
/// behind it, and that UPDATE then acts on the version the commit made (PostgreSQL's EvalPlanQual at READ
/// COMMITTED), the shape of a lost update between two concurrent writers.
#[allow(dead_code)]
pub async fn wait_until_waiting_for_a_lock(table: &str) {
    let admin = direct().await;
    let pattern = format!("%{table}%");
    for _ in 0..500 {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
                &[&pattern],
            )
            .await
            .expect("reads pg_stat_activity")
            .get(0);
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no statement on {table} ever waited for a lock");
}

/// A table name unique to this test and process.
pub fn unique(name: &str) -> String {
    format!("krait_{name}_{}", std::process::id())
}

/// A table name unique to this test and process, dropped (with `DROP TABLE IF EXISTS … CASCADE`, through
/// psql) when the value goes out of scope, also when the test fails: no run leaves a table behind
/// (`scripts/test` checks).
pub struct TestTable(String);

/// A [`TestTable`] named `krait_<name>_<pid>`.
pub fn unique_table(name: &str) -> TestTable {
    TestTable(unique(name))
}

impl std::ops::Deref for TestTable {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TestTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Drop for TestTable {
    fn drop(&mut self) {
        let sql = format!("DROP TABLE IF EXISTS {} CASCADE", self.0);
        let _ = std::process::Command::new("psql")
            .args(["-h", "127.0.0.1", "-U", PG_USER, "-d", PG_DB, "-XAtqc", &sql])
            .output();
    }
}

/// Counts of outcomes.
pub fn outcomes(txns: &[Recorded]) -> Vec<Option<Outcome>> {
    txns.iter().map(|r| r.outcome).collect()
}

/// Writes a fresh self-signed certificate for `localhost` and 127.0.0.1 into `dir`, returning the PEM paths
/// `(cert, key)`. The certificate is its own CA, so clients can verify it with `sslrootcert=<cert>`.
pub fn self_signed(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("generate a certificate");
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, ck.cert.pem()).expect("write cert");
    std::fs::write(&key, ck.signing_key.serialize_pem()).expect("write key");
    (cert, key)
}

/// Runs psql with a connection string and arguments; returns (success, stdout, stderr). Bounded in time.
pub async fn psql(conn: &str, args: &[&str]) -> (bool, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new("psql")
            .arg(conn)
            .args(["-X", "-v", "ON_ERROR_STOP=1", "-At"])
            .args(args)
            .env_remove("PGSSLMODE")
            .stdin(std::process::Stdio::null())
            .output(),
    )
    .await
    .expect("psql finished in time")
    .expect("psql runs (is postgresql-client installed?)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

impl TestProxy {
    /// Waits (bounded) until /metrics contains `needle`; counters for a closed connection are bumped just
    /// after its socket closes, so a test must not read them at once.
    pub async fn wait_metric(&self, needle: &str) {
        let mut metrics = String::new();
        for _ in 0..100 {
            metrics = self.admin_get("/metrics").await;
            if metrics.contains(needle) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{needle:?} not in /metrics:\n{metrics}");
    }
}

/// The startup packet of a session as `postgres` on the test database, encoded.
pub fn startup_packet() -> BytesMut {
    let mut buf = BytesMut::new();
    StartupPacket::Startup {
        major: 3,
        minor: 0,
        params: vec![
            (Bytes::from("user"), Bytes::from(PG_USER)),
            (Bytes::from("database"), Bytes::from(PG_DB)),
        ],
    }
    .encode(&mut buf);
    buf
}

/// Opens a raw connection and completes startup as `postgres`, up to the first ReadyForQuery.
pub async fn raw_session(p: &TestProxy) -> (TcpStream, BytesMut) {
    let mut s = TcpStream::connect(p.handle.listen_addr()).await.unwrap();
    s.write_all(&startup_packet()).await.unwrap();
    let mut rbuf = BytesMut::new();
    loop {
        let m = read_backend(&mut s, &mut rbuf).await.expect("startup reply");
        if matches!(m, BackendMessage::ReadyForQuery(_)) {
            return (s, rbuf);
        }
    }
}

/// Reads one backend message, or `None` at EOF. Bounded in time.
pub async fn read_backend(s: &mut TcpStream, buf: &mut BytesMut) -> Option<BackendMessage> {
    loop {
        if let Some(f) = split_frame(buf, 1 << 20).unwrap() {
            return Some(BackendMessage::decode(&f).unwrap());
        }
        let n = tokio::time::timeout(Duration::from_secs(10), s.read_buf(buf)).await.expect("reply in time");
        if n.unwrap_or(0) == 0 {
            return None;
        }
    }
}

/// A database that asks every connection for an MD5 password (a cleartext one would not cross the proxy's
/// plain upstream connection); returns its address and how many bytes of client messages reached it after
/// the startup packets.
pub async fn upstream_that_asks_for_a_password() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let received = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut len = [0u8; 4];
                s.read_exact(&mut len).await?;
                let mut startup = vec![0u8; (i32::from_be_bytes(len) as usize).saturating_sub(4)];
                s.read_exact(&mut startup).await?;
                s.write_all(&[b'R', 0, 0, 0, 12, 0, 0, 0, 5, 1, 2, 3, 4]).await?;
                let mut chunk = [0u8; 4096];
                loop {
                    match s.read(&mut chunk).await? {
                        0 => return std::io::Result::Ok(()),
                        n => counter.fetch_add(n, Ordering::Relaxed),
                    };
                }
            });
        }
    });
    (addr, received)
}

/// Every record of the (closed) log in `dir` as a reader gets it back, citations expanded and compression
/// undone, printed: the log's records are compressed, so its files' bytes alone would hide a value that is
/// there.
pub fn records_under(dir: &Path) -> String {
    use history::HistoryLog;
    let reader = history::log::LogReader::open(dir).expect("open the closed log");
    history::log::resolved(reader.log().tail(0)).map(|r| format!("{:?}\n", r.expect("record").1)).collect()
}

/// Every file under `dir`, with its path.
pub fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}
