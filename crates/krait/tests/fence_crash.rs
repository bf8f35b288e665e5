//! A proxy that dies after the database committed one of its fences, and before the fence's outcome was
//! logged: the fence's intent is in the log (the proxy logs it, durably, before sending the fence's
//! COMMIT), so the next run's first fence, which reads the version the lost fence wrote, continues the
//! chain of epochs, and garbage collection goes on. Without the intent, that read has no recorded writer,
//! epochs cannot be trusted, and collection stops for good.
//!
//! The crash is made deterministic: between two runs of `krait serve`, the test runs the fence's
//! statements on the database itself, logs what the proxy logs before the COMMIT (or nothing, for the
//! contrast), and leaves the log as a crash leaves it.

mod common;

use std::path::Path;
use std::process::Command;

use common::serve::{Serve, psql_each};
use common::{free_port, write_serve_config};
use history::log::{HistoryLog, LoggedTxn};
use history::{DiskLog, Durability, LogRecord, Outcome, SessionId};
use proxy::interpret::fence::{FENCE_TABLE, fence_ops, fence_row_of, fence_statements};
use proxy::interpret::versions::{VersionBook, key_name, version_id};

/// Runs the fence on row `row` straight on the database and returns the `xmin`s of the version it read
/// and of the one it wrote.
fn fence_behind_the_proxy(row: i32) -> (String, String) {
    let out = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", "5432", "-U", "postgres", "-d", "test", "-X", "-q", "-A", "-t"])
        .args(["-v", "ON_ERROR_STOP=1", "-c", "BEGIN"])
        .args(["-c", &format!("SELECT xmin::text FROM {FENCE_TABLE} WHERE id = {row} FOR UPDATE")])
        .args([
            "-c",
            &format!("UPDATE {FENCE_TABLE} SET epoch = epoch + 1 WHERE id = {row} RETURNING xmin::text"),
        ])
        .args(["-c", "COMMIT"])
        .output()
        .expect("runs psql");
    assert!(out.status.success(), "the fence on the database: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let xmins: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let [read, written] = xmins[..] else { panic!("two xmins, not {text:?}") };
    (read.to_owned(), written.to_owned())
}

/// Leaves the log at `log` as a proxy killed after its fence committed leaves it: with the fence's intent
/// and transaction id and no outcome when `intent`, with nothing at all otherwise (as before the proxy
/// logged fence intents).
fn crash_after_a_committed_fence(log: &Path, intent: bool) {
    let disk = DiskLog::open(log, Durability::Strict).expect("opens the log");
    // What the proxy logged of its own fences: every one that committed, an intent first.
    let (mut intents, mut whole) = (0, 0);
    for item in history::log::resolved(disk.tail(0)) {
        match item.expect("a readable record").1 {
            LogRecord::Intent(txn) if txn.fence => intents += 1,
            LogRecord::Finished { txn, outcome: Outcome::Committed, .. } if txn.fence => whole += 1,
            _ => {}
        }
    }
    assert!(intents > 0 && whole == 0, "{intents} fence intents, {whole} committed fences logged whole");
    let row = fence_row_of(&disk, 0).expect("the log's fence row");
    assert_ne!(row, 0, "the first run stored its fence row");
    let (read, written) = fence_behind_the_proxy(row);
    if intent {
        let book = VersionBook::new();
        let key = key_name(FENCE_TABLE, &[row.to_string().as_bytes()]);
        book.insert(version_id(&key, read.as_bytes()));
        // A transaction id of its own (the log refuses one an earlier run may have used), in a session
        // no run uses.
        let id = disk.txn_id_floor();
        let mut txn = LoggedTxn::new(id, SessionId(u64::MAX >> 1), 0);
        let row_id = row.to_string();
        txn.ops = fence_ops(
            [read.as_bytes(), row_id.as_bytes()],
            [written.as_bytes(), row_id.as_bytes()],
            false,
            &book,
        );
        txn.statements = fence_statements(row, FENCE_TABLE);
        txn.fence = true;
        disk.append_intent(txn).expect("appends the intent").wait().expect("durable");
        let xid: u32 = written.parse().expect("an xid");
        disk.append_xids(id, Some(xid), vec![xid]).expect("appends its id").wait().expect("durable");
    }
    disk.drop_as_if_crashed();
}

#[test]
fn a_fence_committed_as_the_proxy_died_keeps_garbage_collection_going() {
    let table = format!("krait_fence_crash_{}", std::process::id());
    let update = format!("BEGIN; UPDATE {table} SET v = v + 1 WHERE k = 1; COMMIT;");
    let updates = vec![update.as_str(); 12];
    for intent in [true, false] {
        let dir = tempfile::tempdir().expect("a temp dir");
        let port = free_port();
        let config = write_serve_config(dir.path(), port, None, "[fence]\nevery = 2\nmin_interval_ms = 0\n");
        let data = dir.path().join("data");
        let mut outputs = Vec::new();
        for run in 0..2 {
            let mut serve = Serve::start_with(&config, &data, port, &["--level", "serializable"]);
            serve.wait_for("the verifier to start", |line| line.contains("krait serve: the verifier"));
            if run == 0 {
                psql_each(
                    port,
                    &[
                        &format!(
                            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k int primary key, v int);"
                        ),
                        &format!("BEGIN; INSERT INTO {table} VALUES (1, 0); COMMIT;"),
                    ],
                );
            }
            psql_each(port, &updates);
            outputs.extend(serve.stop());
            if run == 0 {
                crash_after_a_committed_fence(&dir.path().join("log"), intent);
            }
        }
        let all = outputs.join("\n");
        let out = common::krait(&["verify", "--rounds", "4", &dir.path().join("log").display().to_string()]);
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("ACCEPT"), "{text}");
        if intent {
            assert!(!all.contains("garbage collection stopped"), "{all}");
            assert!(
                !text.contains("garbage collection was off"),
                "one chain of epochs across the crash:\n{text}"
            );
        } else {
            assert!(
                all.contains("garbage collection stopped") || text.contains("garbage collection was off"),
                "without the intent the next fence reads a version no fence recorded:\n{all}\n{text}"
            );
        }
    }
    psql_each(5432, &[&format!("DROP TABLE IF EXISTS {table};")]);
}
