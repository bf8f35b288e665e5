//! `krait demo`: the README's first command. It records a small contended workload and verifies it online,
//! in rounds, as it runs, then prints the verdict and any reject report in words.
//!
//! Both targets run the same way: the real proxy starts in-process with TLS on (a throw-away self-signed
//! certificate) and row-level tagging on, a few clients run the transfer workload ([`workloads::transfer`])
//! through it over TLS, and the co-located verifier ([`verifier::online::Tailer`]) tails the proxy's history
//! log, exactly as `krait serve` does. What differs is the database behind the proxy:
//! - **postgres**: the local PostgreSQL, at the chosen isolation level.
//! - **embedded**: no database server. The reference store (`refstore`, Xiong et al., ECOOP'20) runs in
//!   process under a chosen consistency model behind its PostgreSQL-wire front ([`refstore::pg`]) on a free
//!   local port, and the proxy talks to it as to PostgreSQL (catalog query, `xmin` tags, fences). `--model
//!   si` lets snapshot-isolation anomalies (write skew) commit, which the verifier rejects.
//!
//! Everything it starts is stopped and its temporary directory removed before it returns; only reject
//! reports are kept (in `DATA_DIR/reports/`).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use history::History;
use indicatif::{ProgressBar, ProgressStyle};
use refstore::{Model, RowKey, SharedStore, StoreConfig};
use verifier::online::{Status, Tailer};
use verifier::{AnomalyClass, Report, ReportStore, RoundOptions, verify_in_rounds};
use workloads::sql::{Isolation, SchemaName};
use workloads::transfer::{self, START_BALANCE, Table, Transfers};

/// Where the demo runs its workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// PostgreSQL if it answers on the given address, else the embedded reference store.
    Auto,
    /// The local PostgreSQL, through the Krait proxy.
    Postgres,
    /// The embedded reference store behind its PostgreSQL-wire front, through the Krait proxy.
    Embedded,
}

/// Arguments of `krait demo`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "A flag for one target implies that target: --model and --history-out imply --target \
embedded, --isolation and --keep-schema imply --target postgres. Naming it with the other target is an error.

Exit status: 0 if the history is accepted, 1 if it is rejected, 2 on error."
)]
pub struct DemoArgs {
    /// Where to run the workload.
    #[arg(long, value_enum, default_value_t = Target::Auto)]
    target: Target,
    /// Embedded target (implies --target embedded): the consistency model the reference store runs under
    /// (ser, si, psi, cp, ua, cc, sg, ra, rc) [default: ser].
    #[arg(long)]
    model: Option<Model>,
    /// PostgreSQL target (implies --target postgres): the isolation level of every transaction
    /// (serializable, repeatable-read, read-committed) [default: serializable].
    #[arg(long)]
    isolation: Option<Isolation>,
    /// The isolation level the verifier checks. The default, `declared`, holds each transaction to the level
    /// it asked for (so a run at --isolation repeatable-read is checked as snapshot isolation); a level the
    /// proxy could not record is held to serializable.
    #[arg(long, value_enum, default_value_t = crate::cmd::verify::LevelArg::Declared)]
    level: crate::cmd::verify::LevelArg,
    /// Transactions to commit (aborted attempts and retries are recorded on top).
    #[arg(long, default_value_t = 400)]
    txns: u64,
    /// Concurrent clients (sessions).
    #[arg(long, default_value_t = 4)]
    clients: u32,
    /// Rows (keys) the clients contend on.
    #[arg(long, default_value_t = 6)]
    keys: u32,
    /// The seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// PostgreSQL target: the database's address.
    #[arg(long, default_value = "127.0.0.1:5432")]
    pg_addr: SocketAddr,
    /// PostgreSQL target: the user to connect as.
    #[arg(long, default_value = "postgres")]
    pg_user: String,
    /// PostgreSQL target: the database to use (the demo creates and drops its own schema in it).
    #[arg(long, default_value = "test")]
    pg_database: String,
    /// PostgreSQL target: keep the demo's schema (its table and rows) afterwards instead of dropping it, so
    /// that a reject can be replayed against it: `krait report replay ID --data-dir DATA_DIR --target …`.
    #[arg(long)]
    keep_schema: bool,
    /// Where reject reports are kept (`DATA_DIR/reports/`); nothing is written there on accept.
    #[arg(long, default_value = "krait-demo")]
    data_dir: PathBuf,
    /// Embedded target (implies --target embedded): also write the history the proxy recorded (`DIR/proxy.native`) and the reference
    /// store's own history of the same run (`DIR/refstore.native`), to compare them with `krait verify`.
    #[arg(long, value_name = "DIR")]
    history_out: Option<PathBuf>,
}

