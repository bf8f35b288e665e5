//! What the proxy records of values (issue 18, item 1), through the real proxy, the real PostgreSQL and a
//! real driver (tokio-postgres: prepared statements, parameters and results in binary format; its simple
//! query for the text format): each statement's parameters and each mapped row's values land in the log
//! beside the ops, named by column; a long value keeps a prefix; secrets (a column in `[record] redact`,
//! anything of a statement about passwords) are hashes, in the history and in the log's bytes; and
//! `values = false` records none.

mod proxy_support;

use history::values::{TxnValues, Value};
use history::{History, Op};
use proxy_support::*;

const CARD: &str = "4111-1111-1111-1111";

/// The replayed history of the proxy's log.
async fn history_of(p: &TestProxy) -> History {
    let log = p.handle.log().clone();
    tokio::task::spawn_blocking(move || log.replay()).await.expect("join").expect("replay")
}

/// Every file's bytes under `dir`.
fn bytes_under(dir: &std::path::Path) -> Vec<u8> {
    files_under(dir).iter().flat_map(|f| std::fs::read(f).unwrap()).collect()
}

/// The row behind the first op of `h` on `table`'s key `id` that `pick` accepts, with the op's parameters.
fn row_of(
    h: &History,
    table: &str,
    id: &str,
    pick: impl Fn(&Op) -> bool,
) -> Option<(String, Option<String>)> {
    for t in &h.transactions {
        let Some(values) = t.values.as_deref() else { continue };
        for (i, op) in t.ops.iter().enumerate() {
            let Some(key) = h.keys.name(op.key()) else { continue };
            let names_row = key.namespace.ends_with(table) && key.bytes == id.as_bytes();
            if names_row && pick(op) {
                return values.describe_row(i).map(|r| (r, values.describe_params(i, op.stmt())));
            }
        }
    }
    None
}

