//! What every session's tagging shares: the catalog cache, the version book, the fence row, the recording
//! horizon's state and the `/metrics` counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::catalog::Catalog;
use super::plan::OpaqueKind;
use super::plan_cache::PlanCache;
use super::versions::{VersionBook, seed};

/// Counters for `/metrics`, shared by all sessions.
#[derive(Debug, Default)]
pub struct TaggingMetrics {
    /// Statements rewritten to return version tags.
    pub statements_rewritten: AtomicU64,
    /// Row reads recorded (including Absent).
    pub reads: AtomicU64,
    /// Of those, reads of a version no recorded transaction wrote, after the recording horizon (DESIGN.md
    /// §3): the verifier counts them as unverifiable.
    pub unrecorded_reads: AtomicU64,
    /// Row writes recorded (including tombstones).
    pub writes: AtomicU64,
    /// Opaque statements or statement parts, by [`OpaqueKind`] in [`OpaqueKind::ALL`] order.
    pub opaque: [AtomicU64; OpaqueKind::ALL.len()],
    /// Sessions that stopped recording ops after a reply they could not place.
    pub broken_sessions: AtomicU64,
    /// Fence transactions run.
    pub fences: AtomicU64,
    /// Ops that arrived after their transaction's write-ahead intent was logged (an autocommit statement's
    /// rows, or a COMMIT sent in the same query string as the statements), logged in a late-ops record.
    pub late_ops: AtomicU64,
}

