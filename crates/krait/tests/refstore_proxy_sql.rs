//! The reference store's PostgreSQL-wire front answers the SQL the Krait proxy sends on its own, with
//! tokio-postgres and the proxy's own statement texts (so a change on the proxy's side that the front no
//! longer matches fails here): the primary-key catalog query, statements rewritten to return `xmin::text`,
//! and the fence transaction on `krait_fence`. Near misses stay refused with 0A000.

use std::net::SocketAddr;

use proxy::interpret::fence::{FENCE_COMMIT, FENCE_TABLE, fence_sql, setup_sql};
use proxy::interpret::{Catalog, PK_QUERY, StmtPlan, plan_query};
use refstore::pg::serve;
use refstore::{Model, SharedStore, StoreConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

async fn start(model: Model) -> (SocketAddr, SharedStore, oneshot::Sender<()>) {
    let store = SharedStore::new(StoreConfig { model, seed: 5, fresh_view_share: 1.0 }).expect("a store");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a local port");
    let addr = listener.local_addr().expect("an address");
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, store.clone(), async {
        let _ = stopped.await;
    }));
    (addr, store, stop)
}

async fn client(addr: SocketAddr) -> Client {
    let conf = format!("host=127.0.0.1 port={} user=test dbname=test", addr.port());
    let (client, connection) = tokio_postgres::connect(&conf, NoTls).await.expect("connects");
    tokio::spawn(connection);
    client
}

/// The rows of a simple query, as text.
async fn simple_rows(c: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    let msgs = c.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    msgs.iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect()),
            _ => None,
        })
        .collect()
}

/// The catalog the proxy builds from the front's answer to its catalog query.
async fn catalog(c: &Client) -> Catalog {
    let rows = c.query(PK_QUERY, &[]).await.expect("the catalog query is answered");
    let rows: Vec<(String, String, Option<String>)> =
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    assert_eq!(
        rows,
        vec![
            ("public".into(), "krait_fence".into(), Some("id".into())),
            ("public".into(), "kv".into(), Some("k".into())),
        ]
    );
    Catalog::from_rows(rows)
}

