//! `krait verify`: check a recorded history, or re-check a reject report.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use verifier::{Backend, Level, Options, Report};

use crate::cmd::history::{InputFormat, is_history_log, load, open_log};

/// Arguments of `krait verify`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit status: 0 if the history is accepted, 1 if it is rejected, 2 on error.")]
pub struct VerifyArgs {
    /// The history: a native or JSON Lines file, a Cobra log folder, or a PolySI or IsoVista text file.
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
    /// For strict serializability of a history from several collectors: clocks with an error bound of their
    /// own, as COLLECTOR=MS (comma-separated). Two timestamps of collectors a and b are then ordered only when
    /// more than error(a) + error(b) apart; a collector not named is within half of --clock-drift-ms.
    #[arg(long, value_delimiter = ',', value_name = "C=MS")]
    clock_error_ms: Vec<crate::cmd::clocks::ClockError>,
    /// For strict serializability of a history in which no transaction has timestamps (real-time order
    /// cannot be checked): accept a serializability-only answer instead of failing with exit status 2.
    #[arg(long)]
    allow_missing_timestamps: bool,
    /// Print the report as JSON (the stable schema of crates/verifier/REPORT.md) instead of text.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file (for `--check-report` later, or to share).
    #[arg(long, value_name = "FILE")]
    report_out: Option<PathBuf>,
    /// Also write the report's cycles as a Graphviz graph to this file (`dot -Tsvg FILE`).
    #[arg(long, value_name = "FILE")]
    dot: Option<PathBuf>,
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
    /// Verify round by round, N transactions per round, with fence epochs and garbage collection between
    /// rounds (Cobra §4), as `krait serve` does online. Stops at the first reject. A history log folder is
    /// then read record by record, as `krait serve` reads it, so memory holds the live transactions rather
    /// than the whole history.
    #[arg(long, value_name = "N")]
    rounds: Option<usize>,
    /// With --rounds: adapt the round size towards the best transactions per second (Cobra §6.2).
    #[arg(long, requires = "rounds")]
    adaptive: bool,
    /// With --rounds, for comparison only: collect garbage with the earlier, over-conservative rules (a kept
    /// reader keeps the writer of the superseded version it read; fences go in session order), under which
    /// the live set grows without bound.
    #[arg(long, requires = "rounds", hide = true)]
    gc_legacy_rules: bool,
    /// The reachability backend used by pruning.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    reachability: BackendArg,
}

/// `--level` values (also `krait serve --level` and `krait demo --level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LevelArg {
    /// Some total order of the committed transactions explains every read.
    Serializable,
    /// As serializable, and the order also respects real time, within the clock-drift threshold.
    StrictSerializable,
    /// Snapshot isolation (PostgreSQL's REPEATABLE READ): each transaction reads one snapshot, which includes
    /// its session's earlier transactions, and no two concurrent transactions write one key. Write skew is
    /// allowed; lost updates and long forks are not.
    SnapshotIsolation,
    /// Causal consistency: every write that happened before a transaction (by session order and reads,
    /// transitively) is visible to it, and no older version of its keys is.
    Causal,
    /// Read atomic: no fractured reads (a transaction sees all of another's writes or none of them).
    ReadAtomic,
    /// Read committed: each read returns a committed version no older than what earlier reads of the
    /// same transaction saw (Adya's PL-2 and more). Lost updates and write skew are allowed.
    ReadCommitted,
    /// Each transaction at the level it asked for, as the proxy recorded it: SERIALIZABLE as serializable,
    /// REPEATABLE READ as snapshot isolation, READ COMMITTED (and READ UNCOMMITTED, which PostgreSQL runs as
    /// READ COMMITTED) as Adya's PL-2. Transactions without a recorded level are held to serializable.
    Declared,
}

impl From<LevelArg> for Level {
    fn from(arg: LevelArg) -> Level {
        match arg {
            LevelArg::Serializable => Level::Serializable,
            LevelArg::StrictSerializable => Level::StrictSerializable,
            LevelArg::SnapshotIsolation => Level::SnapshotIsolation,
            LevelArg::Causal => Level::Causal,
            LevelArg::ReadAtomic => Level::ReadAtomic,
            LevelArg::ReadCommitted => Level::ReadCommitted,
            LevelArg::Declared => Level::Declared,
        }
    }
}

