//! Fuzzes the SQL interpreter on client text: keyword classification (`proxy::sql`), the statement planner
//! and its rewrite (`interpret::plan`). Any text must give a plan, opaque or not, never a panic; a rewrite
//! keeps every character the client wrote, in order (it only splices columns in).
//! Run with `cargo +nightly fuzz run sql_plan` from `crates/proxy`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxy::interpret::{Catalog, plan_query};

fuzz_target!(|data: &[u8]| {
    let Ok(sql) = std::str::from_utf8(data) else { return };
    let _ = proxy::sql::classify(sql.as_bytes());
    let catalog = Catalog::from_rows(vec![
        ("public".into(), "acc".into(), Some("id".into())),
        ("public".into(), "pair".into(), Some("a".into())),
        ("public".into(), "pair".into(), Some("b".into())),
        ("public".into(), "nokey".into(), None),
        ("other".into(), "acc".into(), Some("id".into())),
    ]);
    let planned = plan_query(sql, &catalog);
    if let Some(rewritten) = &planned.rewritten {
        let mut left = rewritten.chars();
        for c in sql.chars() {
            assert!(left.any(|r| r == c), "the rewrite lost {c:?} of {sql:?}: {rewritten:?}");
        }
    }
});
