//! The SQL interpreter: from the statements unmodified clients send to the reads and writes of rows the
//! verifier checks (DESIGN.md §3 "Making writes identifiable without changing the application").
//!
//! - [`plan`]: parse each statement with `sqlparser` (pure Rust, builds in seconds here; `pg_query`
//!   would parse exactly as PostgreSQL does but needs a C build of the server's parser), decide what it
//!   does to rows, and rewrite it to also return each row's version tag. What cannot be mapped is
//!   [`plan::Opaque`], counted by [`plan::OpaqueKind`].
//! - [`strip`]: cut the added columns from RowDescription and DataRow (a suffix cut; the rest is copied
//!   byte for byte) and widen a Bind's per-column result formats.
//! - [`versions`]: (table, pk, xmin) to write ids, tombstones, and the rule for pre-history versions; its
//!   module docs list the limits of `xmin`.
//! - [`catalog`]: primary keys from `pg_catalog`, cached.
//! - [`fence`]: the fence transaction and the per-connection counter.
//! - [`plan_cache`]: plans shared by all sessions, by exact text and, for texts with literals, by
//!   [`fingerprint`] (the text with its literals cut out) as a [`plan_template`] filled in per execution.
//!
//! # In the session
//!
//! With `[tagging] strategy = "xmin"` ([`tagger`] reads each request and reply by the session's one queue of
//! expected replies, [`ops`] collects the transaction's ops beside its statements, [`inject`] runs fences
//! and catalog reloads between transactions):
//! - The first session loads the primary keys before its client's first message; a statement that names
//!   an unknown table is opaque and makes the next idle session reload the catalog.
//! - A statement is rewritten once (at Query or Parse); a prepared statement keeps its plan for every Bind.
//! - A message that may commit (Query, Execute, Sync) waits while rows of earlier statements that are
//!   *writes* are still to come, so the write-ahead intent carries every write. A client that pipelines a
//!   write's Execute and its Sync pays one extra round trip per batch; reads never wait.
//! - A transaction that wrote nothing, and whose unanswered statements are all planned as reads or
//!   transaction control, logs no intent: it is logged once, when it ends. A crash in between loses a
//!   reader, which can hide an anomaly but never fake one. (A SELECT that calls a user function is planned
//!   as a read: what the function writes is an unrecorded writer's either way.)
//! - Ops that arrive after the intent (an autocommit statement's rows: its intent is logged before it is
//!   forwarded, since it commits as it runs; or a COMMIT in the same query string as the statements, e.g.
//!   `UPDATE ...; COMMIT`) go to the log in a late-ops record just before the outcome, whose fsync covers
//!   them; they are counted in `krait_tagging_late_ops_total`.
//! - Fences run between client transactions only, and are recorded with `fence = true` at their place in
//!   session order.
//!
//! Known differences a client can see: an error in a rewritten statement that combines several statements
//! in one query string may report a position shifted by the added columns (single statements are spliced
//! in place and their error positions are moved back). A DML Execute with a row limit returns its rows in
//! pieces (PortalSuspended) where the client, without RETURNING, expected none.
//!
//! Opaque statements are counted in `/metrics` by class; the history itself does not carry them yet (its
//! record format has no field for them), so a report cannot list them.
//!
//! # Strategies
//!
//! [`VersionStrategy`] is what a way of identifying versions must provide. [`XminStrategy`] is
//! PostgreSQL's default. [`ColumnStrategy`] is the design for MySQL/MariaDB and databases without `xmin`:
//!
//! - Setup: for each tagged table, `ALTER TABLE t ADD COLUMN krait_wid BIGINT INVISIBLE` (MySQL 8.0.23+;
//!   MariaDB 10.3+ has `INVISIBLE` too). Invisible columns are left out of `SELECT *` and of INSERTs
//!   without a column list, so the application sees the same result shapes.
//! - Writes: the proxy allocates a write id per statement and row and sets it in the same statement:
//!   `UPDATE t SET ..., krait_wid = <id>`; `INSERT INTO t (cols..., krait_wid) VALUES (..., <id>)`. With
//!   several rows per statement the id is `<statement id> * 2^16 + row number` (MySQL has no RETURNING, so
//!   the proxy must be able to name every row's id in advance). DELETE needs a tombstone id of
//!   (key, deleting transaction), which MySQL cannot return; the rewriter would select the affected keys
//!   first (`SELECT pk FROM t WHERE <same predicate> FOR UPDATE`), which is only equivalent under locking
//!   reads.
//! - Reads: append `t.krait_wid` and the primary key to the target list, and strip them, as with `xmin`.
//! - A row whose `krait_wid` is NULL was written before setup: pre-history, tag 0.
//!
//! Only the interface and this design exist; [`ColumnStrategy`] refuses to plan.