/// Transactions per round: small, so that a short demo shows several rounds.
const ROUND_SIZE: usize = 100;

/// Embedded target: the share of transactions that take the freshest view their model allows (the others
/// take a random older one the model allows), so weak models show their anomalies in a short run.
const FRESH_VIEW_SHARE: f64 = 0.5;

/// A fence every this many committed transactions per connection, as `krait serve`'s default: fences give
/// the online verifier the epochs it collects garbage by (Cobra §4.2). Each log fences a row of its own
/// (chosen at random when the log is new), so a demo beside another proxy on the same database never reads
/// a fence version its log did not record.
const FENCE_EVERY: u64 = 20;

/// Runs `krait demo`.
pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    if args.txns == 0 || args.clients == 0 || args.keys < 2 {
        anyhow::bail!("--txns and --clients must be at least 1, --keys at least 2");
    }
    let target = match (args.target, flags_for(&args, Target::Embedded), flags_for(&args, Target::Postgres)) {
        (_, embedded, postgres) if !embedded.is_empty() && !postgres.is_empty() => anyhow::bail!(
            "{} apply only to the embedded target and {} only to the postgres target; choose one",
            embedded.join(" and "),
            postgres.join(" and ")
        ),
        (Target::Auto, embedded, _) if !embedded.is_empty() => {
            println!("krait demo: {} implies --target embedded.", embedded.join(" and "));
            Target::Embedded
        }
        (Target::Auto, _, postgres) if !postgres.is_empty() => {
            println!("krait demo: {} implies --target postgres.", postgres.join(" and "));
            Target::Postgres
        }
        (Target::Postgres, embedded, _) if !embedded.is_empty() => {
            anyhow::bail!(
                "{} cannot apply to --target postgres: it is for the embedded target",
                embedded.join(" and ")
            )
        }
        (Target::Embedded, _, postgres) if !postgres.is_empty() => {
            anyhow::bail!(
                "{} cannot apply to --target embedded: it is for the postgres target",
                postgres.join(" and ")
            )
        }
        (Target::Auto, _, _) => {
            if TcpStream::connect_timeout(&args.pg_addr, Duration::from_millis(500)).is_ok() {
                println!("krait demo: PostgreSQL answers at {}; using it.", args.pg_addr);
                Target::Postgres
            } else {
                println!(
                    "krait demo: no PostgreSQL at {}; using the embedded reference store instead.",
                    args.pg_addr
                );
                Target::Embedded
            }
        }
        (t, _, _) => t,
    };
    let tmp = tempfile::Builder::new().prefix("krait-demo-").tempdir().context("cannot make a temp dir")?;
    let outcome = match target {
        Target::Embedded => embedded(&args, tmp.path()),
        _ => postgres(&args, tmp.path()),
    }?;
    summarize(&args, &outcome)
}

/// The flags given for one target only (they decide the target under `--target auto`).
fn flags_for(args: &DemoArgs, target: Target) -> Vec<&'static str> {
    let given: &[(&str, bool)] = match target {
        Target::Embedded => {
            &[("--model", args.model.is_some()), ("--history-out", args.history_out.is_some())]
        }
        Target::Postgres => &[("--isolation", args.isolation.is_some()), ("--keep-schema", args.keep_schema)],
        Target::Auto => &[],
    };
    given.iter().filter(|(_, is_given)| *is_given).map(|(flag, _)| *flag).collect()
}

