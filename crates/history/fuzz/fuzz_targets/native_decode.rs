//! Fuzzes the native history decoder (`history::codec::native::decode`): arbitrary bytes must give a history
//! or an error, never a panic, and a decoded history must survive an encode/decode round trip.
#![no_main]

use history::codec::native;
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    if let Ok(h) = native::decode(bytes) {
        let again = native::encode(&h).expect("a decoded history encodes");
        assert_eq!(native::decode(&again).ok(), Some(h));
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    // Checksums reject nearly all random input, so also frame the bytes as chunks with valid checksums: a
    // header with small counts taken from the first bytes, then the rest split among the sections.
    if data.len() < 6 {
        return;
    }
    let mut header = Vec::new();
    for (i, modulus) in [3u8, 3, 8, 8, 2].into_iter().enumerate() {
        header.push(data[i] % modulus);
    }
    let cut = usize::from(data[5]);
    let rest = &data[6..];
    let (keys, txns) = rest.split_at(cut.min(rest.len()));
    let mut chunks: Vec<(u8, &[u8])> = vec![(b'H', &header)];
    if header[0] > 0 {
        chunks.push((b'S', b"\x01a\x01b\x01c"));
    }
    if header[1] > 0 {
        chunks.push((b'N', b"\x00\x01t\x01u"));
    }
    if header[2] > 0 {
        chunks.push((b'K', keys));
    }
    if header[3] > 0 {
        chunks.push((b'T', txns));
    }
    check(&native::frame_chunks(&chunks));
});
