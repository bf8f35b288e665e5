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
    /// Write a self-signed certificate and key for TLS towards clients (`[tls] cert` and `key`), and print
    /// the certificate's SHA-256 fingerprint, which clients can check or pin. For production, a certificate
    /// from your own CA is better: clients can then verify it with sslmode=verify-full.
    InitTls {
        /// The directory for `server.crt` and `server.key` (created with mode 0700 if missing; the key is
        /// written with mode 0600).
        dir: PathBuf,
        /// A name the certificate is for: a DNS name or an IP address, as clients connect to the proxy.
        /// Repeat for several. Default: localhost and 127.0.0.1.
        #[arg(long = "name", value_name = "NAME")]
        names: Vec<String>,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
    },
}

/// Runs `krait proxy` until Ctrl-C or SIGTERM.
pub fn run(args: ProxyArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&args.config)?;
    let runtime = config.listen.runtime().context("cannot start the async runtime")?;
    runtime.block_on(async {
        eprintln!(
            "krait proxy: clients connect to {}, database at {}, history log in {} (durability {})",
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
        ConfigCommand::InitTls { dir, names, force } => init_tls(&dir, names, force),
    }
}

/// `krait config init-tls`: a self-signed pair, the key readable by its owner only.
fn init_tls(dir: &std::path::Path, names: Vec<String>, force: bool) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};

    let names = if names.is_empty() { vec!["localhost".to_owned(), "127.0.0.1".to_owned()] } else { names };
    let pair = rcgen::generate_simple_self_signed(names.clone())
        .with_context(|| format!("cannot make a certificate for {names:?}"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
    let write = |path: &std::path::Path, mode: u32, text: &str| -> anyhow::Result<()> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).mode(mode);
        if force {
            options.create(true).truncate(true);
        } else {
            options.create_new(true);
        }
        let mut file = options.open(path).with_context(|| {
            format!("cannot write {} (pass --force to replace an existing file)", path.display())
        })?;
        file.write_all(text.as_bytes()).with_context(|| format!("cannot write {}", path.display()))
    };
    write(&key, 0o600, &pair.signing_key.serialize_pem())?;
    write(&cert, 0o644, &pair.cert.pem())?;
    let digest = ring::digest::digest(&ring::digest::SHA256, pair.cert.der());
    let fingerprint: Vec<String> = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
    println!("wrote {} and {} for {}", cert.display(), key.display(), names.join(", "));
    println!("SHA-256 fingerprint: {}", fingerprint.join(":"));
    println!(
        "in the proxy's configuration:\n[tls]\nmode = \"require\"\ncert = \"{}\"\nkey = \"{}\"",
        cert.display(),
        key.display()
    );
    Ok(ExitCode::SUCCESS)
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