impl DemoArgs {
    fn model(&self) -> Model {
        self.model.unwrap_or(Model::Serializable)
    }

    fn isolation(&self) -> Isolation {
        self.isolation.unwrap_or_default()
    }
}

/// What a run produced.
struct Outcome {
    status: Status,
    reports: Vec<Report>,
    /// Whether recorded transactions carry row-level reads and writes (false: nothing could be checked).
    row_ops: bool,
    elapsed: Duration,
    what: String,
    /// The history the proxy recorded, replayed from its log.
    recorded: Option<History>,
    /// Embedded target: the verifier's verdict on the store's own history of the run (accepted?) and how
    /// many transactions it holds.
    ground_truth: Option<(bool, usize)>,
}

fn bar(total: u64) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} recorded  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

fn verdict_so_far(s: &Status) -> String {
    let verdict = if s.rejects > 0 { format!("REJECT ({} anomalies)", s.rejects) } else { "accept".into() };
    format!("verified {} in {} rounds, verdict so far: {verdict}", s.verified, s.rounds)
}

/// The embedded target: the reference store's PostgreSQL-wire front on a free local port, the proxy in
/// front of it, the clients through the proxy, and the online verifier on the proxy's log.
fn embedded(args: &DemoArgs, tmp: &Path) -> anyhow::Result<Outcome> {
    let (cert, key, der) = self_signed(tmp)?;
    let config = StoreConfig { model: args.model(), seed: args.seed, fresh_view_share: FRESH_VIEW_SHARE };
    let store = SharedStore::new(config).context("invalid reference store settings")?;
    // The rows go straight into the store, so the load stays out of the proxy's history (as the PostgreSQL
    // target's set-up does): the proxy sees them as versions written before recording began.
    let mut setup = store.connect();
    for k in 0..args.keys {
        setup.write(RowKey(i64::from(k)), Some(START_BALANCE)).context("cannot load the store")?;
    }
    setup.commit().context("cannot load the store")?;
    drop(setup);
    let connector = tls_connector(der)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let outcome = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot listen on a local port for the reference store")?;
        let upstream = listener.local_addr().context("cannot read the reference store's address")?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(refstore::pg::serve(listener, store.clone(), async move {
            let _ = stopped.await;
        }));
        let result = async {
            let (config, tagging) = proxy_config(tmp, &cert, &key, upstream)?;
            let banner = format!(
                "krait demo: target: the embedded reference store (model {} = {:?}, at {upstream}, no database \
                 server) through the Krait proxy at {{proxy}} (TLS required, self-signed certificate), {} \
                 clients; the online verifier tails the proxy's history log.",
                args.model().name(),
                args.model(),
                args.clients
            );
            let what = format!("embedded reference store through the proxy, model {}", args.model().name());
            run_through_proxy(args, config, tagging, connector, Table::Kv, tmp, banner, what).await
        }
        .await;
        let _ = stop.send(());
        let served = server.await;
        let outcome = result?;
        served.context("the reference store's task failed")?.context("the reference store failed")?;
        anyhow::Ok(outcome)
    })?;
    drop(runtime);
    let own = store.history();
    let mut outcome = outcome;
    outcome.ground_truth = Some((store_verdict(&own, args.level.into())?, own.transactions.len()));
    if let Some(dir) = &args.history_out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let recorded = outcome.recorded.as_ref().context("the proxy's history was not kept")?;
        for (name, h) in [("proxy.native", recorded), ("refstore.native", &own)] {
            let path = dir.join(name);
            history::write_history(h, &path, history::Format::Native)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        println!(
            "krait demo: wrote the proxy's recorded history and the reference store's own history to {}",
            dir.display()
        );
    }
    Ok(outcome)
}

/// Whether the verifier accepts the store's own history of the run: what the clients did as the store
/// itself recorded it, without the proxy. The proxy's recording of the same run must get the same verdict.
fn store_verdict(h: &History, level: verifier::Level) -> anyhow::Result<bool> {
    let mut options = RoundOptions::online(ROUND_SIZE, Duration::from_millis(200));
    options.verify.level = level;
    Ok(verify_in_rounds(h, &options).context("cannot verify the store's own history")?.is_accept())
}

