//! `krait history`: inspect and convert histories.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use history::History;
use history::codec::{self, Format};
use history::log::{HistoryLog, LogReader};

/// Subcommands of `krait history`.
#[derive(Debug, clap::Subcommand)]
pub enum HistoryCommand {
    /// Print counts: sessions, transactions (by outcome), reads, writes, distinct keys and fence ops.
    Stats {
        /// The history: a native or JSON Lines file, a Cobra log folder, or a PolySI or IsoVista text file.
        path: PathBuf,
        #[command(flatten)]
        input: InputFormat,
        /// Print the counts as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Convert a history into Krait's native binary format or JSON Lines.
    Convert {
        /// The history to read.
        input: PathBuf,
        /// Where to write the converted history. It must not exist yet, unless --force is given.
        output: PathBuf,
        #[command(flatten)]
        input_format: InputFormat,
        /// The output format: native (compact binary) or jsonl (one transaction per line, for people).
        #[arg(long, value_parser = parse_format, default_value = "native")]
        to: Format,
        /// Overwrite the output if it exists.
        #[arg(long)]
        force: bool,
    },
}

/// How to read an input history.
#[derive(Debug, clap::Args)]
pub struct InputFormat {
    /// The input format: auto, native, jsonl, cobra, cobra-ts (Cobra logs with timestamps) or polysi (also
    /// IsoVista's text).
    #[arg(long = "format", value_parser = parse_input_format, default_value = "auto")]
    pub format: FormatChoice,
}

/// A format named on the command line, or `auto` to detect it from the path.
#[derive(Debug, Clone, Copy)]
pub struct FormatChoice(pub Option<Format>);

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse::<Format>().map_err(|e| e.to_string())
}

fn parse_input_format(s: &str) -> Result<FormatChoice, String> {
    if s == "auto" { Ok(FormatChoice(None)) } else { parse_format(s).map(|f| FormatChoice(Some(f))) }
}

/// Reads a history, naming the path and the format in any error. A proxy's history log directory (the
/// `[log] path` of its configuration) is replayed: transactions whose outcome never reached the log are
/// indeterminate.
pub fn load(path: &Path, format: Option<Format>) -> anyhow::Result<History> {
    if format.is_none() && is_history_log(path) {
        let reader = open_log(path)?;
        let history =
            reader.log().replay().with_context(|| format!("cannot replay history log {}", path.display()))?;
        reader.close().with_context(|| format!("cannot close history log {}", path.display()))?;
        return Ok(history);
    }
    // Every codec error names the file (and the line or byte offset) itself.
    codec::read_history(path, format).context("cannot read history")
}

/// Opens the history log in `path` to read it: in place where it can be, else from a copy (a full disk, a
/// read-only filesystem), and says so. The error says why it cannot be read at all: in use by another
/// process (its lock says so), or unreadable.
pub(crate) fn open_log(path: &Path) -> anyhow::Result<LogReader> {
    let reader =
        LogReader::open(path).with_context(|| format!("cannot open history log {}", path.display()))?;
    if let (Some(why), Some(copy)) = (reader.why_copied(), reader.copy_path()) {
        eprintln!(
            "krait: history log {} cannot be opened in place ({why}); reading a copy in {}",
            path.display(),
            copy.display()
        );
    }
    Ok(reader)
}

/// Whether `path` is a history log directory written by the proxy.
pub(crate) fn is_history_log(path: &Path) -> bool {
    history::log::store::holds_log(path)
}

/// Runs `krait history`.
pub fn run(command: HistoryCommand) -> anyhow::Result<ExitCode> {
    match command {
        HistoryCommand::Stats { path, input, json } => {
            let history = load(&path, input.format.0)?;
            let stats = history.stats();
            if json {
                println!("{}", serde_json::to_string(&stats)?);
            } else {
                println!("history      {}", path.display());
                println!("sessions     {}", stats.sessions);
                println!(
                    "transactions {} ({} committed, {} aborted, {} indeterminate)",
                    stats.transactions, stats.committed, stats.aborted, stats.indeterminate
                );
                println!("reads        {}", stats.reads);
                println!("writes       {}", stats.writes);
                println!("keys         {}", stats.keys);
                println!("fence ops    {}", stats.fence_ops);
            }
            Ok(ExitCode::SUCCESS)
        }
        HistoryCommand::Convert { input, output, input_format, to, force } => {
            if !to.is_writable() {
                anyhow::bail!("cannot write {to}: only native and jsonl can be written");
            }
            if output.exists() && !force {
                anyhow::bail!("{} already exists (pass --force to overwrite it)", output.display());
            }
            let history = load(&input, input_format.format.0)?;
            codec::write_history(&history, &output, to)
                .with_context(|| format!("cannot write {}", output.display()))?;
            let bytes = std::fs::metadata(&output).map(|m| m.len()).unwrap_or(0);
            eprintln!(
                "wrote {} transactions to {} ({to}, {bytes} bytes)",
                history.transactions.len(),
                output.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
