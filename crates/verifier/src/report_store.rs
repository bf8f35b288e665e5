//! The reports directory under a data directory: every reject the online verifier finds is written there as
//! one JSON file (the [`Report`] schema of one-shot verification), so that `krait report list` and
//! `krait report show ID` work offline, on the directory alone.
//!
//! ```
//! use verifier::ReportStore;
//!
//! let dir = std::env::temp_dir().join(format!("krait-doc-{}", std::process::id()));
//! let store = ReportStore::open(&dir).unwrap();
//! assert!(store.list().unwrap().is_empty());
//! # std::fs::remove_dir_all(&dir).ok();
//! ```

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Report;

/// Why the reports directory could not be used.
#[derive(Debug, Error)]
pub enum ReportStoreError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A report file is not a Krait JSON report.
    #[error("{path} is not a Krait JSON report: {source}")]
    Parse {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// An id that cannot name a report (ids are `r` and six or more digits).
    #[error("{0:?} is not a report id (ids look like r000001)")]
    BadId(String),
    /// No report has this id.
    #[error("no report {id} in {dir}")]
    NotFound {
        /// The id.
        id: String,
        /// The reports directory.
        dir: PathBuf,
    },
}

/// One stored report, as `krait report list` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportSummary {
    /// The report's id (its file name without `.json`).
    pub id: String,
    /// The verdict line, as the text report starts.
    pub verdict: String,
    /// The anomaly classes found.
    pub anomalies: Vec<String>,
    /// The transactions involved.
    pub transactions: Vec<u64>,
}

/// The `reports/` directory of a data directory.
#[derive(Clone, Debug)]
pub struct ReportStore {
    dir: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReportStoreError + '_ {
    move |source| ReportStoreError::Io { path: path.to_path_buf(), source }
}

/// The number in a valid id (`r` then digits).
fn id_number(id: &str) -> Option<u64> {
    let digits = id.strip_prefix('r')?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl ReportStore {
    /// Opens (creating it if needed) `data_dir/reports/`. Reports quote statement texts, which may hold
    /// values a client sent, so the folder is its owner's alone (0700) and so is each report (0600), as
    /// the history log is.
    pub fn open(data_dir: &Path) -> Result<Self, ReportStoreError> {
        let dir = data_dir.join("reports");
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(io(&dir))?;
        }
        Ok(ReportStore { dir })
    }

    /// Opens `data_dir/reports/` for reading only; a data directory without one simply has no reports.
    pub fn open_read_only(data_dir: &Path) -> Self {
        ReportStore { dir: data_dir.join("reports") }
    }

    /// The reports directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every stored id, oldest first.
    pub fn ids(&self) -> Result<Vec<String>, ReportStoreError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.dir)(e)),
        };
        let mut ids: Vec<(u64, String)> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io(&self.dir))?;
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else { continue };
            if let Some(n) = id_number(id) {
                ids.push((n, id.to_owned()));
            }
        }
        ids.sort();
        Ok(ids.into_iter().map(|(_, id)| id).collect())
    }

    /// Writes a report under the next free id and returns the id. Files are created exclusively, so two
    /// writers never overwrite each other's reports.
    pub fn save(&self, report: &Report) -> Result<String, ReportStoreError> {
        let mut next = self.ids()?.last().and_then(|id| id_number(id)).map_or(1, |n| n + 1);
        let text = report.to_json();
        loop {
            let id = format!("r{next:06}");
            let path = self.dir.join(format!("{id}.json"));
            let mut options = OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            match options.open(&path) {
                Ok(mut f) => {
                    f.write_all(text.as_bytes()).map_err(io(&path))?;
                    f.sync_all().map_err(io(&path))?;
                    return Ok(id);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => next += 1,
                Err(e) => return Err(io(&path)(e)),
            }
        }
    }

    /// Loads one report.
    pub fn load(&self, id: &str) -> Result<Report, ReportStoreError> {
        if id_number(id).is_none() {
            return Err(ReportStoreError::BadId(id.to_owned()));
        }
        let path = self.dir.join(format!("{id}.json"));
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ReportStoreError::NotFound { id: id.to_owned(), dir: self.dir.clone() });
            }
            Err(e) => return Err(io(&path)(e)),
        };
        Report::from_json(&text).map_err(|source| ReportStoreError::Parse { path, source })
    }

    /// A summary of every stored report, oldest first.
    pub fn list(&self) -> Result<Vec<ReportSummary>, ReportStoreError> {
        self.ids()?
            .into_iter()
            .map(|id| {
                let r = self.load(&id)?;
                Ok(ReportSummary {
                    id,
                    verdict: r.verdict_line(),
                    anomalies: r.anomalies.iter().map(|a| a.class.name().to_owned()).collect(),
                    transactions: r.transactions.iter().map(|t| t.id.0).collect(),
                })
            })
            .collect()
    }
}
