//! `krait`: the one binary. It only parses the command line, wires the crates together, and formats output;
//! every piece of real work lives in a library crate.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

/// mimalloc rather than glibc's malloc. Verification in rounds allocates and frees per-round maps of every
/// live transaction, and glibc spent its time consolidating and kept freed memory: on the same machine,
/// runs alternated, `krait bench rounds` on TPC-C ran at 15.5k txn/s under glibc and 25.5k under mimalloc,
/// `krait serve` held 458 MB after 83k pgbench transactions under glibc and 299 MB after 88k under mimalloc,
/// and pgbench select-only through `krait proxy` gained 6–8% (docs/benchmarks.md, "Allocator"). Plain
/// blocks where their alignment is enough (the `allocator` crate).
#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;

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
    /// List, show, re-check and replay the reject reports stored under a data directory (works offline).
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

/// The exit status after stdout's reader went away: what a process killed by SIGPIPE reports to a shell.
const BROKEN_PIPE_STATUS: i32 = 128 + 13;

fn main() -> ExitCode {
    exit_quietly_when_stdout_closes();
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
        // sqlparser logs every SQL text it parses (at debug, through the `log` bridge), and sled logs the bytes
        // of every history-log record it stores (at trace, as lists of decimal bytes: statement texts and the
        // values clients read and wrote). SQL text may hold passwords and values: those records never reach
        // the output, whatever KRAIT_LOG asks for.
        .with(tracing_subscriber::filter::filter_fn(|meta| {
            let target = meta.target();
            !(target.starts_with("sqlparser")
                || (target.starts_with("sled") && *meta.level() == tracing::Level::TRACE))
        }))
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
        Err(err) if is_broken_pipe(&err) => std::process::exit(BROKEN_PIPE_STATUS),
        Err(err) => {
            eprintln!("krait: error: {}", error_chain(&err));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line, each said once. Many error types print their cause inside their own
/// message *and* return it as their `source()`; walking the chain as `{:#}` does would then say every cause
/// twice, so a cause that its parent's message already ends with is left out.
fn error_chain(err: &anyhow::Error) -> String {
    let mut chain = err.chain().map(|cause| cause.to_string());
    let mut line = chain.next().unwrap_or_default();
    let mut parent = line.clone();
    for cause in chain {
        if !parent.ends_with(&cause) {
            line.push_str(": ");
            line.push_str(&cause);
        }
        parent = cause;
    }
    line
}

/// Rust ignores SIGPIPE, so once the reader of stdout has gone (`krait verify H --json | head`) every
/// `println!` panics. Nothing is left to tell that reader, so such a panic ends the process quietly, with the
/// status a shell expects of a command whose pipe closed; every other panic is reported as before.
fn exit_quietly_when_stdout_closes() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(BROKEN_PIPE_STATUS);
        }
        report(info);
    }));
}

/// Whether an error is a write to a pipe whose reader has gone.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
