//! A local `nats-server` with JetStream, for tests and benches (Debian's `nats-server` package; `scripts/test`
//! installs it). Production runs its own NATS; this only starts one on loopback for a run.

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
    /// Starts one on a free port with JetStream storing under `store`, and waits until it listens; the
    /// error says why not (not installed, not listening within 5 s).
    pub fn start(store: &Path) -> Result<Self, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("no free port: {e}"))?;
        Self::start_on(store, port)
    }

    /// Starts one on `port` (again, after [`LocalNats::kill`], with the same store).
    pub fn start_on(store: &Path, port: u16) -> Result<Self, String> {
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("nats-server is not runnable ({e}); apt-get install nats-server"))?;
        let nats = LocalNats { child, port, store: store.to_owned() };
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(format!("nats-server did not listen on port {port} within 5 s"));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Ok(nats)
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

impl Drop for LocalNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
