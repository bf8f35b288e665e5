//! The Krait middlebox: listener, TLS, auth relay, session state machine and recorder.

pub mod machine;
pub mod sql;