/// `--reachability` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum BackendArg {
    /// Choose by the shape of the graph (and, in a build with the `gpu` feature, fill large graphs on a
    /// CUDA device when one is present).
    Auto,
    /// Per-chain clocks.
    ChainClocks,
    /// Bitset rows, in parallel.
    BitsetRows,
    /// Chain clocks or bitset rows, filled on a CUDA device (needs a build with the `gpu` feature).
    Cuda,
    /// A depth-first search per query (slow; for cross-checking).
    Dfs,
}

/// Runs `krait verify`.
pub fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let options = options(&args);
    // A log folder is verified in rounds as `krait serve` reads it, record by record, so memory holds the
    // live set and not the whole history (loaded whole, a 10-minute log took 6.5 GB).
    if let Some(round_size) = args.rounds
        && args.check_report.is_none()
        && args.input.format.0.is_none()
        && is_history_log(&args.path)
    {
        return verify_log_in_rounds(&args, options, round_size);
    }
    let history = load(&args.path, args.input.format.0)?;

    if let Some(report_path) = &args.check_report {
        let text = std::fs::read_to_string(report_path)
            .with_context(|| format!("cannot read report {}", report_path.display()))?;
        let report = Report::from_json(&text)
            .with_context(|| format!("{} is not a Krait JSON report", report_path.display()))?;
        return match verifier::check_report_detailed(&history, &report) {
            Ok(summary) => {
                println!("REPORT CHECKED: {summary}");
                Ok(ExitCode::SUCCESS)
            }
            Err(err) => {
                println!("REPORT REFUTED: {err}");
                Ok(ExitCode::from(1))
            }
        };
    }

    let committed = history.transactions.iter().filter(|t| t.outcome == history::Outcome::Committed);
    let without_timestamps =
        committed.clone().filter(|t| t.start_ns.is_none() || t.commit_ns.is_none()).count();
    let committed = committed.count();
    check_timestamps(&args, committed, without_timestamps)?;

    let report = match args.rounds {
        None => verifier::verify(&history, &options)
            .with_context(|| format!("cannot verify {}", args.path.display()))?,
        Some(round_size) => {
            let round_options = round_options(&args, options, round_size)?;
            let outcome = verifier::verify_in_rounds(&history, &round_options)
                .with_context(|| format!("cannot verify {} in rounds", args.path.display()))?;
            // The clients' committed transactions, fences left out, as a log read in rounds counts them.
            let fences =
                history.transactions.iter().filter(|t| t.fence && t.outcome == history::Outcome::Committed);
            let committed = committed - fences.count();
            rounds_report(outcome, &round_options, committed as u64, without_timestamps as u64)
                .with_context(|| format!("cannot report on {} in rounds", args.path.display()))?
        }
    };
    write_report(&args, &report)
}

/// The one-shot options the arguments ask for.
fn options(args: &VerifyArgs) -> Options {
    Options {
        level: args.level.into(),
        clock_drift_ms: args.clock_drift_ms,
        clock_errors_ms: crate::cmd::clocks::clock_errors(&args.clock_error_ms),
        prune: !args.no_prune,
        coalesce: !args.no_coalesce,
        combine: !args.no_combine,
        reachability: match args.reachability {
            BackendArg::Auto => Backend::Auto,
            BackendArg::ChainClocks => Backend::ChainClocks,
            BackendArg::BitsetRows => Backend::BitsetRows,
            BackendArg::Cuda => Backend::Cuda,
            BackendArg::Dfs => Backend::Dfs,
        },
    }
}

/// Strict serializability needs timestamps: with none among the `committed` transactions it cannot be
/// decided, and says so unless told to settle for serializability.
fn check_timestamps(args: &VerifyArgs, committed: usize, without_timestamps: usize) -> anyhow::Result<()> {
    if matches!(args.level, LevelArg::StrictSerializable)
        && without_timestamps > 0
        && without_timestamps == committed
        && !args.allow_missing_timestamps
    {
        anyhow::bail!(
            "none of the {committed} committed transactions of {} has timestamps, so real-time order cannot be \
             checked and strict serializability cannot be decided; verify with --level serializable, or pass \
             --allow-missing-timestamps to accept a serializability-only answer",
            args.path.display()
        );
    }
    Ok(())
}