/// The in-process proxy's configuration: TLS required with the demo's certificate, the upstream database,
/// a strict log in `tmp/log`, row-level tagging on and a fence every [`FENCE_EVERY`] commits. Returns
/// whether tagging is on (a build without it falls back to statement text only, and says so).
fn proxy_config(
    tmp: &Path,
    cert: &Path,
    key: &Path,
    upstream: SocketAddr,
) -> anyhow::Result<(proxy::Config, bool)> {
    let toml = format!(
        "[listen]\naddress = \"127.0.0.1:0\"\n[tls]\nmode = \"require\"\ncert = \"{}\"\nkey = \"{}\"\n\
         [upstream]\naddress = \"{upstream}\"\n[log]\npath = \"{}\"\ndurability = \"strict\"\n[admin]\nenabled = false\n",
        cert.display(),
        key.display(),
        tmp.join("log").display()
    );
    let tagged = format!("{toml}[tagging]\nstrategy = \"xmin\"\n[fence]\nevery = {FENCE_EVERY}\n");
    match proxy::Config::parse(&tagged, Path::new("<demo>")) {
        Ok(c) => Ok((c, true)),
        Err(e) if e.to_string().contains("tagging") || e.to_string().contains("fence") => {
            Ok((proxy::Config::parse(&toml, Path::new("<demo>")).context("the demo's proxy config")?, false))
        }
        Err(e) => Err(e).context("the demo's proxy config"),
    }
}

/// A self-signed certificate for `localhost` and 127.0.0.1, written into `dir`: `(cert PEM path, key PEM
/// path, DER)`.
fn self_signed(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf, Vec<u8>)> {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .context("cannot generate a certificate")?;
    let cert = dir.join("demo.crt");
    let key = dir.join("demo.key");
    std::fs::write(&cert, ck.cert.pem()).context("cannot write the certificate")?;
    std::fs::write(&key, ck.signing_key.serialize_pem()).context("cannot write the key")?;
    Ok((cert, key, ck.cert.der().to_vec()))
}

/// A TLS connector that trusts exactly the demo's own certificate.
fn tls_connector(der: Vec<u8>) -> anyhow::Result<tokio_postgres_rustls::MakeRustlsConnect> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls_pki_types::CertificateDer::from(der)).context("cannot trust the demo certificate")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("no TLS protocol version")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The PostgreSQL target.
fn postgres(args: &DemoArgs, tmp: &Path) -> anyhow::Result<Outcome> {
    let (cert, key, der) = self_signed(tmp)?;
    // Row-level tagging (SQL to reads and writes of rows) is a proxy option when this build has it; the demo
    // turns it on, and says so plainly when it is not there (then nothing row-level can be checked).
    let (config, tagging) = proxy_config(tmp, &cert, &key, args.pg_addr)?;
    let connector = tls_connector(der)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let schema: SchemaName = format!("krait_demo_{}_{}", std::process::id(), args.seed)
        .parse()
        .context("the demo's schema name")?;
    let direct = format!(
        "host={} port={} user={} dbname={} connect_timeout=5",
        args.pg_addr.ip(),
        args.pg_addr.port(),
        args.pg_user,
        args.pg_database
    );
    runtime.block_on(async {
        // Set-up goes straight to the database, so the bulk load stays out of the history.
        let (admin, conn) = tokio_postgres::connect(&direct, tokio_postgres::NoTls)
            .await
            .with_context(|| format!("cannot connect to PostgreSQL ({direct})"))?;
        let conn_task = tokio::spawn(conn);
        admin
            .batch_execute(&transfer::accounts_setup_sql(&schema, args.keys))
            .await
            .context("cannot create the demo's table")?;
        let banner = format!(
            "krait demo: target: PostgreSQL at {} through the Krait proxy at {{proxy}} (TLS required, \
             self-signed certificate), {} clients, isolation {}; the online verifier tails the proxy's history \
             log.",
            args.pg_addr, args.clients, args.isolation()
        );
        let what = format!("PostgreSQL through the proxy, isolation {}", args.isolation());
        let table = Table::Accounts { schema: schema.clone() };
        let result = run_through_proxy(args, config, tagging, connector, table, tmp, banner, what).await;
        let dropped = if args.keep_schema {
            println!(
                "krait demo: kept schema {schema} in database {} (--keep-schema); drop it with: DROP SCHEMA \
                 {schema} CASCADE",
                args.pg_database
            );
            Ok(())
        } else {
            admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await
        };
        drop(admin);
        let _ = conn_task.await;
        let outcome = result?;
        dropped.context("cannot drop the demo's schema")?;
        Ok(outcome)
    })
}

