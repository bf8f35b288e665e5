//! `krait report list|show|check|replay`: the reject reports the online verifier wrote into
//! `DATA_DIR/reports/`. It needs nothing but the data directory: no proxy, no database, no running verifier,
//! and (for `check`) not the history log, which compaction may since have cut short. [`StoredReports`] hands the
//! same directory to the admin server of `krait serve`, for its status page and `/reports/ID`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use proxy::status_page::{ReportLink, ReportList, ReportPages};
use verifier::{CitedError, Report, ReportStore, ReportStoreError};

/// Subcommands of `krait report`.
#[derive(Debug, clap::Subcommand)]
pub enum ReportCommand {
    /// List the stored reject reports, oldest first: id, verdict line, anomaly classes, transactions.
    List {
        /// The data directory (its `reports/` folder holds the reports).
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
        /// Print the list as a JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Show one report, as text (the default), as its JSON document, as a Graphviz graph, or as a
    /// self-contained HTML page with its cycles drawn.
    Show {
        /// The report's id, as `list` prints it (for example r000001).
        id: String,
        /// The data directory (its `reports/` folder holds the reports).
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
        /// Print the report's JSON document (the stable schema of crates/verifier/REPORT.md); the same as
        /// `--format json`.
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// How to print it.
        #[arg(long, value_enum, default_value_t = ShowFormat::Text)]
        format: ShowFormat,
    },
    /// Re-check a reject report against the transactions it carries, without the history log it came from
    /// (which compaction may have cut since): every stated edge must follow from those transactions and
    /// every cycle must close, as `krait verify --check-report` checks a report against a whole history.
    /// Exit code: 0 the report holds, 1 it does not, 2 error (an unreadable report; an accept, whose
    /// evidence is the whole history; or a report from before reports carried every transaction they cite,
    /// schema 4, that its own transactions do not bear out).
    Check {
        /// The report's id, as `list` prints it (for example r000001).
        id: String,
        /// The data directory (its `reports/` folder holds the reports).
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
    },
    /// Replay a reject report's anomaly (CLOTHO): write one SQL script per session and the interleaving
    /// that produced it, and with --target run them against a database, recorded by an in-process proxy,
    /// and say whether the anomaly was reproduced, prevented (the database refused a step with a
    /// serialization failure or deadlock) or not reproduced. Exit code: 0 reproduced, 1 prevented or not
    /// reproduced, 2 error. Without --target or --out, prints the interleaving.
    ///
    /// The replay runs in a scratch schema (krait_replay_ID, dropped afterwards): its tables are made LIKE
    /// the recorded ones on the target, holding the rows the steps touch at the values they had before the
    /// first step (from the recorded rows). It never touches the recorded tables unless --in-place.
    Replay {
        /// The report's id, as `list` prints it (for example r000001).
        id: String,
        /// The data directory (its `reports/` folder holds the reports).
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
        /// The database to replay against, as a libpq connection string or URL
        /// (`postgres://user@127.0.0.1:5432/db`); it must hold the recorded tables. `embedded`: a fresh
        /// embedded reference store running --model, loaded with the rows at their recorded values (for
        /// reports of `krait demo --target embedded`).
        #[arg(long, value_name = "URL")]
        target: Option<String>,
        /// With --target embedded: the consistency model the reference store runs (ser, si, psi, cp, ua,
        /// cc, sg, ra, rc); it takes the freshest view the model allows, so the replay is deterministic.
        #[arg(long)]
        model: Option<refstore::Model>,
        /// Run every transaction at this level (`read-committed`, `repeatable-read`, `serializable`)
        /// instead of the level it recorded.
        #[arg(long, value_name = "LEVEL", value_parser = parse_isolation)]
        isolation: Option<history::IsolationLevel>,
        /// Write the scripts into this folder: setup.sql, one session-S….sql per session, interleaving.txt, cleanup.sql.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Run on the recorded tables themselves, setting the touched rows to their recorded values first.
        #[arg(long, requires = "target")]
        in_place: bool,
        /// Keep the scratch schema afterwards, to look at the rows the replay left.
        #[arg(long, requires = "target")]
        keep: bool,
        /// How long a step may go unanswered before it counts as blocked (on a lock) and the replay goes
        /// on with the other sessions.
        #[arg(long, value_name = "MS", default_value_t = 1000)]
        step_timeout_ms: u64,
    },
}

/// Parses an isolation level as SQL spells it (any case, spaces, hyphens or underscores).
fn parse_isolation(text: &str) -> Result<history::IsolationLevel, String> {
    history::IsolationLevel::parse_sql(text).ok_or_else(|| {
        format!("`{text}` is not an isolation level (read-uncommitted, read-committed, repeatable-read, serializable)")
    })
}

/// `krait report show --format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ShowFormat {
    /// For a person: the verdict, each cycle edge by edge, the transactions, with short labels.
    Text,
    /// The JSON document (crates/verifier/REPORT.md).
    Json,
    /// A Graphviz graph of the cycles (`dot -Tsvg`).
    Dot,
    /// One self-contained HTML page (no network needed): the verdict, each cycle drawn as SVG with the
    /// prose for each edge, and the transactions' statements.
    Html,
}