impl TaggingMetrics {
    pub(crate) fn opaque(&self, kind: OpaqueKind) {
        if let Some(i) = OpaqueKind::ALL.iter().position(|k| *k == kind) {
            self.opaque[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The count of one opaque kind.
    pub fn opaque_count(&self, kind: OpaqueKind) -> u64 {
        OpaqueKind::ALL.iter().position(|k| *k == kind).map_or(0, |i| self.opaque[i].load(Ordering::Relaxed))
    }

    /// All opaque counts together.
    pub fn opaque_total(&self) -> u64 {
        self.opaque.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Prometheus text lines.
    pub fn render(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut s = String::new();
        s.push_str(&format!("krait_tagging_statements_rewritten_total {}\n", g(&self.statements_rewritten)));
        s.push_str(&format!("krait_tagging_reads_total {}\n", g(&self.reads)));
        s.push_str(&format!("krait_tagging_unrecorded_reads_total {}\n", g(&self.unrecorded_reads)));
        s.push_str(&format!("krait_tagging_writes_total {}\n", g(&self.writes)));
        for (k, c) in OpaqueKind::ALL.iter().zip(&self.opaque) {
            s.push_str(&format!("krait_tagging_opaque_total{{kind=\"{}\"}} {}\n", k.label(), g(c)));
        }
        s.push_str(&format!("krait_tagging_broken_sessions_total {}\n", g(&self.broken_sessions)));
        s.push_str(&format!("krait_fences_total {}\n", g(&self.fences)));
        s.push_str(&format!("krait_tagging_late_ops_total {}\n", g(&self.late_ops)));
        s
    }
}

/// The least time between two catalog reloads asked for by names the catalog did not know
/// ([`TaggingShared::mark_catalog_stale_for_unknown`]). DDL sent through the proxy marks the catalog stale
/// at once, whatever this says.
pub const UNKNOWN_RELOAD_INTERVAL_MS: u64 = 1000;

/// A monotonic instant, defaulting to now.
#[derive(Debug)]
struct CreatedAt(std::time::Instant);

impl Default for CreatedAt {
    fn default() -> Self {
        Self(std::time::Instant::now())
    }
}

/// What all sessions share: the catalog cache, the version book and the counters.
#[derive(Debug, Default)]
pub struct TaggingShared {
    /// The cached catalog, and the value of `catalog_changes` when the reload that made it began.
    catalog: std::sync::RwLock<(u64, Arc<Catalog>)>,
    /// Counts the moments the catalog may have changed: a statement named a table the catalog does not
    /// know, or DDL that changes tables was planned or its transaction ended. The cache is stale while the
    /// reload that made it began before the last of them; it is a count and not a flag so that a reload
    /// which began before a change (another session's, still running when the DDL committed) cannot mark
    /// the cache fresh without the change in it.
    catalog_changes: AtomicU64,
    /// Mirrors the first half of `catalog`, read without the lock.
    catalog_loaded_at: AtomicU64,
    /// When a name the catalog did not know last marked it stale, in milliseconds after `created`, plus 1
    /// ([`Self::mark_catalog_stale_for_unknown`]); 0 before the first time.
    unknown_marked_ms: AtomicU64,
    /// When this state was made: the monotonic base of `unknown_marked_ms`.
    created: CreatedAt,
    /// Write ids recorded by this proxy.
    pub book: VersionBook,
    /// Whether a fence committed, so the fence table and row exist (later fences skip the setup).
    pub fence_ready: std::sync::atomic::AtomicBool,
    /// This proxy's row of `krait_fence`.
    pub fence_row: i32,
    /// Fences started by sessions of this proxy because they committed enough client transactions (not
    /// the idle ones): an idle session whose last fence is behind this count fences on its own
    /// ([`super::fence::FenceCounter::idle_due`]). Idle fences do not count, or idle sessions would keep
    /// each other fencing with no client traffic at all.
    pub busy_fences: std::sync::atomic::AtomicU64,
    /// The fence table, schema-qualified, once a setup has told where it is ([`Self::fence_table`]).
    fence_table: std::sync::Mutex<Option<String>>,
    /// Set when the database could not answer the horizon query (the reference store, PostgreSQL before
    /// 13): versions no recorded transaction wrote then stay pre-history, and no session asks again.
    pub horizon_unanswered: std::sync::atomic::AtomicBool,
    /// Held while a session learns the horizon, so exactly one learns it, logs it and sets it.
    pub horizon_learning: tokio::sync::Mutex<()>,
    /// Transactions earlier runs left without an outcome, with their top-level database id: the first
    /// session of this run asks the database how they ended (`pg_xact_status`).
    pub crash_window: std::sync::Mutex<Vec<(history::TxnId, u32)>>,
    /// Plans by statement text (see [`super::plan_cache`]).
    pub plans: PlanCache,
    /// How parameters and row values are recorded beside the ops (`[record] values`); `None` records none.
    pub values: Option<Arc<super::values::ValueRecording>>,
    /// Counters.
    pub metrics: TaggingMetrics,
}

impl TaggingShared {
    /// Shared state with an empty catalog, marked stale so the first session loads it.
    pub fn new() -> Self {
        // A random row per proxy, never 0, within PostgreSQL's int.
        let fence_row = 1 + (rand::random::<u32>() % (i32::MAX as u32 - 1)) as i32;
        let s = TaggingShared { fence_row, ..Self::default() };
        s.mark_catalog_stale();
        s
    }

    /// The fence table as fences name it: schema-qualified once a setup has told its schema
    /// ([`super::fence::FENCE_SCHEMA_QUERY`]), so that sessions with any `search_path` find the one table;
    /// unqualified before.
    pub fn fence_table(&self) -> String {
        let known = self.fence_table.lock().unwrap_or_else(|p| p.into_inner()).clone();
        known.unwrap_or_else(|| super::fence::FENCE_TABLE.to_owned())
    }

    /// Notes where the setup found the fence table.
    pub fn set_fence_table(&self, qualified: String) {
        *self.fence_table.lock().unwrap_or_else(|p| p.into_inner()) = Some(qualified);
    }

    /// Seeds this run's state from the log that earlier runs wrote (see [`super::versions::seed`]): their
    /// versions, the ids their transactions own, and the transactions they left without an outcome whose
    /// top-level id is known. Call before any session of this run appends.
    pub fn seed(&self, log: &dyn history::log::HistoryLog) -> Result<seed::Seeded, history::LogError> {
        let (unresolved, seeded) = seed::seed(&self.book, log)?;
        if let Ok(mut w) = self.crash_window.lock() {
            *w = unresolved;
        }
        Ok(seeded)
    }

    /// The current catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().map(|c| c.1.clone()).unwrap_or_default()
    }

    /// Whether the catalog may have changed since the cached one was loaded: reload at the next idle point.
    pub fn catalog_stale(&self) -> bool {
        self.catalog_loaded_at.load(Ordering::Acquire) < self.catalog_changes.load(Ordering::Acquire)
    }

    /// Notes that the catalog may have changed.
    pub fn mark_catalog_stale(&self) {
        self.catalog_changes.fetch_add(1, Ordering::AcqRel);
    }

    /// Notes that a statement named a table the catalog does not know, at most once per
    /// [`UNKNOWN_RELOAD_INTERVAL_MS`]. A table created behind the proxy's back is then found by the next
    /// reload; but a name no reload can find (a view, a temporary table) must not cost a reload of the whole
    /// catalog, a query to the database, at every statement that names it, and neither must a prepared
    /// statement planned before its table was known, which keeps that plan for as long as it lives.
    pub fn mark_catalog_stale_for_unknown(&self) {
        let now = self.created.0.elapsed().as_millis() as u64 + 1;
        let last = self.unknown_marked_ms.load(Ordering::Acquire);
        // Another session may have stored a later time between `now` and the load: saturate.
        if last != 0 && now.saturating_sub(last) < UNKNOWN_RELOAD_INTERVAL_MS {
            return;
        }
        if self.unknown_marked_ms.compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.mark_catalog_stale();
        }
    }

    /// What a reload beginning now passes to [`Self::install_catalog`] when it is done.
    pub fn catalog_reload_begins(&self) -> u64 {
        self.catalog_changes.load(Ordering::Acquire)
    }

    /// Installs the catalog a reload read, which began when [`Self::catalog_reload_begins`] said `as_of`.
    /// An older reload finishing after a newer one leaves the newer catalog in place; a change noted
    /// while it ran leaves the cache stale.
    pub fn install_catalog(&self, cat: Catalog, as_of: u64) {
        if let Ok(mut c) = self.catalog.write()
            && c.0 <= as_of
        {
            *c = (as_of, Arc::new(cat));
            self.catalog_loaded_at.store(as_of, Ordering::Release);
        }
    }

    /// Replaces the catalog with one known to be current (tests and tools that build it by hand).
    pub fn set_catalog(&self, cat: Catalog) {
        self.install_catalog(cat, self.catalog_reload_begins());
    }
}
