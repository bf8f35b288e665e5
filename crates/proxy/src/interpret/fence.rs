//! Fence transactions without client changes (DESIGN.md §3 "Fences without client changes", Cobra §4.2).
//!
//! Before a connection's first client message (`fence.at_open`), and every `fence.every` committed client
//! transactions on it, the session runs one fence transaction on that same connection, between two client
//! transactions (never while the client has one open), and swallows every reply. The fence reads and
//! rewrites the single row of `krait_fence`, so all fences of this proxy form one read-modify-write chain;
//! session order then places every client transaction between two fences, which gives the verifier its
//! epochs.
//!
//! Each proxy fences its own row of `krait_fence`: a proxy's version book knows only its own fences, so two
//! proxies sharing one row would see each other's fence versions as pre-history. The row is chosen at
//! random when a log is new and stored in the log ([`fence_row_of`]): every run of the proxy on that log
//! fences the same row, so that a restarted proxy's first fence reads the last one before the restart and
//! the chain, and with it the verifier's epochs, goes on. A new row per run made a second chain that nothing
//! orders after the first: epochs broke at every restart, and garbage collection stopped for good.
//!
//! The fence runs at READ COMMITTED with `SELECT ... FOR UPDATE`: the lock makes the read return the
//! latest committed version (the one the UPDATE then replaces), whatever the session's default isolation,
//! and two concurrent fences queue on the row lock instead of failing with serialization errors.

use std::time::{Duration, Instant};

use bytes::Bytes;
use history::Observed;
use history::log::{HistoryLog, LogError, LoggedOp, RecordError, decode_framed, encode_framed};
use tracing::warn;

use super::versions::{VersionBook, key_name, version_id};

/// The fence table's name (also its key namespace).
pub const FENCE_TABLE: &str = "krait_fence";

/// The name the log's fence row is stored under ([`HistoryLog::store_checkpoint`]).
pub const FENCE_ROW_CHECKPOINT: &str = "fence-row";

/// Why the log's fence row could not be read or stored.
#[derive(Debug, thiserror::Error)]
pub enum FenceRowError {
    /// The log could not read or store it.
    #[error("the log: {0}")]
    Log(#[from] LogError),
    /// It could not be encoded.
    #[error("encoding it: {0}")]
    Encode(#[from] RecordError),
}

/// The fence row of `log`: the one an earlier run of the proxy stored in it, or else `fresh`, stored
/// there for the next run (see the module documentation). A stored row that does not decode is replaced
/// by `fresh`, with a warning: the chain starts over once, rather than at every restart.
pub fn fence_row_of(log: &dyn HistoryLog, fresh: i32) -> Result<i32, FenceRowError> {
    if let Some(bytes) = log.checkpoint(FENCE_ROW_CHECKPOINT)? {
        match decode_framed::<i32>(&bytes) {
            Ok(row) => return Ok(row),
            Err(e) => warn!(
                "the fence row stored in the log does not decode ({e}): fencing a new row {fresh}, so the \
                 verifier's garbage collection stops where this run starts"
            ),
        }
    }
    log.store_checkpoint(FENCE_ROW_CHECKPOINT, &encode_framed(&fresh)?)?;
    Ok(fresh)
}

/// Creates the fence table and this proxy's row if missing. Safe to run from several sessions: a lost race
/// on CREATE fails harmlessly and the next fence retries.
pub fn setup_sql(row: i32) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS krait_fence (id int PRIMARY KEY, epoch bigint NOT NULL); \
         INSERT INTO krait_fence VALUES ({row}, 0) ON CONFLICT (id) DO NOTHING"
    )
}

/// Where the setup found (or made) the fence table: its schema, quoted as needed. Fences name the table
/// with it, so that every session finds the same table whatever its `search_path` (the setup resolves the
/// unqualified name in the session that ran it; a session with another path would fail every fence, and,
/// never reaching an epoch, hold garbage collection back for as long as it stayed open).
pub const FENCE_SCHEMA_QUERY: &str =
    "SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'krait_fence'::regclass";