/// Starts the proxy, runs the clients through it over TLS with the verifier tailing its log, stops both,
/// and returns what was recorded and verified. `banner` names the target; `{proxy}` in it becomes the
/// proxy's address.
#[allow(clippy::too_many_arguments)]
async fn run_through_proxy(
    args: &DemoArgs,
    config: proxy::Config,
    tagging: bool,
    connector: tokio_postgres_rustls::MakeRustlsConnect,
    table: Table,
    tmp: &Path,
    banner: String,
    what: String,
) -> anyhow::Result<Outcome> {
    let handle = proxy::start(config).await.context("the proxy could not start")?;
    let addr = handle.listen_addr();
    println!("{}", banner.replace("{proxy}", &addr.to_string()));
    let start = Instant::now();
    let mut options = RoundOptions::online(ROUND_SIZE, Duration::from_millis(300));
    options.verify.level = args.level.into();
    let tailer = Tailer::spawn(handle.log().clone(), options, Some(ReportStore::open(tmp)?), |_, _| {})?;
    println!(
        "krait demo: row-level tagging: {}",
        if tagging {
            "on (xmin): the proxy records which row versions each statement read and wrote"
        } else {
            "NOT AVAILABLE in this build of the proxy: transactions are recorded as statement text only"
        }
    );
    let run = Arc::new(Transfers {
        txns: args.txns,
        keys: args.keys,
        isolation: args.isolation(),
        table,
        seed: args.seed,
        counts: Default::default(),
    });
    let url = format!(
        "host=localhost port={} user={} dbname={} sslmode=require connect_timeout=5",
        addr.port(),
        args.pg_user,
        args.pg_database
    );
    let pb = bar(args.txns);
    let clients = drive_clients(&run, args.clients, &url, connector, &tailer, &pb).await;
    // Whatever the clients did, stop the proxy and the verifier. First let the verifier catch up with
    // everything the proxy logged, then stop the proxy (closing the log) and let it read the rest.
    // Only durable records are read, and the last ones may wait for the next fsync; the proxy's clean
    // close makes the rest durable, and the verifier's last pass reads them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while tailer.status().records_read < handle.log().durable_below() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = handle.log().clone();
    let stopped = handle.shutdown().await;
    let status = tokio::task::spawn_blocking(move || tailer.finish()).await.context("verifier thread")??;
    let recorded = log.replay().context("cannot replay the proxy's history log")?;
    clients?;
    stopped.context("the proxy stopped with an error")?;
    let counts = &run.counts;
    pb.set_position(counts.finished());
    pb.finish_with_message(verdict_so_far(&status));
    println!(
        "krait demo: clients: {} committed, {} rolled back by the workload, {} serialization-failure retries \
         (each aborted attempt is recorded too), {} errors",
        counts.committed.load(Ordering::Relaxed),
        counts.rolled_back.load(Ordering::Relaxed),
        counts.retries.load(Ordering::Relaxed),
        counts.errors.load(Ordering::Relaxed)
    );
    if counts.errors.load(Ordering::Relaxed) > 0 {
        anyhow::bail!("some demo transactions failed with errors other than serialization failures");
    }
    let row_ops = status.ops_read > 0;
    let store = ReportStore::open(tmp)?;
    let reports = status.report_ids.iter().map(|id| store.load(id)).collect::<Result<Vec<_>, _>>()?;
    Ok(Outcome {
        reports,
        row_ops,
        elapsed: start.elapsed(),
        what,
        status,
        recorded: Some(recorded),
        ground_truth: None,
    })
}

