//! Helpers shared by the binary's end-to-end tests.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The labelled corpus: `$KRAIT_CORPUS`, or `../shared/corpus` beside the workspace. Panics (failing the
/// test) when it is missing, because a skipped corpus check must never count as a pass.
pub fn corpus() -> PathBuf {
    let dir = match std::env::var_os("KRAIT_CORPUS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus"),
    };
    assert!(
        dir.join("README.md").is_file(),
        "the labelled corpus is missing at {} (set KRAIT_CORPUS)",
        dir.display()
    );
    dir
}

/// Runs the `krait` binary with `args`.
pub fn krait(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_krait")).args(args).output().expect("the krait binary runs")
}
