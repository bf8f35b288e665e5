//! `krait workload`: run Cobra's benchmark workloads (Cobra §6), and chengRW, against a PostgreSQL endpoint,
//! or generate their histories offline.
//!
//! - `setup` creates and loads a workload's schema (idempotent; `run` does it too unless `--no-setup`).
//! - `run` drives concurrent clients through an endpoint (Krait's proxy, or the database directly) with a
//!   progress bar, and prints throughput, latency percentiles and retries.
//! - `generate` runs the same transaction logic on a serial in-memory store and writes the (serializable by
//!   construction) history, for verifier benchmarks without a database.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use history::codec::{self, Format};
use indicatif::{ProgressBar, ProgressStyle};
use workloads::memory::{GenerateOptions, Interleave, generate};
use workloads::sql::{self, Isolation, Progress, RunOptions, RunSummary, SchemaName, SetupOutcome};
use workloads::{Sizes, Workload, WorkloadName};

/// Subcommands of `krait workload`.
#[derive(Debug, clap::Subcommand)]
pub enum WorkloadCommand {
    /// Run a workload's clients concurrently against a PostgreSQL endpoint and print a summary. Exits 0 if
    /// no transaction failed for good (retried serialization failures are fine), 1 otherwise.
    Run {
        /// The workload: tpcc, twitter, rubis, blindw-rm, blindw-rw, blindw-wm or chengrw.
        name: WorkloadName,
        /// The endpoint: a PostgreSQL URL or key=value string, for Krait's proxy or the database itself.
        #[arg(long)]
        target: String,
        /// Concurrent clients, one session each.
        #[arg(long, visible_alias = "sessions", default_value_t = 4)]
        clients: u32,
        /// Stop after this many transactions (all clients together).
        #[arg(long)]
        txns: Option<u64>,
        /// Stop after this many seconds.
        #[arg(long)]
        duration: Option<f64>,
        /// Seed of the clients' random choices.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// The isolation level of every transaction: serializable, repeatable-read or read-committed.
        #[arg(long, default_value = "serializable")]
        isolation: Isolation,
        /// A transaction aborted this many times in a row is given up and counted as an error.
        #[arg(long, default_value_t = 1000)]
        max_retries: u32,
        /// Where to create and load the schema (default: --target). Point it at the database itself when
        /// --target is Krait, so that the bulk load is not recorded as part of the history.
        #[arg(long)]
        setup_target: Option<String>,
        /// Do not create or load the schema first (it must already be set up).
        #[arg(long)]
        no_setup: bool,
        /// Drop and reload the initial state before running.
        #[arg(long, conflicts_with = "no_setup")]
        reset: bool,
        /// Print the summary as one JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        place: Place,
        #[command(flatten)]
        sizes: SizeArgs,
    },
    /// Create the workload's schema and load its initial state, unless it is already loaded.
    Setup {
        /// The workload.
        name: WorkloadName,
        /// The endpoint.
        #[arg(long)]
        target: String,
        /// Drop and reload even if the same initial state is already loaded.
        #[arg(long)]
        reset: bool,
        #[command(flatten)]
        place: Place,
        #[command(flatten)]
        sizes: SizeArgs,
    },
    /// Generate a serializable history offline, by running the workload's transaction logic on a serial
    /// in-memory store, and write it in Krait's native format (or JSON Lines).
    Generate {
        /// The workload: tpcc, twitter, rubis, blindw-rm, blindw-rw, blindw-wm or chengrw.
        name: WorkloadName,
        /// Transactions in the history.
        #[arg(long)]
        txns: u64,
        /// Where to write the history. It must not exist yet, unless --force is given.
        #[arg(long)]
        out: PathBuf,
        /// Sessions (Cobra §6.1 used 24).
        #[arg(long, visible_alias = "sessions", default_value_t = 24)]
        clients: u32,
        /// Seed: the same seed gives the same history.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// How sessions take turns: random (seeded) or round-robin.
        #[arg(long, default_value = "random", value_parser = parse_interleave)]
        interleave: Interleave,
        /// Run a fence transaction in each session at its start and after every this many of its
        /// transactions, as Krait's proxy does (Cobra §4.2); off by default.
        #[arg(long)]
        fence_every: Option<u32>,
        /// The output format: native or jsonl.
        #[arg(long, default_value = "native", value_parser = parse_format)]
        format: Format,
        /// Overwrite the output if it exists.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        sizes: SizeArgs,
    },
}

/// Where the workload's tables live.
#[derive(Debug, clap::Args)]
pub struct Place {
    /// The schema to use (default: krait_<workload>; the BlindW mixes share krait_blindw).
    #[arg(long)]
    schema: Option<SchemaName>,
}

