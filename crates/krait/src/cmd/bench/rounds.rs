//! Cobra Fig. 10: online verification capacity against round size.
//!
//! Two histories, each verified round by round (`verifier::verify_in_rounds`, the algorithm `krait serve`
//! runs online) at several round sizes:
//! - `cobra/scaling/twitter-100000` from the corpus (`$KRAIT_CORPUS`, or `../shared/corpus`), the history
//!   of Cobra's Fig. 10;
//! - a BlindW-RW history of 100,000 transactions generated here with a fence every [`FENCE_EVERY`]
//!   transactions per session (garbage collection needs fences, Cobra §4.2), which Cobra's GPU verifier
//!   could not finish (it ran out of memory).
//!
//! Capacity (Cobra §6.2) is the most transactions per second over round sizes; per round size it is the
//! history's transactions over the whole run's time (sustained, every round included). The table also shows
//! the live transactions after collection (the most over rounds, and at the end) and the process's peak
//! resident memory (`VmHWM`) after each run, which only grows.

use std::path::PathBuf;

use anyhow::Context;
use workloads::WorkloadName;
use workloads::memory::{GenerateOptions, Interleave, generate};

use super::BenchArgs;

/// Fences per session in the generated BlindW-RW history: one every this many transactions.
const FENCE_EVERY: u32 = 20;
/// The corpus history of Cobra Fig. 10.
const TWITTER: &str = "cobra/scaling/twitter-100000";
/// Transactions in the generated BlindW-RW history.
const BLINDW_TXNS: u64 = 100_000;

/// One measured point.
struct RoundPoint {
    history: String,
    round_size: usize,
    rounds: usize,
    verdict: &'static str,
    seconds: f64,
    capacity: f64,
    max_live: usize,
    end_live: usize,
    deleted: u64,
    peak_mib: Option<f64>,
}

/// The corpus directory: `$KRAIT_CORPUS`, or `../shared/corpus` from the current directory or from the
/// workspace root.
fn corpus() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("KRAIT_CORPUS") {
        return Ok(PathBuf::from(dir));
    }
    let candidates = [
        PathBuf::from("../shared/corpus"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus"),
    ];
    candidates.iter().find(|p| p.is_dir()).cloned().with_context(|| {
        format!(
            "the corpus is missing (looked in {}); set KRAIT_CORPUS to the corpus directory",
            candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" and ")
        )
    })
}

