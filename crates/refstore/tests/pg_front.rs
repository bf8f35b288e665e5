//! The PostgreSQL-wire front with real drivers: tokio-postgres (extended protocol) and psql (simple
//! protocol), against serializability (every history accepted by the verifier) and weak models with forced
//! contention (the recorded history rejected). Also: what malformed wire bytes do to a connection.

use std::net::SocketAddr;
use std::time::Duration;

use refstore::pg::serve;
use refstore::{Model, SharedStore, StoreConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

struct Server {
    addr: SocketAddr,
    store: SharedStore,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(model: Model, fresh_view_share: f64, seed: u64) -> Server {
        let store = SharedStore::new(StoreConfig { model, seed, fresh_view_share }).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, store.clone(), async {
            let _ = stopped.await;
        }));
        Server { addr, store, stop: Some(stop), task }
    }

    async fn client(&self) -> Client {
        let conf = format!("host=127.0.0.1 port={} user=test dbname=test", self.addr.port());
        let (client, connection) = tokio_postgres::connect(&conf, NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }

    /// Stops the server (closing every connection) and returns the verifier's verdict on its history.
    async fn stop_and_verify(mut self) -> (bool, history::History) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap().unwrap();
        let h = self.store.history();
        let report = verifier::verify(&h, &verifier::Options::default()).unwrap();
        (report.is_accept(), h)
    }
}

