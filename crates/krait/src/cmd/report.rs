//! `krait report list|show`: the reject reports the online verifier wrote into `DATA_DIR/reports/`. It needs
//! nothing but the data directory: no proxy, no database, no running verifier.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use verifier::ReportStore;

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
    /// Show one report, as text (the default), as its JSON document, or as a Graphviz graph.
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
                ShowFormat::Text => print!("{}", report.render_text()),
            }
            Ok(ExitCode::SUCCESS)
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
}
