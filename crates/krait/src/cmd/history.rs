//! `krait history`: inspect and convert histories.

use std::path::PathBuf;
use std::process::ExitCode;

/// Subcommands of `krait history`.
#[derive(Debug, clap::Subcommand)]
pub enum HistoryCommand {
    /// Print counts: sessions, transactions, reads, writes, keys, fence ops.
    Stats {
        /// The history to read.
        path: PathBuf,
    },
}

/// Runs `krait history`.
pub fn run(_command: HistoryCommand) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`krait history` is not implemented yet")
}
