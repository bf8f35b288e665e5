//! `krait bench`: the shape of the Cobra evaluation (§6), measured on our own code. Each figure writes a CSV
//! table and an SVG plot under `--out`.
//!
//! - fig5, fig7, fig8: the offline verifier on generated histories (this module).
//! - fig10: online verification capacity against round size ([`rounds`]).
//! - fig12, fig13: proxy overhead against a real PostgreSQL ([`proxy`]).

mod chart;
mod proxy;
mod rounds;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use workloads::WorkloadName;
use workloads::memory::{GenerateOptions, Interleave, generate};

use self::chart::{Axes, plot_grouped, plot_lines, plot_stacked};
use super::workload::SizeArgs;

/// Arguments of `krait bench`: verification time against history size, per workload, on generated
/// histories (the shape of Cobra Fig. 5, which plots BlindW-RW against its baselines).
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Workloads to measure, comma-separated (default: all six).
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<WorkloadName>,
    /// History sizes in transactions, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,2000,5000,10000,20000")]
    txns: Vec<u64>,
    /// Sessions per history (Cobra §6.1 used 24 clients).
    #[arg(long, default_value_t = 24)]
    clients: u32,
    /// Seed of the generated histories.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Verify each history this many times and keep the fastest run.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Once verifying one size of a workload takes longer than this many seconds, skip its larger sizes.
    #[arg(long, default_value_t = 120.0)]
    budget_s: f64,
    /// The folder for the CSV tables and SVG plots (created if missing).
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// Figures to produce, comma-separated: fig5 (verification time vs. size, `verify_time.*`), fig7 (time
    /// per verifier stage, `stage_time.*`), fig8 (differential analysis, `differential.*`), fig10 or
    /// `rounds` (online verification capacity vs. round size), fig12 or `proxy` (proxy throughput and
    /// latency, direct vs. through Krait), fig13 or `bytes` (network and history bytes per 1k transactions).
    /// Also accepted as positional arguments: `krait bench rounds`.
    #[arg(long, value_delimiter = ',')]
    figures: Vec<Figure>,
    /// The same as `--figures`, positionally (`krait bench rounds`).
    #[arg(value_name = "FIGURE", value_delimiter = ',')]
    positional_figures: Vec<Figure>,
    /// History size for fig7 (Cobra Fig. 7 uses 10k transactions).
    #[arg(long, default_value_t = 10_000)]
    stage_txns: u64,
    /// History sizes for fig8, comma-separated. The verifier has no time limit, and with a technique off it
    /// can blow up, so these default smaller than Cobra's 10k; a configuration that takes over `--budget-s`
    /// at one size skips the larger ones.
    #[arg(long, value_delimiter = ',', default_value = "1000,2000")]
    diff_txns: Vec<u64>,
    /// Round sizes for fig10 (transactions per round), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,2500,5000,10000,20000")]
    round_sizes: Vec<usize>,
    /// Transactions in fig10's generated histories (Cobra's GPU verifier could not finish 100,000 of
    /// BlindW-RW). fig10 measures the workloads of --workloads, or C-Twitter (Cobra's, from the corpus),
    /// C-RUBiS, TPC-C, BlindW-RW, BlindW-RM and chengRW when none is given.
    #[arg(long, default_value_t = 100_000)]
    blindw_txns: u64,
    #[command(flatten)]
    sizes: SizeArgs,
    /// Internal: measure only this history of fig10, as the child process `krait bench rounds` runs for
    /// each history so that each one's memory is its own.
    #[arg(long, hide = true)]
    rounds_child: Option<WorkloadName>,
    // Boxed: the proxy figures' settings would make `krait`'s command enum large for every command.
    #[command(flatten)]
    proxy: Box<proxy::ProxyArgs>,
}

/// A figure `krait bench` can produce (numbered as in Cobra §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Figure {
    /// Verification time against history size (Cobra Fig. 5).
    Fig5,
    /// Time of each verifier stage on one size (Cobra Fig. 7).
    Fig7,
    /// Verification time with each technique turned off (Cobra Fig. 8).
    Fig8,
    /// Online verification capacity against round size (Cobra Fig. 10).
    #[value(alias = "rounds")]
    Fig10,
    /// Proxy throughput and latency, direct vs. through Krait (Cobra Fig. 12).
    #[value(alias = "proxy")]
    Fig12,
    /// Network and history bytes per 1k transactions (Cobra Fig. 13).
    #[value(alias = "bytes")]
    Fig13,
}