/// The initial state's sizes; each defaults to the workload's own.
#[derive(Debug, clap::Args)]
pub struct SizeArgs {
    /// C-Twitter and C-RUBiS: initial users (defaults 1,000 and 2,000; Cobra's RUBiS used 20,000).
    #[arg(long)]
    users: Option<u64>,
    /// C-RUBiS: initial items (default 20,000; Cobra used 200,000). TPC-C: catalogue items (default 100,000).
    #[arg(long)]
    items: Option<u64>,
    /// TPC-C: customers per district (default 3,000).
    #[arg(long)]
    customers: Option<u64>,
    /// BlindW and chengRW: keys (default 10,000).
    #[arg(long)]
    keys: Option<u64>,
    /// chengRW: distinct keys each transaction reads, chosen uniformly (default 4).
    #[arg(long)]
    reads: Option<u32>,
    /// chengRW: distinct keys each transaction writes after its reads, chosen uniformly (default 4).
    #[arg(long)]
    writes: Option<u32>,
}

impl SizeArgs {
    pub(crate) fn workload(&self, name: WorkloadName) -> Workload {
        let sizes = Sizes {
            users: self.users,
            items: self.items,
            customers: self.customers,
            keys: self.keys,
            reads: self.reads,
            writes: self.writes,
        };
        Workload::new(name, &sizes)
    }
}

fn parse_interleave(s: &str) -> Result<Interleave, String> {
    match s {
        "random" => Ok(Interleave::Random),
        "round-robin" => Ok(Interleave::RoundRobin),
        _ => Err(format!("unknown interleaving {s:?} (expected random or round-robin)")),
    }
}