/// The fence's body on row `row` of `table` (the fence table as the session can name it: schema-qualified
/// once the setup has told its schema, else [`FENCE_TABLE`]): one simple-protocol query string. Replies:
/// BEGIN, the read row (xmin, id), the written row (xmin, id), then ReadyForQuery in the block. COMMIT
/// ([`FENCE_COMMIT`]) goes in a second message, only after the written row has been put in the version
/// book, so no session can read the fence's version before the proxy knows it was recorded, and after the
/// fence's intent is in the log ([`Step::Commit`]), so that a crash cannot lose its record.
pub fn fence_sql(row: i32, table: &str) -> String {
    format!(
        "BEGIN ISOLATION LEVEL READ COMMITTED; \
         SELECT xmin::text, id::text, epoch::text FROM {table} WHERE id = {row} FOR UPDATE; \
         UPDATE {table} SET epoch = epoch + 1 WHERE id = {row} RETURNING xmin::text, id::text"
    )
}

/// The fence's second message.
pub const FENCE_COMMIT: &str = "COMMIT";

/// Counts committed client transactions on one connection and says when a fence is due: after `every`
/// commits, once `min_interval` has passed since the last fence; or, on a connection left idle, once the
/// proxy's fence chain has moved on without it.
#[derive(Debug, Clone)]
pub struct FenceCounter {
    every: u64,
    min_interval: Duration,
    /// How long a connection at rest waits before it fences on its own; zero: never.
    idle: Duration,
    since: u64,
    /// When the last fence ran; `None` before the first, which is due at once.
    last: Option<Instant>,
    /// The proxy's count of fences due by commits ([`super::TaggingShared::busy_fences`]) as this
    /// connection started its last fence.
    chain_seen: u64,
    /// Whether the connection fences before its first client message ([`FenceCounter::opening_due`]).
    at_open: bool,
}

impl FenceCounter {
    /// A counter that asks for a fence every `every` commits, at most once per `min_interval`, and on a
    /// connection at rest for `idle` (zero: never); `every` 0 disables fences.
    pub fn new(every: u64, min_interval: Duration, idle: Duration) -> Self {
        FenceCounter { every, min_interval, idle, since: 0, last: None, chain_seen: 0, at_open: false }
    }

    /// The same counter, fencing also before the connection's first client message
    /// ([`FenceCounter::opening_due`]).
    pub fn fencing_at_open(self) -> Self {
        FenceCounter { at_open: true, ..self }
    }

    /// Whether the connection should fence before its first client message: fences are on, it fences at
    /// open, and it has not fenced yet. The verifier judges a read of a collected version only for a reader
    /// that follows a fence of its session (Cobra §4.2's Guarantee): a fence first thing covers every
    /// transaction of the connection, where a fence after `every` commits leaves those commits' reads of
    /// collected versions unjudged (and a connection per request has none judged). An opening fence that
    /// aborts is not retried before the next regular one.
    pub fn opening_due(&self) -> bool {
        self.at_open && self.every > 0 && self.last.is_none()
    }

    /// How long a connection at rest waits before it may fence on its own ([`FenceCounter::idle_due`]);
    /// `None` when it never does.
    pub fn idle_after(&self) -> Option<Duration> {
        (self.every > 0 && !self.idle.is_zero()).then_some(self.idle)
    }

    /// Whether a connection that has been at rest for [`FenceCounter::idle_after`] should fence now: the
    /// proxy has started `chain` fences due by commits, and some since this connection's last fence.
    /// `epoch_agree` (Cobra §4.2) is the least epoch every open session has reached, so a session that
    /// stays idle behind the chain holds garbage collection back for as long as it stays open; one whose
    /// last fence is still the latest holds nothing back and does not fence.
    pub fn idle_due(&self, chain: u64) -> bool {
        self.idle_after().is_some()
            && chain > self.chain_seen
            && self.last.is_none_or(|at| at.elapsed() >= self.min_interval)
    }