pub mod catalog;
pub mod fence;
pub mod fingerprint;
pub mod inject;
pub mod ops;
pub mod plan;
pub mod plan_cache;
pub mod plan_template;
pub mod search_path;
pub mod shared;
pub mod strip;
pub mod tagger;
pub mod values;
pub mod versions;

use bytes::Bytes;
use serde::Deserialize;

pub use catalog::{Catalog, Lookup, PK_QUERY, TableInfo};
pub use plan::{
    Opaque, OpaqueKind, PlanOptions, PlannedQuery, RowKind, RowPlan, SavepointCmd, StmtPlan, plan_query,
    plan_query_with,
};
pub use versions::{DiscoveredWrite, RowOps, TagError, VersionBook};

/// Which version-tagging strategy the proxy uses (`[tagging] strategy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StrategyName {
    /// No rewriting; transactions are recorded as statements only.
    Off,
    /// PostgreSQL's `xmin` system column: the default, as DESIGN.md §3 says for PostgreSQL.
    #[default]
    Xmin,
    /// A hidden column the proxy fills (MySQL/MariaDB; design only).
    Column,
}

/// The `[tagging]` section of the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaggingConfig {
    /// The strategy: `xmin` (the default, as DESIGN.md §3 says for PostgreSQL), `off` (statements only), or
    /// `column` (not built yet).
    pub strategy: StrategyName,
}

/// The `[fence]` section of the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FenceConfig {
    /// Run a fence every this many committed client transactions per connection (20 by default); 0
    /// disables fences. Only with tagging on.
    pub every: u64,
    /// …but not sooner than this many milliseconds after the connection's last fence (100 by default; 0:
    /// no floor). A fence costs the database a transaction with a commit record, so at thousands of commits
    /// a second per connection, fencing every 20 is most of the proxy's cost to the database, and the
    /// client whose transaction waits behind a fence sees its latency (at a 20 ms floor, one select-only
    /// transaction in fifty did, and the 99th percentile of latency was 5-13× direct's; at 100 ms, 1.2-1.3
    /// ms against direct's 0.5-1.0: docs/proxy-cost.md). Epochs need only advance often enough for garbage
    /// collection, which runs once per verification round.
    pub min_interval_ms: u64,
    /// A connection with no client transaction open and nothing outstanding for this many milliseconds
    /// runs a fence of its own, when other connections have fenced since its last one (1,000 by default;
    /// 0: never). Epochs advance only as far as every open session has fenced (Cobra §4.2), so without it
    /// one idle connection (a pooled one, say) stops garbage collection for as long as it stays idle.
    pub idle_ms: u64,
    /// A connection runs a fence before its first client message (on by default; only with `every` above
    /// 0). The verifier judges a read of a version garbage collection deleted only for a reader that follows
    /// a fence of its session (Cobra §4.2): without the opening fence, a connection opened after collection
    /// began has its first `every` transactions' reads of collected versions not judged, and a connection
    /// that runs one transaction and closes has none judged.
    pub at_open: bool,
}

impl Default for FenceConfig {
    fn default() -> Self {
        FenceConfig { every: 20, min_interval_ms: 100, idle_ms: 1_000, at_open: true }
    }
}