fn parse_format(s: &str) -> Result<Format, String> {
    let f = s.parse::<Format>().map_err(|e| e.to_string())?;
    if f.is_writable() {
        Ok(f)
    } else {
        Err(format!("cannot write {f}: only native and jsonl can be written"))
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")
}

/// Runs `krait workload`.
pub fn run(cmd: WorkloadCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        WorkloadCommand::Setup { name, target, reset, place, sizes } => {
            let workload = sizes.workload(name);
            let schema = place.schema.unwrap_or_else(|| SchemaName::default_for(&workload));
            let outcome = runtime()?.block_on(sql::setup(&target, &workload, &schema, reset))?;
            report_setup(&workload, &schema, outcome);
            Ok(ExitCode::SUCCESS)
        }
        WorkloadCommand::Run {
            name,
            target,
            clients,
            txns,
            duration,
            seed,
            isolation,
            max_retries,
            setup_target,
            no_setup,
            reset,
            json,
            place,
            sizes,
        } => {
            let duration = match duration {
                Some(s) if !(s.is_finite() && s > 0.0) => {
                    anyhow::bail!("--duration must be a positive number of seconds")
                }
                Some(s) => Some(Duration::from_secs_f64(s)),
                None => None,
            };
            if txns.is_none() && duration.is_none() {
                anyhow::bail!("give --txns, --duration, or both");
            }
            if clients == 0 {
                anyhow::bail!("--clients must be at least 1");
            }
            let workload = Arc::new(sizes.workload(name));
            let schema = place.schema.unwrap_or_else(|| SchemaName::default_for(&workload));
            let opts =
                RunOptions { clients, txns, duration, seed, isolation, schema: schema.clone(), max_retries };
            let rt = runtime()?;
            let summary = rt.block_on(async {
                if !no_setup {
                    let setup_at = setup_target.as_deref().unwrap_or(&target);
                    let outcome = sql::setup(setup_at, &workload, &schema, reset).await?;
                    report_setup(&workload, &schema, outcome);
                }
                let progress = Arc::new(Progress::default());
                let bar = progress_bar(txns, duration);
                let ticker = tokio::spawn(tick(bar.clone(), progress.clone(), txns.is_some()));
                let result = sql::run(&target, workload.clone(), &opts, progress).await;
                ticker.abort();
                bar.finish_and_clear();
                anyhow::Ok(result?)
            })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&summary_json(name, &opts, &summary))?);
            } else {
                print_summary(name, &opts, &summary);
            }
            Ok(if summary.errors == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        WorkloadCommand::Generate {
            name,
            txns,
            out,
            clients,
            seed,
            interleave,
            fence_every,
            format,
            force,
            sizes,
        } => {
            if out.exists() && !force {
                anyhow::bail!("{} already exists (pass --force to overwrite it)", out.display());
            }
            let workload = sizes.workload(name);
            let started = Instant::now();
            let generated =
                generate(&workload, &GenerateOptions { txns, clients, seed, interleave, fence_every })?;
            let took = started.elapsed();
            codec::write_history(&generated.history, &out, format)
                .with_context(|| format!("cannot write {}", out.display()))?;
            let stats = generated.history.stats();
            let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
            eprintln!(
                "wrote {} transactions of {name} ({} committed, {} aborted; {} sessions, {} keys, {} reads, {} writes) \
                 to {} ({format}, {bytes} bytes) in {:.2} s",
                stats.transactions,
                stats.committed,
                stats.aborted,
                stats.sessions,
                stats.keys,
                stats.reads,
                stats.writes,
                out.display(),
                took.as_secs_f64()
            );
            eprintln!("mix          {}", format_mix(&generated.mix));
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn report_setup(workload: &Workload, schema: &SchemaName, outcome: SetupOutcome) {
    match outcome {
        SetupOutcome::AlreadyLoaded => {
            eprintln!("schema {schema} already holds {} ({})", workload.family(), workload.fingerprint())
        }
        SetupOutcome::Loaded { rows } => {
            eprintln!(
                "loaded {rows} rows of {} into schema {schema} ({})",
                workload.family(),
                workload.fingerprint()
            )
        }
    }
}

/// A bar over the transaction count, or else over the duration in seconds.
fn progress_bar(txns: Option<u64>, duration: Option<Duration>) -> ProgressBar {
    let (len, template) = match (txns, duration) {
        (Some(n), _) => (n, "{elapsed_precise} [{bar:40}] {pos}/{len} txns {msg}"),
        (None, Some(d)) => (d.as_secs().max(1), "{elapsed_precise} [{bar:40}] {pos}/{len} s {msg}"),
        (None, None) => (0, "{elapsed_precise} {msg}"),
    };
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

async fn tick(bar: ProgressBar, progress: Arc<Progress>, by_count: bool) {
    let start = Instant::now();
    let mut interval = tokio::time::interval(Duration::from_millis(100));
    loop {
        interval.tick().await;
        let done = progress.finished.load(Ordering::Relaxed);
        bar.set_position(if by_count { done } else { start.elapsed().as_secs() });
        let rate = done as f64 / start.elapsed().as_secs_f64().max(1e-3);
        bar.set_message(format!(
            "{done} done, {rate:.0}/s, {} retries, {} errors",
            progress.retries.load(Ordering::Relaxed),
            progress.errors.load(Ordering::Relaxed)
        ));
    }
}

fn format_mix(mix: &std::collections::BTreeMap<&'static str, u64>) -> String {
    mix.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn print_summary(name: WorkloadName, opts: &RunOptions, s: &RunSummary) {
    let h = &s.latency_us;
    println!(
        "workload     {name} ({}, {} clients, seed {}, schema {})",
        opts.isolation, opts.clients, opts.seed, opts.schema
    );
    println!(
        "finished     {} transactions in {:.2} s: {} committed, {} rolled back by the workload",
        s.committed + s.rolled_back,
        s.elapsed.as_secs_f64(),
        s.committed,
        s.rolled_back
    );
    println!("throughput   {:.1} committed txn/s", s.tps());
    if h.is_empty() {
        println!("latency      (no transaction finished)");
    } else {
        println!(
            "latency      p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            ms(h.value_at_quantile(0.50)),
            ms(h.value_at_quantile(0.95)),
            ms(h.value_at_quantile(0.99)),
            ms(h.max())
        );
    }
    let kinds: Vec<String> = s.retries.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let kinds = if kinds.is_empty() { String::new() } else { format!(" ({})", kinds.join(", ")) };
    println!("aborts       {} retried{kinds}", s.total_retries());
    println!("errors       {}", s.errors);
    for e in &s.error_samples {
        println!("  {e}");
    }
    println!("mix          {}", format_mix(&s.mix));
}

fn summary_json(name: WorkloadName, opts: &RunOptions, s: &RunSummary) -> serde_json::Value {
    let h = &s.latency_us;
    let q = |p: f64| {
        if h.is_empty() { serde_json::Value::Null } else { serde_json::json!(ms(h.value_at_quantile(p))) }
    };
    serde_json::json!({
        "workload": name.as_str(),
        "isolation": opts.isolation.to_string(),
        "clients": opts.clients,
        "seed": opts.seed,
        "schema": opts.schema.as_str(),
        "committed": s.committed,
        "rolled_back": s.rolled_back,
        "elapsed_s": s.elapsed.as_secs_f64(),
        "tps": s.tps(),
        "latency_ms": { "p50": q(0.50), "p95": q(0.95), "p99": q(0.99), "max": if h.is_empty() { serde_json::Value::Null } else { serde_json::json!(ms(h.max())) } },
        "retries": s.retries.iter().map(|(k, n)| (k.to_string(), *n)).collect::<std::collections::BTreeMap<_, _>>(),
        "errors": s.errors,
        "error_samples": s.error_samples,
        "mix": s.mix,
    })
}
