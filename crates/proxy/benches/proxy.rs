//! Throughput of pgbench through Krait against the database directly and against pgbouncer.
//!
//! `cargo bench -p proxy --bench proxy` (set `KRAIT_BENCH_SECONDS` to change the 10 s per run,
//! `KRAIT_BENCH_ROUNDS` to repeat every path that many times, alternating, and report the median, and
//! `KRAIT_BENCH_WORKERS` for the proxy runtime's worker threads, 2 by default, and `KRAIT_BENCH_PROTOCOL`
//! for pgbench's `-M`: `prepared` by default, `simple` or `extended`; `KRAIT_BENCH_PATH=xmin` runs only the
//! Krait paths whose name contains it). It needs
//! PostgreSQL on 127.0.0.1:5432 with trust auth, pgbench and psql; pgbouncer is optional
//! (`scripts/bench-deps` installs it; it runs as the `postgres` OS user). It creates and drops a database of
//! its own, `krait_bench`.
//!
//! For each workload (pgbench's built-in select-only `-S` and tpcb-like) and each path it prints tps, mean
//! latency, the 99th percentile of latency (from pgbench's per-transaction log of one transaction in ten),
//! the ratios of tps and p99 to direct, the proxy's CPU per transaction (Krait's or PgBouncer's, from
//! `/proc`), and Krait's log fsyncs per committed transaction (issue 16 asks for at most one per four).
//! The paths: direct; through Krait with tagging off and `log.durability = none`, `group` and `strict`;
//! through Krait recording everything (xmin tagging, a fence every 20 commits but at most one per 100 ms per
//! connection, `strict`; and the same under `group` and `none`, to show what strict's fsyncs cost, and
//! without fences, to show what they cost), with and without parameters and row values (`[record]
//! values`), with a fence every 20 commits whatever the rate (`[fence] min_interval_ms = 0`), and the same
//! shipping its log to a NATS server started here (`[ship]`, when `nats-server` is installed); and through
//! pgbouncer in session pooling. Nothing is asserted: the figures depend on the machine, and only the
//! ratios of one run compare.
//!
//! The cost of xmin tagging and fences on the tokio-postgres workloads of `krait workload run`, and the
//! network and history bytes per 1k transactions, are `krait bench fig12` and `fig13` (Cobra Fig. 12 and 13;
//! docs/benchmarks.md).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The allocator the `krait` binary runs the proxy under (`crates/krait/src/main.rs`): the proxy runs in
/// this process, so the bench measures what users run only with the same one.
#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;