    /// Notes one committed client transaction.
    pub fn committed(&mut self) {
        self.since = self.since.saturating_add(1);
    }

    /// Whether a fence is due now.
    pub fn due(&self) -> bool {
        // The clock is read only once enough commits have passed.
        self.every > 0
            && self.since >= self.every
            && self.last.is_none_or(|at| at.elapsed() >= self.min_interval)
    }

    /// Whether a connection that is closing should fence first: fences are on and it committed a client
    /// transaction since its last fence. Without that fence those transactions never get an epoch (Cobra
    /// §4.2): they stay open for good, and garbage collection keeps every transaction they reach, which a
    /// read-modify-write chain on a key makes every later writer of it. So the closing fence ignores
    /// `every` and `min_interval`: it costs one transaction per connection that wrote since its last fence.
    pub fn closing_due(&self) -> bool {
        self.every > 0 && self.since > 0
    }

    /// Notes that a fence ran (whatever its outcome: an aborted fence is simply retried next time), and
    /// that the proxy's count of fences due by commits is `chain` with it.
    pub fn fenced(&mut self, chain: u64) {
        self.since = 0;
        self.last = Some(Instant::now());
        self.chain_seen = chain;
    }
}

/// The ops of a fence: the read of the version it found and the write of the next one. `read` and
/// `written` are the (xmin, id) values of the two result rows; `initial` says that the row read is the
/// one the setup inserted (its `epoch` column is still 0).
pub fn fence_ops(read: [&[u8]; 2], written: [&[u8]; 2], initial: bool, book: &VersionBook) -> Vec<LoggedOp> {
    let key = key_name(FENCE_TABLE, &[read[1]]);
    let old = version_id(&key, read[0]);
    let new_key = key_name(FENCE_TABLE, &[written[1]]);
    let new = version_id(&new_key, written[0]);
    book.insert(new);
    // A version of this proxy's fence row that the book does not know is the one the setup inserted (the
    // row's initial version, before every fence, whatever the recording horizon says of its writer), or
    // one a fence of an earlier run wrote and never recorded: the run ended (a crash under `group` or `none`
    // durability, which can lose the fence's intent, or a log that failed) after the database committed the
    // fence and before its intent was in the log. Such a version has no owner,
    // which is never evidence (DESIGN.md §3): taken for the initial version, the next run's first fence
    // would read a second initial version of the row, a stale read the database never did.
    let observed = match (book.contains(old), initial) {
        (true, _) => Observed::Version(old),
        (false, true) => Observed::PreHistory(old.0),
        (false, false) => Observed::Unrecorded(old.0),
    };
    vec![
        LoggedOp::Read { key, observed, stmt: Some(1) },
        LoggedOp::Write { key: new_key, write: new, stmt: Some(2) },
    ]
}

/// The statement texts a fence transaction records, so its op `stmt` indices resolve.
pub fn fence_statements(row: i32, table: &str) -> Vec<String> {
    let mut v: Vec<String> = fence_sql(row, table).split("; ").map(|s| s.trim().to_owned()).collect();
    v.push(FENCE_COMMIT.to_owned());
    v
}

/// The question [`Injection::Xid`] asks: the open transaction's id as text, NULL if it has none (it wrote
/// nothing, so there is nothing to discover). PostgreSQL 13 and later.
pub const XID_QUERY: &str = "SELECT pg_current_xact_id_if_assigned()::text";

/// Reads the (xmin, id) of a fence's two rows from their DataRow values (the row read has its epoch after
/// them).
pub fn fence_row(values: &[Option<Bytes>]) -> Option<[Bytes; 2]> {
    match values {
        [Some(a), Some(b), ..] => Some([a.clone(), b.clone()]),
        _ => None,
    }
}

