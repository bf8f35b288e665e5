//! The online verifier's checkpoint (issue 20, item 4): what a [`Feeder`] has derived from the records it
//! read, stored in the log it reads ([`HistoryLog::store_checkpoint`]), so that a restarted `krait serve`
//! resumes at the next record instead of verifying the log again from its first.
//!
//! **What it holds.** The whole feeder: the log reader's state (the key and statement tables, the intents
//! still waiting for an outcome, the sessions still open), the online verifier's (the residual history, the
//! transactions waiting for admission, the collected write ids, the epochs, the links, the rounds and the
//! rejects found) and the counters. Restored, it reads the next record exactly as the feeder that stored it
//! would have: a checkpoint restored and fed the rest of the log ends in the state that reading the whole
//! log in one go reaches (`tests/checkpoint.rs` checks this at every split of random logs).
//!
//! **Only what a crash cannot take back.** A feeder reads only records that are durable (under
//! `durability = none`, every record appended, which a crash may lose), so a checkpoint is stored only when
//! every record it covers is below the log's [`HistoryLog::durable_below`]: a crash can then cut records
//! after it, never one it covers, and the next run appends after the records it covers.
//!
//! **When it does not serve.** A checkpoint made under other verification options (level, clock drift,
//! collection), in another format, or covering more records than the log holds, is not used: the feeder
//! reads the log from its first record, as it did before checkpoints, and says why. That is always correct,
//! only slower.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use history::CollectorId;
use history::log::{HistoryLog, LogError, RecordError, decode_framed, encode_framed_large};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::Feeder;
use crate::{Level, ReportStore, RoundOptions};

/// The name the checkpoint is stored under in the log.
pub const CHECKPOINT_NAME: &str = "online-verifier";

/// A running verifier stores a checkpoint once at least this many rounds have run since the last one…
pub const CHECKPOINT_EVERY_ROUNDS: u64 = 4;

/// …and at least this long has passed, so that a fast stream of small rounds does not spend its time
/// storing checkpoints (each one encodes the whole state and waits for an fsync).
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);

/// The layout of the stored state. Bump it whenever a type the checkpoint serializes changes shape
/// (the feeder, the log reader, the online verifier and what they hold): an older checkpoint is then read
/// as not serving, never misread.
const FORMAT: u32 = 10;

/// Ends every checkpoint, so that a state decoded with the wrong layout is caught even where every field
/// happened to decode.
const END_MARK: u64 = 0x6b72_6169_745f_636b;

/// Why a stored checkpoint was not used.
#[derive(Debug, Error)]
pub enum CheckpointError {
    /// It does not decode: damaged, or written by a build with another layout.
    #[error("it does not decode")]
    Decode(#[source] RecordError),
    /// It was written in another format.
    #[error("it is in format {found}, this build reads format {FORMAT}")]
    Format {
        /// The format it names.
        found: u32,
    },
    /// It was made under other options, so its verdicts and collection answered another question.
    #[error("it was made checking {stored}, and this run checks {now}")]
    OtherBasis {
        /// What it was made under.
        stored: String,
        /// What this run asks.
        now: String,
    },
    /// It covers records the log does not hold (the log was replaced, or lost records it had made durable).
    #[error("it covers {covers} records, and the log holds {holds}")]
    BeyondLog {
        /// The records it covers.
        covers: u64,
        /// The records the log holds.
        holds: u64,
    },
    /// The log could not give it back.
    #[error("it could not be read")]
    Read(#[source] LogError),
    /// Its file could not be read.
    #[error("its file could not be read")]
    ReadFile(#[source] std::io::Error),
    /// It was made reading another stream, or for other collectors ([`super::edges`]).
    #[error("it was made reading {stored}, and this run reads {now}")]
    OtherStream {
        /// What it read.
        stored: String,
        /// What this run reads.
        now: String,
    },
}

/// The options a checkpoint's state depends on: what is checked (level, clock drift) and what collection
/// may delete. The others (round size, the pipeline's techniques) change how fast, not what.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Basis {
    level: Level,
    clock_drift_ms: u64,
    clock_errors_ms: BTreeMap<CollectorId, u64>,
    gc: bool,
    gc_legacy_rules: bool,
    stop_at_first_reject: bool,
}

impl Basis {
    fn of(options: &RoundOptions) -> Self {
        Basis {
            level: options.verify.level,
            clock_drift_ms: options.verify.clock_drift_ms,
            clock_errors_ms: options.verify.clock_errors_ms.clone(),
            gc: options.gc,
            gc_legacy_rules: options.gc_legacy_rules,
            stop_at_first_reject: options.stop_at_first_reject,
        }
    }

    fn describe(&self) -> String {
        let mut s = format!("{} with a clock drift of {} ms", self.level.name(), self.clock_drift_ms);
        for (collector, ms) in &self.clock_errors_ms {
            s.push_str(&format!(", {ms} ms for collector {}", collector.0));
        }
        if !self.gc {
            s.push_str(", without garbage collection");
        }
        if self.gc_legacy_rules {
            s.push_str(", with the legacy collection rules");
        }
        if self.stop_at_first_reject {
            s.push_str(", stopping at the first reject");
        }
        s
    }
}

/// The stored form, after [`FORMAT`] as four little-endian bytes (outside the encoding, so that a checkpoint
/// of another format is named as such rather than as one that does not decode): `F` is `&Feeder` when
/// storing and `Feeder` when restoring, so one definition says the layout both ways. `position` is where
/// the feeder's input stands beside the feeder's own state: nothing (`()`, which encodes as no bytes) for a
/// feeder that reads a local log, and the merger and the stream position for one fed by many edges
/// ([`super::edges`]).
#[derive(Serialize, Deserialize)]
struct Stored<F, P> {
    basis: Basis,
    feeder: F,
    position: P,
    end: u64,
}

/// How a [`Feeder`] started: from a checkpoint, or from its input's start and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// Where it resumed, when it restored a checkpoint covering what came before: a log record, or a stream
    /// message.
    pub resumed_at: Option<u64>,
    /// Why a stored checkpoint was not used, when there was one.
    pub not_used: Option<String>,
    /// How long reading and restoring the checkpoint took.
    pub took: Duration,
    /// What it reads.
    pub input: Input,
}

/// What a [`Feeder`] reads, for saying where it resumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// A local history log (`krait serve`).
    Log,
    /// The stream the proxies ship their logs to (`krait serve --verify-only`).
    Stream,
}

