//! `krait bench fig12` and `fig13` end to end against the local PostgreSQL (127.0.0.1:5432, trust, user
//! postgres, database test): each point is measured, each history the proxy recorded is verified, and the
//! counting relays see the proxy forward a client's bytes unchanged when tagging is off.

mod common;

use common::krait;

/// Both tests drive BlindW-RW on the same schema; run concurrently, each proxy would see the other's writes
/// as unrecorded versions and (rightly) reject its history as stale reads.
static SHARED_SCHEMA: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// The value of `column` in a CSV row, by the header.
fn field<'a>(header: &str, row: &'a str, column: &str) -> &'a str {
    let i = header.split(',').position(|c| c == column).unwrap_or_else(|| panic!("no column {column}"));
    row.split(',').nth(i).unwrap_or_else(|| panic!("row {row} has no column {column}"))
}

#[test]
fn fig12_measures_every_path_side_by_side_and_verifies_what_the_proxy_recorded() {
    let _serial = SHARED_SCHEMA.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = krait(&[
        "bench",
        "proxy",
        "--proxy-workload",
        "blindw-rw",
        "--keys",
        "300",
        "--proxy-clients",
        "2",
        "--proxy-seconds",
        "1",
        "--proxy-configs",
        "direct,off,xmin-fence",
        "--warmup-s",
        "0",
        "--out",
        d,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    let csv = std::fs::read_to_string(dir.path().join("proxy_overhead.csv")).unwrap();
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 3, "{csv}");
    let paths: Vec<&str> = rows.iter().map(|r| field(header, r, "path")).collect();
    assert_eq!(paths, ["direct", "off", "xmin-fence"], "{csv}");
    assert_eq!(field(header, rows[0], "verdict"), "-", "nothing is recorded directly: {csv}");
    for &row in &rows[1..] {
        assert_eq!(field(header, row, "verdict"), "accept", "{csv}");
        let committed: u64 = field(header, row, "committed").parse().unwrap();
        let recorded: u64 = field(header, row, "recorded_committed").parse().unwrap();
        assert!(committed > 0 && recorded >= committed, "every committed transaction is recorded: {csv}");
        let tps_ratio: f64 = field(header, row, "tps_ratio").parse().unwrap();
        assert!(tps_ratio > 0.0, "{csv}");
    }
    // Tagging records row operations; with it off only statements are recorded.
    assert_eq!(field(header, rows[1], "reads"), "0", "{csv}");
    assert!(field(header, rows[2], "reads").parse::<u64>().unwrap() > 0, "{csv}");
    for svg in ["proxy_p50.svg", "proxy_p99.svg", "proxy_tps.svg"] {
        let svg = std::fs::read_to_string(dir.path().join(svg)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("xmin-fence"));
    }
}

#[test]
fn fig13_counts_both_legs_and_the_proxy_adds_bytes_only_when_tagging() {
    let _serial = SHARED_SCHEMA.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = krait(&[
        "bench",
        "bytes",
        "--workloads",
        "blindw-rw",
        "--keys",
        "300",
        "--bytes-txns",
        "200",
        "--bytes-clients",
        "4",
        "--bytes-configs",
        "off,xmin-fence",
        "--warmup-s",
        "0",
        "--out",
        d,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    let csv = std::fs::read_to_string(dir.path().join("bytes.csv")).unwrap();
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 2, "{csv}");
    let bytes = |row: &str, column: &str| field(header, row, column).parse::<u64>().unwrap();
    for &row in &rows {
        assert_eq!(field(header, row, "verdict"), "accept", "{csv}");
        assert!(bytes(row, "client_bytes") > 0 && bytes(row, "native_bytes") > 0, "{csv}");
    }
    // Tagging off: the proxy relays the protocol as it is, plus, per session, its one question at startup
    // (`SHOW default_transaction_isolation` and its answer, about 280 bytes: the level each transaction runs
    // at is recorded whatever the tagging) and a Terminate of its own at most.
    let (client, db) = (bytes(rows[0], "client_bytes"), bytes(rows[0], "db_bytes"));
    let per_session = 320;
    assert!(db.abs_diff(client) <= 64 + 4 * per_session, "off: client leg {client}, database leg {db}");
    // Tagging on: version columns, RETURNING and fences cross the database leg only.
    let (client, db) = (bytes(rows[1], "client_bytes"), bytes(rows[1], "db_bytes"));
    assert!(db > client, "xmin-fence: client leg {client}, database leg {db}");
    assert!(bytes(rows[1], "fences") > 0, "{csv}");
    let svg = std::fs::read_to_string(dir.path().join("bytes.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("blindw-rw"));
}