/// Runs `krait report`.
pub fn run(cmd: ReportCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ReportCommand::List { data_dir, json } => {
            let store = ReportStore::open_read_only(&data_dir);
            let list = store.list().with_context(|| format!("cannot list {}", store.dir().display()))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() {
                println!("no reports in {}", store.dir().display());
            } else {
                for r in &list {
                    let txns: Vec<String> = r.transactions.iter().map(|t| format!("T{t}")).collect();
                    println!("{}  {}  [{}]  {}", r.id, r.verdict, r.anomalies.join(", "), txns.join(" "));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ReportCommand::Show { id, data_dir, json, format } => {
            let store = ReportStore::open_read_only(&data_dir);
            let report = store.load(&id)?;
            match if json { ShowFormat::Json } else { format } {
                ShowFormat::Json => println!("{}", report.to_json()),
                ShowFormat::Dot => print!("{}", report.to_dot()),
                ShowFormat::Html => print!("{}", report.to_html()),
                ShowFormat::Text => print!("{}", report.render_text()),
            }
            Ok(ExitCode::SUCCESS)
        }
        ReportCommand::Check { id, data_dir } => {
            let report = ReportStore::open_read_only(&data_dir).load(&id)?;
            check(&report)
        }
        ReportCommand::Replay {
            id,
            data_dir,
            target,
            model,
            isolation,
            out,
            in_place,
            keep,
            step_timeout_ms,
        } => {
            let report = ReportStore::open_read_only(&data_dir).load(&id)?;
            let plan = replay::ReplayPlan::new(&id, &report, isolation)?;
            let Some(target) = target else {
                let scratch = replay::Scratch {
                    map: replay::TableMap::scratch(&replay::scratch_schema(&id), plan.tables()),
                    primary_keys: Default::default(),
                };
                let prepared = replay::Prepared::new(&plan, &scratch)?;
                match out {
                    Some(dir) => {
                        for path in replay::script::write(&dir, &plan, &prepared)
                            .with_context(|| format!("cannot write the scripts into {}", dir.display()))?
                        {
                            println!("wrote {}", path.display());
                        }
                    }
                    None => {
                        let files = replay::script::files(&plan, &prepared);
                        let (_, order) = files
                            .iter()
                            .find(|(name, _)| name == "interleaving.txt")
                            .expect("always written");
                        print!("{order}");
                    }
                }
                return Ok(ExitCode::SUCCESS);
            };
            let options = replay::ReplayOptions {
                in_place,
                keep,
                step_timeout: std::time::Duration::from_millis(step_timeout_ms),
                out,
                ..replay::ReplayOptions::new(target)
            };
            let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            let replayed = match (options.target.as_str(), model) {
                ("embedded", Some(model)) => runtime.block_on(replay_on_embedded(&plan, model, options))?,
                ("embedded", None) => {
                    anyhow::bail!("--target embedded needs --model: the model the store runs")
                }
                (_, Some(_)) => anyhow::bail!("--model is for --target embedded"),
                (_, None) => runtime.block_on(replay::replay(&plan, &options))?,
            };
            print!("{}", replay::describe(&plan, &replayed));
            Ok(if replayed.verdict == replay::Verdict::Reproduced {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// `krait report check`: says what re-checking `report` against its own transactions covered, or why it
/// does not hold.
fn check(report: &Report) -> anyhow::Result<ExitCode> {
    match verifier::check_cited(report) {
        Ok(covered) => {
            println!("REPORT CHECKED: {}", covered.check);
            println!(
                "checked against the {} transaction(s) the report carries, without the history it came from",
                covered.transactions
            );
            if covered.absences_unproved > 0 {
                println!(
                    "not checked: {} anomal{} claim that no recorded transaction wrote the version read, which \
                     only the whole history can show (krait verify --check-report)",
                    covered.absences_unproved,
                    if covered.absences_unproved == 1 { "y" } else { "ies" }
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(err @ (CitedError::Accept | CitedError::Incomplete { .. })) => Err(anyhow::Error::new(err)),
        Err(err) => {
            println!("REPORT REFUTED: {err}");
            Ok(ExitCode::from(1))
        }
    }
}

/// Replays `plan` on a fresh embedded reference store running `model`, behind its PostgreSQL-wire front on
/// a local port: the rows go straight into the store at their values before the first step (the store's
/// tables are `kv(k, v)` and the fence table `krait_fence(id, epoch)`), so the recording proxy sees them as versions from before recording began.
async fn replay_on_embedded(
    plan: &replay::ReplayPlan,
    model: refstore::Model,
    mut options: replay::ReplayOptions,
) -> anyhow::Result<replay::Replayed> {
    let config = refstore::StoreConfig { model, seed: 1, fresh_view_share: 1.0 };
    let store = refstore::SharedStore::new(config).context("invalid reference store settings")?;
    let mut load = store.connect();
    for (key, before) in replay::rows_before(plan) {
        let table = match key.table.as_str() {
            "kv" => Some(refstore::Table::Kv),
            "krait_fence" => Some(refstore::Table::Fence),
            _ => None,
        };
        let row = match (table, key.pk.as_slice()) {
            (Some(table), [k]) => k.parse::<i64>().ok().map(|key| refstore::Row { table, key }),
            _ => None,
        }
        .with_context(|| {
            format!(
                "{}:{} is not a row of the embedded store's kv(k, v) or krait_fence(id, epoch)",
                key.table,
                key.pk.join(",")
            )
        })?;
        let (name, value_column) = (row.table.name(), row.table.value_column());
        match before {
            replay::Before::Row(values) => {
                let v = values.iter().find(|c| c.column == value_column).and_then(|c| match &c.value {
                    history::values::Value::Text(v) => v.parse::<i64>().ok(),
                    _ => None,
                });
                let v = v.with_context(|| {
                    format!("{name}:{}: the recorded row has no integer {value_column}", row.key)
                })?;
                load.write(row, Some(v)).context("cannot load the store")?;
            }
            replay::Before::Absent => {}
            replay::Before::Unknown => println!(
                "note: {name}:{}: its value before the first step was not recorded; it starts absent",
                row.key
            ),
        }
    }
    load.commit().context("cannot load the store")?;
    drop(load);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot listen on a local port for the reference store")?;
    let port = listener.local_addr().context("cannot read the reference store's address")?.port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(refstore::pg::serve(listener, store, async move {
        let _ = stopped.await;
    }));
    options.target = format!("host=127.0.0.1 port={port} user=krait dbname=kv");
    options.preloaded = true;
    let replayed = replay::replay(plan, &options).await;
    let _ = stop.send(());
    server.await.context("the reference store's task failed")?.context("the reference store failed")?;
    Ok(replayed?)
}

/// A data directory's reports as the admin server shows them: listed on its status page, each at
/// `/reports/ID` as the page `--format html` prints.
pub struct StoredReports(pub ReportStore);

impl ReportPages for StoredReports {
    fn newest(&self, limit: usize) -> Result<ReportList, String> {
        let ids = self.0.ids().map_err(|e| e.to_string())?;
        let newest = ids
            .iter()
            .rev()
            .take(limit)
            .map(|id| ReportLink {
                id: id.clone(),
                // One unreadable report must not hide the others.
                verdict: self
                    .0
                    .load(id)
                    .map_or_else(|e| format!("cannot be read: {e}"), |r| r.labelled_summary_line()),
            })
            .collect();
        Ok(ReportList { total: ids.len(), newest })
    }

    fn page(&self, id: &str) -> Result<Option<String>, String> {
        match self.0.load(id) {
            Ok(report) => Ok(Some(report.to_html())),
            Err(ReportStoreError::BadId(_) | ReportStoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::HistoryBuilder;
    use verifier::{Options, verify};

    #[test]
    fn list_and_show_work_on_the_data_directory_alone() {
        let dir = tempfile::tempdir().unwrap();
        let h = HistoryBuilder::new()
            .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
            .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
            .build();
        let report = verify(&h, &Options::default()).unwrap();
        let id = ReportStore::open(dir.path()).unwrap().save(&report).unwrap();
        let list = ReportCommand::List { data_dir: dir.path().to_path_buf(), json: true };
        assert_eq!(run(list).unwrap(), ExitCode::SUCCESS);
        let show = ReportCommand::Show {
            id: id.clone(),
            data_dir: dir.path().to_path_buf(),
            json: false,
            format: ShowFormat::Text,
        };
        assert_eq!(run(show).unwrap(), ExitCode::SUCCESS);
        let missing = ReportCommand::Show {
            id: "r000042".into(),
            data_dir: dir.path().to_path_buf(),
            json: false,
            format: ShowFormat::Text,
        };
        assert!(run(missing).is_err());
        let bad = ReportCommand::Show {
            id: "../x".into(),
            data_dir: dir.path().to_path_buf(),
            json: false,
            format: ShowFormat::Text,
        };
        assert!(run(bad).is_err());
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(
            run(ReportCommand::List { data_dir: empty.path().to_path_buf(), json: false }).unwrap(),
            ExitCode::SUCCESS
        );
    }

    #[test]
    fn stored_reports_are_listed_newest_first_and_only_their_ids_have_pages() {
        let dir = tempfile::tempdir().unwrap();
        let h = HistoryBuilder::new()
            .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
            .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
            .build();
        let report = verify(&h, &Options::default()).unwrap();
        let store = ReportStore::open(dir.path()).unwrap();
        let (first, second) = (store.save(&report).unwrap(), store.save(&report).unwrap());
        let pages = StoredReports(store);
        let list = pages.newest(1).unwrap();
        assert_eq!(list.total, 2);
        assert_eq!(list.newest.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [second.as_str()]);
        assert!(
            list.newest[0].verdict.starts_with("write skew: T"),
            "a cycle in a few words: {:?}",
            list.newest
        );
        let page = pages.page(&first).unwrap().expect("a stored report has a page");
        assert!(page.contains("class=\"txn\""), "{page}");
        for missing in ["r000042", "../reports/r000001", "r000001.json", "x"] {
            assert_eq!(pages.page(missing), Ok(None), "{missing}");
        }
    }
}
