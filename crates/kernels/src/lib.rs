//! Reachability backends for pruning (Cobra §3.3). Being built in the verifier issue.