/// Whether the row a fence read is the one the setup inserted: its epoch (the third value) is 0.
fn setup_row(values: &[Option<Bytes>]) -> bool {
    matches!(values.get(2), Some(Some(epoch)) if epoch.as_ref() == b"0")
}

/// A query the proxy runs on a client's connection between two client transactions (or, for the
/// transaction's id, inside one before its COMMIT), with every reply swallowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injection {
    /// Reload the primary-key catalog ([`super::PK_QUERY`]); `as_of` is what
    /// [`super::shared::TaggingShared::catalog_reload_begins`] said as it began.
    Catalog {
        /// When the reload began, in catalog changes.
        as_of: u64,
    },
    /// Ask the open transaction's id ([`XID_QUERY`]), before its COMMIT (see `versions`, "Discovered
    /// writes").
    Xid,
    /// Learn the recording horizon ([`super::versions::HORIZON_QUERY`]).
    Horizon,
    /// A fence transaction, preceded by the fence table's setup when `setup` is set.
    Fence {
        /// Create the table and row first.
        setup: bool,
        /// This proxy's row of `krait_fence`.
        row: i32,
    },
}

impl Injection {
    /// The first statements to send, in one batch ending in Sync; [`InjectedReplies::on_backend`] says
    /// when to send more. A fence names the table as `shared` knows it
    /// ([`super::shared::TaggingShared::fence_table`]).
    pub fn statements(self, shared: &super::shared::TaggingShared) -> Vec<String> {
        let sql = match self {
            Injection::Catalog { .. } => return vec![super::PK_QUERY.to_owned()],
            Injection::Horizon => return vec![super::versions::HORIZON_QUERY.to_owned()],
            Injection::Xid => return vec![XID_QUERY.to_owned()],
            Injection::Fence { setup: false, row } => fence_sql(row, &shared.fence_table()),
            // The setup commits on its own: in the fence's transaction, the fence would read its own insert.
            // It names the table as its session resolves it; where that is, it asks after the fence.
            Injection::Fence { setup: true, row } => {
                format!("BEGIN; {}; COMMIT; {}", setup_sql(row), fence_sql(row, FENCE_TABLE))
            }
        };
        sql.split("; ").map(str::to_owned).collect()
    }
}

/// What an injected query produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injected {
    /// The catalog was reloaded (or failed to; then it stays stale).
    Catalog,
    /// The horizon query ran: the database's answer, if it could give one. The caller logs it and only
    /// then sets it (see `VersionBook::set_horizon`).
    Horizon(Option<history::RecordingHorizon>),
    /// The transaction's id (its low 32 bits, as `xmin` shows it), if it has one and the query worked.
    Xid(Option<u32>),
    /// A fence ran: its ops, and whether it committed.
    Fence {
        /// The fence's read and write (empty if it failed before returning rows).
        ops: Vec<LoggedOp>,
        /// Whether it committed.
        committed: bool,
    },
}

/// What the session does after an injected query's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Keep reading replies.
    More,
    /// Send this query string next (swallowing its replies too).
    Send(&'static str),
    /// The fence has read and rewritten its row: log its intent (its ops, and its transaction id, the
    /// `xmin` of the row it wrote), then send [`FENCE_COMMIT`].
    Commit {
        /// The fence's read and write.
        ops: Vec<LoggedOp>,
        /// Its transaction id, if the row's `xmin` parsed.
        xid: Option<u32>,
    },
    /// The injection is over; the connection is the client's again.
    Done,
}

/// Collects the replies to one injection, up to its last ReadyForQuery.
#[derive(Debug)]
pub struct InjectedReplies {
    what: Injection,
    rows: Vec<Vec<Option<Bytes>>>,
    /// The fence table's schema, from a setup's [`FENCE_SCHEMA_QUERY`] (its one-column row).
    fence_schema: Option<String>,
    /// Whether the setup's [`FENCE_SCHEMA_QUERY`] went out (after the fence's COMMIT): a database that
    /// cannot answer it (the reference store) fails it without failing the fence.
    asked_schema: bool,
    error: bool,
    committed: bool,
    sent_commit: bool,
    /// The fence's ops, once its two rows are in (computed once: they are logged with its intent).
    ops: Option<Vec<LoggedOp>>,
}

