//! Fuzzes the session state machine with tagging (`proxy::machine`, `interpret::tagger`): an arbitrary
//! interleaving of client messages and database replies, each given as a direction byte and a framed
//! message, must be matched, rewritten and stripped without a panic; replies it cannot place give a desync,
//! after which it relays. The bytes of every message come from the fuzzer, so replies need not answer
//! anything.
//! Run with `cargo +nightly fuzz run session_machine` from `crates/proxy`.
#![no_main]

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use proxy::interpret::Catalog;
use proxy::interpret::shared::TaggingShared;
use proxy::interpret::tagger::Tagger;
use proxy::machine::{FrontendStep, SessionMachine};
use wire::pg::{FrontendMessage, split_frame};

fuzz_target!(|data: &[u8]| {
    let shared = Arc::new(TaggingShared::new());
    shared.set_catalog(Catalog::from_rows(vec![("public".into(), "acc".into(), Some("id".into()))]));
    if data.first().is_some_and(|b| b & 1 == 1) {
        shared.book.set_horizon(history::RecordingHorizon::from_xmin(1000));
    }
    let mut machine = SessionMachine::with_tagging(Some(Tagger::new(shared)));
    let mut rest = data.get(1..).unwrap_or_default();
    let mut clock = 0u64;
    // Each step: a direction byte (even: from the client), then one frame (tag, length, body).
    while let Some((&direction, after)) = rest.split_first() {
        let mut buf = BytesMut::from(after);
        let Ok(Some(frame)) = split_frame(&mut buf, 1 << 16) else { return };
        rest = &after[frame.raw().len()..];
        clock += 1;
        if direction % 2 == 0 {
            if let Ok(msg) = FrontendMessage::decode(&frame) {
                match machine.on_frontend(&msg, clock) {
                    FrontendStep::LearnXid => machine.learned_xid(Some(1500)),
                    FrontendStep::Forward { .. } | FrontendStep::Wait => {}
                }
            }
        } else {
            let body: Bytes = frame.body();
            let _ = machine.on_backend(frame.tag(), &body, clock);
            let _ = machine.take_discovered();
        }
    }
    let _ = machine.on_disconnect(clock + 1);
});