fn values_of(h: &History) -> Vec<&TxnValues> {
    h.transactions.iter().filter_map(|t| t.values.as_deref()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_and_rows_are_recorded_by_column_bounded_and_without_secrets() {
    let table = unique_table("values");
    let d = direct().await;
    d.batch_execute(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int PRIMARY KEY, owner text, balance bigint, \
         card_number text); INSERT INTO {table} VALUES (1, 'alice', 100, '{CARD}'), (2, 'bob', 50, NULL), \
         (3, repeat('x', 400), 0, NULL)"
    ))
    .await
    .unwrap();
    let p = start_proxy_with(Opts {
        record: Some("redact = [\"Card_Number\"]\nrow_bytes = 64"),
        ..Opts::default()
    })
    .await;
    let c = p.connect().await;
    c.batch_execute("BEGIN").await.unwrap();
    let got =
        c.query(&format!("SELECT id, owner, balance FROM {table} WHERE id = $1"), &[&1i32]).await.unwrap();
    assert_eq!(got[0].get::<_, i64>(2), 100);
    c.query(&format!("UPDATE {table} SET balance = $1 WHERE id = $2 RETURNING balance"), &[&90i64, &1i32])
        .await
        .unwrap();
    c.query(&format!("SELECT * FROM {table} WHERE id = $1"), &[&1i32]).await.unwrap();
    c.batch_execute("COMMIT").await.unwrap();
    // The simple protocol: text format, names from the RowDescription of each statement.
    c.simple_query(&format!(
        "SELECT id, balance FROM {table} WHERE id = 2; SELECT owner FROM {table} WHERE id = 3"
    ))
    .await
    .unwrap();
    // A secret column a statement names: its parameters are hashes too.
    c.execute(&format!("UPDATE {table} SET card_number = $1 WHERE id = $2"), &[&CARD, &2i32]).await.unwrap();
    drop(c);
    p.wait_for(&table, 3).await;
    let h = history_of(&p).await;

    let read = |op: &Op| matches!(op, Op::Read { .. });
    let write = |op: &Op| matches!(op, Op::Write { .. });
    let (first, params) = row_of(&h, &table, "1", read).expect("the first read of row 1 has its row");
    assert_eq!(first, "id = '1', owner = 'alice', balance = '100'", "binary results decoded by type");
    assert_eq!(params.as_deref(), Some("$1 = '1'"));
    let (updated, params) = row_of(&h, &table, "1", write).expect("the update of row 1 has its row");
    assert_eq!(updated, "balance = '90'");
    assert_eq!(params.as_deref(), Some("$1 = '90', $2 = '1'"));
    let star = values_of(&h)
        .iter()
        .flat_map(|v| v.rows.iter().map(move |r| (v, r)))
        .find(|(v, r)| v.runs[r.run as usize].columns.len() == 4)
        .map(|(v, r)| (v.runs[r.run as usize].columns.clone(), r.values.clone()))
        .expect("the SELECT * row");
    assert_eq!(star.0, ["id", "owner", "balance", "card_number"]);
    assert!(matches!(&star.1[3], Value::Redacted(h) if h.starts_with("sha256:")), "{:?}", star.1);
    let (simple, params) = row_of(&h, &table, "2", read).expect("the simple query's row");
    assert_eq!(simple, "id = '2', balance = '50'");
    assert_eq!(params, None, "a simple query's literals are in its text");
    let (long, _) = row_of(&h, &table, "3", read).expect("the long row");
    assert_eq!(long, format!("owner = '{}…' (400 bytes)", "x".repeat(64)));
    let secret_params = values_of(&h)
        .iter()
        .flat_map(|v| &v.runs)
        .find(|r| r.params.len() == 2 && r.params.iter().all(|p| matches!(p, Value::Redacted(_))));
    assert!(secret_params.is_some(), "the card number's UPDATE has hashed parameters: {:?}", values_of(&h));

    // The verdict does not depend on values.
    let report = verifier::verify(&h, &verifier::Options::default()).expect("verify");
    assert!(report.is_accept(), "{report}");
    let dir = p.dir.path().join("log");
    p.handle.shutdown().await.unwrap();
    let bytes = bytes_under(&dir);
    assert!(!bytes.windows(CARD.len()).any(|w| w == CARD.as_bytes()), "the card number reached the log");
    let records = records_under(&dir);
    assert!(!records.contains(CARD), "the card number reached the log's records");
    assert!(records.contains("alice"), "values are in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_values_off_the_log_holds_ops_and_no_values() {
    let table = unique_table("values_off");
    let d = direct().await;
    d.batch_execute(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int PRIMARY KEY, owner text); \
         INSERT INTO {table} VALUES (1, 'carol')"
    ))
    .await
    .unwrap();
    let p = start_proxy_with(Opts { record: Some("values = false"), ..Opts::default() }).await;
    let c = p.connect().await;
    c.query(&format!("SELECT owner FROM {table} WHERE id = $1"), &[&1i32]).await.unwrap();
    drop(c);
    p.wait_for(&table, 1).await;
    let h = history_of(&p).await;
    assert!(h.transactions.iter().any(|t| t.ops.iter().any(|op| matches!(op, Op::Read { .. }))));
    assert!(values_of(&h).is_empty(), "{:?}", values_of(&h));
    let dir = p.dir.path().join("log");
    p.handle.shutdown().await.unwrap();
    assert!(!bytes_under(&dir).windows(5).any(|w| w == b"carol"));
    assert!(!records_under(&dir).contains("carol"), "no values in the log's records");
}

