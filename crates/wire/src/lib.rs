//! Wire-protocol codecs, pure and without I/O, so that every parser of untrusted bytes can be unit-tested and
//! fuzzed on its own (`crates/wire/fuzz`).
//!
//! - [`pg`]: the PostgreSQL frontend/backend protocol 3.0: the frame splitter, startup packets, and one type per
//!   frontend and backend message.
//!
//! The codec is our own rather than `pgwire`'s: the proxy needs a splitter that hands out each message's raw
//! bytes (so that forwarding is a copy of the original, never a re-encoding), decodes only the few messages
//! it inspects, and treats partial input as "incomplete" rather than as an error. Owning it also keeps it free
//! of I/O and async code, which makes the fuzz target trivial.

pub mod pg;
