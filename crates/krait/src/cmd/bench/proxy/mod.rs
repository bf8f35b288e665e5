//! Cobra Fig. 12 and Fig. 13 (§6.3, "Online overheads"): what the proxy costs, measured against a real
//! PostgreSQL with the tokio-postgres workloads of `krait workload run`.
//!
//! - fig12: throughput and latency of one workload (C-Twitter, as in Cobra) run directly against the
//!   database and through Krait in several configurations, side by side in one run, at several client
//!   counts. The ratios to the direct run are the result; absolute numbers depend on the machine.
//! - fig13: bytes per 1k transactions: between the clients and the proxy (what the clients would send to
//!   the database directly), between the proxy and the database (plus the rewrites that return version
//!   tags, fences and catalog queries), and of the recorded history. Two counting TCP relays sit on the
//!   two legs, so the proxy itself is measured unchanged.
//!
//! Every history a proxy records is replayed and verified at SERIALIZABLE afterwards; a reject, a run that
//! hangs past its time limit, or a transaction that failed for good makes `krait bench` exit 1. The older
//! `cargo bench -p proxy --bench proxy` measures pgbench (and pgbouncer) with tagging off; this one measures
//! the tagging and fence overhead with the workloads of issue #8.

mod relay;
mod run;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use workloads::WorkloadName;
use workloads::sql::RunSummary;

use super::BenchArgs;
use super::chart::{Axes, plot_grouped, plot_lines};
use run::{run_point, runtimes, setup, warm_up};

/// The columns of `proxy_overhead.csv`, which `docs/img/proxy_overhead.csv` keeps from one run.
const OVERHEAD_CSV_HEADER: &str = "workload,path,clients,seconds,committed,tps,p50_ms,p99_ms,tps_ratio,p50_ratio,\
     p99_ratio,retries,errors,recorded_committed,recorded_aborted,reads,writes,opaque,fences,late_ops,\
     broken_sessions,desyncs,unverifiable,verdict";

/// Arguments of fig12 and fig13 (flattened into `krait bench`).
#[derive(Debug, clap::Args)]
pub(super) struct ProxyArgs {
    /// fig12: the workload run directly and through Krait (Cobra Fig. 12 used C-Twitter).
    #[arg(long, default_value = "twitter")]
    proxy_workload: WorkloadName,
    /// fig12: the client counts, comma-separated; each is one point per configuration.
    #[arg(long, value_delimiter = ',', default_value = "1,8,24")]
    proxy_clients: Vec<u32>,
    /// fig12: seconds each point runs.
    #[arg(long, default_value_t = 3.0)]
    proxy_seconds: f64,
    /// fig12: the paths measured side by side, comma-separated: direct (no proxy), off (tagging off),
    /// xmin (tagging, no fences), xmin-fence (tagging and a fence every --fence-every transactions), and
    /// xmin-fence-group / xmin-fence-none (the same with `log.durability` group or none instead of strict),
    /// and xmin-fence-no-values (xmin-fence without recording parameters and row values).
    #[arg(long, value_delimiter = ',', default_value = "direct,off,xmin,xmin-fence,xmin-fence-group")]
    proxy_configs: Vec<Route>,
    /// fig13: transactions per run (all clients together).
    #[arg(long, default_value_t = 1000)]
    bytes_txns: u64,
    /// fig13: clients per run.
    #[arg(long, default_value_t = 24)]
    bytes_clients: u32,
    /// fig13: the proxy configurations measured, comma-separated (as --proxy-configs; direct is not
    /// needed, the client leg is what a direct client sends). The plot shows the last one. fig13 measures
    /// the workloads of --workloads, or Cobra's four (blindw-rw, twitter, rubis, tpcc) when none is given.
    #[arg(long, value_delimiter = ',', default_value = "off,xmin-fence")]
    bytes_configs: Vec<Route>,
    /// Before measuring a workload, run it directly for this many seconds, unmeasured, so that the first
    /// measured point does not pay for cold caches (0 skips it).
    #[arg(long, default_value_t = 2.0)]
    warmup_s: f64,
    /// Fences: every this many committed transactions per connection (Cobra and Krait's default: 20).
    #[arg(long, default_value_t = 20)]
    fence_every: u64,
    /// A run still going this many seconds after it should have ended (a hang) is stopped and counted as
    /// a failure; fig13's runs, bounded by a count, get this much in all.
    #[arg(long, default_value_t = 60.0)]
    run_timeout_s: f64,
    /// The PostgreSQL server, host:port (trust authentication).
    #[arg(long, default_value = "127.0.0.1:5432")]
    pg_address: String,
    /// The PostgreSQL user.
    #[arg(long, default_value = "postgres")]
    pg_user: String,
    /// The PostgreSQL database.
    #[arg(long, default_value = "test")]
    pg_database: String,
    /// Keep every proxy's history log under --out (by default only the logs of rejected or failed runs
    /// are kept).
    #[arg(long)]
    keep_logs: bool,
}

