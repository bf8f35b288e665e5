//! A local `nats-server` with JetStream, for tests and benches (Debian's `nats-server` package; `scripts/test`
//! installs it). Production runs its own NATS; this only starts one on loopback for a run.

use std::io::Read;
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `nats-server` child process on loopback, killed when dropped.
pub struct LocalNats {
    child: Child,
    port: u16,
    store: PathBuf,
}

impl LocalNats {
    /// Starts one on a port the server picks itself, with JetStream storing under `store`, and waits until it
    /// answers; the error says why not (not installed, exited, not answering within 10 s, with its log's end).
    ///
    /// The server picks the port, and reports it in a ports file, so that no other test can take the port
    /// between our choosing it and the server binding it (a port we chose and freed could be bound by a
    /// parallel test's restarted server, and ours would then be answered by theirs).
    pub fn start(store: &Path) -> Result<Self, String> {
        Self::spawn(store, None)
    }

    /// Starts one on `port` (again, after [`LocalNats::kill`], with the same store).
    pub fn start_on(store: &Path, port: u16) -> Result<Self, String> {
        Self::spawn(store, Some(port))
    }

    fn spawn(store: &Path, port: Option<u16>) -> Result<Self, String> {
        std::fs::create_dir_all(store).map_err(|e| format!("cannot make {}: {e}", store.display()))?;
        let log = store.join("nats-server.log");
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p"])
            .arg(port.map_or_else(|| "-1".to_owned(), |p| p.to_string()))
            .arg("-sd")
            .arg(store)
            .arg("--ports_file_dir")
            .arg(store)
            .arg("-l")
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("nats-server is not runnable ({e}); apt-get install nats-server"))?;
        let mut nats = LocalNats { child, port: 0, store: store.to_owned() };
        let ports_file = store.join(format!("nats-server_{}.ports", nats.child.id()));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = nats.child.try_wait() {
                return Err(format!("nats-server exited ({status}) before it answered: {}", log_end(&log)));
            }
            if let Some(listening) = reported_port(&ports_file).filter(|&p| answers(p)) {
                nats.port = listening;
                return Ok(nats);
            }
            if Instant::now() > deadline {
                return Err(format!("nats-server did not answer within 10 s: {}", log_end(&log)));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Publishes `messages` (subject, headers, payload) to `stream` (created as a shipper would), each
    /// acknowledged before the next: a shipped log made by hand, for a test that needs one no shipper would
    /// make (one with a hole in it).
    pub async fn publish(
        &self,
        stream: &str,
        messages: Vec<(String, async_nats::HeaderMap, bytes::Bytes)>,
    ) -> Result<(), String> {
        let client = async_nats::connect(self.url()).await.map_err(|e| format!("cannot connect: {e}"))?;
        let js = async_nats::jetstream::new(client);
        js.get_or_create_stream(crate::message::stream_config(stream))
            .await
            .map_err(|e| format!("cannot create stream {stream}: {e}"))?;
        for (subject, headers, payload) in messages {
            js.publish_with_headers(subject.clone(), headers, payload)
                .await
                .map_err(|e| format!("cannot publish to {subject}: {e}"))?
                .await
                .map_err(|e| format!("no ack from {subject}: {e}"))?;
        }
        Ok(())
    }

    /// Kills it at once (SIGKILL), as a crash would, and returns its store for a restart.
    pub fn kill(mut self) -> PathBuf {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::take(&mut self.store)
    }
}

/// The client port a server wrote in its ports file (`{"nats":["nats://127.0.0.1:PORT"]}`), once it has.
fn reported_port(ports_file: &Path) -> Option<u16> {
    #[derive(serde::Deserialize)]
    struct Ports {
        nats: Vec<String>,
    }
    let ports: Ports = serde_json::from_slice(&std::fs::read(ports_file).ok()?).ok()?;
    ports.nats.first()?.rsplit_once(':')?.1.parse().ok()
}

/// Whether a NATS server answers on `port`: it greets every client with `INFO` at once.
fn answers(port: u16) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), Duration::from_secs(1))
    else {
        return false;
    };
    let mut greeting = [0u8; 4];
    stream.set_read_timeout(Some(Duration::from_secs(1))).is_ok()
        && stream.read_exact(&mut greeting).is_ok()
        && &greeting == b"INFO"
}

/// The last lines of a server's log, for an error that says why it did not start.
fn log_end(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

impl Drop for LocalNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
