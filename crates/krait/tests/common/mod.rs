//! Helpers shared by the binary's end-to-end tests.

#![allow(dead_code)]

pub mod serve;

use std::path::{Path, PathBuf};
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

/// A port on loopback that nothing listened on a moment ago.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds an ephemeral port");
    listener.local_addr().expect("has an address").port()
}

/// Writes `dir/krait.toml` for `krait serve` and returns its path: listening on `port`, in front of the
/// machine's PostgreSQL, logging to `dir/log`, with the admin server on `admin_port` (none when `None`),
/// then the sections in `more`.
pub fn write_serve_config(dir: &Path, port: u16, admin_port: Option<u16>, more: &str) -> PathBuf {
    let admin = match admin_port {
        Some(admin_port) => format!("[admin]\nenabled = true\naddress = \"127.0.0.1:{admin_port}\"\n"),
        None => "[admin]\nenabled = false\n".to_owned(),
    };
    let config = dir.join("krait.toml");
    std::fs::write(
        &config,
        format!(
            "[listen]\naddress = \"127.0.0.1:{port}\"\n[upstream]\naddress = \"127.0.0.1:5432\"\n\
             [log]\npath = \"{}\"\n{admin}{more}",
            dir.join("log").display()
        ),
    )
    .expect("writes the config");
    config
}
