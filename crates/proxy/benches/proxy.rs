//! Throughput of pgbench through Krait against the database directly and against pgbouncer.
//!
//! `cargo bench -p proxy --bench proxy` (set `KRAIT_BENCH_SECONDS` to change the 10 s per run). It needs
//! PostgreSQL on 127.0.0.1:5432 with trust auth, pgbench and psql; pgbouncer is optional (Debian package
//! `pgbouncer`, run as the `postgres` OS user). It creates and drops a database of its own, `krait_bench`.
//!
//! For each workload (pgbench's built-in select-only `-S` and tpcb-like) and each path it prints tps and
//! mean latency: direct; through Krait with `log.durability = none`, `group` and `strict`; and through
//! pgbouncer in session pooling. Nothing is asserted: the figures depend on the machine.
//!
//! Tagging is off here (the config has no `[tagging]`): this bench is the proxy's relay and log cost on
//! pgbench's own driver, next to pgbouncer. The cost of xmin tagging and fences, on the tokio-postgres
//! workloads of `krait workload run`, and the network and history bytes per 1k transactions, are
//! `krait bench fig12` and `fig13` (Cobra Fig. 12 and 13; docs/benchmarks.md).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const DB: &str = "krait_bench";
const CLIENTS: &str = "8";

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{cmd:?} failed: {text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

fn pgbench(port: u16, workload: &[&str], seconds: u64) -> Result<(f64, f64), String> {
    let port = port.to_string();
    let secs = seconds.to_string();
    let mut args = vec!["-n", "-M", "prepared", "-c", CLIENTS, "-j", "2", "-T", &secs];
    args.extend_from_slice(workload);
    args.extend_from_slice(&["-h", "127.0.0.1", "-p", &port, "-U", "postgres", DB]);
    let report = run(Command::new("pgbench").args(&args))?;
    let pick = |prefix: &str| {
        report
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    let tps = pick("tps = ").ok_or_else(|| format!("no tps in {report}"))?;
    let lat = pick("latency average = ").ok_or_else(|| format!("no latency in {report}"))?;
    Ok((tps, lat))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

/// Starts pgbouncer in session pooling on a free port, or says why not.
fn start_pgbouncer(dir: &Path) -> Result<(Child, u16), String> {
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
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench proxy: no runtime: {e}");
            std::process::exit(1);
        }
    };
    let tmp = std::env::temp_dir().join(format!("krait-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&tmp);

    println!("pgbench -M prepared, {CLIENTS} clients, {seconds} s per run, scale 5");
    println!("{:<14} {:<26} {:>10} {:>14}", "workload", "path", "tps", "latency ms");
    // KRAIT_BENCH_ONLY=select-only (or tpcb-like) runs one workload, e.g. under a profiler.
    let only = std::env::var("KRAIT_BENCH_ONLY").ok();
    for (name, workload) in [("select-only", vec!["-S"]), ("tpcb-like", vec![])] {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let row = |path: &str, r: Result<(f64, f64), String>| match r {
            Ok((tps, lat)) => println!("{name:<14} {path:<26} {tps:>10.0} {lat:>14.3}"),
            Err(e) => println!("{name:<14} {path:<26} {:>10} ({e})", "-"),
        };
        row("direct", pgbench(5432, &workload, seconds));
        for durability in ["none", "group", "strict"] {
            let log = tmp.join(format!("log-{name}-{durability}"));
            let toml = format!(
                "[listen]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:5432\"\n\
                 [log]\npath = \"{}\"\ndurability = \"{durability}\"\n[admin]\nenabled = false\n",
                log.display()
            );
            let result = runtime.block_on(async {
                let config = proxy::Config::parse(&toml, Path::new("<bench>")).map_err(|e| e.to_string())?;
                let handle = proxy::start(config).await.map_err(|e| e.to_string())?;
                let port = handle.listen_addr().port();
                let r = tokio::task::spawn_blocking({
                    let workload: Vec<&'static str> = workload.clone();
                    move || pgbench(port, &workload, seconds)
                })
                .await
                .map_err(|e| e.to_string())?;
                handle.shutdown().await.map_err(|e| e.to_string())?;
                r
            });
            row(&format!("krait (durability {durability})"), result);
            let _ = std::fs::remove_dir_all(&log);
        }
        match start_pgbouncer(&tmp) {
            Ok((mut child, port)) => {
                row("pgbouncer (session)", pgbench(port, &workload, seconds));
                let _ = child.kill();
                let _ = child.wait();
            }
            Err(e) => row("pgbouncer (session)", Err(e)),
        }
    }
    let _ = setup(&format!("drop database if exists {DB} with (force)"));
    let _ = std::fs::remove_dir_all(&tmp);
}
