//! `krait`: the one binary. It only parses the command line, wires the crates together, and formats output;
//! every piece of real work lives in a library crate.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

/// Krait checks whether your database really gives you the serializable transactions it promises.
///
/// It records every transaction your clients run (as a transparent PostgreSQL proxy) and verifies that the
/// history is serializable, or strictly serializable within a clock-drift threshold. It can also verify
/// histories recorded elsewhere (Cobra logs, PolySI text).
#[derive(Debug, Parser)]
#[command(name = "krait", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Verify a recorded history: exit 0 if it is accepted, 1 if it is rejected, 2 on error.
    Verify(cmd::verify::VerifyArgs),
    /// Inspect and convert histories.
    #[command(subcommand)]
    History(cmd::history::HistoryCommand),
    /// Run the proxy and the co-located online verifier in one process: transactions are recorded and
    /// verified in rounds as they arrive; reject reports go to DATA_DIR/reports/.
    Serve(cmd::serve::ServeArgs),
    /// Run the recording proxy: clients connect to it instead of the database, and every transaction is
    /// recorded in the durable history log (verify it with `krait verify LOG_DIR`).
    Proxy(cmd::proxy::ProxyArgs),
    /// Check configuration files.
    #[command(subcommand)]
    Config(cmd::proxy::ConfigCommand),
    /// List and show the reject reports stored under a data directory (works offline).
    #[command(subcommand)]
    Report(cmd::report::ReportCommand),
    /// Run a small contended workload and verify it online as it runs: through Krait (TLS on) into the local
    /// PostgreSQL, or in the embedded reference store when there is none. Exit 0 on accept, 1 on reject.
    Demo(cmd::demo::DemoArgs),
    /// Run a workload (TPC-C, C-Twitter, C-RUBiS, BlindW) against PostgreSQL or through Krait, or generate
    /// a serializable history of it offline.
    #[command(subcommand)]
    Workload(cmd::workload::WorkloadCommand),
    /// Verification time against history size for each workload, as CSV and an SVG plot (Cobra Fig. 5).
    Bench(cmd::bench::BenchArgs),
    /// Serve the reference store (a kv-store whose consistency model is known by construction) over the
    /// PostgreSQL wire protocol; on shutdown, write the history its clients observed (--history-out).
    Refstore(cmd::refstore::RefstoreArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KRAIT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .finish()
        // sqlparser logs every SQL text it parses (at debug, through the `log` bridge), and SQL text may hold
        // passwords and values: its records never reach the output, whatever KRAIT_LOG asks for.
        .with(tracing_subscriber::filter::filter_fn(|meta| !meta.target().starts_with("sqlparser")))
        .init();
    let result = match cli.command {
        Command::Verify(args) => cmd::verify::run(args),
        Command::History(command) => cmd::history::run(command),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Proxy(args) => cmd::proxy::run(args),
        Command::Config(command) => cmd::proxy::config(command),
        Command::Report(command) => cmd::report::run(command),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Workload(command) => cmd::workload::run(command),
        Command::Bench(args) => cmd::bench::bench(args),
        Command::Refstore(args) => cmd::refstore::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("krait: error: {err:#}");
            ExitCode::from(2)
        }
    }
}