impl Input {
    /// Its first unit, and what one unit is called.
    fn words(self) -> (&'static str, &'static str) {
        match self {
            Input::Log => ("the log from its first record", "log record"),
            Input::Stream => ("the stream from its first message", "stream message"),
        }
    }
}

impl Started {
    /// One line for a person.
    pub fn line(&self) -> String {
        let (from_start, unit) = self.input.words();
        match (self.resumed_at, &self.not_used) {
            (Some(at), _) => format!(
                "resumed from its checkpoint at {unit} {at} in {:.0} ms (what comes before it is not read \
                 again)",
                self.took.as_secs_f64() * 1e3
            ),
            (None, Some(why)) => format!("did not use the stored checkpoint ({why}): it reads {from_start}"),
            (None, None) => format!("reads {from_start} (it has no checkpoint yet)"),
        }
    }
}

impl Feeder {
    /// The state so far, encoded: what [`Feeder::from_checkpoint`] restores.
    pub fn checkpoint(&self) -> Result<Vec<u8>, RecordError> {
        self.checkpoint_with(&())
    }

    /// The state so far and `position`, where its input stands, encoded together: what
    /// [`Feeder::from_checkpoint_with`] restores.
    pub(crate) fn checkpoint_with<P: Serialize>(&self, position: &P) -> Result<Vec<u8>, RecordError> {
        let stored =
            Stored { basis: Basis::of(self.verifier.options()), feeder: self, position, end: END_MARK };
        encode_framed_large(&FORMAT.to_le_bytes(), &stored)
    }

    /// A feeder in the state [`Feeder::checkpoint`] encoded, verifying with `options` (which must ask what
    /// the checkpoint's did) and writing reject reports into `store`.
    pub fn from_checkpoint(
        bytes: &[u8],
        options: RoundOptions,
        store: Option<ReportStore>,
    ) -> Result<Feeder, CheckpointError> {
        Feeder::from_checkpoint_with::<()>(bytes, options, store).map(|(feeder, ())| feeder)
    }

    /// A feeder and its input's position, as [`Feeder::checkpoint_with`] encoded them.
    pub(crate) fn from_checkpoint_with<P: DeserializeOwned>(
        bytes: &[u8],
        options: RoundOptions,
        store: Option<ReportStore>,
    ) -> Result<(Feeder, P), CheckpointError> {
        let (format, framed) = bytes
            .split_first_chunk::<4>()
            .ok_or(CheckpointError::Decode(RecordError::Truncated { len: bytes.len() }))?;
        let format = u32::from_le_bytes(*format);
        if format != FORMAT {
            return Err(CheckpointError::Format { found: format });
        }
        let stored: Stored<Feeder, P> = decode_framed(framed).map_err(CheckpointError::Decode)?;
        if stored.end != END_MARK {
            return Err(CheckpointError::Decode(RecordError::Malformed { reason: "no end mark".into() }));
        }
        let now = Basis::of(&options);
        if stored.basis != now {
            return Err(CheckpointError::OtherBasis { stored: stored.basis.describe(), now: now.describe() });
        }
        let mut feeder = stored.feeder;
        feeder.verifier.restored(options, store);
        feeder.restored();
        Ok((feeder, stored.position))
    }

