//! Fuzzes the reference store's PostgreSQL front (`refstore::pg`) end to end: any bytes a client sends
//! (startup packet, messages, SQL text, parameters) are answered or refused with an error, and the
//! connection ends when the client's side closes, never with a panic or a hang. The store behind it is
//! serializable, so commits run the model's test too. An input whose first byte is even is sent after a
//! valid startup packet, so that most inputs reach the messages and the SQL.
//! Run with `cargo +nightly fuzz run pg_front` from `crates/refstore`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use refstore::pg::connection;
use refstore::{Model, SharedStore, StoreConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fuzz_target!(|data: &[u8]| {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
    rt.block_on(async {
        let Ok(store) =
            SharedStore::new(StoreConfig { model: Model::Serializable, seed: 1, fresh_view_share: 1.0 })
        else {
            return;
        };
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let front = tokio::spawn(connection(server, store));
        let (mut reader, mut writer) = tokio::io::split(&mut client);
        let send = async {
            if let Some((&first, rest)) = data.split_first()
                && first % 2 == 0
            {
                let _ = writer.write_all(&startup_packet()).await;
                let _ = writer.write_all(rest).await;
            } else {
                let _ = writer.write_all(data).await;
            }
            let _ = writer.shutdown().await;
        };
        let drain = async {
            let mut sink = Vec::new();
            let _ = reader.read_to_end(&mut sink).await;
        };
        tokio::join!(send, drain);
        let _ = front.await;
    });
});

/// A protocol 3.0 startup packet for user and database `test`.
fn startup_packet() -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for (k, v) in [("user", "test"), ("database", "test")] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut packet = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    packet.extend(body);
    packet
}