/// Prints `report` (text or JSON) and writes the files asked for; the exit status follows its verdict.
fn write_report(args: &VerifyArgs, report: &Report) -> anyhow::Result<ExitCode> {
    if let Some(out) = &args.report_out {
        std::fs::write(out, report.to_json()).with_context(|| format!("cannot write {}", out.display()))?;
    }
    if let Some(out) = &args.dot {
        std::fs::write(out, report.to_dot()).with_context(|| format!("cannot write {}", out.display()))?;
    }
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.render_text());
    }
    Ok(if report.is_accept() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Verifies the history log at `args.path` in rounds, streaming its records through the online verifier.
fn verify_log_in_rounds(args: &VerifyArgs, options: Options, round_size: usize) -> anyhow::Result<ExitCode> {
    let round_options = round_options(args, options, round_size)?;
    let path = &args.path;
    let reader = open_log(path)?;
    let read = verifier::online::verify_log_in_rounds(reader.log(), &round_options)
        .with_context(|| format!("cannot verify history log {} in rounds", path.display()))?;
    reader.close().with_context(|| format!("cannot close history log {}", path.display()))?;
    let (committed, without_timestamps) = (read.status.committed, read.status.committed_without_timestamps);
    check_timestamps(
        args,
        usize::try_from(committed).unwrap_or(usize::MAX),
        usize::try_from(without_timestamps).unwrap_or(usize::MAX),
    )?;
    let report = rounds_report(read.outcome, &round_options, committed, without_timestamps)
        .with_context(|| format!("cannot report on history log {} in rounds", path.display()))?;
    write_report(args, &report)
}

/// The options for verifying in rounds of `round_size`.
fn round_options(
    args: &VerifyArgs,
    options: Options,
    round_size: usize,
) -> anyhow::Result<verifier::RoundOptions> {
    if round_size == 0 {
        anyhow::bail!("--rounds needs a positive number of transactions per round");
    }
    if !options.level.collects_garbage() {
        eprintln!(
            "krait verify: rounds at {} keep every transaction (garbage collection is argued for \
             serializability, and for declared levels until a transaction asks for REPEATABLE READ), so each \
             round checks the whole history so far",
            options.level.name()
        );
    }
    Ok(verifier::RoundOptions {
        verify: options,
        adaptive: args.adaptive,
        gc_legacy_rules: args.gc_legacy_rules,
        ..verifier::RoundOptions::offline(round_size)
    })
}

/// Prints the rounds of `outcome` to standard error; returns the first reject's report, or the accept's,
/// over `committed` transactions of which `without_timestamps` had no timestamps.
fn rounds_report(
    outcome: verifier::RoundsOutcome,
    round_options: &verifier::RoundOptions,
    committed: u64,
    without_timestamps: u64,
) -> Result<Report, verifier::RoundsError> {
    // One line per round, so that the live set after collection can be seen to stay bounded (or not).
    for r in &outcome.rounds {
        eprintln!(
            "round {}: {} admitted, {} verified, {} deleted, {} live after collection, epoch_agree {}, \
             {:.0} ms verify + {:.0} ms collect",
            r.round, r.admitted, r.verified, r.deleted, r.live_after, r.epoch_agree, r.verify_ms, r.gc_ms
        );
        let k = &r.kept;
        if k.total() > 0 {
            eprintln!(
                "  kept: {} not old ({} unfenced), {} reached from a newer one, {} in a constraint with a newer \
                 one, {} in an entangled constraint, {} fences after a kept one, {} pinned, {} with a kept reader \
                 of a superseded version, {} frontier not base, {} constraint mates, {} not vertices",
                k.not_old,
                k.unfenced,
                k.reached_from_new,
                k.constraint_with_new,
                k.entangled_constraint,
                k.fence_order,
                k.pinned,
                k.reader_kept,
                k.not_base,
                k.constraint_mate,
                k.not_vertex
            );
        }
    }
    eprintln!(
        "{} rounds over {} transactions in {:.0} ms ({:.0} txn/s); garbage collection deleted {}, at most {} \
         live after a round, {} live at the end, {} tombstones",
        outcome.rounds.len(),
        outcome.transactions,
        outcome.elapsed_ms,
        outcome.transactions as f64 / (outcome.elapsed_ms / 1e3).max(1e-9),
        outcome.deleted,
        outcome.max_live,
        outcome.live_at_end,
        outcome.tombstones
    );
    if let Some(reason) = &outcome.gc_disabled {
        eprintln!("garbage collection was off: {reason}");
    }
    outcome.into_report(round_options, committed, without_timestamps)
}
