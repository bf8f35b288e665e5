//! `krait refstore`: the reference store behind a PostgreSQL-wire front, so that real drivers (psql,
//! tokio-postgres, ...) run transactions on a store whose consistency model is known by construction.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use history::Format;
use refstore::{Model, SharedStore, StoreConfig};

use crate::cmd::proxy::shutdown_signal;

/// Arguments of `krait refstore`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The store has one table, kv(k int8 primary key, v int8 not null), empty at start. It understands BEGIN / \
START TRANSACTION, COMMIT, ROLLBACK and point statements: SELECT cols FROM kv WHERE k = x; UPDATE kv SET v = \
x | v + x | v - x WHERE k = x; INSERT INTO kv (k, v) VALUES (x, x), ...; DELETE FROM kv WHERE k = x; where x \
is an integer literal or a parameter $n, cols are k, v or xmin (the writer's transaction number), and \
UPDATE/INSERT/DELETE take RETURNING cols. It also answers what the Krait proxy sends on its own (its \
primary-key catalog query, `xmin::text` tags, and fence transactions on a second table, krait_fence), so \
`krait proxy` with tagging on can run in front of it. Other SQL gets ERROR 0A000 and the connection carries on.

Each connection is one client (one session of the history). A transaction takes its view when it begins and \
commits only if the model's execution test allows it; a refused COMMIT is ERROR 40001 (serialization_failure), \
which drivers retry. Statements outside BEGIN commit one by one. No authentication, no TLS.

Example:
  krait refstore --listen 127.0.0.1:5433 --model si --history-out si.native &
  psql -h 127.0.0.1 -p 5433 -c 'INSERT INTO kv VALUES (1, 100)'
  kill %1 && krait verify si.native")]
pub struct RefstoreArgs {
    /// The address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:5433", value_name = "ADDR")]
    listen: SocketAddr,
    /// The consistency model: ser, si, psi, cp, ua, cc, sg, ra or rc (Xiong et al., ECOOP'20; rc is read
    /// committed, outside the paper).
    #[arg(long, default_value = "ser", value_parser = parse_model)]
    model: Model,
    /// The seed of the random view choices. Clients that run one at a time replay exactly under a seed;
    /// concurrent clients add the scheduler's nondeterminism.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The probability that a transaction takes the freshest view its model allows rather than a random
    /// allowed one. Below 1, weak models read stale data and show more anomalies (serializability's
    /// transactions always see the whole store).
    #[arg(long, default_value_t = 1.0, value_name = "P")]
    fresh_view_share: f64,
    /// On shutdown (Ctrl-C or SIGTERM), write the history the clients observed to FILE: JSON Lines if the
    /// name ends in .jsonl, else Krait's native format. Check it with `krait verify FILE`.
    #[arg(long, value_name = "FILE")]
    history_out: Option<PathBuf>,
}

fn parse_model(s: &str) -> Result<Model, String> {
    s.parse::<Model>().map_err(|e| e.to_string())
}

/// Runs `krait refstore` until Ctrl-C or SIGTERM.
pub fn run(args: RefstoreArgs) -> anyhow::Result<ExitCode> {
    let config = StoreConfig { model: args.model, seed: args.seed, fresh_view_share: args.fresh_view_share };
    let store = SharedStore::new(config).context("invalid reference store settings")?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let addr = listener.local_addr().context("cannot read the listening address")?;
        eprintln!(
            "krait refstore: listening on {addr} (model {}, seed {}); connect with `psql -h {} -p {}`; table \
             kv(k int8, v int8); stop with Ctrl-C",
            args.model,
            args.seed,
            addr.ip(),
            addr.port()
        );
        refstore::pg::serve(listener, store.clone(), shutdown_signal()).await.context("the server failed")
    })?;
    let history = store.history();
    let stats = history.stats();
    eprintln!(
        "krait refstore: stopped; {} transactions recorded ({} committed, {} aborted) in {} sessions",
        stats.transactions, stats.committed, stats.aborted, stats.sessions
    );
    if let Some(path) = &args.history_out {
        history::write_history(&history, path, format_for(path))
            .with_context(|| format!("cannot write the history to {}", path.display()))?;
        eprintln!(
            "krait refstore: history written to {}; check it with `krait verify {}`",
            path.display(),
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn format_for(path: &Path) -> Format {
    match path.extension().and_then(|e| e.to_str()) {
        Some("jsonl" | "json") => Format::Jsonl,
        _ => Format::Native,
    }
}
