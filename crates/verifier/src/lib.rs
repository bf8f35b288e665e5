//! Checks a history for serializability. Being built in the verifier issue.
