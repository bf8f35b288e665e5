//! The reference store: the operational semantics of consistency models of Xiong, Cerone, Raad and Gardner
//! ("Data consistency in transactional storage systems: a centralised semantics", ECOOP 2020;
//! `seeds/004_…`), run in process to *generate* histories whose consistency model is known by construction.
//!
//! - [`store`]: the centralised multi-version kv-store (per key, a list of versions with value, writer and
//!   readers) and client views (§3).
//! - [`model`]: the execution tests, one vshift and one can-commit per consistency model (§4.1, Fig. 4, as
//!   restated in DESIGN.md's Appendix), plus read committed, which the paper cannot express.
//! - [`generate`](mod@generate): seeded clients that drive the store and record a [`history::History`].
//! - [`session`]: interactive clients, one transaction statement by statement, several open at once.
//! - [`pg`]: a PostgreSQL-wire front on sessions, so real drivers can run transactions on the store.
//!
//! ```
//! use refstore::{GenConfig, Model, generate};
//!
//! let history = generate(&GenConfig {
//!     model: Model::ReadCommitted,
//!     clients: 4,
//!     txns: 20,
//!     keys: 2,
//!     ops_per_txn: 3,
//!     read_ratio: 0.5,
//!     seed: 42,
//!     ..GenConfig::default()
//! })
//! .unwrap();
//! assert_eq!(history.stats().committed, 20);
//! ```
//!
//! In generated histories: the session is the client; write ids are unique per version and count up from 1;
//! the initial version of every key reads as `Observed::PreHistory(0)`; timestamps come from a logical clock
//! (one tick per scheduling step, in µs), so a transaction of a view model starts and commits within its
//! step, and a stale view shows up as a real-time violation (which is how serializability's stale read-only
//! transactions separate it from strict serializability).

//! **Reading the table.** Where DESIGN.md's Appendix leaves room, the choices are:
//! - Consistent prefix, SI and serializability take views that are prefixes of the *actual* commit order.
//!   The paper's consistent prefix closes views under an approximation of that order (§4.1.6), which allows
//!   more views; ours are a subset, so every history is still consistent-prefix (sound, less complete).
//! - Update atomic closes the view under WW⁻¹ restricted to the keys the transaction writes (the paper's
//!   `R_UA`); parallel SI closes it under `R_UA ∪ SO ∪ WR ∪ WW` as one relation (§4.1.5).
//! - Weak SI (§4.1.9, consistent prefix plus update atomic) is not offered: with prefix views its commit test
//!   is SI's, so it would generate exactly SI's histories.
//! - A view shift happens before each transaction; the view after a commit is the one the transaction ran
//!   on plus the transaction itself, which is what read-your-writes asks for.

pub mod generate;
pub mod model;
pub mod pg;
pub mod session;
pub mod store;

pub use generate::{
    GenConfig, GenError, MAX_CLIENTS, MAX_KEYS, MAX_OPS_PER_TXN, Simulation, generate, simulate,
};
pub use model::{ClientState, Model, UnknownModel};
pub use session::{Row, RowKey, Session, SessionError, SharedStore, StoreConfig, Table};
pub use store::{KvStore, TxnIndex, Version, View};
