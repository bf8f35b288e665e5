//! `krait verify`: check a recorded history, or re-check a reject report.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use verifier::{Backend, Level, Options, Report};

use crate::cmd::history::{InputFormat, load};

/// Arguments of `krait verify`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit status: 0 if the history is accepted, 1 if it is rejected, 2 on error.")]
pub struct VerifyArgs {
    /// The history: a native or JSON Lines file, a Cobra log folder, or a PolySI text file.
    path: PathBuf,
    #[command(flatten)]
    input: InputFormat,
    /// The level to check.
    #[arg(long, value_enum, default_value_t = LevelArg::Serializable)]
    level: LevelArg,
    /// For strict serializability: commit timestamps are pushed this much later before real-time order is
    /// inferred, so clock drift between collectors never produces a false real-time edge.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    clock_drift_ms: u64,
    /// Print the report as JSON (the stable schema of crates/verifier/REPORT.md) instead of text.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file (for `--check-report` later, or to share).
    #[arg(long, value_name = "FILE")]
    report_out: Option<PathBuf>,
    /// Re-check a JSON report against the history, independently of the pipeline, instead of verifying:
    /// every stated edge must follow from the history and every cycle must close.
    #[arg(long, value_name = "FILE")]
    check_report: Option<PathBuf>,
    /// Differential mode: turn off pruning (Cobra §3.3).
    #[arg(long)]
    no_prune: bool,
    /// Differential mode: turn off coalescing of constraints (Cobra §3.2).
    #[arg(long)]
    no_coalesce: bool,
    /// Differential mode: turn off combining writes into chains (Cobra §3.1).
    #[arg(long)]
    no_combine: bool,
    /// The reachability backend used by pruning.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    reachability: BackendArg,
}

/// `--level` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LevelArg {
    /// Some total order of the committed transactions explains every read.
    Serializable,
    /// As serializable, and the order also respects real time, within the clock-drift threshold.
    StrictSerializable,
}

/// `--reachability` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum BackendArg {
    /// Choose by the shape of the graph.
    Auto,
    /// Per-chain clocks.
    ChainClocks,
    /// Bitset rows, in parallel.
    BitsetRows,
    /// A depth-first search per query (slow; for cross-checking).
    Dfs,
}

/// Runs `krait verify`.
pub fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let history = load(&args.path, args.input.format.0)?;

    if let Some(report_path) = &args.check_report {
        let text = std::fs::read_to_string(report_path)
            .with_context(|| format!("cannot read report {}", report_path.display()))?;
        let report = Report::from_json(&text)
            .with_context(|| format!("{} is not a Krait JSON report", report_path.display()))?;
        return match verifier::check_report_detailed(&history, &report) {
            Ok(summary) => {
                println!(
                    "REPORT CHECKED: {} cycle edges, {} version-order facts proved from the history, \
                     {} taken from the solver's refutation (checked for consistency only), {} omitted, \
                     {} transactions replayed",
                    summary.edges,
                    summary.derivations_proved,
                    summary.derivations_assumed,
                    summary.derivations_omitted,
                    summary.replayed
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(err) => {
                println!("REPORT REFUTED: {err}");
                Ok(ExitCode::from(1))
            }
        };
    }

    let options = Options {
        level: match args.level {
            LevelArg::Serializable => Level::Serializable,
            LevelArg::StrictSerializable => Level::StrictSerializable,
        },
        clock_drift_ms: args.clock_drift_ms,
        prune: !args.no_prune,
        coalesce: !args.no_coalesce,
        combine: !args.no_combine,
        reachability: match args.reachability {
            BackendArg::Auto => Backend::Auto,
            BackendArg::ChainClocks => Backend::ChainClocks,
            BackendArg::BitsetRows => Backend::BitsetRows,
            BackendArg::Dfs => Backend::Dfs,
        },
    };
    let report = verifier::verify(&history, &options)
        .with_context(|| format!("cannot verify {}", args.path.display()))?;

    if let Some(out) = &args.report_out {
        std::fs::write(out, report.to_json()).with_context(|| format!("cannot write {}", out.display()))?;
    }
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.render_text());
    }
    Ok(if report.is_accept() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
