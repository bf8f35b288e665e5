//! Feeds arbitrary bytes to every parser of untrusted input: none may panic, and whatever decodes must encode
//! back to exactly the bytes it came from (so forwarding a re-encoded message could never change it).

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use wire::pg::{BackendMessage, FrontendMessage, StartupPacket, split_frame, split_startup};

fn check_stream(input: &[u8]) {
    let mut buf = BytesMut::from(input);
    while let Ok(Some(frame)) = split_frame(&mut buf, 1 << 16) {
        if let Ok(m) = FrontendMessage::decode(&frame) {
            let mut out = BytesMut::new();
            m.encode(&mut out);
            assert_eq!(&out[..], &frame.raw()[..], "frontend re-encoding differs for {m:?}");
        }
        if let Ok(m) = BackendMessage::decode(&frame) {
            assert_eq!(&m.to_bytes()[..], &frame.raw()[..], "backend re-encoding differs for {m:?}");
        }
    }
    let mut buf = BytesMut::from(input);
    if let Ok(Some(body)) = split_startup(&mut buf, 10_000)
        && let Ok(p) = StartupPacket::decode(&body)
    {
        let mut out = BytesMut::new();
        p.encode(&mut out);
        assert_eq!(&out[4..], &body[..], "startup re-encoding differs for {p:?}");
    }
}

/// Builds inputs that are framed correctly, so that the property reaches the message decoders and not only
/// the length check.
fn framed() -> impl Strategy<Value = Vec<u8>> {
    let tags = prop::sample::select(b"BCdcfDEHFPpQSXRK23GHWDIEVvnNAtS1sZT".to_vec());
    prop::collection::vec((tags, prop::collection::vec(any::<u8>(), 0..40)), 1..6).prop_map(|msgs| {
        let mut out = Vec::new();
        for (tag, body) in msgs {
            out.push(tag);
            out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
            out.extend_from_slice(&body);
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn random_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..200)) {
        check_stream(&input);
    }

    #[test]
    fn framed_random_bodies_never_panic_and_reencode_exactly(input in framed()) {
        check_stream(&input);
    }
}

#[test]
fn a_real_psql_exchange_decodes() {
    // A Parse/Bind/Describe/Execute/Sync batch as tokio-postgres sends it, then the server's replies.
    let mut client = BytesMut::new();
    for m in [
        FrontendMessage::Parse { name: "s0".into(), query: "select $1::int".into(), param_types: vec![23] },
        FrontendMessage::Bind {
            portal: Bytes::new(),
            statement: "s0".into(),
            param_formats: vec![1],
            params: vec![Some(Bytes::from_static(&[0, 0, 0, 7]))],
            result_formats: vec![1],
        },
        FrontendMessage::Execute { portal: Bytes::new(), max_rows: 0 },
        FrontendMessage::Sync,
    ] {
        m.encode(&mut client);
    }
    let mut tags = Vec::new();
    while let Some(frame) = split_frame(&mut client, 1024).unwrap() {
        tags.push(FrontendMessage::decode(&frame).unwrap().tag());
    }
    assert_eq!(tags, b"PBES");
}
