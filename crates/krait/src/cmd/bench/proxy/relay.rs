//! Counting TCP relays: fig13 puts one on each leg (client to proxy, proxy to database) to count the bytes
//! that cross it, so that the proxy itself is measured unchanged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Bytes one relay has carried, in each direction.
#[derive(Debug, Default)]
pub(super) struct Traffic {
    to_server: AtomicU64,
    to_client: AtomicU64,
}

impl Traffic {
    pub(super) fn total(&self) -> u64 {
        self.to_server.load(Ordering::Relaxed) + self.to_client.load(Ordering::Relaxed)
    }
}

/// A TCP relay that counts the bytes it forwards: Cobra Fig. 13 counted bytes on the client's NIC; here a
/// relay on each leg counts what crosses it, without touching the proxy.
pub(super) struct CountingRelay {
    pub(super) addr: std::net::SocketAddr,
    pub(super) traffic: Arc<Traffic>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingRelay {
    pub(super) async fn start(target: String) -> anyhow::Result<CountingRelay> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("cannot bind a counting relay")?;
        let addr = listener.local_addr().context("counting relay has no address")?;
        let traffic = Arc::new(Traffic::default());
        let counters = traffic.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let target = target.clone();
                let counters = counters.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&target).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up = pump(cr, sw, counters.clone(), true);
                    let down = pump(sr, cw, counters, false);
                    let _ = tokio::join!(up, down);
                });
            }
        });
        Ok(CountingRelay { addr, traffic, task })
    }
}

impl Drop for CountingRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies one direction, counting; closes the write side when the read side ends.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    traffic: Arc<Traffic>,
    to_server: bool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let counter = if to_server { &traffic.to_server } else { &traffic.to_client };
        counter.fetch_add(n as u64, Ordering::Relaxed);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
