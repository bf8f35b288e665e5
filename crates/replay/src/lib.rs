//! Replays a reject report's anomaly against a database (issue 18, item 4), after CLOTHO (seed 003): an
//! anomaly found in a history becomes a concrete test that reproduces it.
//!
//! The data flows through one module per stage:
//! 1. [`plan`]: from the report's transactions to sessions of steps (BEGIN, each statement, COMMIT) and one
//!    interleaving of them across sessions: the order the recorded dependencies and times imply.
//! 2. [`sql`]: each statement as it will be sent, its parameters written in as literals and its tables
//!    moved into the scratch schema.
//! 3. [`setup`]: the scratch schema and the rows the steps touch, at the values they had before the first
//!    step (from the recorded row values).
//! 4. [`script`]: the plan as files a person can read and run by hand.
//! 5. [`run`]: the steps run on their own connections, through an in-process Krait proxy that records
//!    them, in exactly that interleaving; the recorded replay is verified at the report's level and the
//!    result named: reproduced, prevented or not reproduced.

pub mod plan;
pub mod run;
pub mod script;
pub mod setup;
pub mod sql;

pub use plan::{PlanError, ReplayPlan, Step, StepKind};
pub use run::{ReplayError, ReplayOptions, Replayed, StepOutcome, Verdict, describe, replay};
pub use script::Prepared;
pub use setup::{Before, Scratch, Setup, rows_before, scratch_schema};
pub use sql::TableMap;
