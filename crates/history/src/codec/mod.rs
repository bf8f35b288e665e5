//! Reading and writing histories: Krait's own formats and importers for other checkers' histories.
//!
//! | format | read | write | module |
//! |---|---|---|---|
//! | native (compact binary, checksummed) | yes | yes | [`native`] |
//! | JSON Lines (readable) | yes | yes | [`jsonl`] |
//! | Cobra binary log folder (plain or timestamped) | yes | no | [`cobra`] |
//! | PolySI / IsoVista text | yes | no | [`polysi`] |
//!
//! dbcop's histories are not supported: dbcop stores them as bincode-serialised Rust structs of its own
//! types, so reading them means mirroring those types and their encoding rather than parsing a format.
//!
//! ```no_run
//! use std::path::Path;
//! use history::codec::{self, Format};
//!
//! let h = codec::read_history(Path::new("../shared/corpus/cobra/one-shot-chengRW/chengRW-100"), None)?;
//! codec::write_history(&h, Path::new("chengRW-100.krh"), Format::Native)?;
//! # Ok::<(), codec::CodecError>(())
//! ```

mod bytes;
pub mod cobra;
pub mod jsonl;
pub mod native;
pub mod polysi;

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use thiserror::Error;

use crate::model::History;

pub use cobra::{CobraError, CobraErrorKind, CobraOptions};
pub use jsonl::{JsonlError, JsonlWriteError};
pub use native::{InvalidHistory, NativeError};
pub use polysi::PolysiError;

/// A history file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Krait's compact binary format.
    Native,
    /// Krait's JSON Lines format.
    Jsonl,
    /// A folder of Cobra binary client logs, `T<n>.log`.
    Cobra,
    /// The same, in Cobra's timestamped layout.
    CobraTimestamped,
    /// PolySI / IsoVista text, `r(key,value,session,txn)` lines.
    Polysi,
}

impl Format {
    /// Every format, in the order the names are listed in help texts.
    pub const ALL: [Format; 5] =
        [Format::Native, Format::Jsonl, Format::Cobra, Format::CobraTimestamped, Format::Polysi];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Native => "native",
            Format::Jsonl => "jsonl",
            Format::Cobra => "cobra",
            Format::CobraTimestamped => "cobra-ts",
            Format::Polysi => "polysi",
        }
    }

    /// Whether Krait can write histories in this format (only its own formats).
    pub fn is_writable(self) -> bool {
        matches!(self, Format::Native | Format::Jsonl)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = CodecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| CodecError::UnknownFormatName(s.to_owned()))
    }
}

