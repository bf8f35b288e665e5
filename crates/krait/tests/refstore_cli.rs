//! `krait refstore` through the binary: psql runs transactions on it, SIGTERM stops it and it writes the
//! history its clients observed, and `krait verify` accepts that history under serializability and rejects
//! it under a weak model with forced contention.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::krait;

struct Refstore {
    child: Child,
    port: u16,
    lines: mpsc::Receiver<String>,
}

impl Refstore {
    fn start(args: &[&str]) -> Refstore {
        let mut child = Command::new(env!("CARGO_BIN_EXE_krait"))
            .args(["refstore", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts krait refstore");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let first =
            lines.recv_timeout(Duration::from_secs(30)).expect("krait refstore says where it listens");
        let port = first
            .split("listening on 127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {first:?}"));
        Refstore { child, port, lines }
    }

    /// Runs psql with each command as one `-c`, on one connection; returns stdout, failing on error.
    fn psql(&self, commands: &[&str]) -> String {
        let mut cmd = Command::new("psql");
        cmd.args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "test", "-d", "test"]);
        for c in commands {
            cmd.args(["-c", c]);
        }
        let out = cmd.output().expect("psql must be installed for this test");
        assert!(out.status.success(), "psql {commands:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// SIGTERM, then a bounded wait for a clean exit; returns the rest of stderr.
    fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("runs kill");
        assert!(killed.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("waits") {
                break status;
            }
            assert!(Instant::now() < deadline, "krait refstore did not stop after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        };
        let rest: Vec<String> = self.lines.try_iter().collect();
        assert!(status.success(), "krait refstore exited with {status}: {rest:?}");
        rest.join("\n")
    }
}

#[test]
fn help_explains_the_front_and_the_history() {
    let out = krait(&["refstore", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in ["--listen", "--model", "--seed", "--history-out", "40001", "0A000", "krait verify"] {
        assert!(help.contains(needle), "--help does not mention {needle}:\n{help}");
    }
}

#[test]
fn a_serializable_store_records_a_history_that_verify_accepts() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = dir.path().join("ser.native");
    let server =
        Refstore::start(&["--model", "ser", "--seed", "7", "--history-out", out.to_str().expect("utf-8")]);
    server.psql(&["INSERT INTO kv (k, v) VALUES (1, 100), (2, 100)"]);
    for _ in 0..3 {
        server.psql(&[
            "BEGIN",
            "UPDATE kv SET v = v - 10 WHERE k = 1",
            "UPDATE kv SET v = v + 10 WHERE k = 2",
            "COMMIT",
        ]);
    }
    assert_eq!(server.psql(&["SELECT v FROM kv WHERE k = 1"]), "70\n");
    let said = server.stop();
    assert!(said.contains("history written to"), "{said}");
    let verdict = krait(&["verify", out.to_str().expect("utf-8")]);
    assert_eq!(
        verdict.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&verdict.stdout),
        String::from_utf8_lossy(&verdict.stderr)
    );
}

#[test]
fn a_consistent_prefix_store_with_stale_views_records_lost_updates_that_verify_rejects() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = dir.path().join("cp.jsonl");
    let server = Refstore::start(&[
        "--model",
        "cp",
        "--seed",
        "3",
        "--fresh-view-share",
        "0",
        "--history-out",
        out.to_str().expect("utf-8"),
    ]);
    server.psql(&["INSERT INTO kv VALUES (1, 0)"]);
    // Each psql run is a new client whose view may be any prefix of the commit order: increments read
    // stale values and overwrite each other.
    for _ in 0..8 {
        server.psql(&["UPDATE kv SET v = v + 1 WHERE k = 1"]);
    }
    server.stop();
    let text = std::fs::read_to_string(&out).expect("the history was written");
    assert!(text.starts_with('{'), "--history-out FILE.jsonl writes JSON Lines");
    let verdict = krait(&["verify", out.to_str().expect("utf-8")]);
    assert_eq!(
        verdict.status.code(),
        Some(1),
        "{}{}",
        String::from_utf8_lossy(&verdict.stdout),
        String::from_utf8_lossy(&verdict.stderr)
    );
}
