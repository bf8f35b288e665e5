//! Fuzzes the Cobra log importer on one session file's bytes, in both layouts: it must give a history or an
//! error with an offset, never a panic, and an imported history must survive the native round trip.
#![no_main]

use history::codec::{cobra, native};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for timestamped in [false, true] {
        match cobra::import_bytes(data, cobra::CobraOptions { timestamped }) {
            Ok(h) => {
                let bytes = native::encode(&h).expect("an imported history encodes");
                assert_eq!(native::decode(&bytes).ok(), Some(h));
            }
            Err(e) => assert!(e.offset.is_some_and(|o| o <= data.len() as u64), "{e}"),
        }
    }
});