/// Reading or writing a history failed.
#[derive(Debug, Error)]
pub enum CodecError {
    /// A file could not be opened, read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The format of a path could not be recognised.
    #[error("{}: cannot tell the history format ({reason}); name it explicitly", path.display())]
    UnknownFormat {
        /// The path.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// A format name is not one of [`Format::ALL`].
    #[error("unknown history format \"{0}\"; known formats: native, jsonl, cobra, cobra-ts, polysi")]
    UnknownFormatName(String),
    /// Krait only writes its own formats.
    #[error("writing {0} histories is not supported; write native or jsonl")]
    NotWritable(Format),
    /// A native file is malformed.
    #[error("{}: {source}", path.display())]
    Native {
        /// The file.
        path: PathBuf,
        /// The failure, with its byte offset.
        source: NativeError,
    },
    /// A JSON Lines file is malformed.
    #[error("{}: {source}", path.display())]
    Jsonl {
        /// The file.
        path: PathBuf,
        /// The failure, with its line.
        source: JsonlError,
    },
    /// A Cobra log is malformed (the error names the file and offset).
    #[error(transparent)]
    Cobra(#[from] CobraError),
    /// A PolySI file is malformed.
    #[error("{}: {source}", path.display())]
    Polysi {
        /// The file.
        path: PathBuf,
        /// The failure, with its line.
        source: PolysiError,
    },
    /// The history to write refers to keys or statements it does not have.
    #[error(transparent)]
    Invalid(#[from] InvalidHistory),
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> CodecError + '_ {
    move |source| CodecError::Io { path: path.to_owned(), source }
}

/// Guesses the format of `path`: a folder of `T<n>.log` files is Cobra (plain, since the timestamped layout
/// cannot be told apart by its bytes alone); a file that starts with the native magic is native, one whose
/// first non-blank character is `{` is JSON Lines, and one that starts with `r(` or `w(` is PolySI.
pub fn detect_format(path: &Path) -> Result<Format, CodecError> {
    let meta = std::fs::metadata(path).map_err(io_error(path))?;
    if meta.is_dir() {
        let files = cobra::session_files(path)?;
        if files.is_empty() {
            return Err(CodecError::UnknownFormat {
                path: path.to_owned(),
                reason: "a folder without T<n>.log files".to_owned(),
            });
        }
        return Ok(Format::Cobra);
    }
    let mut head = [0u8; 64];
    let n = {
        use std::io::Read;
        let mut f = std::fs::File::open(path).map_err(io_error(path))?;
        let mut n = 0;
        while n < head.len() {
            match f.read(&mut head[n..]).map_err(io_error(path))? {
                0 => break,
                m => n += m,
            }
        }
        n
    };
    let cobra_file =
        path.file_name().and_then(|f| f.to_str()).and_then(cobra::session_of_file_name).is_some();
    detect_bytes(&head[..n]).ok_or_else(|| CodecError::UnknownFormat {
        path: path.to_owned(),
        reason: if n == 0 {
            "an empty file".to_owned()
        } else if cobra_file {
            "a single Cobra session file; a Cobra history is the folder that holds it".to_owned()
        } else {
            "unrecognised first bytes".to_owned()
        },
    })
}

/// Guesses a file format from its first bytes; `None` when nothing matches. Never answers Cobra, whose
/// histories are folders.
pub fn detect_bytes(head: &[u8]) -> Option<Format> {
    if head.starts_with(&native::MAGIC) {
        return Some(Format::Native);
    }
    let text = head.trim_ascii_start();
    if text.starts_with(b"{") {
        Some(Format::Jsonl)
    } else if text.starts_with(b"r(") || text.starts_with(b"w(") {
        Some(Format::Polysi)
    } else {
        None
    }
}

/// Reads a history from `path` in `format`, or in the detected format when `format` is `None`.
pub fn read_history(path: &Path, format: Option<Format>) -> Result<History, CodecError> {
    let format = match format {
        Some(f) => f,
        None => detect_format(path)?,
    };
    let p = || path.to_owned();
    match format {
        Format::Cobra => Ok(cobra::import_dir(path, CobraOptions { timestamped: false })?),
        Format::CobraTimestamped => match cobra::import_dir(path, CobraOptions { timestamped: true }) {
            Ok(history) => Ok(history),
            // A plain log read with the timestamped layout fails at some record that is not there (the byte
            // after an `S` record's txn id is the next tag, not a timestamp): if it reads cleanly without
            // timestamps, say that instead of the byte it tripped on.
            Err(err)
                if !matches!(err.kind, CobraErrorKind::Io(_) | CobraErrorKind::NoSessions)
                    && cobra::import_dir(path, CobraOptions { timestamped: false }).is_ok() =>
            {
                Err(CobraError { file: path.to_owned(), offset: None, kind: CobraErrorKind::NoTimestamps }
                    .into())
            }
            Err(err) => Err(err.into()),
        },
        Format::Native => {
            let data = std::fs::read(path).map_err(io_error(path))?;
            native::decode(&data).map_err(|source| CodecError::Native { path: p(), source })
        }
        Format::Jsonl => {
            let data = std::fs::read(path).map_err(io_error(path))?;
            jsonl::decode_bytes(&data).map_err(|source| CodecError::Jsonl { path: p(), source })
        }
        Format::Polysi => {
            let data = std::fs::read(path).map_err(io_error(path))?;
            polysi::import_bytes(&data).map_err(|source| CodecError::Polysi { path: p(), source })
        }
    }
}

/// Writes a history to `out` in `format`, which must be native or jsonl.
pub fn write_history_to(history: &History, out: &mut impl Write, format: Format) -> Result<(), CodecError> {
    let stdout = || PathBuf::from("<output>");
    match format {
        Format::Native => {
            let bytes = native::encode(history)?;
            out.write_all(&bytes)
                .and_then(|()| out.flush())
                .map_err(|source| CodecError::Io { path: stdout(), source })
        }
        Format::Jsonl => jsonl::encode(history, out).map_err(|e| match e {
            JsonlWriteError::Invalid(e) => CodecError::Invalid(e),
            JsonlWriteError::Io(source) => CodecError::Io { path: stdout(), source },
        }),
        other => Err(CodecError::NotWritable(other)),
    }
}

/// Writes a history to the file at `path` in `format`, which must be native or jsonl.
pub fn write_history(history: &History, path: &Path, format: Format) -> Result<(), CodecError> {
    if !format.is_writable() {
        return Err(CodecError::NotWritable(format));
    }
    let mut file = std::fs::File::create(path).map_err(io_error(path))?;
    write_history_to(history, &mut file, format).map_err(|e| match e {
        CodecError::Io { source, .. } => CodecError::Io { path: path.to_owned(), source },
        other => other,
    })
}