impl InjectedReplies {
    /// Starts collecting the replies to `what`.
    pub fn new(what: Injection) -> Self {
        InjectedReplies {
            what,
            rows: Vec::new(),
            fence_schema: None,
            asked_schema: false,
            error: false,
            committed: false,
            sent_commit: false,
            ops: None,
        }
    }

    /// The fence's read and write, from its two rows, computed once; empty if the rows are not both in.
    fn fence_ops(&mut self, book: &VersionBook) -> Vec<LoggedOp> {
        let rows = &self.rows;
        self.ops
            .get_or_insert_with(|| {
                match (rows.first().and_then(|r| fence_row(r)), rows.get(1).and_then(|r| fence_row(r))) {
                    (Some(r), Some(w)) => {
                        let initial = rows.first().is_some_and(|r| setup_row(r));
                        fence_ops([&r[0], &r[1]], [&w[0], &w[1]], initial, book)
                    }
                    _ => Vec::new(),
                }
            })
            .clone()
    }

    /// Takes one backend message and says what to do next.
    ///
    /// The fence's new version goes into the version book as soon as its row arrives, before the COMMIT
    /// that makes it visible, so a concurrent fence that reads it finds it recorded.
    pub fn on_backend(&mut self, tag: u8, body: &Bytes, book: &VersionBook) -> Step {
        use wire::pg::backend::tag as btag;
        match tag {
            btag::DATA_ROW => match super::strip::data_row_values(body) {
                Ok(vals) if self.asked_schema && vals.len() == 1 => {
                    let schema = vals[0].as_ref().map(|v| String::from_utf8_lossy(v).into_owned());
                    self.fence_schema = schema;
                }
                Ok(vals) => {
                    if let (Injection::Fence { .. }, 1, Some(w)) =
                        (self.what, self.rows.len(), fence_row(&vals))
                    {
                        book.insert(version_id(&key_name(FENCE_TABLE, &[&w[1]]), &w[0]));
                    }
                    self.rows.push(vals)
                }
                Err(_) => self.error = true,
            },
            // The schema question comes after the fence is over: its failure leaves the name unqualified.
            btag::ERROR_RESPONSE if self.asked_schema => {}
            btag::ERROR_RESPONSE => self.error = true,
            // The setup's COMMIT comes before the fence's two rows; only the fence's own counts.
            btag::COMMAND_COMPLETE if body.starts_with(b"COMMIT") => self.committed = self.rows.len() >= 2,
            btag::READY_FOR_QUERY => {
                // The fence's block is open (status `T`) after its first message: commit it now.
                if matches!(self.what, Injection::Fence { .. })
                    && body.first() == Some(&b'T')
                    && !self.sent_commit
                {
                    self.sent_commit = true;
                    // Its intent goes to the log before the COMMIT (DESIGN.md §3, durability), as a
                    // client transaction's does: a run that ends after the database committed the fence
                    // leaves the fence's record without an outcome, not missing. Missing, the next run's
                    // first fence read a version no recorded fence wrote, and epochs, and with them garbage
                    // collection, stopped for good.
                    let ops = self.fence_ops(book);
                    if ops.is_empty() {
                        return Step::Send(FENCE_COMMIT);
                    }
                    let xid =
                        self.rows.get(1).and_then(|r| fence_row(r)).and_then(|w| {
                            std::str::from_utf8(&w[0]).ok().and_then(|x| x.parse::<u32>().ok())
                        });
                    return Step::Commit { ops, xid };
                }
                if matches!(self.what, Injection::Fence { setup: true, .. })
                    && self.sent_commit
                    && !self.asked_schema
                    && body.first() == Some(&b'I')
                {
                    self.asked_schema = true;
                    return Step::Send(FENCE_SCHEMA_QUERY);
                }
                if body.first() == Some(&b'E') && self.what == Injection::Xid {
                    // The client's block failed under the question (it should not: see
                    // `SessionMachine::wants_xid`). Its COMMIT will say so; rolling back here would hide it.
                    self.error = true;
                    return Step::Done;
                }
                if body.first() == Some(&b'E') {
                    // A failed block (an error after BEGIN): roll it back before handing the connection back.
                    self.error = true;
                    return Step::Send("ROLLBACK");
                }
                return Step::Done;
            }
            _ => {}
        }
        Step::More
    }