/// The figures `krait bench` produces when none is named: those that need no database.
const DEFAULT_FIGURES: [Figure; 3] = [Figure::Fig5, Figure::Fig7, Figure::Fig8];

/// The technique configurations of the differential analysis (Cobra §6.2, Fig. 8).
const DIFF_CONFIGS: [&str; 4] = ["all-on", "no-prune", "no-coalesce", "no-combine"];

/// The verifier options for one [`DIFF_CONFIGS`] entry.
fn diff_options(config: &str) -> verifier::Options {
    let all = verifier::Options::default();
    match config {
        "no-prune" => verifier::Options { prune: false, ..all },
        "no-coalesce" => verifier::Options { coalesce: false, ..all },
        "no-combine" => verifier::Options { combine: false, ..all },
        _ => all,
    }
}

/// One fig7 row: the stage timings of one verification.
struct StagePoint {
    workload: WorkloadName,
    committed: u64,
    timings: verifier::report::Timings,
    verdict: &'static str,
}

/// One fig8 row.
struct DiffPoint {
    workload: WorkloadName,
    txns: u64,
    config: &'static str,
    verify_ms: f64,
    verdict: &'static str,
}

/// Generates the (serializable by construction) history of one workload and size.
fn generate_for(args: &BenchArgs, name: WorkloadName, txns: u64) -> anyhow::Result<history::History> {
    let opts = GenerateOptions {
        txns,
        clients: args.clients,
        seed: args.seed,
        interleave: Interleave::Random,
        fence_every: None,
    };
    Ok(generate(&args.sizes.workload(name), &opts)?.history)
}

/// One measured point.
struct BenchPoint {
    workload: WorkloadName,
    txns: u64,
    committed: u64,
    gen_ms: f64,
    verify_ms: f64,
    verdict: &'static str,
}