/// A strategy that cannot do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategyError {
    /// The strategy is designed but not built.
    #[error("not implemented yet: {0}")]
    NotImplemented(&'static str),
    /// A row's version columns were malformed.
    #[error(transparent)]
    Tag(#[from] TagError),
}

/// A way to learn which version of a row each statement read or wrote.
pub trait VersionStrategy: Send + Sync {
    /// The strategy's configuration name.
    fn name(&self) -> &'static str;

    /// SQL to run once per table before its rows can be tagged (for example adding a hidden column), if
    /// any.
    fn table_setup(&self, table: &TableInfo) -> Result<Option<String>, StrategyError>;

    /// Plans a query string and rewrites it to return version tags.
    fn plan(&self, sql: &str, catalog: &Catalog) -> Result<PlannedQuery, StrategyError>;

    /// The ops of one result row, from the values of its extra columns.
    fn row_ops(
        &self,
        plan: &RowPlan,
        extras: &[Option<Bytes>],
        stmt: Option<u32>,
        book: &VersionBook,
        own: &[u32],
    ) -> Result<RowOps, StrategyError>;
}

/// PostgreSQL's `xmin` (see [`versions`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct XminStrategy {
    /// What the rewrite adds beyond the version columns.
    pub options: PlanOptions,
}

impl VersionStrategy for XminStrategy {
    fn name(&self) -> &'static str {
        "xmin"
    }

    fn table_setup(&self, _table: &TableInfo) -> Result<Option<String>, StrategyError> {
        Ok(None)
    }

    fn plan(&self, sql: &str, catalog: &Catalog) -> Result<PlannedQuery, StrategyError> {
        Ok(plan_query_with(sql, catalog, self.options))
    }

    fn row_ops(
        &self,
        plan: &RowPlan,
        extras: &[Option<Bytes>],
        stmt: Option<u32>,
        book: &VersionBook,
        own: &[u32],
    ) -> Result<RowOps, StrategyError> {
        Ok(versions::row_ops(plan, extras, stmt, book, own)?)
    }
}

/// The hidden-column strategy for MySQL/MariaDB: designed (module docs), not built.
#[derive(Debug, Clone, Copy, Default)]
pub struct ColumnStrategy;

impl VersionStrategy for ColumnStrategy {
    fn name(&self) -> &'static str {
        "column"
    }

    fn table_setup(&self, table: &TableInfo) -> Result<Option<String>, StrategyError> {
        Ok(Some(format!(
            "ALTER TABLE {} ADD COLUMN IF NOT EXISTS krait_wid BIGINT INVISIBLE",
            table.namespace
        )))
    }

    fn plan(&self, _sql: &str, _catalog: &Catalog) -> Result<PlannedQuery, StrategyError> {
        Err(StrategyError::NotImplemented("the column strategy's statement rewriting"))
    }

    fn row_ops(
        &self,
        _plan: &RowPlan,
        _extras: &[Option<Bytes>],
        _stmt: Option<u32>,
        _book: &VersionBook,
        _own: &[u32],
    ) -> Result<RowOps, StrategyError> {
        Err(StrategyError::NotImplemented("the column strategy's row tags"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagging_config_defaults_to_xmin_with_fences_every_20() {
        let c: TaggingConfig = toml::from_str("").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.strategy, StrategyName::Xmin);
        assert_eq!(
            FenceConfig::default(),
            FenceConfig { every: 20, min_interval_ms: 100, idle_ms: 1_000, at_open: true }
        );
        let c: TaggingConfig = toml::from_str("strategy = \"off\"").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.strategy, StrategyName::Off);
        let f: FenceConfig = toml::from_str("every = 5").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((f.every, f.min_interval_ms), (5, 100));
        let f: FenceConfig = toml::from_str("min_interval_ms = 0").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((f.every, f.min_interval_ms), (20, 0));
        let f: FenceConfig = toml::from_str("idle_ms = 0").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((f.every, f.idle_ms), (20, 0));
        let f: FenceConfig = toml::from_str("at_open = false").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((f.every, f.at_open), (20, false));
        assert!(toml::from_str::<TaggingConfig>("strategy = \"bogus\"").is_err());
    }

    #[test]
    fn the_column_strategy_says_it_is_not_built() {
        let s = ColumnStrategy;
        assert!(matches!(s.plan("SELECT 1", &Catalog::new()), Err(StrategyError::NotImplemented(_))));
        assert_eq!(XminStrategy::default().name(), "xmin");
    }
}