    /// The first value of the first row, as text, if the injection did not fail.
    fn first_value(&self) -> Option<&str> {
        let value = self.rows.first()?.first()?.as_ref()?;
        std::str::from_utf8(value).ok().filter(|_| !self.error)
    }

    /// Applies the result: a reloaded catalog goes into `shared`, a fence's ops are returned.
    pub fn finish(mut self, shared: &super::shared::TaggingShared) -> Injected {
        match self.what {
            Injection::Catalog { as_of } => {
                if !self.error {
                    let text =
                        |v: &Option<Bytes>| v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
                    let rows = self.rows.iter().filter(|r| r.len() == 3).map(|r| {
                        (text(&r[0]).unwrap_or_default(), text(&r[1]).unwrap_or_default(), text(&r[2]))
                    });
                    shared.install_catalog(super::Catalog::from_rows(rows), as_of);
                }
                Injected::Catalog
            }
            Injection::Horizon => Injected::Horizon(
                self.first_value().and_then(|s| history::RecordingHorizon::parse_snapshot(s).ok()),
            ),
            Injection::Xid => {
                // xid8 is (epoch << 32) | xid; a row's xmin shows the xid.
                let xid8 = self.first_value().and_then(|s| s.parse::<u64>().ok());
                Injected::Xid(xid8.map(|x| x as u32))
            }
            Injection::Fence { .. } => {
                let committed = self.committed && !self.error;
                let ops = self.fence_ops(&shared.book);
                if let Some(schema) = self.fence_schema {
                    shared.set_fence_table(format!("{schema}.{FENCE_TABLE}"));
                }
                if committed {
                    shared.fence_ready.store(true, std::sync::atomic::Ordering::Relaxed);
                    shared.metrics.fences.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Injected::Fence { ops, committed }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::Observed;

    #[test]
    fn counter_fires_every_n_commits_and_zero_disables() {
        let mut c = FenceCounter::new(3, Duration::ZERO, Duration::ZERO);
        for _ in 0..2 {
            c.committed();
            assert!(!c.due());
        }
        c.committed();
        assert!(c.due());
        c.fenced(1);
        assert!(!c.due());
        let mut off = FenceCounter::new(0, Duration::ZERO, Duration::from_secs(1));
        for _ in 0..100 {
            off.committed();
        }
        assert!(!off.due());
        assert_eq!(off.idle_after(), None, "no fences, no idle ones either");
        assert!(!off.idle_due(5));
    }

    #[test]
    fn an_idle_connection_fences_only_once_the_chain_has_moved_on_without_it() {
        let mut c = FenceCounter::new(20, Duration::ZERO, Duration::from_millis(1_000));
        assert_eq!(c.idle_after(), Some(Duration::from_millis(1_000)));
        assert!(c.idle_due(1), "it never fenced and another connection did: it holds the epochs back");
        assert!(!c.idle_due(0), "no fence anywhere yet: there is no epoch to hold back");
        c.fenced(4);
        assert!(!c.idle_due(4), "its own fence is still the latest");
        assert!(c.idle_due(5), "another connection fenced since");
        assert!(!c.due(), "commits, not idleness, make the regular fence due");
        let never = FenceCounter::new(20, Duration::ZERO, Duration::ZERO);
        assert_eq!(never.idle_after(), None);
        assert!(!never.idle_due(9), "idle_ms = 0 turns idle fences off");
    }

    /// A closing connection fences if it committed since its last fence, however few commits and however
    /// soon: otherwise its last transactions never get an epoch, and collection keeps all they reach.
    #[test]
    fn a_closing_connection_fences_after_any_commit_since_its_last_fence() {
        let mut c = FenceCounter::new(20, Duration::from_secs(3_600), Duration::ZERO);
        assert!(!c.closing_due(), "nothing committed: nothing to give an epoch");
        c.committed();
        assert!(!c.due() && c.closing_due(), "one commit of twenty is enough when closing");
        c.fenced(1);
        assert!(!c.closing_due());
        c.committed();
        assert!(c.closing_due(), "the minimum interval does not hold a closing fence back");
        let mut off = FenceCounter::new(0, Duration::ZERO, Duration::ZERO);
        off.committed();
        assert!(!off.closing_due(), "no fences, no closing ones either");
    }

    /// A connection that fences at open does so before anything else, once, and only when fences are on.
    #[test]
    fn an_opening_fence_is_due_once_before_the_first_commit() {
        let mut c = FenceCounter::new(20, Duration::from_secs(3_600), Duration::ZERO).fencing_at_open();
        assert!(c.opening_due() && !c.due() && !c.closing_due(), "due before anything was committed");
        c.fenced(0);
        assert!(!c.opening_due(), "once per connection");
        c.committed();
        assert!(!c.opening_due() && c.closing_due());
        assert!(!FenceCounter::new(20, Duration::ZERO, Duration::ZERO).opening_due(), "off unless asked");
        let off = FenceCounter::new(0, Duration::ZERO, Duration::ZERO).fencing_at_open();
        assert!(!off.opening_due(), "no fences, no opening one either");
    }

    #[test]
    fn counter_waits_out_the_minimum_interval_after_a_fence() {
        let mut c = FenceCounter::new(2, Duration::from_millis(150), Duration::ZERO);
        c.committed();
        c.committed();
        assert!(c.due(), "the first fence is due at once");
        c.fenced(1);
        for _ in 0..100 {
            c.committed();
        }
        assert!(!c.due(), "enough commits, but too soon after the last fence");
        std::thread::sleep(Duration::from_millis(160));
        assert!(c.due(), "enough commits and long enough since the last fence");
        c.fenced(1);
        std::thread::sleep(Duration::from_millis(160));
        c.committed();
        assert!(!c.due(), "long enough, but not enough commits");
    }

    #[test]
    fn fences_chain_through_the_book() {
        let book = VersionBook::new();
        let first = fence_ops([b"5", b"0"], [b"9", b"0"], true, &book);
        assert!(matches!(first[0], LoggedOp::Read { observed: Observed::PreHistory(_), .. }));
        let second = fence_ops([b"9", b"0"], [b"12", b"0"], false, &book);
        let (LoggedOp::Write { write, .. }, LoggedOp::Read { observed, .. }) = (&first[1], &second[0]) else {
            panic!("shape")
        };
        assert_eq!(*observed, Observed::Version(*write));
        // A later version the book does not know: written by a fence whose record was lost.
        let lost = fence_ops([b"15", b"0"], [b"17", b"0"], false, &book);
        assert!(matches!(lost[0], LoggedOp::Read { observed: Observed::Unrecorded(_), .. }), "{lost:?}");
        assert!(setup_row(&[
            Some(Bytes::from_static(b"5")),
            Some(Bytes::from_static(b"0")),
            Some(Bytes::from_static(b"0"))
        ]));
        assert!(!setup_row(&[
            Some(Bytes::from_static(b"5")),
            Some(Bytes::from_static(b"0")),
            Some(Bytes::from_static(b"3"))
        ]));
        assert_eq!(fence_statements(7, FENCE_TABLE).len(), 4);
        assert!(fence_statements(7, "app.krait_fence")[1].contains("FROM app.krait_fence WHERE id = 7"));
    }
}