/// The process's peak resident memory in MiB (`VmHWM` in /proc/self/status), where Linux reports it.
fn peak_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Cobra Fig. 10 (and `krait bench rounds`): capacity in transactions per second for several round sizes.
/// Returns whether every history was accepted.
pub(super) fn fig10(args: &BenchArgs) -> anyhow::Result<bool> {
    let mut sizes = args.round_sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() || sizes[0] == 0 {
        anyhow::bail!("--round-sizes needs positive sizes");
    }
    let path = corpus()?.join(TWITTER);
    let twitter = history::codec::read_history(&path, None).with_context(|| {
        format!("cannot read {} (set KRAIT_CORPUS to the corpus directory)", path.display())
    })?;
    let opts = GenerateOptions {
        txns: BLINDW_TXNS,
        clients: args.clients,
        seed: args.seed,
        interleave: Interleave::Random,
        fence_every: Some(FENCE_EVERY),
    };
    let blindw = generate(&args.sizes.workload(WorkloadName::BlindWRw), &opts)?.history;
    let histories = [("twitter-100000".to_owned(), twitter), ("blindw-rw-100000".to_owned(), blindw)];

    println!(
        "\n{:<18} {:>10} {:>7} {:>8} {:>9} {:>10} {:>9} {:>9} {:>9} {:>10}",
        "history",
        "round size",
        "rounds",
        "verdict",
        "time (s)",
        "txn/s",
        "max live",
        "end live",
        "deleted",
        "peak MiB"
    );
    let mut points = Vec::new();
    for (name, h) in &histories {
        for &round_size in &sizes {
            let options = verifier::RoundOptions {
                round_size,
                round_interval: None,
                stop_at_first_reject: true,
                ..verifier::RoundOptions::default()
            };
            let out = verifier::verify_in_rounds(h, &options)
                .with_context(|| format!("cannot verify {name} in rounds of {round_size}"))?;
            let p = RoundPoint {
                history: name.clone(),
                round_size,
                rounds: out.rounds.len(),
                verdict: if out.is_accept() { "accept" } else { "REJECT" },
                seconds: out.elapsed_ms / 1e3,
                capacity: out.throughput(),
                max_live: out.max_live,
                end_live: out.live_at_end,
                deleted: out.deleted,
                peak_mib: peak_mib(),
            };
            println!(
                "{:<18} {:>10} {:>7} {:>8} {:>9.2} {:>10.0} {:>9} {:>9} {:>9} {:>10}",
                p.history,
                p.round_size,
                p.rounds,
                p.verdict,
                p.seconds,
                p.capacity,
                p.max_live,
                p.end_live,
                p.deleted,
                p.peak_mib.map_or("-".to_owned(), |m| format!("{m:.0}"))
            );
            let live: Vec<String> = out.rounds.iter().map(|r| r.live_after.to_string()).collect();
            println!("    live after each round's collection: {}", live.join(" "));
            points.push(p);
        }
        if let Some(best) =
            points.iter().filter(|p| &p.history == name).max_by(|a, b| a.capacity.total_cmp(&b.capacity))
        {
            println!("{name}: capacity {:.0} txn/s (round size {})", best.capacity, best.round_size);
        }
    }

    let csv_path = args.out.join("rounds.csv");
    let mut csv = String::from(
        "history,round_size,rounds,verdict,seconds,capacity_txn_per_s,max_live,end_live,deleted,peak_mib\n",
    );
    for p in &points {
        csv.push_str(&format!(
            "{},{},{},{},{:.3},{:.1},{},{},{},{}\n",
            p.history,
            p.round_size,
            p.rounds,
            p.verdict,
            p.seconds,
            p.capacity,
            p.max_live,
            p.end_live,
            p.deleted,
            p.peak_mib.map_or(String::new(), |m| format!("{m:.1}"))
        ));
    }
    std::fs::write(&csv_path, csv).with_context(|| format!("cannot write {}", csv_path.display()))?;
    let svg_path = args.out.join("rounds.svg");
    let lines: Vec<(String, Vec<(f64, f64)>)> = histories
        .iter()
        .map(|(name, _)| {
            let line = points
                .iter()
                .filter(|p| &p.history == name)
                .map(|p| (p.round_size as f64, p.capacity))
                .collect();
            (name.clone(), line)
        })
        .collect();
    plot_capacity(&lines, &svg_path).with_context(|| format!("cannot draw {}", svg_path.display()))?;
    eprintln!("wrote {} and {}", csv_path.display(), svg_path.display());
    Ok(points.iter().all(|p| p.verdict == "accept"))
}

/// Capacity against round size, one line per history.
fn plot_capacity(lines: &[(String, Vec<(f64, f64)>)], path: &std::path::Path) -> anyhow::Result<()> {
    use plotters::prelude::*;

    let points = || lines.iter().flat_map(|(_, l)| l.iter());
    let x_max = points().map(|p| p.0).fold(0.0, f64::max).max(1e-3) * 1.05;
    let y_max = points().map(|p| p.1).fold(0.0, f64::max).max(1e-3) * 1.1;
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Verification capacity vs. round size (Cobra Fig. 10)", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("round size (transactions)")
        .y_desc("capacity (txn/s)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (i, (name, series)) in lines.iter().enumerate() {
        if series.is_empty() {
            continue;
        }
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(series.clone(), color.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(series.iter().map(|&(x, y)| Circle::new((x, y), 3, color.filled())))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}
