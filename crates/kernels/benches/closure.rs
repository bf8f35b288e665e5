//! Closure time per reachability backend on history-shaped graphs (issue 23): CPU chain clocks, CPU bitset
//! rows, the level fill on a CUDA device, and Cobra's repeated squaring on the device (§5). Prints a table;
//! never asserts a time. Without the `gpu` feature or a device, the device columns say why they are empty.
//!
//! `cargo bench -p kernels --features gpu --bench closure -- 10000x24 1000000x200` picks the points
//! (nodes × sessions); the default runs 10k to 2M nodes on 24, 200 and 1,000 sessions, which needs about
//! 20 GB of memory at its largest point. `scripts/gpu-check` runs it on a GPU machine.

use std::time::Instant;

use kernels::{Backend, Graph, Reachability, reachability};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Bitset rows take `nodes²` bits: past this many nodes they exceed what a closure may take.
const BITSET_UP_TO: u32 = 200_000;
/// Squaring does `nodes³ / 64` work per step: past this many nodes one step takes seconds.
const SQUARING_UP_TO: u32 = 20_000;

const DEFAULT_POINTS: &[(u32, u32)] = &[
    (10_000, 24),
    (10_000, 1000),
    (100_000, 24),
    (100_000, 200),
    (100_000, 1000),
    (1_000_000, 24),
    (1_000_000, 200),
    (1_000_000, 1000),
    (2_000_000, 24),
    (2_000_000, 200),
    (2_000_000, 1000),
];

/// A history-shaped DAG: `nodes` transactions in commit order, each the next of one of `sessions`
/// sessions (the chain hints), and each also after two recent transactions, as a read follows the write it
/// read and a write the version it replaced (within the last `4 × sessions` commits).
fn history_like(rng: &mut StdRng, nodes: u32, sessions: u32) -> (Graph, Vec<Vec<u32>>) {
    let mut chains = vec![Vec::new(); sessions as usize];
    let mut edges = Vec::with_capacity(nodes as usize * 3);
    let window = 4 * sessions;
    for v in 0..nodes {
        let chain = &mut chains[rng.gen_range(0..sessions as usize)];
        if let Some(&last) = chain.last() {
            edges.push((last, v));
        }
        chain.push(v);
        for _ in 0..2 {
            if v > 0 {
                edges.push((v - 1 - rng.gen_range(0..v.min(window)), v));
            }
        }
    }
    (Graph::from_edges(nodes, &edges).expect("generated edges are in range"), chains)
}

/// A closure's median time in milliseconds, and the closure (or why there is none).
type Timed = (f64, Result<Box<dyn Reachability>, kernels::KernelError>);

/// Runs `f` `runs` times and returns the median time in milliseconds and the last result.
fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        last = Some(f());
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], last.expect("at least one run"))
}

/// A table cell: the time, `—` where the point is out of the backend's reach, `n/a` where it failed (the
/// reason goes to `notes`, printed under the row).
fn cell(result: Option<Timed>, notes: &mut Vec<String>) -> String {
    match result {
        None => "—".to_string(),
        Some((ms, Ok(_))) => format!("{ms:.1}"),
        Some((_, Err(e))) => {
            notes.push(e.to_string());
            "n/a".to_string()
        }
    }
}

fn points() -> Vec<(u32, u32)> {
    let given: Vec<(u32, u32)> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .filter_map(|a| {
            let (n, c) = a.split_once('x')?;
            Some((n.parse().ok()?, c.parse().ok()?))
        })
        .collect();
    if given.is_empty() { DEFAULT_POINTS.to_vec() } else { given }
}

fn main() {
    println!("CPU: {} rayon threads", rayon::current_num_threads());
    let device = device_line();
    println!("device: {device}");
    println!(
        "{:>9} {:>8} {:>6} {:>10} {:>12} {:>12} {:>14} {:>12} {:>12} {:>7}",
        "nodes",
        "sessions",
        "chains",
        "edges",
        "cpu clocks",
        "cpu bitset",
        "cuda fill",
        "cuda layout",
        "cuda square",
        "auto"
    );
    let mut rng = StdRng::seed_from_u64(23);
    for (nodes, sessions) in points() {
        let (g, chains) = history_like(&mut rng, nodes, sessions);
        let runs = if nodes <= 100_000 { 3 } else { 1 };
        let (cpu_ms, cpu) = time(runs, || kernels::ChainClocks::new(&g, Some(&chains)));
        let chain_count = cpu.map(|c| c.chains()).unwrap_or(0);
        let bits =
            (nodes <= BITSET_UP_TO).then(|| time(runs, || reachability(&g, None, Backend::BitsetRows)));
        let ((cuda_ms, cuda), phases) = cuda_fill(&g, &chains, runs);
        let layout = if u64::from(nodes) * chain_count as u64 * 4
            <= u64::from(nodes) * u64::from(nodes).div_ceil(64) * 8
        {
            "clocks"
        } else {
            "bits"
        };
        let mut notes = Vec::new();
        let cuda_cell = cell(Some((cuda_ms, cuda)), &mut notes);
        let square = (nodes <= SQUARING_UP_TO).then(|| square(&g, runs));
        let auto =
            reachability(&g, Some(&chains), Backend::Auto).map(|r| r.backend().name()).unwrap_or("error");
        println!(
            "{nodes:>9} {sessions:>8} {chain_count:>6} {:>10} {cpu_ms:>12.1} {:>12} {cuda_cell:>14} {layout:>12} {:>12} {auto:>7}",
            g.edges(),
            cell(bits, &mut notes),
            cell(square, &mut notes),
        );
        notes.extend(phases);
        notes.dedup();
        for note in notes {
            println!("    {note}");
        }
    }
}

/// Opens the device (loading the driver and compiling the kernels, once per process) and says how long it
/// took, so that the table's device times do not include it.
#[cfg(feature = "gpu")]
fn device_line() -> String {
    let start = Instant::now();
    match kernels::gpu::device_name() {
        Ok(name) => {
            format!("{name}, opened and kernels compiled in {:.0} ms", start.elapsed().as_secs_f64() * 1e3)
        }
        Err(e) => e.to_string(),
    }
}

#[cfg(not(feature = "gpu"))]
fn device_line() -> String {
    "none: built without the `gpu` feature".to_string()
}

/// The level fill on the device, and where its last run's time went.
#[cfg(feature = "gpu")]
fn cuda_fill(g: &Graph, chains: &[Vec<u32>], runs: usize) -> (Timed, Option<String>) {
    let mut phases = None;
    let timed = time(runs, || {
        kernels::gpu::fill_with_phases(g, Some(chains)).map(|(reach, p)| {
            phases = Some(format!(
                "cuda: {} levels in {} launches; prepare {:.1} ms, upload {:.1} ms, fill {:.1} ms, download {:.1} ms",
                p.levels, p.launches, p.prepare_ms, p.upload_ms, p.fill_ms, p.download_ms
            ));
            reach
        })
    });
    (timed, phases)
}

#[cfg(not(feature = "gpu"))]
fn cuda_fill(g: &Graph, chains: &[Vec<u32>], runs: usize) -> (Timed, Option<String>) {
    (time(runs, || reachability(g, Some(chains), Backend::Cuda)), None)
}

#[cfg(feature = "gpu")]
fn square(g: &Graph, runs: usize) -> Timed {
    time(runs, || kernels::gpu::squaring_closure(g))
}

#[cfg(not(feature = "gpu"))]
fn square(_: &Graph, _: usize) -> Timed {
    (0.0, Err(kernels::KernelError::NoDevice { reason: "built without the `gpu` feature".to_string() }))
}
