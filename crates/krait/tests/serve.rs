//! `krait serve` through the binary, in front of the machine's PostgreSQL: psql runs transactions through
//! it, the co-located verifier's status lines show it caught up, and SIGTERM stops both cleanly.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds an ephemeral port");
    listener.local_addr().expect("has an address").port()
}

/// The numbers after "recorded" and "verified" in a verifier status line.
fn recorded_verified(line: &str) -> Option<(u64, u64)> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |w: &str| -> Option<u64> {
        let i = words.iter().position(|x| *x == w)?;
        words.get(i + 1)?.trim_end_matches(',').parse().ok()
    };
    Some((after("recorded")?, after("verified")?))
}

#[test]
fn serve_verifies_psql_transactions_online_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let port = free_port();
    let config = dir.path().join("krait.toml");
    std::fs::write(
        &config,
        format!(
            "[listen]\naddress = \"127.0.0.1:{port}\"\n[upstream]\naddress = \"127.0.0.1:5432\"\n\
             [log]\npath = \"{}\"\n[admin]\nenabled = false\n",
            dir.path().join("log").display()
        ),
    )
    .expect("writes the config");
    let data = dir.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_krait"))
        .args(["serve", "--config", config.to_str().expect("utf-8 path")])
        .args(["--data-dir", data.to_str().expect("utf-8 path"), "--status-every", "1"])
        .args(["--round-interval-ms", "200"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts krait serve");
    let (tx, rx) = mpsc::channel::<String>();
    let stderr = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });

    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "krait serve did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
    let table = format!("krait_serve_{}", std::process::id());
    let sql = format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k int primary key, v int);\n\
         BEGIN; INSERT INTO {table} VALUES (1, 1); COMMIT;\n\
         BEGIN; UPDATE {table} SET v = v + 1 WHERE k = 1; COMMIT;\n\
         BEGIN; UPDATE {table} SET v = v + 1 WHERE k = 1; ROLLBACK;\n\
         SELECT v FROM {table} WHERE k = 1;\nDROP TABLE {table};\n"
    );
    let psql = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "test", "-X", "-q"])
        .args(["-v", "ON_ERROR_STOP=1", "-t", "-A", "-c", &sql])
        .output()
        .expect("runs psql");
    assert!(psql.status.success(), "psql through krait serve: {}", String::from_utf8_lossy(&psql.stderr));
    assert_eq!(String::from_utf8_lossy(&psql.stdout).trim(), "2");

    // A status line must show the verifier caught up: at least the three explicit transactions recorded,
    // and every recorded one verified.
    let mut seen = Vec::new();
    let mut caught_up = false;
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline && !caught_up {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            if line.contains("verifier:")
                && let Some((recorded, verified)) = recorded_verified(&line)
            {
                caught_up = recorded >= 3 && verified == recorded;
            }
            seen.push(line);
        }
    }
    assert!(caught_up, "no status line shows the verifier caught up:\n{}", seen.join("\n"));

    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("runs kill");
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waits for krait serve") {
            break status;
        }
        assert!(Instant::now() < deadline, "krait serve did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    reader.join().expect("the stderr reader ends");
    seen.extend(rx.try_iter());
    assert!(status.success(), "krait serve exited with {status}:\n{}", seen.join("\n"));
    let last = seen.iter().find(|l| l.contains("stopped; verifier:")).expect("a final status line");
    let (recorded, verified) = recorded_verified(last).expect("numbers in the final line");
    assert!(recorded >= 3 && verified == recorded, "{last}");
    assert!(!seen.iter().any(|l| l.contains("REJECT")), "{}", seen.join("\n"));
    assert!(data.join("reports").is_dir(), "the reports directory exists");
}