/// One way of reaching the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Route {
    /// Straight to PostgreSQL.
    Direct,
    /// Through Krait, tagging off: transactions are recorded as statement texts only.
    Off,
    /// Through Krait, xmin tagging, no fences.
    Xmin,
    /// Through Krait, xmin tagging and fences.
    XminFence,
    /// As xmin-fence, with group commit of the history log.
    XminFenceGroup,
    /// As xmin-fence, never fsyncing the history log.
    XminFenceNone,
    /// As xmin-fence, without recording parameters and row values (`[record] values = false`): what the
    /// values cost (issue 18).
    XminFenceNoValues,
}

impl Route {
    fn as_str(self) -> &'static str {
        match self {
            Route::Direct => "direct",
            Route::Off => "off",
            Route::Xmin => "xmin",
            Route::XminFence => "xmin-fence",
            Route::XminFenceGroup => "xmin-fence-group",
            Route::XminFenceNone => "xmin-fence-none",
            Route::XminFenceNoValues => "xmin-fence-no-values",
        }
    }

    /// Whether the proxy records parameters and row values on this path.
    fn records_values(self) -> bool {
        self != Route::XminFenceNoValues
    }

    /// The `[tagging] strategy`, `[fence] every` and `[log] durability` of this path (None for direct).
    fn proxy_settings(self, fence_every: u64) -> Option<(&'static str, u64, &'static str)> {
        match self {
            Route::Direct => None,
            Route::Off => Some(("off", 0, "strict")),
            Route::Xmin => Some(("xmin", 0, "strict")),
            Route::XminFence => Some(("xmin", fence_every, "strict")),
            Route::XminFenceGroup => Some(("xmin", fence_every, "group")),
            Route::XminFenceNone => Some(("xmin", fence_every, "none")),
            Route::XminFenceNoValues => Some(("xmin", fence_every, "strict")),
        }
    }
}

/// How one measured run is bounded.
#[derive(Clone, Copy)]
enum Bound {
    Seconds(f64),
    Txns(u64),
}

/// One run to measure.
#[derive(Clone, Copy)]
struct Spec {
    route: Route,
    clients: u32,
    bound: Bound,
    /// Put counting relays on both legs (fig13); they add a hop, so fig12 runs without them.
    count_bytes: bool,
}

/// What one run measured.
struct RunPoint {
    path: Route,
    clients: u32,
    summary: Option<RunSummary>,
    timed_out: bool,
    recorded: Option<Recorded>,
    /// Bytes between clients and the proxy (or the database, for direct), when counted.
    client_bytes: Option<u64>,
    /// Bytes between the proxy and the database, when counted.
    db_bytes: Option<u64>,
}

/// What the proxy recorded in one run, and the verdict on it.
struct Recorded {
    stats: history::HistoryStats,
    verdict: &'static str,
    unverifiable: usize,
    log_dir_bytes: u64,
    native_bytes: u64,
    counters: ProxyCounters,
    /// Where the log was kept, if it was.
    kept_at: Option<PathBuf>,
}

