//! Fuzzes every PostgreSQL parser: the frame splitter, startup packets, and frontend and backend messages.
//! Run with `cargo +nightly fuzz run pg_messages` from `crates/wire`.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use wire::pg::{BackendMessage, FrontendMessage, StartupPacket, split_frame, split_startup};

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = split_frame(&mut buf, 1 << 20) {
        if let Ok(m) = FrontendMessage::decode(&frame) {
            let mut out = BytesMut::new();
            m.encode(&mut out);
            assert_eq!(&out[..], &frame.raw()[..]);
        }
        if let Ok(m) = BackendMessage::decode(&frame) {
            assert_eq!(&m.to_bytes()[..], &frame.raw()[..]);
        }
    }
    let mut buf = BytesMut::from(data);
    if let Ok(Some(body)) = split_startup(&mut buf, 10_000) {
        let _ = StartupPacket::decode(&body);
    }
});
