//! Fuzzes the durable log's record decoder (`history::log::LogRecord::decode`): arbitrary bytes must give a
//! record or an error, never a panic, and whatever decodes must survive an encode/decode round trip.
#![no_main]

use history::LogRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(record) = LogRecord::decode(data) {
        let bytes = record.encode().expect("a decoded record encodes");
        assert_eq!(LogRecord::decode(&bytes).ok(), Some(record));
    }
    // The checksum rejects nearly all random input, so also try the bytes as a payload behind a valid
    // header; that is where the postcard decoder sees them.
    // Behind a compressed record's header (zstd, or LZ4 as older logs hold), the decompressor sees them first.
    use history::log::{FORMAT_VERSION, LZ4_FORMAT_VERSION, ZSTD_FORMAT_VERSION};
    for version in [FORMAT_VERSION, LZ4_FORMAT_VERSION, ZSTD_FORMAT_VERSION] {
        let framed = history::log::record::frame(version, data);
        if let Ok(record) = LogRecord::decode(&framed) {
            let bytes = record.encode().expect("a decoded record encodes");
            assert_eq!(LogRecord::decode(&bytes).ok(), Some(record));
        }
    }
});
