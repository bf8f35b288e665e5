//! Cobra Fig. 10: online verification capacity against round size.
//!
//! Three histories, each verified round by round (`verifier::verify_in_rounds`, the algorithm `krait serve`
//! runs online) at several round sizes:
//! - `cobra/scaling/twitter-100000` from the corpus (`$KRAIT_CORPUS`, or `../shared/corpus`), the history
//!   of Cobra's Fig. 10;
//! - a BlindW-RW history of 100,000 transactions (`--blindw-txns`) generated here with a fence every [`FENCE_EVERY`]
//!   transactions per session (garbage collection needs fences, Cobra §4.2), which Cobra's GPU verifier
//!   could not finish (it ran out of memory);
//! - a chengRW history of as many transactions, generated the same way (issue 20: uniform reads and blind
//!   writes, on which Cobra's rule for live constraints collected almost nothing; see `verifier`'s `gc`).
//!
//! Capacity (Cobra §6.2) is the most transactions per second over round sizes; per round size it is the
//! history's transactions over the whole run's time (sustained, every round included). The table also shows
//! the live transactions after collection (the most over rounds, and at the end) and memory.
//!
//! Memory is measured per history in a child process of its own (this binary again, with the hidden
//! `--rounds-child NAME`): a process's peak resident memory (`VmHWM`) can be reset only down to what it
//! holds, and the allocator keeps some of what an earlier history freed, so in one process every history
//! measured after TPC-C showed about TPC-C's peak as its own. Three columns: the history held as input
//! (resident memory once it is generated or read, before verification starts: the bench holds it whole,
//! where `krait serve` reads it from the log), the peak while verifying, and their difference, what
//! verification itself held at most. It is approximate both ways: memory that generating the history
//! freed and the allocator kept counts in the input and can be reused by verification unseen, and when one
//! child measures several round sizes, what an earlier size freed and the allocator kept counts in the
//! later sizes' peaks.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use workloads::WorkloadName;
use workloads::memory::{GenerateOptions, Interleave, generate};

use super::BenchArgs;
use super::chart::{Axes, plot_lines};

/// Fences per session in the generated BlindW-RW history: one every this many transactions.
const FENCE_EVERY: u32 = 20;
/// The corpus history of Cobra Fig. 10.
const TWITTER: &str = "cobra/scaling/twitter-100000";

/// One measured point.
#[derive(Serialize, Deserialize)]
struct RoundPoint {
    history: String,
    round_size: usize,
    rounds: usize,
    accepted: bool,
    seconds: f64,
    capacity: f64,
    max_live: usize,
    end_live: usize,
    deleted: u64,
    /// Resident memory holding the input history as verification starts.
    input_mib: Option<f64>,
    /// Peak resident memory while verifying, input included.
    peak_mib: Option<f64>,
}

/// The table's columns: (CSV name, printed title).
const COLUMNS: [(&str, &str); 12] = [
    ("history", "history"),
    ("round_size", "round size"),
    ("rounds", "rounds"),
    ("verdict", "verdict"),
    ("seconds", "time (s)"),
    ("capacity_txn_per_s", "txn/s"),
    ("max_live", "max live"),
    ("end_live", "end live"),
    ("deleted", "deleted"),
    ("input_mib", "input MiB"),
    ("peak_mib", "peak MiB"),
    ("verifier_mib", "verif. MiB"),
];

/// Prints one row of the table, the first column left-aligned and the others right-aligned.
fn print_row(cells: &[String; 12]) {
    const WIDTHS: [usize; 12] = [18, 10, 7, 8, 9, 10, 9, 9, 9, 10, 9, 10];
    let mut line = format!("{:<w$}", cells[0], w = WIDTHS[0]);
    for (cell, w) in cells.iter().zip(WIDTHS).skip(1) {
        line.push_str(&format!(" {cell:>w$}"));
    }
    println!("{line}");
}