/// Counters read from the proxy's /metrics before it stopped.
#[derive(Default)]
struct ProxyCounters {
    opaque: u64,
    fences: u64,
    late_ops: u64,
    broken_sessions: u64,
    desyncs: u64,
}

impl RunPoint {
    fn tps(&self) -> f64 {
        self.summary.as_ref().map_or(0.0, RunSummary::tps)
    }

    fn latency_ms(&self, q: f64) -> Option<f64> {
        let h = &self.summary.as_ref()?.latency_us;
        (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1e3)
    }

    /// Transactions the workload finished (committed or rolled back on purpose): the "1k transactions" of
    /// Fig. 13.
    fn finished(&self) -> u64 {
        self.summary.as_ref().map_or(0, |s| s.committed + s.rolled_back)
    }

    fn errors(&self) -> u64 {
        self.summary.as_ref().map_or(0, |s| s.errors)
    }

    fn retries(&self) -> u64 {
        self.summary.as_ref().map_or(0, RunSummary::total_retries)
    }

    /// accept / REJECT / TIMEOUT / ERRORS, or `-` for a direct run (nothing recorded).
    fn verdict(&self) -> &'static str {
        if self.timed_out {
            "TIMEOUT"
        } else if self.recorded.as_ref().is_some_and(|r| r.verdict != "accept") {
            self.recorded.as_ref().map_or("-", |r| r.verdict)
        } else if self.errors() > 0 {
            "ERRORS"
        } else if self.recorded.is_some() {
            "accept"
        } else {
            "-"
        }
    }

    fn ok(&self) -> bool {
        matches!(self.verdict(), "accept" | "-")
    }
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

fn fmt_ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.3}"))
}