const DB: &str = "krait_bench";
const CLIENTS: &str = "8";
/// Tagging is on by default (xmin); the relay-and-log rows turn it off.
const OFF: &str = "[tagging]\nstrategy = \"off\"\n";
/// Full recording's tagging and fences; the variant rows append to its `[fence]` section or add their own.
const XMIN_FENCES: &str = "[tagging]\nstrategy = \"xmin\"\n[fence]\nevery = 20\n";
/// Full recording without fences, to show what they cost.
const XMIN_NO_FENCES: &str = "[tagging]\nstrategy = \"xmin\"\n[fence]\nevery = 0\n";

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{cmd:?} failed: {text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// What one pgbench run measured.
#[derive(Clone, Copy, Debug)]
struct Measured {
    tps: f64,
    /// Mean latency, ms.
    mean_ms: f64,
    /// 99th percentile of latency, ms, from pgbench's per-transaction log (a sample of one in ten).
    p99_ms: f64,
    /// The proxy's CPU per transaction in µs: Krait's, which runs in this process, or PgBouncer's.
    cpu_us: Option<f64>,
    /// Krait's log fsyncs per committed transaction it recorded (fences included).
    fsyncs_per_commit: Option<f64>,
}

/// One pgbench run, or why it failed.
type Run = Result<Measured, String>;

/// CPU seconds process `pid` (`"self"` for this one) has used, all threads, from `/proc/<pid>/stat`;
/// `None` where there is none. For this process that is the proxy's runtime and its log's threads (pgbench
/// is a child and not counted).
fn process_cpu(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces: the state is field 3,
    // utime and stime (in clock ticks of 1/100 s) are fields 14 and 15.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// The pid of pgbouncer itself, which `runuser` (pid `runuser`) started as its only child.
fn pgbouncer_pid(runuser: u32) -> Option<String> {
    let children = std::fs::read_to_string(format!("/proc/{runuser}/task/{runuser}/children")).ok()?;
    children.split_whitespace().next().map(str::to_owned)
}

/// One pgbench run through a process other than this one (`pid`), with that process's CPU per transaction.
fn pgbench_measuring(pid: Option<&str>, port: u16, workload: &[&str], seconds: u64) -> Run {
    let before = pid.and_then(process_cpu);
    let measured = pgbench(port, workload, seconds)?;
    let cpu_us =
        before.zip(pid.and_then(process_cpu)).map(|(b, a)| (a - b) * 1e6 / (measured.tps * seconds as f64));
    Ok(Measured { cpu_us, ..measured })
}

/// pgbench's query protocol (`-M`): `KRAIT_BENCH_PROTOCOL`, `prepared` unless set. `simple` sends every
/// statement's literals in its text, which the proxy's plan cache meets by fingerprint.
fn protocol() -> String {
    std::env::var("KRAIT_BENCH_PROTOCOL").unwrap_or_else(|_| "prepared".to_owned())
}

fn pgbench(port: u16, workload: &[&str], seconds: u64) -> Run {
    let port = port.to_string();
    let secs = seconds.to_string();
    let protocol = protocol();
    // pgbench writes its per-transaction log (`-l`) as PREFIX.PID and PREFIX.PID.THREAD.
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let logs = std::env::temp_dir().join(format!("krait-bench-latency-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&logs).map_err(|e| format!("cannot make {}: {e}", logs.display()))?;
    let prefix = logs.join("txn").display().to_string();
    let mut args = vec!["-n", "-M", &protocol, "-c", CLIENTS, "-j", "2", "-T", &secs];
    args.extend_from_slice(&["-l", "--sampling-rate", "0.1", "--log-prefix", &prefix]);
    args.extend_from_slice(workload);
    args.extend_from_slice(&["-h", "127.0.0.1", "-p", &port, "-U", "postgres", DB]);
    let report = run(Command::new("pgbench").args(&args));
    let p99 = p99_ms(&logs);
    let _ = std::fs::remove_dir_all(&logs);
    let report = report?;
    let pick = |prefix: &str| {
        report
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    let tps = pick("tps = ").ok_or_else(|| format!("no tps in {report}"))?;
    let mean_ms = pick("latency average = ").ok_or_else(|| format!("no latency in {report}"))?;
    Ok(Measured { tps, mean_ms, p99_ms: p99?, cpu_us: None, fsyncs_per_commit: None })
}

/// The 99th percentile of the latencies in pgbench's per-transaction logs in `dir`, in ms. Each line is
/// `client transaction latency_us script epoch_s epoch_us` (pgbench's documentation, "Per-Transaction
/// Logging").
fn p99_ms(dir: &Path) -> Result<f64, String> {
    let mut latencies: Vec<u64> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())?.flatten() {
        let text = std::fs::read_to_string(entry.path()).map_err(|e| e.to_string())?;
        latencies.extend(text.lines().filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok()));
    }
    if latencies.is_empty() {
        return Err("pgbench logged no transaction".into());
    }
    latencies.sort_unstable();
    let at = (latencies.len() * 99).div_ceil(100).saturating_sub(1);
    Ok(latencies[at] as f64 / 1e3)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

/// Starts pgbouncer in session pooling on a free port, or says why not.
fn start_pgbouncer(dir: &Path) -> Result<(Child, u16), String> {
    if Command::new("pgbouncer").arg("--version").output().is_err() {
        return Err("pgbouncer is not installed; scripts/bench-deps installs it".into());
    }
    let port = free_port();
    let ini = dir.join("pgbouncer.ini");
    std::fs::write(
        &ini,
        format!(
            "[databases]\n{DB} = host=127.0.0.1 port=5432 dbname={DB} user=postgres\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
             listen_port = {port}\nauth_type = any\npool_mode = session\nmax_client_conn = 100\n\
             default_pool_size = 20\nunix_socket_dir =\nlogfile = {}\n",
            dir.join("pgbouncer.log").display()
        ),
    )
    .map_err(|e| e.to_string())?;
    run(Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir))?;
    let child = Command::new("runuser")
        .args(["-u", "postgres", "--", "pgbouncer"])
        .arg(&ini)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("pgbouncer not runnable ({e}); apt-get install pgbouncer"))?;
    for _ in 0..50 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok((child, port));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err("pgbouncer did not start listening".into())
}

fn main() {
    let seconds: u64 = std::env::var("KRAIT_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    let setup =
        |sql: &str| run(Command::new("psql").args(["-X", "-h", "127.0.0.1", "-U", "postgres", "-c", sql]));
    if let Err(e) = setup(&format!("drop database if exists {DB} with (force)"))
        .and(setup(&format!("create database {DB}")))
    {
        eprintln!("bench proxy: cannot prepare the database: {e}");
        std::process::exit(1);
    }
    if let Err(e) =
        run(Command::new("pgbench").args(["-i", "-q", "-s", "5", "-h", "127.0.0.1", "-U", "postgres", DB]))
    {
        eprintln!("bench proxy: pgbench -i failed: {e}");
        std::process::exit(1);
    }
    // KRAIT_BENCH_WORKERS: the proxy runtime's worker threads (default 2, as on this 2-core machine).
    let workers: usize = std::env::var("KRAIT_BENCH_WORKERS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    let runtime =
        match tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build() {
            Ok(r) => r,
            Err(e) => {
                eprintln!("bench proxy: no runtime: {e}");
                std::process::exit(1);
            }
        };
    let tmp = std::env::temp_dir().join(format!("krait-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&tmp);

    let rounds: usize =
        std::env::var("KRAIT_BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1).max(1);
    println!(
        "pgbench -M {}, {CLIENTS} clients, {seconds} s per run, scale 5, median of {rounds}",
        protocol()
    );
    println!(
        "{:<14} {:<48} {:>10} {:>12} {:>9} {:>9} {:>11} {:>14} {:>14}",
        "workload",
        "path",
        "tps",
        "latency ms",
        "/direct",
        "p99 ms",
        "p99/direct",
        "proxy µs CPU/txn",
        "fsyncs/commit"
    );
    // KRAIT_BENCH_ONLY=select-only (or tpcb-like) runs one workload, e.g. under a profiler.
    let only = std::env::var("KRAIT_BENCH_ONLY").ok();
    let path_filter = std::env::var("KRAIT_BENCH_PATH").ok();
    // The shipping row needs a NATS server: started here when nats-server is installed, else the row says why.
    let nats = std::fs::create_dir_all(tmp.join("nats"))
        .map_err(|e| e.to_string())
        .and_then(|()| ship::local::LocalNats::start(&tmp.join("nats")));
    let ship = match &nats {
        Ok(nats) => format!("{XMIN_FENCES}[ship]\nnats = \"{}\"\n", nats.url()),
        Err(_) => String::new(),
    };
    let krait_paths: [(&str, &str, &str); 10] = [
        ("krait, tagging off, none", "none", OFF),
        ("krait, tagging off, group", "group", OFF),
        ("krait, tagging off, strict", "strict", OFF),
        ("krait, xmin + fences + strict", "strict", XMIN_FENCES),
        // What strict's fsync wait costs, beside it: the same recording with group commit, and with none.
        ("krait, xmin + fences + group", "group", XMIN_FENCES),
        ("krait, xmin + fences + none", "none", XMIN_FENCES),
        // What fences cost, beside it: the client's next transaction waits for each one.
        ("krait, xmin + strict, no fences", "strict", XMIN_NO_FENCES),
        // Every 20 commits whatever the rate, as before the time floor (`[fence] min_interval_ms`).
        (
            "krait, xmin + fences + strict, no fence floor",
            "strict",
            &format!("{XMIN_FENCES}min_interval_ms = 0\n"),
        ),
        (
            "krait, xmin + fences + strict, no values",
            "strict",
            &format!("{XMIN_FENCES}[record]\nvalues = false\n"),
        ),
        ("krait, xmin + fences + strict, shipping to NATS", "strict", &ship),
    ];
    for (name, workload) in [("select-only", vec!["-S"]), ("tpcb-like", vec![])] {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        // Every path once per round, in the same order, so drift on a shared machine spreads over all.
        let mut results: Vec<(String, Vec<Run>)> = Vec::new();
        let mut record = |path: &str, r: Run| match results.iter_mut().find(|(p, _)| p == path) {
            Some((_, rs)) => rs.push(r),
            None => results.push((path.to_owned(), vec![r])),
        };
        for round in 0..rounds {
            record("direct", pgbench(5432, &workload, seconds));
            for (path, durability, tagging) in krait_paths {
                if path_filter.as_deref().is_some_and(|f| !path.contains(f)) {
                    continue;
                }
                if let (true, Err(why)) = (path.contains("shipping"), &nats) {
                    record(path, Err(why.clone()));
                    continue;
                }
                let log = tmp.join(format!("log-{name}-{round}-{durability}-{}", tagging.len()));
                let toml = format!(
                    "[listen]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:5432\"\n\
                     [log]\npath = \"{}\"\ndurability = \"{durability}\"\n[admin]\nenabled = false\n{tagging}",
                    log.display()
                );
                let result = runtime.block_on(async {
                    let config =
                        proxy::Config::parse(&toml, Path::new("<bench>")).map_err(|e| e.to_string())?;
                    let handle = proxy::start(config).await.map_err(|e| e.to_string())?;
                    let port = handle.listen_addr().port();
                    let cpu_before = process_cpu("self");
                    let r = tokio::task::spawn_blocking({
                        let workload: Vec<&'static str> = workload.clone();
                        move || pgbench(port, &workload, seconds)
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                    let cpu = cpu_before.zip(process_cpu("self")).map(|(b, a)| a - b);
                    let fsyncs = handle.log().stats().fsyncs as f64;
                    let commits = handle.metrics().txns_committed.load(std::sync::atomic::Ordering::Relaxed);
                    handle.shutdown().await.map_err(|e| e.to_string())?;
                    r.map(|m| Measured {
                        cpu_us: cpu.map(|c| c * 1e6 / (m.tps * seconds as f64)),
                        fsyncs_per_commit: (commits > 0).then(|| fsyncs / commits as f64),
                        ..m
                    })
                });
                record(path, result);
                let _ = std::fs::remove_dir_all(&log);
            }
            match start_pgbouncer(&tmp) {
                Ok((mut child, port)) => {
                    let pid = pgbouncer_pid(child.id());
                    record(
                        "pgbouncer (session)",
                        pgbench_measuring(pid.as_deref(), port, &workload, seconds),
                    );
                    // Killing `runuser` leaves pgbouncer, its child, running (one left behind per run,
                    // each holding its port): stop pgbouncer itself first.
                    if let Some(pid) = &pid {
                        let _ = Command::new("kill").arg(pid).status();
                    }
                    let _ = child.kill();
                    let _ = child.wait();
                }
                Err(e) => record("pgbouncer (session)", Err(e)),
            }
        }
        let direct = results.first().and_then(|(_, rs)| median(rs));
        for (path, rs) in &results {
            match median(rs) {
                Some(m) => {
                    let ratio = |of: fn(&Measured) -> f64| {
                        direct.map_or_else(|| "-".to_owned(), |d| format!("{:.2}", of(&m) / of(&d)))
                    };
                    let (tps_ratio, p99_ratio) = (ratio(|m| m.tps), ratio(|m| m.p99_ms));
                    let cpu = m.cpu_us.map_or_else(|| "-".to_owned(), |c| format!("{c:.0}"));
                    let fsyncs = m.fsyncs_per_commit.map_or_else(|| "-".to_owned(), |f| format!("{f:.2}"));
                    println!(
                        "{name:<14} {path:<48} {:>10.0} {:>12.3} {tps_ratio:>9} {:>9.3} {p99_ratio:>11} {cpu:>14} \
                         {fsyncs:>14}",
                        m.tps, m.mean_ms, m.p99_ms
                    );
                }
                None => {
                    let why = rs.iter().find_map(|r| r.as_ref().err()).cloned().unwrap_or_default();
                    println!("{name:<14} {path:<48} {:>10} ({why})", "-");
                }
            }
        }
    }
    let _ = setup(&format!("drop database if exists {DB} with (force)"));
    drop(nats);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The run with the median throughput among those that succeeded.
fn median(runs: &[Run]) -> Option<Measured> {
    let mut ok: Vec<Measured> = runs.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
    ok.sort_by(|a, b| a.tps.total_cmp(&b.tps));
    ok.get(ok.len().checked_sub(1)? / 2).copied()
}
