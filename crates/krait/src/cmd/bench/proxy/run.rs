//! Measuring one run: the client and proxy runtimes, the workload's set-up, a proxy started for the route
//! (with counting relays when bytes are counted), the workload run against it, and the recorded history
//! replayed and verified.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use workloads::Workload;
use workloads::sql::{self, Isolation, Progress, RunOptions, SchemaName};

use super::relay::CountingRelay;
use super::{Bound, ProxyArgs, ProxyCounters, Recorded, Route, RunPoint, Spec};
use crate::cmd::bench::BenchArgs;

/// The clients' and the proxies' runtimes, kept apart as if they were two processes.
pub(super) struct Runtimes {
    clients: tokio::runtime::Runtime,
    proxy: tokio::runtime::Runtime,
}

pub(super) fn runtimes() -> anyhow::Result<Runtimes> {
    let build = |name: &str| {
        tokio::runtime::Builder::new_multi_thread()
            .thread_name(name)
            .enable_all()
            .build()
            .with_context(|| format!("cannot start the {name} runtime"))
    };
    Ok(Runtimes { clients: build("bench-clients")?, proxy: build("bench-proxy")? })
}

fn pg_url(args: &ProxyArgs, address: &str) -> anyhow::Result<String> {
    let (host, port) = address.rsplit_once(':').with_context(|| format!("{address} is not host:port"))?;
    Ok(format!("host={host} port={port} user={} dbname={}", args.pg_user, args.pg_database))
}

/// Creates and loads the workload's tables directly in the database, so that the load is not recorded.
pub(super) fn setup(rt: &Runtimes, args: &ProxyArgs, workload: &Workload) -> anyhow::Result<SchemaName> {
    let schema = SchemaName::default_for(workload);
    let url = pg_url(args, &args.pg_address)?;
    let outcome = rt
        .clients
        .block_on(sql::setup(&url, workload, &schema, false))
        .with_context(|| format!("cannot set up {} in {url}", workload.family()))?;
    if let sql::SetupOutcome::Loaded { rows } = outcome {
        eprintln!("loaded {rows} rows of {} into schema {schema}", workload.family());
    }
    Ok(schema)
}

/// Runs one point: starts a proxy for `path` (unless direct), with counting relays on both legs if
/// `count_bytes`, runs the workload, stops everything, and verifies what was recorded.
pub(super) fn run_point(
    rt: &Runtimes,
    bench: &BenchArgs,
    workload: &Arc<Workload>,
    schema: &SchemaName,
    spec: Spec,
) -> anyhow::Result<RunPoint> {
    let args = &bench.proxy;
    let Spec { route: path, clients, bound, count_bytes } = spec;
    let log_dir = tempfile::Builder::new()
        .prefix(&format!("krait-bench-{}-{}-{clients}-", workload.name(), path.as_str()))
        .tempdir()
        .context("cannot create a temporary log directory")?;
    // The database leg's relay, then the proxy, then the client leg's relay.
    let db_relay = if count_bytes && path != Route::Direct {
        Some(rt.proxy.block_on(CountingRelay::start(args.pg_address.clone()))?)
    } else {
        None
    };
    let upstream = db_relay.as_ref().map_or_else(|| args.pg_address.clone(), |r| r.addr.to_string());
    let handle = match path.proxy_settings(args.fence_every) {
        None => None,
        Some((strategy, every, durability)) => {
            let toml = format!(
                "[listen]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = {upstream:?}\n\
                 [log]\npath = {:?}\ndurability = \"{durability}\"\n\
                 [admin]\nenabled = true\naddress = \"127.0.0.1:0\"\n\
                 [tagging]\nstrategy = \"{strategy}\"\n[fence]\nevery = {every}\n[record]\nvalues = {}\n",
                log_dir.path().display().to_string(),
                path.records_values()
            );
            let config = proxy::Config::parse(&toml, Path::new("<krait bench>"))?;
            Some(rt.proxy.block_on(proxy::start(config)).context("cannot start the proxy")?)
        }
    };
    let endpoint = handle.as_ref().map_or_else(|| args.pg_address.clone(), |h| h.listen_addr().to_string());
    let client_relay =
        if count_bytes { Some(rt.proxy.block_on(CountingRelay::start(endpoint.clone()))?) } else { None };
    let target = client_relay.as_ref().map_or(endpoint, |r| r.addr.to_string());
    let url = pg_url(args, &target)?;

    let (txns, duration, limit) = match bound {
        Bound::Seconds(s) => (None, Some(Duration::from_secs_f64(s)), s + args.run_timeout_s),
        Bound::Txns(n) => (Some(n), None, args.run_timeout_s),
    };
    let opts = RunOptions {
        clients,
        txns,
        duration,
        seed: bench.seed,
        isolation: Isolation::Serializable,
        schema: schema.clone(),
        max_retries: 1000,
    };
    let progress = Arc::new(Progress::default());
    let run = sql::run(&url, workload.clone(), &opts, progress.clone());
    let outcome =
        rt.clients.block_on(async { tokio::time::timeout(Duration::from_secs_f64(limit), run).await });
    let (summary, timed_out) = match outcome {
        Ok(result) => {
            (Some(result.with_context(|| format!("{} through {}", workload.name(), path.as_str()))?), false)
        }
        Err(_) => {
            eprintln!(
                "{} {} {clients} clients: still running after {limit:.0} s ({} transactions finished); \
                 stopping it",
                workload.name(),
                path.as_str(),
                progress.finished.load(Ordering::Relaxed)
            );
            (None, true)
        }
    };
    // Let the last replies and closes cross the relays before reading their counters.
    std::thread::sleep(Duration::from_millis(200));
    let client_bytes = client_relay.as_ref().map(|r| r.traffic.total());
    let db_bytes = db_relay.as_ref().map(|r| r.traffic.total());

    let recorded = match handle {
        None => None,
        Some(handle) => {
            let counters = match handle.admin_addr() {
                Some(addr) => rt.proxy.block_on(read_counters(addr)).unwrap_or_default(),
                None => ProxyCounters::default(),
            };
            let desyncs = proxy::Metrics::get(&handle.metrics().desyncs);
            rt.proxy.block_on(handle.shutdown()).context("the proxy did not stop cleanly")?;
            drop(client_relay);
            drop(db_relay);
            let counters = ProxyCounters { desyncs, ..counters };
            Some(verify_log(bench, log_dir, counters, timed_out)?)
        }
    };
    Ok(RunPoint { path, clients, summary, timed_out, recorded, client_bytes, db_bytes })
}

