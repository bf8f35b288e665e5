//! Why the pipeline gave no verdict: [`VerifyError`], which any stage may return (Cobra Fig. 3 has no such
//! outcome; a failed solver or an out-of-memory closure is Krait's own).

use thiserror::Error;

/// Why verification could not give a verdict.
#[derive(Debug, Error)]
pub enum VerifyError {
    /// The solver failed.
    #[error("solver failed: {0}")]
    Solver(#[from] solver::SolverError),
    /// Reachability could not be computed (for example, the closure would not fit in memory).
    #[error("reachability failed: {0}")]
    Reachability(#[from] kernels::KernelError),
    /// The history breaks the model's rules in a way that leaves no verdict (for example, two transactions
    /// share an id, so a report could not say which one it means).
    #[error("malformed history: {0}")]
    Malformed(String),
    /// A broken invariant inside the verifier; a bug, reported instead of a panic.
    #[error("internal error: {0}")]
    Internal(String),
}
