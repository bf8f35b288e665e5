//! `krait proxy` and `krait config check`: run the recording proxy, or check its configuration.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// Arguments of `krait proxy`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Stop it with Ctrl-C or SIGTERM: open transactions are recorded and the log is closed \
                        cleanly. SIGHUP reloads the client TLS certificate and key."
)]
pub struct ProxyArgs {
    /// The configuration file (see configs/krait.toml, which documents every setting).
    #[arg(long, short, value_name = "FILE")]
    config: PathBuf,
}

/// Subcommands of `krait config`.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Check a configuration file without starting anything: syntax, values, and the TLS files it names.
    Check {
        /// The configuration file.
        file: PathBuf,
    },
}

/// Runs `krait proxy` until Ctrl-C or SIGTERM.
pub fn run(args: ProxyArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&args.config)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        eprintln!(
            "krait proxy: clients connect to {}, database at {}, history log in {} ({:?} durability)",
            config.listen.address,
            config.upstream.address,
            config.log.path.display(),
            config.log.durability
        );
        proxy::run(config, shutdown_signal()).await.context("the proxy stopped with an error")
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Loads and checks a configuration file. A configuration error names the file itself; a TLS error names
/// only the certificate or key, so it is told which configuration named that file.
pub(crate) fn load_config(file: &std::path::Path) -> anyhow::Result<proxy::Config> {
    proxy::check_config(file).map_err(|err| match err {
        proxy::ProxyError::Config(_) => anyhow::Error::new(err),
        other => anyhow::Error::new(other).context(format!("invalid configuration {}", file.display())),
    })
}

/// Runs `krait config`.
pub fn config(command: ConfigCommand) -> anyhow::Result<ExitCode> {
    match command {
        ConfigCommand::Check { file } => {
            load_config(&file)?;
            println!("{}: OK", file.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM: how `krait proxy` and `krait serve` are told to stop.
pub(crate) async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}