    /// A feeder for `log`: restored from the checkpoint stored in it when there is one that serves, else
    /// one that reads the log from its first record; with how it started.
    pub fn resume(
        log: &dyn HistoryLog,
        options: RoundOptions,
        store: Option<ReportStore>,
    ) -> (Feeder, Started) {
        let start = Instant::now();
        let restored = match log.checkpoint(CHECKPOINT_NAME) {
            Ok(None) => None,
            Ok(Some(bytes)) => {
                Some(Feeder::from_checkpoint(&bytes, options.clone(), store.clone()).and_then(|feeder| {
                    let holds = log.next_seq();
                    match feeder.next_seq <= holds {
                        true => Ok(feeder),
                        false => Err(CheckpointError::BeyondLog { covers: feeder.next_seq, holds }),
                    }
                }))
            }
            Err(e) => Some(Err(CheckpointError::Read(e))),
        };
        let (feeder, resumed_at, not_used) = match restored {
            None => (Feeder::new(options, store), None, None),
            Some(Ok(feeder)) => {
                let at = feeder.next_seq;
                (feeder, Some(at), None)
            }
            Some(Err(why)) => (Feeder::new(options, store), None, Some(with_causes(&why))),
        };
        (feeder, Started { resumed_at, not_used, took: start.elapsed(), input: Input::Log })
    }

    /// Stores a checkpoint in `log` if every record read so far is durable there; returns the records it
    /// covers (those below the returned sequence number), or `None` when it stored none.
    pub fn store_checkpoint(&self, log: &dyn HistoryLog) -> Result<Option<u64>, StoreCheckpointError> {
        if self.next_seq > log.durable_below() {
            return Ok(None);
        }
        let bytes = self.checkpoint().map_err(StoreCheckpointError::Encode)?;
        log.store_checkpoint(CHECKPOINT_NAME, &bytes).map_err(StoreCheckpointError::Write)?;
        Ok(Some(self.next_seq))
    }

    /// The sequence number of the next record it reads: a checkpoint of it covers every record below.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
}

/// When a running verifier stores its checkpoint (a [`super::Tailer`], `krait serve --verify-only`): every [`CHECKPOINT_EVERY_ROUNDS`] rounds, at most once per
/// [`CHECKPOINT_INTERVAL`] or per [`CHECKPOINT_COST_SHARE`] times what the last one took, whichever is
/// longer, and when it stops. The checkpoint grows with the collected write ids (one entry per collected
/// write), so the cost floor keeps storing it to a small share of the verifier's time however long it runs.
pub struct CheckpointSchedule {
    /// The rounds run when the last one was stored (or when the tailer started).
    rounds: u64,
    /// When the last one was stored (or when the tailer started).
    at: Instant,
    /// How long storing the last one took.
    cost: Duration,
}

/// See [`CheckpointSchedule`]: storing a checkpoint takes at most about 1/20 of the verifier thread's time.
const CHECKPOINT_COST_SHARE: u32 = 20;

impl CheckpointSchedule {
    /// A schedule that counts from now and from `feeder`'s rounds so far.
    pub fn new(feeder: &Feeder) -> Self {
        CheckpointSchedule { rounds: feeder.verifier.rounds_done(), at: Instant::now(), cost: Duration::ZERO }
    }

    /// Whether one is due.
    pub fn due(&self, feeder: &Feeder) -> bool {
        let rounds = feeder.verifier.rounds_done();
        let interval = CHECKPOINT_INTERVAL.max(self.cost * CHECKPOINT_COST_SHARE);
        rounds >= self.rounds + CHECKPOINT_EVERY_ROUNDS && self.at.elapsed() >= interval
    }

    /// Stores one with `store`, which says what it covers (`None`: it stored none, since what the feeder
    /// read is not durable yet); a failure is noted in the status, not fatal: the next start resumes from an
    /// older checkpoint, or reads its input from the start.
    pub fn store(
        &mut self,
        feeder: &mut Feeder,
        store: impl FnOnce(&Feeder) -> Result<Option<u64>, StoreCheckpointError>,
    ) {
        let start = Instant::now();
        match store(feeder) {
            Ok(Some(covers)) => {
                self.rounds = feeder.verifier.rounds_done();
                self.at = Instant::now();
                self.cost = start.elapsed();
                feeder.status.checkpoint_covers = Some(covers);
                feeder.status.checkpoint_error = None;
            }
            Ok(None) => {}
            Err(e) => {
                // Tried again after the interval, not at every tick.
                self.at = Instant::now();
                feeder.status.checkpoint_error = Some(with_causes(&e));
            }
        }
    }
}

/// Why a checkpoint could not be stored. Verification goes on without it; the next start then resumes from
/// an older one, or reads the log from its first record.
#[derive(Debug, Error)]
pub enum StoreCheckpointError {
    /// The state did not encode.
    #[error("cannot encode the verifier's state")]
    Encode(#[source] RecordError),
    /// The log did not store it.
    #[error("cannot store the verifier's checkpoint in the log")]
    Write(#[source] LogError),
    /// Its file could not be written.
    #[error("cannot write the verifier's checkpoint to {}", path.display())]
    WriteFile {
        /// The file.
        path: std::path::PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// An error and its causes on one line, outermost first.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(": ");
        line.push_str(&c.to_string());
        cause = c.source();
    }
    line
}
