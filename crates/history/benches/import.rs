//! Import and codec speed on the corpus, and what each format costs in bytes per 1k transactions.
//!
//! Run with `cargo bench -p history --bench import`. It reads `scaling/twitter-100000` (and the smaller
//! Cobra histories) from `$KRAIT_CORPUS` or `<workspace>/../shared/corpus` and prints two tables. Nothing is
//! asserted: the figures are for reading.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use history::History;
use history::codec::{cobra, jsonl, native};

fn corpus() -> PathBuf {
    match std::env::var_os("KRAIT_CORPUS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus"),
    }
}

/// Runs `f` at least three times and for at least a second, and returns the best time of one run.
fn best_of<T>(mut f: impl FnMut() -> T) -> (Duration, T) {
    let started = Instant::now();
    let mut best = Duration::MAX;
    let mut runs = 0;
    loop {
        let t = Instant::now();
        let out = f();
        best = best.min(t.elapsed());
        runs += 1;
        if runs >= 3 && started.elapsed() > Duration::from_secs(1) {
            return (best, out);
        }
    }
}

fn folder_bytes(dir: &Path) -> u64 {
    cobra::session_files(dir)
        .expect("a Cobra folder")
        .iter()
        .map(|(_, p)| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
}

fn ops(h: &History) -> u64 {
    h.transactions.iter().map(|t| t.ops.len() as u64).sum()
}

fn main() {
    let root = corpus();
    if !root.join("README.md").is_file() {
        eprintln!("the corpus is missing: set KRAIT_CORPUS (looked in {})", root.display());
        std::process::exit(1);
    }

    let big = root.join("cobra/scaling/twitter-100000");
    let (t_import, h) = best_of(|| cobra::import_dir(&big, cobra::CobraOptions::default()).expect("imports"));
    let n_ops = ops(&h) as f64;
    let (t_enc, bytes) = best_of(|| native::encode(&h).expect("encodes"));
    let (t_dec, back) = best_of(|| native::decode(&bytes).expect("decodes"));
    assert!(back == h, "native roundtrip");
    let (t_jenc, text) = best_of(|| jsonl::encode_to_vec(&h).expect("encodes"));
    let (t_jdec, _) = best_of(|| jsonl::decode_bytes(&text).expect("decodes"));

    println!(
        "speed on cobra/scaling/twitter-100000 ({} txns, {} ops; best of several runs)",
        h.transactions.len(),
        n_ops
    );
    println!("| step | time | ops/s | MB/s |");
    println!("|---|---:|---:|---:|");
    let row = |name: &str, t: Duration, size: u64| {
        let s = t.as_secs_f64();
        println!("| {name} | {:.1} ms | {:.2} M | {:.0} |", s * 1e3, n_ops / s / 1e6, size as f64 / s / 1e6);
    };
    row("cobra import", t_import, folder_bytes(&big));
    row("native encode", t_enc, bytes.len() as u64);
    row("native decode", t_dec, bytes.len() as u64);
    row("jsonl encode", t_jenc, text.len() as u64);
    row("jsonl decode", t_jdec, text.len() as u64);

    println!();
    println!("bytes per 1k transactions");
    println!("| history | txns | Cobra log folder | native | jsonl | native / Cobra |");
    println!("|---|---:|---:|---:|---:|---:|");
    for rel in [
        "ser-violation/cock-G2",
        "one-shot-chengRW/chengRW-2000",
        "one-shot-10k/twitter-10000",
        "one-shot-10k/rubis-10000",
        "scaling/twitter-100000",
    ] {
        let dir = root.join("cobra").join(rel);
        let h = cobra::import_dir(&dir, cobra::CobraOptions::default()).expect("imports");
        let per_1k = |b: u64| b as f64 * 1000.0 / h.transactions.len() as f64 / 1000.0;
        let cobra_b = folder_bytes(&dir);
        let native_b = native::encode(&h).expect("encodes").len() as u64;
        let jsonl_b = jsonl::encode_to_vec(&h).expect("encodes").len() as u64;
        println!(
            "| {rel} | {} | {:.1} KB | {:.1} KB | {:.1} KB | {:.2} |",
            h.transactions.len(),
            per_1k(cobra_b),
            per_1k(native_b),
            per_1k(jsonl_b),
            native_b as f64 / cobra_b as f64
        );
    }
}
