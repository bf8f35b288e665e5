//! The checkpoint of the verifier that many edges feed (`krait serve --verify-only`, DESIGN.md §4): a
//! restart resumes after the last stream message it took, instead of reading the whole stream again.
//!
//! **What it holds.** The feeder, as a local checkpoint does ([`super::checkpoint`]); the [`Merger`] (each
//! collector's log reader, the events held back for heartbeats, the records that overtook earlier ones, the
//! holes given up on, the write ids every collector recorded); and the stream position after the last
//! message both took. They are encoded together into one file that replaces the previous one at once
//! ([`replace_file`], as the log's own metadata is written), so the position never disagrees with the
//! state it belongs to, whenever the process stops.
//!
//! **Why resuming is safe.** The merger drops every record it already has, by each collector's own
//! sequence numbers, so a message read again changes nothing: where the stream cannot serve the position
//! (it lost messages, or was deleted and made again) the reader starts again from its first message and
//! the history is the same. Messages after the position are read as they would have been without a stop.
//!
//! **When it does not serve.** Made under other verification options (as a local checkpoint), or reading
//! another stream or another list of collectors (a listed collector holds the others back until it is
//! heard from, so the merger's state depends on the list): the verifier then reads the stream from its
//! first message, as before checkpoints, and says why.

use std::path::{Path, PathBuf};
use std::time::Instant;

use history::CollectorId;
use history::log::merge::Merger;
use history::log::store::segments::replace_file;
use serde::{Deserialize, Serialize};

use super::checkpoint::with_causes;
use super::{CheckpointError, Feeder, Input, Started, StoreCheckpointError};
use crate::{ReportStore, RoundOptions};

/// The checkpoint's file name, in the verifier's data folder (beside `reports/`).
pub const EDGES_CHECKPOINT_FILE: &str = "verifier.checkpoint";

/// Where the verifier stands in the stream: every message before `next_message` has been taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamPosition {
    /// The stream's generation (when it was made, as the server says): a stream deleted and made again
    /// numbers its messages from 1 again.
    pub generation: String,
    /// The next message to read.
    pub next_message: u64,
}

/// What a checkpoint stores beside the feeder: `M` is `&Merger` when storing and `Merger` when restoring.
#[derive(Serialize, Deserialize)]
struct EdgesPosition<M> {
    stream: String,
    collectors: Vec<CollectorId>,
    at: StreamPosition,
    merger: M,
}

/// What [`EdgesCheckpoint::resume`] gives: a feeder and a merger to go on with, and where to read from.
pub struct Resumed {
    /// The feeder: restored, or new.
    pub feeder: Feeder,
    /// The merger: restored, or new.
    pub merger: Merger,
    /// Where to go on reading, when restored; `None`: from the stream's first message.
    pub at: Option<StreamPosition>,
    /// How it started, for a person.
    pub started: Started,
}

/// The checkpoint file of a verifier reading `stream` for `collectors`.
#[derive(Clone, Debug)]
pub struct EdgesCheckpoint {
    path: PathBuf,
    stream: String,
    collectors: Vec<CollectorId>,
}

impl EdgesCheckpoint {
    /// The checkpoint in `data_dir` of a verifier reading `stream` for `collectors` (empty: every
    /// collector that ships).
    pub fn new(data_dir: &Path, stream: &str, collectors: &[CollectorId]) -> Self {
        EdgesCheckpoint {
            path: data_dir.join(EDGES_CHECKPOINT_FILE),
            stream: stream.to_owned(),
            collectors: collectors.to_vec(),
        }
    }

    /// Where it is stored.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A feeder and a merger restored from the stored checkpoint when one serves, else new ones that read
    /// the stream from its first message; with how they started.
    pub fn resume(&self, options: RoundOptions, store: Option<ReportStore>) -> Resumed {
        let start = Instant::now();
        let fresh = |options: RoundOptions, store| {
            (Feeder::new(options.clone(), store), Merger::new(&self.collectors, options.verify.clocks()))
        };
        let restored = match std::fs::read(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => Some(Err(CheckpointError::ReadFile(e))),
            Ok(bytes) => Some(self.restore(&bytes, options.clone(), store.clone())),
        };
        let (feeder, merger, at, not_used) = match restored {
            None => {
                let (feeder, merger) = fresh(options, store);
                (feeder, merger, None, None)
            }
            Some(Ok((feeder, merger, at))) => (feeder, merger, Some(at), None),
            Some(Err(why)) => {
                let (feeder, merger) = fresh(options, store);
                (feeder, merger, None, Some(with_causes(&why)))
            }
        };
        let started = Started {
            resumed_at: at.as_ref().map(|at| at.next_message),
            not_used,
            took: start.elapsed(),
            input: Input::Stream,
        };
        Resumed { feeder, merger, at, started }
    }

    fn restore(
        &self,
        bytes: &[u8],
        options: RoundOptions,
        store: Option<ReportStore>,
    ) -> Result<(Feeder, Merger, StreamPosition), CheckpointError> {
        let (feeder, position) =
            Feeder::from_checkpoint_with::<EdgesPosition<Merger>>(bytes, options, store)?;
        if position.stream != self.stream || position.collectors != self.collectors {
            return Err(CheckpointError::OtherStream {
                stored: describe(&position.stream, &position.collectors),
                now: describe(&self.stream, &self.collectors),
            });
        }
        Ok((feeder, position.merger, position.at))
    }

    /// Stores `feeder` and `merger`, which have taken every message before `at`, replacing the stored
    /// checkpoint at once; returns the stream message it resumes at.
    pub fn store(
        &self,
        feeder: &Feeder,
        merger: &Merger,
        at: &StreamPosition,
    ) -> Result<Option<u64>, StoreCheckpointError> {
        let position = EdgesPosition {
            stream: self.stream.clone(),
            collectors: self.collectors.clone(),
            at: at.clone(),
            merger,
        };
        let bytes = feeder.checkpoint_with(&position).map_err(StoreCheckpointError::Encode)?;
        replace_file(&self.path, &bytes)
            .map_err(|source| StoreCheckpointError::WriteFile { path: self.path.clone(), source })?;
        Ok(Some(at.next_message))
    }
}

/// The stream and collectors a checkpoint reads, for a person.
fn describe(stream: &str, collectors: &[CollectorId]) -> String {
    match collectors {
        [] => format!("stream {stream}, every collector"),
        _ => {
            let ids: Vec<String> = collectors.iter().map(|c| c.0.to_string()).collect();
            format!("stream {stream}, collectors {}", ids.join(","))
        }
    }
}