/// A write the client asked no rows of still records the row it wrote (the proxy returns it hidden, beside
/// the version columns), and only for the write: not for the version an UPDATE replaced, which it read
/// first, nor for a DELETE's tombstone. The client sees exactly what it would without the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_record_the_row_they_wrote_and_the_client_sees_no_more_than_it_asked() {
    let table = unique_table("values_w");
    let d = direct().await;
    d.batch_execute(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int PRIMARY KEY, owner text, balance bigint); \
         INSERT INTO {table} VALUES (1, 'alice', 100), (2, 'bob', 50), (3, 'carol', 0)"
    ))
    .await
    .unwrap();
    let p = start_proxy_with(Opts::default()).await;
    let c = p.connect().await;
    // Prepared statements (binary results), no RETURNING. At REPEATABLE READ an UPDATE that reads its row
    // records the version it replaced as read (at READ COMMITTED it cannot know it).
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await.unwrap();
    let n = c
        .execute(&format!("UPDATE {table} SET balance = balance + $1 WHERE id = $2"), &[&10i64, &1i32])
        .await
        .unwrap();
    assert_eq!(n, 1);
    // A client that asked for a column gets that column only.
    let rows = c
        .query(&format!("UPDATE {table} SET balance = balance * 2 WHERE id = $1 RETURNING balance"), &[&3i32])
        .await
        .unwrap();
    assert_eq!((rows.len(), rows[0].len(), rows[0].get::<_, i64>(0)), (1, 1, 0));
    c.batch_execute("COMMIT").await.unwrap();
    let n = c
        .execute(
            &format!("INSERT INTO {table} (id, owner, balance) VALUES ($1, $2, $3)"),
            &[&4i32, &"dave", &7i64],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    // The simple protocol (text results): the client gets its command tag and no rows.
    let msgs = c.simple_query(&format!("UPDATE {table} SET owner = 'bobby' WHERE id = 2")).await.unwrap();
    assert!(
        matches!(msgs.as_slice(), [tokio_postgres::SimpleQueryMessage::CommandComplete(1)]),
        "the client sees only its command's completion: {} messages",
        msgs.len()
    );
    c.execute(&format!("DELETE FROM {table} WHERE id = $1"), &[&4i32]).await.unwrap();
    drop(c);
    p.wait_for(&table, 4).await;
    let h = history_of(&p).await;

    let read = |op: &Op| matches!(op, Op::Read { .. });
    let write = |op: &Op| matches!(op, Op::Write { .. });
    let row = |id: &str, pick: &dyn Fn(&Op) -> bool| row_of(&h, &table, id, pick).map(|(r, _)| r);
    assert_eq!(row("1", &write).as_deref(), Some("id = '1', owner = 'alice', balance = '110'"));
    // The rows were loaded directly, so what it read is pre-history or an unrecorded writer's.
    let replaced = |op: &Op| matches!(op, Op::Read { .. });
    assert!(
        h.transactions
            .iter()
            .flat_map(|t| &t.ops)
            .any(|op| replaced(op) && h.keys.name(op.key()).is_some_and(|k| k.bytes == b"1")),
        "the UPDATE of row 1 read the version it replaced"
    );
    assert_eq!(row("1", &read), None, "the replaced version is not the row the UPDATE returned");
    assert_eq!(row("4", &write).as_deref(), Some("id = '4', owner = 'dave', balance = '7'"), "the INSERT");
    assert_eq!(row("2", &write).as_deref(), Some("id = '2', owner = 'bobby', balance = '50'"), "simple");
    assert_eq!(row("3", &write).as_deref(), Some("balance = '0'"), "what the client asked for");
    assert_eq!(row("3", &read), None);
    let full_rows = h
        .transactions
        .iter()
        .filter(|t| t.values.as_deref().is_some_and(|v| v.rows.iter().any(|r| r.values.len() == 3)))
        .count();
    assert_eq!(
        full_rows, 3,
        "rows with three values: the UPDATE, the INSERT and the simple UPDATE, not the DELETE"
    );
    let report = verifier::verify(&h, &verifier::Options::default()).expect("verify");
    assert!(report.is_accept(), "{report}");
    let ours = d.query(&format!("SELECT id, owner, balance FROM {table} ORDER BY id"), &[]).await.unwrap();
    assert_eq!(ours.len(), 3, "the database holds what the client wrote");
}