/// Cobra Fig. 12: throughput and latency, direct vs. through Krait. Returns whether every recorded history
/// was accepted (and no run hung or failed a transaction for good).
pub(super) fn fig12(args: &BenchArgs) -> anyhow::Result<bool> {
    let p = &args.proxy;
    if p.proxy_clients.is_empty() || p.proxy_clients.contains(&0) {
        anyhow::bail!("--proxy-clients needs positive client counts");
    }
    if !(p.proxy_seconds.is_finite() && p.proxy_seconds > 0.0) {
        anyhow::bail!("--proxy-seconds must be a positive number");
    }
    if p.proxy_configs.is_empty() {
        anyhow::bail!("--proxy-configs needs at least one path");
    }
    let rt = runtimes()?;
    let workload = Arc::new(args.sizes.workload(p.proxy_workload));
    let schema = setup(&rt, p, &workload)?;
    warm_up(&rt, args, &workload, &schema, p.proxy_clients.iter().copied().max().unwrap_or(1))?;
    println!(
        "\nfig12: {} at SERIALIZABLE, {} s per point; ratios are to the direct run at the same client count",
        p.proxy_workload, p.proxy_seconds
    );
    println!(
        "{:<17} {:>7} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6} {:>6}  verdict",
        "path",
        "clients",
        "tps",
        "p50 ms",
        "p99 ms",
        "tps/dir",
        "p50/dir",
        "p99/dir",
        "retries",
        "opaque",
        "fences",
        "errors"
    );
    let mut points: Vec<RunPoint> = Vec::new();
    for &clients in &p.proxy_clients {
        for &path in &p.proxy_configs {
            let spec =
                Spec { route: path, clients, bound: Bound::Seconds(p.proxy_seconds), count_bytes: false };
            let point = run_point(&rt, args, &workload, &schema, spec)?;
            let direct = points.iter().find(|d| d.path == Route::Direct && d.clients == clients);
            let ratio = |f: &dyn Fn(&RunPoint) -> Option<f64>| Some(f(&point)? / f(direct?)?);
            let r = point.recorded.as_ref();
            println!(
                "{:<17} {:>7} {:>9.1} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6} {:>6}  {}",
                path.as_str(),
                clients,
                point.tps(),
                fmt_ms(point.latency_ms(0.5)),
                fmt_ms(point.latency_ms(0.99)),
                fmt_ratio(ratio(&|x| Some(x.tps()))),
                fmt_ratio(ratio(&|x| x.latency_ms(0.5))),
                fmt_ratio(ratio(&|x| x.latency_ms(0.99))),
                point.retries(),
                r.map_or("-".into(), |r| r.counters.opaque.to_string()),
                r.map_or("-".into(), |r| r.counters.fences.to_string()),
                point.errors(),
                point.verdict()
            );
            print_problems(&point);
            points.push(point);
        }
    }

    let csv_path = args.out.join("proxy_overhead.csv");
    let mut csv = format!("{OVERHEAD_CSV_HEADER}\n");
    for point in &points {
        let direct = points.iter().find(|d| d.path == Route::Direct && d.clients == point.clients);
        let ratio = |f: &dyn Fn(&RunPoint) -> Option<f64>| Some(f(point)? / f(direct?)?);
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
        let r = point.recorded.as_ref();
        let rec = |f: &dyn Fn(&Recorded) -> u64| r.map_or(String::new(), |r| f(r).to_string());
        csv.push_str(&format!(
            "{},{},{},{},{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            p.proxy_workload,
            point.path.as_str(),
            point.clients,
            p.proxy_seconds,
            point.summary.as_ref().map_or(0, |s| s.committed),
            point.tps(),
            opt(point.latency_ms(0.5)),
            opt(point.latency_ms(0.99)),
            opt(ratio(&|x| Some(x.tps()))),
            opt(ratio(&|x| x.latency_ms(0.5))),
            opt(ratio(&|x| x.latency_ms(0.99))),
            point.retries(),
            point.errors(),
            rec(&|r| r.stats.committed),
            rec(&|r| r.stats.aborted),
            rec(&|r| r.stats.reads),
            rec(&|r| r.stats.writes),
            rec(&|r| r.counters.opaque),
            rec(&|r| r.counters.fences),
            rec(&|r| r.counters.late_ops),
            rec(&|r| r.counters.broken_sessions),
            rec(&|r| r.counters.desyncs),
            rec(&|r| r.unverifiable as u64),
            point.verdict()
        ));
    }
    std::fs::write(&csv_path, csv).with_context(|| format!("cannot write {}", csv_path.display()))?;

    // Cobra Fig. 12 plots latency against throughput, one line per setup, a point per client count.
    let mut svgs = Vec::new();
    for (q, file, what) in [(0.5, "proxy_p50.svg", "p50"), (0.99, "proxy_p99.svg", "p99")] {
        let lines: Vec<(String, Vec<(f64, f64)>)> = p
            .proxy_configs
            .iter()
            .map(|&path| {
                let line = points
                    .iter()
                    .filter(|x| x.path == path)
                    .filter_map(|x| Some((x.tps(), x.latency_ms(q)?)))
                    .collect();
                (path.as_str().to_owned(), line)
            })
            .collect();
        let caption = format!(
            "{} latency vs. throughput, {} (points: {:?} clients)",
            what, p.proxy_workload, p.proxy_clients
        );
        let y_desc = format!("{what} latency (ms)");
        let axes = Axes {
            caption: &caption,
            x_desc: "committed transactions per second",
            y_desc: &y_desc,
            log_y: false,
        };
        let svg = args.out.join(file);
        plot_lines(&lines, &axes, &svg).with_context(|| format!("cannot draw {}", svg.display()))?;
        svgs.push(svg);
    }
    let groups: Vec<(String, Vec<Option<f64>>)> = p
        .proxy_clients
        .iter()
        .map(|&clients| {
            let tps = p
                .proxy_configs
                .iter()
                .map(|&path| {
                    points.iter().find(|x| x.path == path && x.clients == clients).map(RunPoint::tps)
                })
                .collect();
            (format!("{clients} clients"), tps)
        })
        .collect();
    let names: Vec<&str> = p.proxy_configs.iter().map(|c| c.as_str()).collect();
    let caption = format!("Throughput, direct vs. through Krait, {}", p.proxy_workload);
    let axes = Axes {
        caption: &caption,
        x_desc: "clients",
        y_desc: "committed transactions per second",
        log_y: false,
    };
    let svg = args.out.join("proxy_tps.svg");
    plot_grouped(&groups, &names, &axes, &svg).with_context(|| format!("cannot draw {}", svg.display()))?;
    svgs.push(svg);
    eprintln!(
        "wrote {} and {}",
        csv_path.display(),
        svgs.iter().map(|s| s.display().to_string()).collect::<Vec<_>>().join(", ")
    );
    Ok(points.iter().all(RunPoint::ok))
}

