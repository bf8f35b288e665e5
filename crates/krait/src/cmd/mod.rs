//! One module per subcommand.

use std::process::ExitCode;

pub mod demo;
pub mod history;
pub mod proxy;
pub mod serve;
pub mod verify;
pub mod workload;

/// Arguments of a subcommand whose issue is not done yet: it accepts anything, so that it can say so clearly.
#[derive(Debug, clap::Args)]
pub struct NotYet {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    args: Vec<String>,
}

/// Fails with a clear message for a subcommand whose issue is not done yet.
pub fn not_yet(name: &str, issue: &str) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`krait {name}` is not implemented yet (see the \"{issue}\" issue)")
}