/// Connects the run's clients through the proxy over TLS and runs them to the end, showing progress.
async fn drive_clients(
    run: &Arc<Transfers>,
    clients: u32,
    url: &str,
    connector: tokio_postgres_rustls::MakeRustlsConnect,
    tailer: &Tailer,
    pb: &ProgressBar,
) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, conn) = tokio_postgres::connect(url, connector.clone())
            .await
            .context("cannot connect through the proxy")?;
        tokio::spawn(conn);
        tasks.push(tokio::spawn(transfer::run_client(run.clone(), c, client)));
    }
    let mut ticker = tokio::time::interval(Duration::from_millis(200));
    while !tasks.iter().all(|t| t.is_finished()) {
        ticker.tick().await;
        pb.set_position(run.counts.finished());
        pb.set_message(verdict_so_far(&tailer.status()));
    }
    for t in tasks {
        t.await.context("a client task failed")?;
    }
    Ok(())
}

/// How many rejects after the first the demo lists, one line each.
const DEMO_REJECT_LINES: usize = 8;

/// What an anomaly class means, in plain words.
fn plain_words(class: AnomalyClass) -> &'static str {
    match class {
        AnomalyClass::G0 => {
            "two transactions overwrote each other's writes in opposite orders (dirty write)."
        }
        AnomalyClass::G1a => "a transaction read a value written by a transaction that aborted.",
        AnomalyClass::G1b => {
            "a transaction read a value that another transaction later overwrote itself \
                               before committing (an intermediate value)."
        }
        AnomalyClass::G1c => "transactions read each other's writes in a circle, so none can come first.",
        AnomalyClass::GSingle => {
            "a transaction saw part of another's effects but missed the rest (read skew)."
        }
        AnomalyClass::G2Item => {
            "transactions each read something that another of them then overwrote, in a circle: each acted \
             on a snapshot another invalidated (an anti-dependency cycle)."
        }
        AnomalyClass::WriteSkew => {
            "two transactions each read something the other then overwrote: each acted on a snapshot the \
             other invalidated, so no serial order explains both (write skew)."
        }
        AnomalyClass::LostUpdate => {
            "two transactions read the same value and both wrote a new one based on \
                                      it, so one update was lost."
        }
        AnomalyClass::LongFork => "two readers saw two independent writes in opposite orders.",
        AnomalyClass::StaleRead => {
            "a transaction read a value that had already been overwritten long before."
        }
        AnomalyClass::NonRepeatableRead => "a transaction read the same key twice and got different values.",
        AnomalyClass::GarbageRead => "a read returned a value no transaction ever wrote.",
        AnomalyClass::UnownedVersion => {
            "a read returned a version no transaction through the proxy wrote, though every writer was to go \
             through it."
        }
        AnomalyClass::DuplicateWrite => "two writes carry the same identity.",
        AnomalyClass::FutureRead => "a read returned a write its own transaction made only later.",
        AnomalyClass::FracturedRead => {
            "a transaction saw some of another transaction's writes but an older version of a key it also wrote \
             (a fractured read)."
        }
        AnomalyClass::CausalityViolation => {
            "a transaction read a version older than a write it causally depends on."
        }
        AnomalyClass::InternalRead => {
            "after writing a key, a transaction read it back and did not see its own \
                                        write."
        }
    }
}