fn code(e: &tokio_postgres::Error) -> Option<&SqlState> {
    e.code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_runs_transactions_and_retries_a_refused_commit_under_ser() {
    let server = Server::start(Model::Serializable, 0.5, 1).await;
    let a = server.client().await;
    let mut b = server.client().await;
    let insert = a.prepare("INSERT INTO kv (k, v) VALUES ($1, $2)").await.unwrap();
    for k in 0..3i64 {
        assert_eq!(a.execute(&insert, &[&k, &100i64]).await.unwrap(), 1);
    }
    let dup = a.execute(&insert, &[&0i64, &1i64]).await.unwrap_err();
    assert_eq!(code(&dup), Some(&SqlState::UNIQUE_VIOLATION), "{dup}");

    // Two read-modify-write transactions on key 0, interleaved: the second commit must be refused.
    let select = "SELECT v FROM kv WHERE k = $1";
    let update = "UPDATE kv SET v = $1 WHERE k = $2";
    a.batch_execute("BEGIN").await.unwrap();
    b.batch_execute("BEGIN").await.unwrap();
    let va: i64 = a.query_one(select, &[&0i64]).await.unwrap().get(0);
    let vb: i64 = b.query_one(select, &[&0i64]).await.unwrap().get(0);
    assert_eq!((va, vb), (100, 100));
    a.execute(update, &[&(va + 1), &0i64]).await.unwrap();
    b.execute(update, &[&(vb + 1), &0i64]).await.unwrap();
    a.batch_execute("COMMIT").await.unwrap();
    let refused = b.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(code(&refused), Some(&SqlState::T_R_SERIALIZATION_FAILURE), "{refused}");

    // The driver's retry loop, with tokio-postgres's own transaction API this time.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let tx = b.transaction().await.unwrap();
        let v: i64 = tx.query_one(select, &[&0i64]).await.unwrap().get(0);
        tx.execute(update, &[&(v + 1), &0i64]).await.unwrap();
        match tx.commit().await {
            Ok(()) => break,
            Err(e) if code(&e) == Some(&SqlState::T_R_SERIALIZATION_FAILURE) && attempts < 10 => continue,
            Err(e) => panic!("commit failed: {e}"),
        }
    }
    let v: i64 = a.query_one("SELECT v FROM kv WHERE k = 0", &[]).await.unwrap().get(0);
    assert_eq!(v, 102, "both increments landed, none lost");

    // RETURNING, xmin, literals, DELETE, and a read of a deleted row.
    let row =
        a.query_one("UPDATE kv SET v = v + 5 WHERE k = $1 RETURNING k, v, xmin", &[&1i64]).await.unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (1, 105));
    let xmin: i64 = row.get(2);
    let seen: i64 = a.query_one("SELECT xmin FROM kv WHERE k = 1", &[]).await.unwrap().get(0);
    assert_eq!(seen, xmin, "xmin names the writer transaction");
    assert_eq!(a.execute("DELETE FROM kv WHERE k = 2", &[]).await.unwrap(), 1);
    assert!(a.query_opt("SELECT v FROM kv WHERE k = 2", &[]).await.unwrap().is_none());
    assert_eq!(a.execute("UPDATE kv SET v = 1 WHERE k = 2", &[]).await.unwrap(), 0);

    // Unsupported SQL is an error, and the connection carries on.
    let e = a.batch_execute("SELECT v FROM kv").await.unwrap_err();
    assert_eq!(code(&e), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{e}");
    let e = a.prepare("CREATE TABLE t (x int)").await.unwrap_err();
    assert_eq!(code(&e), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{e}");
    // In a block, an error fails the block until ROLLBACK.
    a.batch_execute("BEGIN").await.unwrap();
    assert!(a.batch_execute("SELECT nothing").await.is_err());
    let e = a.query("SELECT v FROM kv WHERE k = 0", &[]).await.unwrap_err();
    assert_eq!(code(&e), Some(&SqlState::IN_FAILED_SQL_TRANSACTION), "{e}");
    a.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(a.query_one(select, &[&0i64]).await.unwrap().get::<_, i64>(0), 102);

    drop((a, b));
    let (accepted, h) = server.stop_and_verify().await;
    assert!(accepted, "a history run under ser was rejected");
    assert!(h.stats().aborted >= 1, "the refused commit is in the history as aborted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_skew_under_si_commits_and_the_verifier_rejects_the_history() {
    let server = Server::start(Model::SnapshotIsolation, 1.0, 2).await;
    let a = server.client().await;
    let b = server.client().await;
    a.batch_execute("INSERT INTO kv VALUES (1, 1), (2, 1)").await.unwrap();
    let select = a.prepare("SELECT v FROM kv WHERE k = $1").await.unwrap();
    let select_b = b.prepare("SELECT v FROM kv WHERE k = $1").await.unwrap();
    // Each transaction checks that both are on call, then takes one off: SI lets both commit.
    a.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE").await.unwrap();
    b.batch_execute("BEGIN").await.unwrap();
    for k in [1i64, 2] {
        assert_eq!(a.query_one(&select, &[&k]).await.unwrap().get::<_, i64>(0), 1);
        assert_eq!(b.query_one(&select_b, &[&k]).await.unwrap().get::<_, i64>(0), 1);
    }
    a.execute("UPDATE kv SET v = 0 WHERE k = $1", &[&1i64]).await.unwrap();
    b.execute("UPDATE kv SET v = 0 WHERE k = $1", &[&2i64]).await.unwrap();
    a.batch_execute("COMMIT").await.unwrap();
    b.batch_execute("COMMIT").await.unwrap();
    drop((a, b));
    let (accepted, _) = server.stop_and_verify().await;
    assert!(!accepted, "write skew under si was accepted");
}

/// Runs psql against the server with each `-c` command in turn on one connection; returns (success,
/// stdout, stderr).
async fn psql(addr: SocketAddr, commands: &[&str]) -> (bool, String, String) {
    let mut cmd = tokio::process::Command::new("psql");
    cmd.args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-h", "127.0.0.1"])
        .args(["-p", &addr.port().to_string(), "-U", "test", "-d", "test"])
        .env("PGCONNECT_TIMEOUT", "5");
    for c in commands {
        cmd.args(["-c", c]);
    }
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("psql timed out")
        .expect("psql must be installed for this test");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_simple_protocol_under_ser_is_accepted() {
    let server = Server::start(Model::Serializable, 0.5, 3).await;
    let (ok, _, err) = psql(server.addr, &["INSERT INTO kv (k, v) VALUES (1, 10), (2, 20)"]).await;
    assert!(ok, "{err}");
    for _ in 0..3 {
        let (ok, _, err) = psql(
            server.addr,
            &["BEGIN; UPDATE kv SET v = v + 1 WHERE k = 1; UPDATE kv SET v = v - 1 WHERE k = 2; COMMIT"],
        )
        .await;
        assert!(ok, "{err}");
    }
    let (ok, out, err) =
        psql(server.addr, &["SELECT v FROM kv WHERE k = 1", "SELECT k, v FROM kv WHERE k = 2"]).await;
    assert!(ok, "{err}");
    assert_eq!(out, "13\n2|17\n");
    let (ok, _, err) = psql(server.addr, &["SELECT count(*) FROM kv"]).await;
    assert!(!ok && err.contains("0A000"), "unsupported SQL: {err}");
    let (accepted, h) = server.stop_and_verify().await;
    assert!(accepted, "a history run under ser was rejected");
    assert_eq!(h.stats().committed, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_increments_under_consistent_prefix_with_stale_views_lose_updates_and_are_rejected() {
    // Every psql run is a new client, so a consistent-prefix view may be any prefix of the commit order:
    // increments read stale values and overwrite each other. The runs are sequential, so the seeded RNG
    // makes the outcome the same every time.
    let server = Server::start(Model::ConsistentPrefix, 0.0, 4).await;
    let (ok, _, err) = psql(server.addr, &["INSERT INTO kv VALUES (1, 0)"]).await;
    assert!(ok, "{err}");
    let n = 8;
    for _ in 0..n {
        let (ok, _, err) = psql(server.addr, &["UPDATE kv SET v = v + 1 WHERE k = 1"]).await;
        assert!(ok, "{err}");
    }
    let (accepted, h) = server.stop_and_verify().await;
    assert_eq!(h.stats().committed, n + 1);
    assert!(!accepted, "lost updates under cp were accepted");
}

/// Reads backend messages until ReadyForQuery or end of stream; returns the message tags seen and whether
/// the stream ended.
async fn read_messages(s: &mut TcpStream) -> (Vec<u8>, Vec<u8>, bool) {
    let mut data = Vec::new();
    let mut tags = Vec::new();
    let mut pos = 0;
    loop {
        while data.len() >= pos + 5 {
            let len =
                u32::from_be_bytes([data[pos + 1], data[pos + 2], data[pos + 3], data[pos + 4]]) as usize;
            if data.len() < pos + 1 + len {
                break;
            }
            tags.push(data[pos]);
            pos += 1 + len;
            if tags.last() == Some(&b'Z') {
                return (tags, data, false);
            }
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk)).await.expect("server hung") {
            Ok(0) | Err(_) => return (tags, data, true),
            Ok(n) => data.extend_from_slice(&chunk[..n]),
        }
    }
}

fn startup() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&196_608i32.to_be_bytes());
    body.extend_from_slice(b"user\0test\0\0");
    let mut msg = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    msg.extend_from_slice(&body);
    msg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_wire_bytes_get_an_error_and_a_closed_connection_and_the_server_carries_on() {
    let server = Server::start(Model::Serializable, 1.0, 5).await;
    let cases: [&[u8]; 4] = [
        b"Q\xff\xff\xff\xff", // a negative length
        b"S\0\0\0\x05x",      // a Sync with a body
        b"B\0\0\0\x06p\0",    // a Bind cut short
        b"Z\0\0\0\x05I",      // a backend message sent by a client
    ];
    for bad in cases {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(&startup()).await.unwrap();
        let (tags, _, closed) = read_messages(&mut s).await;
        assert!(!closed && tags.contains(&b'R') && tags.contains(&b'K'), "startup: {tags:?}");
        s.write_all(bad).await.unwrap();
        let (tags, data, closed) = read_messages(&mut s).await;
        assert_eq!(tags, vec![b'E'], "{bad:?}");
        assert!(closed, "{bad:?}: the connection stayed open");
        assert!(data.windows(6).any(|w| w == b"C08P01"), "{bad:?}: not a protocol violation");
    }
    // A startup packet with an impossible length.
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"\0\0\0\x02").await.unwrap();
    let (tags, _, closed) = read_messages(&mut s).await;
    assert!(closed && tags == vec![b'E'], "{tags:?}");
    // The server still serves.
    let c = server.client().await;
    c.batch_execute("INSERT INTO kv VALUES (1, 1)").await.unwrap();
    assert_eq!(c.query_one("SELECT v FROM kv WHERE k = 1", &[]).await.unwrap().get::<_, i64>(0), 1);
    drop(c);
    let (accepted, _) = server.stop_and_verify().await;
    assert!(accepted);
}