/// Runs the workload directly for `--warmup-s`, unmeasured.
pub(super) fn warm_up(
    rt: &Runtimes,
    bench: &BenchArgs,
    workload: &Arc<Workload>,
    schema: &SchemaName,
    clients: u32,
) -> anyhow::Result<()> {
    let s = bench.proxy.warmup_s;
    if s > 0.0 && s.is_finite() {
        let spec = Spec { route: Route::Direct, clients, bound: Bound::Seconds(s), count_bytes: false };
        run_point(rt, bench, workload, schema, spec)?;
    }
    Ok(())
}

/// Replays the log, verifies it at SERIALIZABLE, and measures it. The log directory is kept under `--out`
/// when the run failed or `--keep-logs` asks.
fn verify_log(
    bench: &BenchArgs,
    log_dir: tempfile::TempDir,
    counters: ProxyCounters,
    failed: bool,
) -> anyhow::Result<Recorded> {
    let log_dir_bytes = history::log::disk_bytes(log_dir.path());
    let history = crate::cmd::history::load(log_dir.path(), None)?;
    let mut native = Vec::new();
    history::codec::write_history_to(&history, &mut native, history::codec::Format::Native)
        .context("cannot encode the recorded history")?;
    let report = verifier::verify(&history, &verifier::Options::default())
        .with_context(|| format!("cannot verify {}", log_dir.path().display()))?;
    let verdict = if report.is_accept() { "accept" } else { "REJECT" };
    let kept_at = if failed || verdict != "accept" || bench.proxy.keep_logs {
        let name = log_dir.path().file_name().map(|n| n.to_owned()).unwrap_or_default();
        let dest = bench.out.join("logs").join(name);
        std::fs::create_dir_all(bench.out.join("logs")).context("cannot create the logs folder")?;
        let kept = log_dir.keep();
        std::fs::rename(&kept, &dest)
            .with_context(|| format!("cannot move {} to {}", kept.display(), dest.display()))?;
        if verdict != "accept" {
            let report_path = dest.with_extension("report.json");
            std::fs::write(&report_path, report.to_json())
                .with_context(|| format!("cannot write {}", report_path.display()))?;
            eprint!("{}", report.render_text());
            eprintln!("kept the rejected log at {} (report {})", dest.display(), report_path.display());
        }
        Some(dest)
    } else {
        None
    };
    Ok(Recorded {
        stats: history.stats(),
        verdict,
        unverifiable: report.unverifiable.len(),
        log_dir_bytes,
        native_bytes: native.len() as u64,
        counters,
        kept_at,
    })
}

/// Reads the tagging counters from the proxy's /metrics (the admin server's Prometheus text).
async fn read_counters(admin: std::net::SocketAddr) -> anyhow::Result<ProxyCounters> {
    let mut stream = TcpStream::connect(admin).await?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await?;
    let mut c = ProxyCounters::default();
    for line in body.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else { continue };
        let Ok(value) = value.trim().parse::<u64>() else { continue };
        if name.starts_with("krait_tagging_opaque_total") {
            c.opaque += value;
        } else if name == "krait_fences_total" {
            c.fences = value;
        } else if name == "krait_tagging_late_ops_total" {
            c.late_ops = value;
        } else if name == "krait_tagging_broken_sessions_total" {
            c.broken_sessions = value;
        }
    }
    Ok(c)
}