fn summarize(args: &DemoArgs, o: &Outcome) -> anyhow::Result<ExitCode> {
    let s = &o.status;
    println!();
    println!("Summary ({}):", o.what);
    println!(
        "  {} transactions recorded ({} row-level reads and writes), {} verified online in {} rounds, {:.1} s",
        s.txns_read,
        s.ops_read,
        s.verified,
        s.rounds,
        o.elapsed.as_secs_f64()
    );
    if let Some(e) = &s.error {
        anyhow::bail!("the online verifier failed: {e}");
    }
    if !o.row_ops {
        println!(
            "  NOTE: the recorded transactions carry no row-level reads or writes (SQL-to-row tagging is off \
             or not available in this build of the proxy: statement text only), so there was nothing for the \
             verifier to check and its ACCEPT below is trivially true. It does NOT show that PostgreSQL ran \
             these transactions serializably."
        );
    }
    let reports = &o.reports;
    let accepted = reports.is_empty() && s.rejects == 0;
    if let Some((truth, n)) = o.ground_truth {
        let word = |a: bool| if a { "ACCEPT" } else { "REJECT" };
        println!(
            "  Cross-check: the reference store's own record of this run ({n} transactions, kept by the store, not \
             the proxy) gets {}: {}.",
            word(truth),
            if truth == accepted {
                "the verdicts agree"
            } else {
                "the verdicts DISAGREE, a bug in Krait's recording or checking"
            }
        );
    }
    let level = verifier::Level::from(args.level);
    if level == verifier::Level::Declared
        && let Some(h) = &o.recorded
    {
        let d = verifier::DeclaredLevels::count(h);
        println!(
            "  Checked at the levels the transactions asked for (--level declared): {} serializable, {} \
             repeatable read (as snapshot isolation), {} read committed and {} read uncommitted (as Adya's \
             PL-2), {} with no recorded level and {} fences (as serializable).",
            d.serializable, d.repeatable_read, d.read_committed, d.read_uncommitted, d.unrecorded, d.fences
        );
    }
    if accepted {
        let what = match level {
            verifier::Level::Declared => "every transaction kept the isolation level it asked for".to_owned(),
            other => format!("the history satisfies {}", other.name()),
        };
        println!("  Verdict: ACCEPT: no anomaly found; {what}.");
        return Ok(ExitCode::SUCCESS);
    }
    println!("  Verdict: REJECT: {} anomal{} found.", s.rejects, if s.rejects == 1 { "y" } else { "ies" });
    let store = ReportStore::open(&args.data_dir)
        .with_context(|| format!("cannot keep the reports in {}", args.data_dir.display()))?;
    let mut first_id = None;
    let mut others = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        let id = store.save(r)?;
        if i > 0 {
            others.push((id, r.labelled_summary_line()));
            continue;
        }
        first_id = Some(id.clone());
        // The first reject in full, so that it fits on one screen: the plain-words sentence, then the
        // report with short labels and values; the others one line each below it.
        println!();
        println!(
            "Reject 1 of {} (report {}):",
            reports.len(),
            store.dir().join(format!("{id}.json")).display()
        );
        let mut classes: Vec<AnomalyClass> = r.anomalies.iter().map(|a| a.class).collect();
        classes.dedup();
        for c in classes {
            println!("  In plain words ({}): {}", c.name(), plain_words(c));
        }
        for line in r.render_text().lines() {
            println!("  {line}");
        }
    }
    if !others.is_empty() {
        let data = args.data_dir.display();
        println!();
        println!(
            "The other {} reject(s), one line each (labels are per report; `krait report show ID --data-dir \
             {data}` shows one in full):",
            others.len()
        );
        for (id, line) in others.iter().take(DEMO_REJECT_LINES) {
            println!("  {id}  {line}");
        }
        if others.len() > DEMO_REJECT_LINES {
            println!(
                "  … and {} more: krait report list --data-dir {data}",
                others.len() - DEMO_REJECT_LINES
            );
        }
    }
    if let (Some(id), true) = (first_id, o.ground_truth.is_none()) {
        let data = args.data_dir.display();
        println!();
        println!(
            "Replay the first one as SQL scripts: krait report replay {id} --data-dir {data} --out replay-{id}"
        );
        if args.keep_schema {
            println!(
                "Or run it against the kept schema: krait report replay {id} --data-dir {data} --target \
                 'host={} port={} user={} dbname={}'",
                args.pg_addr.ip(),
                args.pg_addr.port(),
                args.pg_user,
                args.pg_database
            );
        }
    }
    Ok(ExitCode::from(1))
}