/// Prints what went wrong in a run, if anything did.
fn print_problems(point: &RunPoint) {
    if let Some(s) = &point.summary {
        for e in &s.error_samples {
            eprintln!("  error: {e}");
        }
    }
    if let Some(r) = &point.recorded {
        let c = &r.counters;
        if c.broken_sessions + c.desyncs > 0 {
            eprintln!("  proxy: {} broken sessions, {} desyncs", c.broken_sessions, c.desyncs);
        }
        if let Some(at) = &r.kept_at {
            eprintln!("  log kept at {}", at.display());
        }
    }
}

/// Cobra's four workloads of Fig. 13.
const FIG13_WORKLOADS: [WorkloadName; 4] =
    [WorkloadName::BlindWRw, WorkloadName::Twitter, WorkloadName::Rubis, WorkloadName::Tpcc];

/// Cobra Fig. 13: network and history bytes per 1k transactions. Returns whether every recorded history
/// was accepted (and no run hung or failed a transaction for good).
pub(super) fn fig13(args: &BenchArgs) -> anyhow::Result<bool> {
    let p = &args.proxy;
    if p.bytes_txns == 0 || p.bytes_clients == 0 {
        anyhow::bail!("--bytes-txns and --bytes-clients must be positive");
    }
    let configs: Vec<Route> = p.bytes_configs.iter().copied().filter(|c| *c != Route::Direct).collect();
    let Some(&shown) = configs.last() else {
        anyhow::bail!("--bytes-configs needs at least one proxy configuration");
    };
    let names = if args.workloads.is_empty() { FIG13_WORKLOADS.to_vec() } else { args.workloads.clone() };
    let rt = runtimes()?;
    println!(
        "\nfig13: {} transactions, {} clients, SERIALIZABLE; KB per 1k finished transactions",
        p.bytes_txns, p.bytes_clients
    );
    println!(
        "{:<10} {:<17} {:>9} {:>8} {:>12} {:>12} {:>9} {:>12} {:>12} {:>7} {:>6}  verdict",
        "workload",
        "path",
        "finished",
        "retries",
        "client KB",
        "db KB",
        "db/client",
        "log dir KB",
        "native KB",
        "opaque",
        "fences"
    );
    let mut rows: Vec<(WorkloadName, RunPoint)> = Vec::new();
    for &name in &names {
        let workload = Arc::new(args.sizes.workload(name));
        let schema = setup(&rt, p, &workload)?;
        warm_up(&rt, args, &workload, &schema, p.bytes_clients)?;
        for &path in &configs {
            let spec = Spec {
                route: path,
                clients: p.bytes_clients,
                bound: Bound::Txns(p.bytes_txns),
                count_bytes: true,
            };
            let point = run_point(&rt, args, &workload, &schema, spec)?;
            let per_1k = |b: u64| b as f64 / point.finished().max(1) as f64;
            let r = point.recorded.as_ref();
            println!(
                "{:<10} {:<17} {:>9} {:>8} {:>12.1} {:>12.1} {:>9} {:>12.1} {:>12.1} {:>7} {:>6}  {}",
                name.as_str(),
                path.as_str(),
                point.finished(),
                point.retries(),
                per_1k(point.client_bytes.unwrap_or(0)),
                per_1k(point.db_bytes.unwrap_or(0)),
                fmt_ratio(db_over_client(&point)),
                per_1k(r.map_or(0, |r| r.log_dir_bytes)),
                per_1k(r.map_or(0, |r| r.native_bytes)),
                r.map_or("-".into(), |r| r.counters.opaque.to_string()),
                r.map_or("-".into(), |r| r.counters.fences.to_string()),
                point.verdict()
            );
            print_problems(&point);
            rows.push((name, point));
        }
    }

    let csv_path = args.out.join("bytes.csv");
    let mut csv = String::from(
        "workload,path,clients,finished,retries,client_bytes,db_bytes,db_over_client,log_dir_bytes,native_bytes,\
         client_kb_per_1k,db_kb_per_1k,log_dir_kb_per_1k,native_kb_per_1k,recorded_committed,opaque,fences,\
         verdict\n",
    );
    for (name, point) in &rows {
        let r = point.recorded.as_ref();
        let n = point.finished().max(1) as f64;
        let (client, db) = (point.client_bytes.unwrap_or(0), point.db_bytes.unwrap_or(0));
        let (log, native) = (r.map_or(0, |r| r.log_dir_bytes), r.map_or(0, |r| r.native_bytes));
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{},{},{},{}\n",
            name,
            point.path.as_str(),
            point.clients,
            point.finished(),
            point.retries(),
            client,
            db,
            db_over_client(point).map_or(String::new(), |v| format!("{v:.4}")),
            log,
            native,
            client as f64 / n,
            db as f64 / n,
            log as f64 / n,
            native as f64 / n,
            r.map_or(0, |r| r.stats.committed),
            r.map_or(0, |r| r.counters.opaque),
            r.map_or(0, |r| r.counters.fences),
            point.verdict()
        ));
    }
    std::fs::write(&csv_path, csv).with_context(|| format!("cannot write {}", csv_path.display()))?;

    let series = ["client<->proxy", "proxy<->database", "history (log dir)", "history (native)"];
    let groups: Vec<(String, Vec<Option<f64>>)> = rows
        .iter()
        .filter(|(_, point)| point.path == shown)
        .map(|(name, point)| {
            let n = point.finished().max(1) as f64;
            let r = point.recorded.as_ref();
            let kb = |b: Option<u64>| b.map(|b| b as f64 / n);
            let values = vec![
                kb(point.client_bytes),
                kb(point.db_bytes),
                kb(r.map(|r| r.log_dir_bytes)),
                kb(r.map(|r| r.native_bytes)),
            ];
            (name.to_string(), values)
        })
        .collect();
    let caption = format!("Bytes per 1k transactions through Krait ({})", shown.as_str());
    let axes = Axes {
        caption: &caption,
        x_desc: "workload",
        y_desc: "KB per 1k transactions (log scale)",
        log_y: true,
    };
    let svg = args.out.join("bytes.svg");
    plot_grouped(&groups, &series, &axes, &svg).with_context(|| format!("cannot draw {}", svg.display()))?;
    eprintln!("wrote {} and {}", csv_path.display(), svg.display());
    Ok(rows.iter().all(|(_, point)| point.ok()))
}

/// Bytes on the database leg over bytes on the client leg: 1 + the proxy's network overhead.
fn db_over_client(point: &RunPoint) -> Option<f64> {
    let client = point.client_bytes.filter(|&b| b > 0)?;
    Some(point.db_bytes? as f64 / client as f64)
}

#[cfg(test)]
mod csv_tests {
    /// The committed figures must have the columns the bench writes today, so that a reader of the docs
    /// never meets a column the bench no longer has (it once still said `lost_ops`).
    #[test]
    fn the_committed_overhead_table_has_the_columns_the_bench_writes() {
        let committed = include_str!("../../../../../../docs/img/proxy_overhead.csv");
        assert_eq!(committed.lines().next(), Some(super::OVERHEAD_CSV_HEADER));
    }
}
