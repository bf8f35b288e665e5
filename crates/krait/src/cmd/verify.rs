//! `krait verify`: check a recorded history.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `krait verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The history: a native or JSON Lines file, a Cobra log folder, or a PolySI text file.
    path: PathBuf,
}

/// Runs `krait verify`.
pub fn run(_args: VerifyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`krait verify` is not implemented yet (see the \"verifier\" issue)")
}
