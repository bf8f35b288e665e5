//! Fuzzes result stripping (`interpret::strip`), which takes the extra version columns off every DataRow a
//! rewritten statement returns: any body must give the client's row and the extras, or an error, never a
//! panic, and the two parts together hold every value.
//! Run with `cargo +nightly fuzz run strip` from `crates/proxy`.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use proxy::interpret::strip::split_data_row;

fuzz_target!(|data: &[u8]| {
    let Some((&extra, body)) = data.split_first() else { return };
    let body = Bytes::copy_from_slice(body);
    if let Ok((kept, extras)) = split_data_row(&body, usize::from(extra % 8)) {
        assert_eq!(extras.len(), usize::from(extra % 8));
        assert!(kept.len() <= body.len());
    }
});