/// The proxy's rewrite of `sql` (one statement), which must be tagged.
fn rewrite(sql: &str, catalog: &Catalog) -> String {
    let planned = plan_query(sql, catalog);
    assert!(matches!(planned.stmts.as_slice(), [StmtPlan::Rows(_)]), "{sql}: {planned:?}");
    planned.rewritten.expect("a tagged statement is rewritten")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_query_names_the_primary_keys() {
    let (addr, _store, _stop) = start(Model::Serializable).await;
    let c = client(addr).await;
    let cat = catalog(&c).await;
    // With it, the proxy tags statements on both tables; without it, it could not.
    for sql in ["SELECT k, v FROM kv WHERE k = $1", "SELECT epoch FROM krait_fence WHERE id = 1"] {
        assert!(rewrite(sql, &cat).contains("::TEXT"), "{sql}");
        let blind = plan_query(sql, &Catalog::new());
        assert!(matches!(blind.stmts.as_slice(), [StmtPlan::Opaque(_)]), "{sql}: {blind:?}");
    }
    // The simple protocol gets the same answer, and a near miss of the query is refused.
    assert_eq!(simple_rows(&c, PK_QUERY).await.len(), 2);
    let e = c.simple_query(&PK_QUERY.replace("'r', 'p'", "'r'")).await.expect_err("refused");
    assert_eq!(e.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewritten_statements_return_the_writers_transaction_as_xmin_text() {
    let (addr, _store, _stop) = start(Model::Serializable).await;
    let c = client(addr).await;
    let cat = catalog(&c).await;
    // Two rows written by two transactions; `xmin` (int8) names each writer.
    let w1: i64 = c.query_one("INSERT INTO kv VALUES (1, 10) RETURNING xmin", &[]).await.unwrap().get(0);
    let w2: i64 = c.query_one("INSERT INTO kv VALUES (2, 20) RETURNING xmin", &[]).await.unwrap().get(0);
    assert_ne!(w1, w2, "distinct writers have distinct xmins");

    // A point read, rewritten by the proxy: the extra columns are xmin and the key, as text.
    let read = rewrite("SELECT k, v FROM kv WHERE k = $1", &cat);
    assert!(read.contains("xmin::TEXT"), "{read}");
    for (k, writer) in [(1i64, w1), (2, w2)] {
        let row = c.query_one(read.as_str(), &[&k]).await.unwrap_or_else(|e| panic!("{read}: {e}"));
        assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (k, k * 10));
        assert_eq!(row.get::<_, String>(2), writer.to_string(), "xmin names the version's writer");
        assert_eq!(row.get::<_, String>(3), k.to_string(), "the key as text");
        // Stable: read again, the same version has the same tag.
        let again = c.query_one(read.as_str(), &[&k]).await.unwrap();
        assert_eq!(again.get::<_, String>(2), writer.to_string());
    }
    // The simple protocol sends the same text.
    let rows = simple_rows(&c, &read.replace("$1", "1")).await;
    assert_eq!(rows, vec![vec![Some("1".into()), Some("10".into()), Some(w1.to_string()), Some("1".into())]]);

    // An update that reads its row also returns the replaced version's xmin; the new one is its own.
    let update = rewrite("UPDATE kv SET v = v + 1 WHERE k = $1", &cat);
    assert!(update.contains("krait_old"), "{update}");
    c.batch_execute("BEGIN").await.unwrap();
    let own: i64 = c.query_one("SELECT pg_current_xact_id() FROM kv WHERE k = 1", &[]).await.unwrap().get(0);
    let row = c.query_one(update.as_str(), &[&1i64]).await.unwrap_or_else(|e| panic!("{update}: {e}"));
    c.batch_execute("COMMIT").await.unwrap();
    assert_eq!(row.len(), 3, "xmin, key, replaced xmin");
    assert_eq!(row.get::<_, String>(0), own.to_string(), "the new version is the transaction's own");
    assert_eq!(row.get::<_, String>(2), w1.to_string(), "the replaced version was w1's");
    let after = c.query_one(read.as_str(), &[&1i64]).await.unwrap();
    assert_eq!((after.get::<_, i64>(1), after.get::<_, String>(2)), (11, own.to_string()));

    // A blind write returns the replaced version too (the store's model has no read committed, so the
    // proxy's guard takes the subquery); a delete returns the deleter's transaction.
    let blind = rewrite("UPDATE kv SET v = $1 WHERE k = $2", &cat);
    let row = c.query_one(blind.as_str(), &[&5i64, &2i64]).await.unwrap_or_else(|e| panic!("{blind}: {e}"));
    assert_eq!(row.len(), 3, "xmin, key, replaced xmin");
    let blind_writer = row.get::<_, String>(0);
    assert_ne!(blind_writer, w2.to_string());
    assert_eq!(row.get::<_, String>(2), w2.to_string(), "the replaced version was w2's");
    let delete = rewrite("DELETE FROM kv WHERE k = $1", &cat);
    let row = c.query_one(delete.as_str(), &[&2i64]).await.unwrap_or_else(|e| panic!("{delete}: {e}"));
    assert_eq!(row.get::<_, String>(0), blind_writer, "the deleted version's xmin");
    assert_ne!(row.get::<_, String>(2), blind_writer, "the deleter is a transaction of its own");
    assert!(c.query_opt(read.as_str(), &[&2i64]).await.unwrap().is_none());

    // Near misses stay refused.
    for sql in [
        "SELECT kv.xmin::date FROM kv WHERE k = 1",
        "SELECT (SELECT a.xmin FROM kv AS a WHERE a.k = kv.k) FROM kv WHERE k = 1",
        "SELECT v, now() FROM kv WHERE k = 1",
    ] {
        let e = c.simple_query(sql).await.expect_err(sql);
        assert_eq!(e.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{sql}: {e}");
    }
}

/// Runs one fence as the proxy sends it (each statement on its own, COMMIT last); returns the (xmin, id)
/// rows it read and wrote, or the error.
async fn fence(
    c: &Client,
    row: i32,
    setup: bool,
) -> Result<(Vec<String>, Vec<String>), tokio_postgres::Error> {
    if setup {
        c.batch_execute("BEGIN").await?;
        for stmt in setup_sql(row).split("; ") {
            c.execute(stmt, &[]).await?;
        }
        c.batch_execute("COMMIT").await?;
    }
    let sql = fence_sql(row, FENCE_TABLE);
    let stmts: Vec<&str> = sql.split("; ").collect();
    assert_eq!(stmts.len(), 3, "BEGIN, SELECT ... FOR UPDATE, UPDATE ... RETURNING");
    c.batch_execute(stmts[0]).await?;
    let text = |r: &tokio_postgres::Row| vec![r.get::<_, String>(0), r.get::<_, String>(1)];
    let read = c.query_one(stmts[1], &[]).await?;
    let written = c.query_one(stmts[2], &[]).await?;
    c.batch_execute(FENCE_COMMIT).await?;
    Ok((text(&read), text(&written)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_chain_on_krait_fence_under_the_models_rules() {
    let (addr, store, _stop) = start(Model::Serializable).await;
    let (a, b) = (client(addr).await, client(addr).await);
    let row = 7;
    let (read1, written1) = fence(&a, row, true).await.expect("the first fence with its set-up");
    assert_eq!(read1[1], "7");
    assert_ne!(read1[0], written1[0], "the fence writes a new version");
    // The set-up again is harmless (the table exists, the row is kept), and the next fence, on another
    // connection, reads exactly the version the last one wrote.
    let (read2, written2) = fence(&b, row, true).await.expect("the second fence");
    assert_eq!(read2, written1, "fences form one read-modify-write chain");
    let epoch: i64 = a.query_one("SELECT epoch FROM krait_fence WHERE id = 7", &[]).await.unwrap().get(0);
    assert_eq!(epoch, 2);
    let (read3, _) = fence(&a, row, false).await.expect("a third fence");
    assert_eq!(read3, written2);

    // Two interleaved fences: under serializability the second commit is refused (the proxy retries later).
    let sql = fence_sql(row, FENCE_TABLE);
    let stmts: Vec<&str> = sql.split("; ").collect();
    for c in [&a, &b] {
        c.batch_execute(stmts[0]).await.unwrap();
        c.query_one(stmts[1], &[]).await.unwrap();
        c.query_one(stmts[2], &[]).await.unwrap();
    }
    a.batch_execute(FENCE_COMMIT).await.expect("the first commits");
    let e = b.batch_execute(FENCE_COMMIT).await.expect_err("the second is refused");
    assert_eq!(e.code(), Some(&SqlState::T_R_SERIALIZATION_FAILURE), "{e}");

    // The fence rows are keys of their own namespace in the store's history, named as the proxy names them.
    let h = store.history();
    assert!(h.keys.names().iter().any(|n| n.namespace == "krait_fence" && n.bytes == b"7"));
    assert!(!h.keys.names().iter().any(|n| n.namespace == "kv"), "no kv key was touched");

    // FOR UPDATE stays refused on kv, where a client would rely on a lock the store does not take; a fence
    // key beyond int4 is out of range, as on PostgreSQL.
    let e = a.simple_query("SELECT v FROM kv WHERE k = 1 FOR UPDATE").await.expect_err("refused");
    assert_eq!(e.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{e}");
    let e = a.simple_query("INSERT INTO krait_fence VALUES (3000000000, 0)").await.expect_err("refused");
    assert_eq!(e.code(), Some(&SqlState::NUMERIC_VALUE_OUT_OF_RANGE), "{e}");
    let e =
        a.simple_query("CREATE TABLE IF NOT EXISTS krait_fence (id int PRIMARY KEY)").await.expect_err("no");
    assert_eq!(e.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{e}");
}
