//! The memory a session's pumps hold in their buffers, and giving it back.
//!
//! A buffer grows to whatever the largest message (or the largest run of pipelined messages) needed: a
//! client's 450 KB Query makes the client pump's read buffer and its send buffer 450 KB each, and a 10 MB
//! DataRow does the same to the database pump's. Left alone they would stay that size for the session's
//! lifetime, so a client could make every one of its idle connections hold the most it ever sent. Once a
//! pump has forwarded what it read, a buffer that grew past [`SHRINK_ABOVE`] is replaced by a small one.
//!
//! What the buffers hold shows in `/metrics` as `krait_session_buffer_bytes`, the sum over live sessions.
//! The gauge moves only when a buffer's size changes, not per message.
//!
//! Freed memory is not returned to the system by itself: glibc's malloc keeps what a session freed in its
//! per-thread arenas, so after a large message the process stays near its peak. [`return_freed_memory`]
//! hands it back when a session ends after some session forwarded a large message.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::BytesMut;

use crate::metrics::Metrics;

/// How much room a pump's read buffer gets before each read. `read_buf` reads only into spare capacity, and a
/// buffer whose frames were just split off may have a few bytes of it left: a reply would then arrive in
/// pieces, each forwarded with a send of its own.
pub(super) const READ_ROOM: usize = 16 * 1024;

/// A buffer that grew past this is given back once the pump has forwarded what it held: four times the
/// usual read room, so that ordinary traffic (a reply of a few reads) never reallocates.
pub(super) const SHRINK_ABOVE: usize = 64 * 1024;

/// Makes sure the next read can take a whole typical reply (reusing the buffer's memory when it can).
pub(super) fn make_room(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < READ_ROOM / 2 {
        buf.reserve(READ_ROOM);
    }
}

/// One pump's read buffer and send buffer as `krait_session_buffer_bytes` counts them. The buffers stay the
/// pump's own variables; this only watches their sizes and swaps a grown one for a small one.
pub(super) struct PumpBuffers<'m> {
    metrics: &'m Metrics,
    /// The largest capacity the read buffer showed since it was allocated. `BytesMut::capacity` counts from
    /// the first unread byte, so once a large message is split off the buffer no longer shows the allocation
    /// it still holds (and reuses); this remembers it.
    read_held: usize,
    /// What this pump adds to the gauge now.
    reported: u64,
}

impl<'m> PumpBuffers<'m> {
    /// Starts counting one pump's buffers in `metrics`.
    pub(super) fn new(metrics: &'m Metrics) -> Self {
        PumpBuffers { metrics, read_held: 0, reported: 0 }
    }

    /// Notes the buffers' sizes just before a read (after [`make_room`]), when a message larger than the
    /// room has made the read buffer grow.
    pub(super) fn note(&mut self, read: &BytesMut, out: &BytesMut) {
        self.read_held = self.read_held.max(read.capacity());
        self.report(out);
    }

    /// After the pump has sent what it forwarded (`out` is empty): replaces a buffer that grew past
    /// [`SHRINK_ABOVE`] with a small one. The read buffer's unread bytes (the start of the next message, at
    /// most a read's worth) move with it; if more than that is unread, a large message is still arriving and
    /// the buffer stays until it has been forwarded.
    pub(super) fn shrink(&mut self, read: &mut BytesMut, out: &mut BytesMut) {
        if self.read_held.max(read.capacity()) > SHRINK_ABOVE && read.len() <= READ_ROOM {
            let mut small = BytesMut::with_capacity(READ_ROOM);
            small.extend_from_slice(read);
            *read = small;
            self.read_held = read.capacity();
            LARGE_FREED.store(true, Ordering::Relaxed);
        }
        if out.is_empty() && out.capacity() > SHRINK_ABOVE {
            *out = BytesMut::new();
            LARGE_FREED.store(true, Ordering::Relaxed);
        }
        self.report(out);
    }

    /// Moves the gauge by the change in what this pump holds, if any.
    fn report(&mut self, out: &BytesMut) {
        let now = (self.read_held + out.capacity()) as u64;
        if now > self.reported {
            self.metrics.session_buffer_bytes.fetch_add(now - self.reported, Ordering::Relaxed);
        } else if now < self.reported {
            self.metrics.session_buffer_bytes.fetch_sub(self.reported - now, Ordering::Relaxed);
        }
        self.reported = now;
    }
}

impl Drop for PumpBuffers<'_> {
    /// The pump's buffers are freed with it: its share leaves the gauge however the session ends.
    fn drop(&mut self) {
        self.metrics.session_buffer_bytes.fetch_sub(self.reported, Ordering::Relaxed);
    }
}

/// Set when a pump gave back a buffer that a large message had grown: that message's parse, copies and
/// replies were freed with it, in amounts worth returning to the system.
static LARGE_FREED: AtomicBool = AtomicBool::new(false);

/// Returns the memory malloc holds free to the system, if a large message was forwarded since the last time.
///
/// Measured (proxy_memory's 50,000-statement Query, RSS of the test process with the proxy in it): 41.4 MB
/// after the Query, 41.4 MB after the session closed without this, 38.1 MB with it, from 29.9 MB before
/// the Query. Most of what the Query took is already returned because its statements are no longer all
/// parsed at once (`interpret::plan::plan_query`); this gives back most of the rest. Called at a session's
/// end only, and only after a large message, because `malloc_trim` walks every arena under its lock.
pub(super) fn return_freed_memory() {
    if LARGE_FREED.swap(false, Ordering::Relaxed) {
        trim();
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: malloc_trim takes no pointers and may be called from any thread at any time; glibc locks each
    // arena while it trims it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators and C libraries return memory their own way; nothing to do.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauge(m: &Metrics) -> u64 {
        m.session_buffer_bytes.load(Ordering::Relaxed)
    }

    #[test]
    fn a_buffer_grown_by_a_large_message_is_given_back_once_forwarded() {
        let m = Metrics::default();
        let mut bufs = PumpBuffers::new(&m);
        let (mut read, mut out) = (BytesMut::new(), BytesMut::new());
        make_room(&mut read);
        bufs.note(&read, &out);
        let idle = gauge(&m);
        assert!(idle >= READ_ROOM as u64 && idle <= SHRINK_ABOVE as u64, "{idle}");

        // A 450 KB message arrives, plus the start of the next one; it is split off and forwarded.
        read.extend_from_slice(&vec![b'x'; 450_000 + 10]);
        bufs.note(&read, &out);
        let message = read.split_to(450_000);
        out.extend_from_slice(&message);
        assert!(read.capacity() < SHRINK_ABOVE, "the tail no longer shows the allocation it holds");
        bufs.note(&read, &out);
        assert!(gauge(&m) >= 900_000, "{}", gauge(&m));
        out.clear();
        bufs.shrink(&mut read, &mut out);
        assert!(LARGE_FREED.load(Ordering::Relaxed), "the next session end returns what was freed");
        assert_eq!(&read[..], &[b'x'; 10][..], "the next message's start is kept");
        assert!(read.capacity() <= SHRINK_ABOVE && out.capacity() <= SHRINK_ABOVE);
        assert!(gauge(&m) <= SHRINK_ABOVE as u64, "{}", gauge(&m));

        // A message still arriving keeps its buffer.
        read.extend_from_slice(&vec![b'y'; 100_000]);
        bufs.note(&read, &out);
        bufs.shrink(&mut read, &mut out);
        assert_eq!(read.len(), 100_010);
        drop(bufs);
        assert_eq!(gauge(&m), 0, "a pump that ends leaves the gauge");
    }
}