impl RoundPoint {
    /// The point's values in [`COLUMNS`] order, as printed and as written to the CSV.
    fn cells(&self) -> [String; 12] {
        let mib = |m: Option<f64>| m.map_or(String::new(), |m| format!("{m:.0}"));
        let verifier = self.peak_mib.zip(self.input_mib).map(|(peak, input)| (peak - input).max(0.0));
        [
            self.history.clone(),
            self.round_size.to_string(),
            self.rounds.to_string(),
            (if self.accepted { "accept" } else { "REJECT" }).to_owned(),
            format!("{:.2}", self.seconds),
            format!("{:.0}", self.capacity),
            self.max_live.to_string(),
            self.end_live.to_string(),
            self.deleted.to_string(),
            mib(self.input_mib),
            mib(self.peak_mib),
            mib(verifier),
        ]
    }
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

/// Starts the process's peak resident memory over from what it holds now (`5` to /proc/self/clear_refs).
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// A memory figure of this process from /proc/self/status in MiB (`VmRSS` now, `VmHWM` the peak), where
/// Linux reports it.
fn status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The histories fig10 measures when `--workloads` names none: the six issue 20 sets its targets on.
const ROUNDS_WORKLOADS: [WorkloadName; 6] = [
    WorkloadName::Twitter,
    WorkloadName::Rubis,
    WorkloadName::Tpcc,
    WorkloadName::BlindWRw,
    WorkloadName::BlindWRm,
    WorkloadName::ChengRw,
];

/// The round sizes asked for, sorted, each once.
fn round_sizes(args: &BenchArgs) -> anyhow::Result<Vec<usize>> {
    let mut sizes = args.round_sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() || sizes[0] == 0 {
        anyhow::bail!("--round-sizes needs positive sizes");
    }
    Ok(sizes)
}

/// Cobra Fig. 10 (and `krait bench rounds`): capacity in transactions per second for several round sizes,
/// on each history of `--workloads` (C-Twitter from the corpus, the others generated with fences), each in
/// a child process of its own. Returns whether every history was accepted.
pub(super) fn fig10(args: &BenchArgs) -> anyhow::Result<bool> {
    round_sizes(args)?;
    let names = if args.workloads.is_empty() { ROUNDS_WORKLOADS.to_vec() } else { args.workloads.clone() };
    println!();
    print_row(&COLUMNS.map(|(_, title)| title.to_owned()));
    let mut points: Vec<RoundPoint> = Vec::new();
    let mut labels = Vec::with_capacity(names.len());
    for workload in names {
        // One history at a time, each in its own process: holding all six (about 700 MB) made every round
        // more than twice as slow, and memory is only measured apart in a process of its own.
        let measured = measure_in_child(args, workload)?;
        let Some(first) = measured.first() else { continue };
        let name = first.history.clone();
        if let Some(best) = measured.iter().max_by(|a, b| a.capacity.total_cmp(&b.capacity)) {
            println!("{name}: capacity {:.0} txn/s (round size {})", best.capacity, best.round_size);
        }
        labels.push(name);
        points.extend(measured);
    }

    let csv_path = args.out.join("rounds.csv");
    let mut csv = COLUMNS.map(|(name, _)| name).join(",") + "\n";
    for p in &points {
        csv.push_str(&p.cells().join(","));
        csv.push('\n');
    }
    std::fs::write(&csv_path, csv).with_context(|| format!("cannot write {}", csv_path.display()))?;
    let svg_path = args.out.join("rounds.svg");
    let lines: Vec<(String, Vec<(f64, f64)>)> = labels
        .iter()
        .map(|name| {
            let line = points
                .iter()
                .filter(|p| &p.history == name)
                .map(|p| (p.round_size as f64, p.capacity))
                .collect();
            (name.clone(), line)
        })
        .collect();
    let axes = Axes {
        caption: "Verification capacity vs. round size (Cobra Fig. 10)",
        x_desc: "round size (transactions)",
        y_desc: "capacity (txn/s)",
        log_y: false,
    };
    plot_lines(&lines, &axes, &svg_path).with_context(|| format!("cannot draw {}", svg_path.display()))?;
    eprintln!("wrote {} and {}", csv_path.display(), svg_path.display());
    Ok(points.iter().all(|p| p.accepted))
}

/// Where a child leaves its points for the parent.
fn child_output(out: &Path, workload: WorkloadName) -> PathBuf {
    out.join(format!(".rounds-{workload}.json"))
}

/// Runs this binary again with the same arguments and `--rounds-child workload`, which prints its rows as
/// they come, and reads back the points it measured.
fn measure_in_child(args: &BenchArgs, workload: WorkloadName) -> anyhow::Result<Vec<RoundPoint>> {
    let exe = std::env::current_exe().context("cannot find this program to run a child of it")?;
    let output = child_output(&args.out, workload);
    let status = Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .arg("--rounds-child")
        .arg(workload.as_str())
        .status()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    if !status.success() {
        anyhow::bail!("measuring {workload} in rounds failed ({status})");
    }
    let json = std::fs::read(&output).with_context(|| format!("cannot read {}", output.display()))?;
    // A leftover from a crashed run would be read by the next: this one is consumed.
    std::fs::remove_file(&output).with_context(|| format!("cannot remove {}", output.display()))?;
    serde_json::from_slice(&json).with_context(|| format!("{} is not what a child writes", output.display()))
}

/// `krait bench rounds --rounds-child NAME`: verifies one history in rounds of each size, prints a row per
/// size, and leaves the points for the parent ([`measure_in_child`]).
pub(super) fn child(args: &BenchArgs, workload: WorkloadName) -> anyhow::Result<ExitCode> {
    let sizes = round_sizes(args)?;
    let (name, h) = if workload == WorkloadName::Twitter {
        // Cobra's own C-Twitter history, as Fig. 10 used.
        let path = corpus()?.join(TWITTER);
        let twitter = history::codec::read_history(&path, None).with_context(|| {
            format!("cannot read {} (set KRAIT_CORPUS to the corpus directory)", path.display())
        })?;
        ("twitter-100000".to_owned(), twitter)
    } else {
        let opts = GenerateOptions {
            txns: args.blindw_txns,
            clients: args.clients,
            seed: args.seed,
            interleave: Interleave::Random,
            fence_every: Some(FENCE_EVERY),
        };
        let generated = generate(&args.sizes.workload(workload), &opts)
            .with_context(|| format!("cannot generate a {workload} history"))?;
        (format!("{workload}-{}", args.blindw_txns), generated.history)
    };
    let input_mib = status_mib("VmRSS");
    let mut points = Vec::with_capacity(sizes.len());
    for &round_size in &sizes {
        let measured = reset_peak();
        let out = verifier::verify_in_rounds(&h, &verifier::RoundOptions::offline(round_size))
            .with_context(|| format!("cannot verify {name} in rounds of {round_size}"))?;
        let p = RoundPoint {
            history: name.clone(),
            round_size,
            rounds: out.rounds.len(),
            accepted: out.is_accept(),
            seconds: out.elapsed_ms / 1e3,
            capacity: out.throughput(),
            max_live: out.max_live,
            end_live: out.live_at_end,
            deleted: out.deleted,
            input_mib,
            // Without a reset the peak would be the generator's, not verification's.
            peak_mib: status_mib("VmHWM").filter(|_| measured),
        };
        print_row(&p.cells());
        let live: Vec<String> = out.rounds.iter().map(|r| r.live_after.to_string()).collect();
        println!("    live after each round's collection: {}", live.join(" "));
        points.push(p);
    }
    let output = child_output(&args.out, workload);
    let json = serde_json::to_vec(&points).context("cannot encode the points")?;
    std::fs::write(&output, json).with_context(|| format!("cannot write {}", output.display()))?;
    Ok(ExitCode::SUCCESS)
}
