//! Fuzzes the PolySI/IsoVista text importer: arbitrary bytes must give a history or a line-numbered error,
//! never a panic, and an imported history must survive the native round trip.
#![no_main]

use history::codec::{native, polysi};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match polysi::import_bytes(data) {
        Ok(h) => {
            let bytes = native::encode(&h).expect("an imported history encodes");
            assert_eq!(native::decode(&bytes).ok(), Some(h));
        }
        Err(e) => assert!(e.line >= 1 && e.line <= data.len() + 1, "{e}"),
    }
});