/// Runs `krait bench`: generates a history per workload and size, times `verifier::verify` on it, and
/// writes a CSV table and an SVG plot. Exits 1 if any generated history was not accepted (it is
/// serializable by construction, so that would be a verifier or generator bug).
pub fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if let Some(workload) = args.rounds_child {
        return rounds::child(&args, workload);
    }
    let names = if args.workloads.is_empty() { WorkloadName::ALL.to_vec() } else { args.workloads.clone() };
    let mut sizes = args.txns.clone();
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() || sizes[0] == 0 {
        anyhow::bail!("--txns needs positive sizes");
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let mut figures: Vec<Figure> = args.figures.iter().chain(&args.positional_figures).copied().collect();
    if figures.is_empty() {
        figures = DEFAULT_FIGURES.to_vec();
    }
    let mut all_accepted = true;
    if figures.contains(&Figure::Fig5) {
        all_accepted &= fig5(&args, &names, &sizes)?;
    }
    if figures.contains(&Figure::Fig7) {
        all_accepted &= fig7(&args, &names)?;
    }
    if figures.contains(&Figure::Fig8) {
        all_accepted &= fig8(&args, &names)?;
    }
    if figures.contains(&Figure::Fig10) {
        all_accepted &= rounds::fig10(&args)?;
    }
    if figures.contains(&Figure::Fig12) {
        all_accepted &= proxy::fig12(&args)?;
    }
    if figures.contains(&Figure::Fig13) {
        all_accepted &= proxy::fig13(&args)?;
    }
    Ok(if all_accepted { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Cobra Fig. 5: verification time against history size. Returns whether every history was accepted.
fn fig5(args: &BenchArgs, names: &[WorkloadName], sizes: &[u64]) -> anyhow::Result<bool> {
    println!(
        "{:<10} {:>7} {:>9} {:>10} {:>11}  verdict",
        "workload", "txns", "committed", "gen ms", "verify ms"
    );
    let mut points = Vec::new();
    for &name in names {
        let workload = args.sizes.workload(name);
        for &txns in sizes {
            let started = Instant::now();
            let opts = GenerateOptions {
                txns,
                clients: args.clients,
                seed: args.seed,
                interleave: Interleave::Random,
                fence_every: None,
            };
            let generated = generate(&workload, &opts)?;
            let gen_ms = started.elapsed().as_secs_f64() * 1e3;
            let mut verify_ms = f64::INFINITY;
            let mut verdict = "accept";
            for _ in 0..args.repeat.max(1) {
                let started = Instant::now();
                let report = verifier::verify(&generated.history, &verifier::Options::default())?;
                verify_ms = verify_ms.min(started.elapsed().as_secs_f64() * 1e3);
                if !report.is_accept() {
                    verdict = "REJECT";
                }
            }
            let committed = generated.history.stats().committed;
            println!("{name:<10} {txns:>7} {committed:>9} {gen_ms:>10.1} {verify_ms:>11.1}  {verdict}");
            points.push(BenchPoint { workload: name, txns, committed, gen_ms, verify_ms, verdict });
            if verify_ms > args.budget_s * 1e3 {
                eprintln!("{name}: {txns} transactions took over {} s; skipping larger sizes", args.budget_s);
                break;
            }
        }
    }
    let csv_path = args.out.join("verify_time.csv");
    let mut csv = String::from("workload,txns,committed,sessions,seed,gen_ms,verify_ms,verdict\n");
    for p in &points {
        csv.push_str(&format!(
            "{},{},{},{},{},{:.3},{:.3},{}\n",
            p.workload, p.txns, p.committed, args.clients, args.seed, p.gen_ms, p.verify_ms, p.verdict
        ));
    }
    std::fs::write(&csv_path, csv).with_context(|| format!("cannot write {}", csv_path.display()))?;
    let svg_path = args.out.join("verify_time.svg");
    let lines: Vec<(String, Vec<(f64, f64)>)> = WorkloadName::ALL
        .iter()
        .map(|name| {
            let line = points
                .iter()
                .filter(|p| p.workload == *name)
                .map(|p| (p.txns as f64, p.verify_ms / 1e3))
                .collect();
            (name.to_string(), line)
        })
        .collect();
    let axes = Axes {
        caption: "Verification time vs. number of transactions (generated histories)",
        x_desc: "number of transactions",
        y_desc: "verification time (s)",
        log_y: false,
    };
    plot_lines(&lines, &axes, &svg_path).with_context(|| format!("cannot draw {}", svg_path.display()))?;
    eprintln!("wrote {} and {}", csv_path.display(), svg_path.display());
    Ok(points.iter().all(|p| p.verdict == "accept"))
}

/// Cobra Fig. 7: the time of each verifier stage on one history size per workload. Returns whether every
/// history was accepted.
fn fig7(args: &BenchArgs, names: &[WorkloadName]) -> anyhow::Result<bool> {
    let txns = args.stage_txns;
    if txns == 0 {
        anyhow::bail!("--stage-txns must be positive");
    }
    println!(
        "\n{:<10} {:>7} {:>12} {:>9} {:>9} {:>10}  verdict",
        "workload", "txns", "construct ms", "prune ms", "solve ms", "report ms"
    );
    let mut points = Vec::new();
    for &name in names {
        let history = generate_for(args, name, txns)?;
        let mut best: Option<verifier::Report> = None;
        for _ in 0..args.repeat.max(1) {
            let report = verifier::verify(&history, &verifier::Options::default())?;
            let total =
                |r: &verifier::Report| r.timings.construct_ms + r.timings.prune_ms + r.timings.solve_ms;
            if best.as_ref().is_none_or(|b| total(&report) < total(b)) {
                best = Some(report);
            }
        }
        let Some(report) = best else { continue };
        let verdict = if report.is_accept() { "accept" } else { "REJECT" };
        let t = report.timings.clone();
        println!(
            "{name:<10} {txns:>7} {:>12.1} {:>9.1} {:>9.1} {:>10.1}  {verdict}",
            t.construct_ms, t.prune_ms, t.solve_ms, t.report_ms
        );
        points.push(StagePoint { workload: name, committed: history.stats().committed, timings: t, verdict });
    }
    let csv_path = args.out.join("stage_time.csv");
    let mut csv = String::from("workload,txns,committed,construct_ms,prune_ms,solve_ms,report_ms,verdict\n");
    for p in &points {
        let t = &p.timings;
        csv.push_str(&format!(
            "{},{},{},{:.3},{:.3},{:.3},{:.3},{}\n",
            p.workload, txns, p.committed, t.construct_ms, t.prune_ms, t.solve_ms, t.report_ms, p.verdict
        ));
    }
    std::fs::write(&csv_path, csv).with_context(|| format!("cannot write {}", csv_path.display()))?;
    let svg_path = args.out.join("stage_time.svg");
    let bars: Vec<(String, Vec<f64>)> = points
        .iter()
        .map(|p| {
            let t = &p.timings;
            (p.workload.to_string(), vec![t.construct_ms / 1e3, t.prune_ms / 1e3, t.solve_ms / 1e3])
        })
        .collect();
    let caption = format!("Time per verifier stage, {txns} transactions (generated histories)");
    plot_stacked(&bars, &["construct", "prune", "solve"], &caption, &svg_path)
        .with_context(|| format!("cannot draw {}", svg_path.display()))?;
    eprintln!("wrote {} and {}", csv_path.display(), svg_path.display());
    Ok(points.iter().all(|p| p.verdict == "accept"))
}

/// Cobra Fig. 8: verification time with every technique on, and with pruning, coalescing or combining
/// turned off. Returns whether every history was accepted.
fn fig8(args: &BenchArgs, names: &[WorkloadName]) -> anyhow::Result<bool> {
    let mut sizes = args.diff_txns.clone();
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() || sizes[0] == 0 {
        anyhow::bail!("--diff-txns needs positive sizes");
    }
    println!("\n{:<10} {:>7} {:<12} {:>11}  verdict", "workload", "txns", "config", "verify ms");
    let mut points = Vec::new();
    for &name in names {
        // A configuration that blew the budget at one size is not run at larger ones.
        let mut over_budget = [false; DIFF_CONFIGS.len()];
        for &txns in &sizes {
            let history = generate_for(args, name, txns)?;
            for (i, &config) in DIFF_CONFIGS.iter().enumerate() {
                if over_budget[i] {
                    continue;
                }
                let opts = diff_options(config);
                let mut verify_ms = f64::INFINITY;
                let mut verdict = "accept";
                for _ in 0..args.repeat.max(1) {
                    let started = Instant::now();
                    let report = verifier::verify(&history, &opts)?;
                    verify_ms = verify_ms.min(started.elapsed().as_secs_f64() * 1e3);
                    if !report.is_accept() {
                        verdict = "REJECT";
                    }
                }
                println!("{name:<10} {txns:>7} {config:<12} {verify_ms:>11.1}  {verdict}");
                points.push(DiffPoint { workload: name, txns, config, verify_ms, verdict });
                if verify_ms > args.budget_s * 1e3 {
                    eprintln!(
                        "{name} {config}: {txns} transactions took over {} s; skipping larger sizes",
                        args.budget_s
                    );
                    over_budget[i] = true;
                }
            }
        }
    }
    let csv_path = args.out.join("differential.csv");
    let mut csv = String::from("workload,txns,config,verify_ms,verdict\n");
    for p in &points {
        csv.push_str(&format!("{},{},{},{:.3},{}\n", p.workload, p.txns, p.config, p.verify_ms, p.verdict));
    }
    std::fs::write(&csv_path, csv).with_context(|| format!("cannot write {}", csv_path.display()))?;
    // The plot shows the largest size; a configuration skipped there gets no bar.
    let largest = sizes[sizes.len() - 1];
    let groups: Vec<(String, Vec<Option<f64>>)> = names
        .iter()
        .map(|&name| {
            let times = DIFF_CONFIGS
                .iter()
                .map(|&c| {
                    points
                        .iter()
                        .find(|p| p.workload == name && p.txns == largest && p.config == c)
                        .map(|p| p.verify_ms / 1e3)
                })
                .collect();
            (name.to_string(), times)
        })
        .collect();
    let svg_path = args.out.join("differential.svg");
    let caption = format!("Differential analysis, {largest} transactions (generated histories)");
    let axes = Axes { caption: &caption, x_desc: "workload", y_desc: "verification time (s)", log_y: false };
    plot_grouped(&groups, &DIFF_CONFIGS, &axes, &svg_path)
        .with_context(|| format!("cannot draw {}", svg_path.display()))?;
    eprintln!("wrote {} and {}", csv_path.display(), svg_path.display());
    Ok(points.iter().all(|p| p.verdict == "accept"))
}
