//! Fuzzes the JSON Lines history decoder: arbitrary bytes must give a history or a line-numbered error,
//! never a panic, and a decoded history must survive an encode/decode round trip.
#![no_main]

use history::codec::jsonl;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = jsonl::decode_bytes(data) {
        let again = jsonl::encode_to_vec(&h).expect("a decoded history encodes");
        assert_eq!(jsonl::decode_bytes(&again).ok(), Some(h));
    }
});
