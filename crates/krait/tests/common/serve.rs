//! A running `krait serve`, driven through the binary, for the end-to-end tests of `serve` and retention.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `krait serve` and the lines it writes to stderr.
pub struct Serve {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    reader: std::thread::JoinHandle<()>,
    pub seen: Vec<String>,
}

impl Serve {
    pub fn start(config: &std::path::Path, data: &std::path::Path, port: u16) -> Serve {
        Serve::start_with(config, data, port, &[])
    }

    /// As [`Serve::start`], with more arguments for `krait serve`.
    pub fn start_with(config: &std::path::Path, data: &std::path::Path, port: u16, more: &[&str]) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_krait"))
            .args(["serve", "--config", config.to_str().expect("utf-8 path")])
            .args(more)
            .args(["--data-dir", data.to_str().expect("utf-8 path"), "--status-every", "1"])
            .args(["--round-interval-ms", "200"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts krait serve");
        let (tx, lines) = mpsc::channel::<String>();
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
        Serve { child, lines, reader, seen: Vec::new() }
    }

    /// Waits (bounded) for a stderr line that satisfies `want`.
    pub fn wait_for(&mut self, what: &str, want: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                let hit = want(&line);
                self.seen.push(line);
                if hit {
                    return;
                }
            }
        }
        panic!("no line shows {what}:\n{}", self.seen.join("\n"));
    }

    /// SIGKILL, as a crash: nothing is closed or flushed. Returns every stderr line.
    pub fn kill(mut self) -> Vec<String> {
        self.child.kill().expect("kills krait serve");
        self.child.wait().expect("waits for krait serve");
        self.reader.join().expect("the stderr reader ends");
        self.seen.extend(self.lines.try_iter());
        self.seen
    }

    /// SIGTERM, then waits (bounded) for a clean exit; returns every stderr line.
    pub fn stop(mut self) -> Vec<String> {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("runs kill");
        assert!(killed.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("waits for krait serve") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                self.seen.extend(self.lines.try_iter());
                panic!("krait serve did not stop after SIGTERM:\n{}", self.seen.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        self.reader.join().expect("the stderr reader ends");
        self.seen.extend(self.lines.try_iter());
        assert!(status.success(), "krait serve exited with {status}:\n{}", self.seen.join("\n"));
        self.seen
    }
}

/// The numbers after "recorded" and "verified" in a verifier status line.
pub fn recorded_verified(line: &str) -> Option<(u64, u64)> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |w: &str| -> Option<u64> {
        let i = words.iter().position(|x| *x == w)?;
        words.get(i + 1)?.trim_end_matches(',').parse().ok()
    };
    Some((after("recorded")?, after("verified")?))
}

/// One HTTP/1.1 GET on the admin server; returns the body.
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connects to the admin server");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("sets a timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("sends");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("reads the reply");
    assert!(response.starts_with("HTTP/1.1 200"), "{path}: {response}");
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()
}

/// Runs `sql` through the proxy with psql; asserts it succeeded.
pub fn psql(port: u16, sql: &str) {
    psql_each(port, &[sql]);
}

/// Runs each of `queries` through the proxy as a query of its own, in one psql session (so that the proxy
/// can run a fence between them); asserts they all succeeded.
pub fn psql_each(port: u16, queries: &[&str]) {
    let mut psql = Command::new("psql");
    psql.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "test", "-X", "-q"])
        .args(["-v", "ON_ERROR_STOP=1"]);
    for sql in queries {
        psql.args(["-c", sql]);
    }
    let out = psql.output().expect("runs psql");
    assert!(out.status.success(), "psql through krait serve: {}", String::from_utf8_lossy(&out.stderr));
}
