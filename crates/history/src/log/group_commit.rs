//! Group commit: one flusher thread turns many "make seq N durable" requests into few fsyncs.
//!
//! Appends only write into the storage engine's buffers. Under `strict`, a caller that needs its append
//! durable waits on a [`DurabilityTicket`]; that registers a request, and the flusher thread takes
//! every request that arrived while the previous fsync ran, notes the highest sequence number appended so
//! far, and covers all of them with one fsync. So N concurrent sessions committing at once pay for about one
//! fsync, not N (the same idea as PostgreSQL's group commit of WAL flushes).
//!
//! That alone shares little when commits come one after another rather than at once: each arrives while
//! no fsync runs and gets one of its own (issue 16: 0.95 fsyncs per waited commit at 8 clients). So a
//! waiter's fsync is held back, for at most the commit delay, while other transactions' COMMITs are in
//! flight at the database (intent logged, outcome not yet): their outcomes arrive within about one database
//! commit, and the fsync then covers them as well. With nothing in flight there is no delay.
//!
//! Under `group`, the flusher fsyncs whatever was appended at a fixed interval and tickets are ready at
//! once; under `none` it fsyncs only when asked ([`super::HistoryLog::sync`]) or at close.
//!
//! An fsync failure is final: after one, nothing later is ever reported durable, every waiter gets the
//! error, and appends are refused. Retrying an fsync after a failure can report success for pages the kernel
//! already dropped (the "fsyncgate" lesson), so the log does not retry.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::LogError;

/// Upper bounds, in microseconds, of the fsync latency histogram buckets; a last bucket counts the rest.
pub const FSYNC_BUCKETS_US: [u64; 12] =
    [50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 1_000_000];

/// How soon a record asked for with [`DurabilityTicket::request`] is made durable, at the latest. No one
/// waits on such a record, only a tailing verifier, whose rounds come at most a second apart (`krait serve
/// --round-interval-ms`), so a tenth of a second adds little lag. It is what a read-only load pays in
/// fsyncs: at 10 ms, the hundred fsyncs a second the flusher then ran were a fifth of the proxy's CPU under
/// pgbench select-only and cost it 10-20% of its throughput against `durability = "none"`
/// (`docs/proxy-cost.md`).
pub const SOON: Duration = Duration::from_millis(100);

/// What the flusher does without being asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlushPolicy {
    /// Fsync only for waiters (and `sync`).
    OnDemand,
    /// Also fsync anything appended, at most this long after the previous fsync.
    Every(Duration),
}

/// The engine-specific fsync; returns a description of the failure.
pub(crate) type FlushFn = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Counters for `/metrics`: how many fsyncs the log did, how long they took, and how many appends and
/// durable waits they served. A snapshot; take another to see progress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogStats {
    /// Records appended by this process.
    pub appends: u64,
    /// Tickets that waited for an fsync (under `strict`, one per acknowledged commit).
    pub durable_waits: u64,
    /// Fsyncs (storage-engine flushes) that succeeded.
    pub fsyncs: u64,
    /// Fsyncs that failed (at most one: the log stops after the first).
    pub fsync_failures: u64,
    /// Total time spent in fsync, in nanoseconds.
    pub fsync_ns_total: u64,
    /// The slowest fsync, in nanoseconds.
    pub fsync_ns_max: u64,
    /// Fsync latency histogram: `fsync_histogram[i]` counts fsyncs that took at most
    /// `FSYNC_BUCKETS_US[i]` microseconds (and more than the bucket before); the last entry counts slower
    /// ones. Not cumulative.
    pub fsync_histogram: Vec<u64>,
}

impl LogStats {
    /// Mean fsync latency in nanoseconds, or 0 before the first fsync.
    pub fn fsync_ns_mean(&self) -> u64 {
        self.fsync_ns_total.checked_div(self.fsyncs).unwrap_or(0)
    }
}

#[derive(Default)]
struct Counters {
    appends: AtomicU64,
    durable_waits: AtomicU64,
    fsyncs: AtomicU64,
    fsync_failures: AtomicU64,
    fsync_ns_total: AtomicU64,
    fsync_ns_max: AtomicU64,
    histogram: [AtomicU64; FSYNC_BUCKETS_US.len() + 1],
}

impl Counters {
    fn record_fsync(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.fsync_ns_total.fetch_add(ns, Ordering::Relaxed);
        self.fsync_ns_max.fetch_max(ns, Ordering::Relaxed);
        let us = ns / 1_000;
        let bucket = FSYNC_BUCKETS_US.iter().position(|&b| us <= b).unwrap_or(FSYNC_BUCKETS_US.len());
        if let Some(cell) = self.histogram.get(bucket) {
            cell.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn snapshot(&self) -> LogStats {
        LogStats {
            appends: self.appends.load(Ordering::Relaxed),
            durable_waits: self.durable_waits.load(Ordering::Relaxed),
            fsyncs: self.fsyncs.load(Ordering::Relaxed),
            fsync_failures: self.fsync_failures.load(Ordering::Relaxed),
            fsync_ns_total: self.fsync_ns_total.load(Ordering::Relaxed),
            fsync_ns_max: self.fsync_ns_max.load(Ordering::Relaxed),
            fsync_histogram: self.histogram.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
        }
    }
}

/// Sequence-number bounds are exclusive ("everything below"), so that 0 means "nothing".
struct State {
    /// Every seq below this has been handed to the engine.
    appended_below: u64,
    /// Every seq below this is covered by a finished fsync.
    durable_below: u64,
    /// Some waiter needs every seq below this durable.
    wanted_below: u64,
    /// Some waiter needs every seq below this durable without the commit delay
    /// ([`DurabilityTicket::wait_async_undelayed`]).
    undelayed_below: u64,
    /// Every seq below this was asked to be made durable soon ([`DurabilityTicket::request`]), by no one
    /// waiting: the flusher covers it within [`SOON`] of the first such request, with whatever fsync comes.
    soon_below: u64,
    /// When the oldest pending "soon" request was made.
    soon_since: Option<Instant>,
    /// The first fsync failure; final.
    failed: Option<String>,
    /// Set by `shutdown`: the flusher makes everything appended durable once more and exits.
    shutdown: bool,
    /// Async waiters: (id, seq, waker).
    wakers: Vec<(u64, u64, Waker)>,
    next_waker_id: u64,
    /// Transactions whose intent is logged and whose outcome is not: COMMITs in flight at the database,
    /// whose outcomes (and waiters) come soon. Kept by the engine ([`GroupCommit::set_in_flight`]).
    in_flight: u64,
    /// Outcomes logged so far, to tell when the commits in flight at the start of a delay have all
    /// logged theirs.
    outcomes: u64,
    /// The flusher is holding an fsync back for commits in flight and wants to hear of each outcome; at
    /// other times an outcome wakes no one (a wake-up is a system call, and outcomes come at every commit).
    delaying: bool,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    /// Signals the flusher that there is work.
    work: Condvar,
    /// Signals waiters that `durable_below` moved (or that the log failed or shut down).
    done: Condvar,
    counters: Counters,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock can only come from a bug in this module; the state is still
        // consistent (every update is a single assignment), so carry on rather than poison every session.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The engine-independent half of a log: durability bookkeeping, the flusher thread, and statistics.
pub(crate) struct GroupCommit {
    shared: Arc<Shared>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    /// Whether tickets wait for an fsync (`strict`).
    tickets_wait: bool,
}

impl GroupCommit {
    /// Starts the flusher thread. `appended_below` is the next sequence number; everything before it is
    /// taken as durable (it was recovered from disk). `commit_delay` is the longest an fsync a waiter
    /// asked for waits for the outcomes of commits in flight (see [`super::LogOptions::commit_delay`]).
    pub(crate) fn start(
        appended_below: u64,
        policy: FlushPolicy,
        tickets_wait: bool,
        commit_delay: Duration,
        flush: FlushFn,
    ) -> Result<Self, LogError> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                appended_below,
                durable_below: appended_below,
                wanted_below: appended_below,
                undelayed_below: appended_below,
                soon_below: appended_below,
                soon_since: None,
                failed: None,
                shutdown: false,
                wakers: Vec::new(),
                next_waker_id: 0,
                in_flight: 0,
                outcomes: 0,
                delaying: false,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            counters: Counters::default(),
        });
        let thread_shared = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("krait-log-flusher".into())
            .spawn(move || flusher_loop(&thread_shared, policy, commit_delay, &flush))
            .map_err(|e| LogError::Storage(format!("cannot start the log flusher thread: {e}")))?;
        Ok(GroupCommit { shared, flusher: Mutex::new(Some(handle)), tickets_wait })
    }

    /// Fails if an fsync has failed or the log is shut down; appends check this first.
    pub(crate) fn check_usable(&self) -> Result<(), LogError> {
        let state = self.shared.lock();
        if let Some(reason) = &state.failed {
            return Err(LogError::FsyncFailed(reason.clone()));
        }
        if state.shutdown {
            return Err(LogError::Closed);
        }
        Ok(())
    }

    /// Why the log stopped, once an fsync (or a write, see [`GroupCommit::fail`]) has failed.
    pub(crate) fn failure(&self) -> Option<String> {
        self.shared.lock().failed.clone()
    }

    /// Stops the log as a failed fsync does: the engine could not write a record, and the log's store
    /// refuses every later write after an I/O error, so nothing appended from now on could
    /// be made durable either. The first failure's reason is kept. Wakes every waiter with the error.
    pub(crate) fn fail(&self, reason: String) {
        let woken = {
            let mut state = self.shared.lock();
            if state.failed.is_none() {
                self.shared.counters.fsync_failures.fetch_add(1, Ordering::Relaxed);
                state.failed = Some(reason);
            }
            std::mem::take(&mut state.wakers)
        };
        self.shared.work.notify_all();
        self.shared.done.notify_all();
        for (_, _, waker) in woken {
            waker.wake();
        }
    }

    /// A ticket for `seq` that waits until an fsync covers it, whatever the log's durability.
    pub(crate) fn fsynced(&self, seq: u64) -> DurabilityTicket {
        DurabilityTicket { seq, shared: Some(Arc::clone(&self.shared)) }
    }

    /// Notes that `seq` was handed to the engine. Callers serialise appends, so seqs arrive in order.
    pub(crate) fn appended(&self, seq: u64) -> DurabilityTicket {
        self.shared.counters.appends.fetch_add(1, Ordering::Relaxed);
        {
            let mut state = self.shared.lock();
            state.appended_below = state.appended_below.max(seq + 1);
        }
        DurabilityTicket { seq, shared: self.tickets_wait.then(|| Arc::clone(&self.shared)) }
    }

    /// Notes how many transactions have an intent logged and no outcome yet (`in_flight`), and whether an
    /// outcome was just logged. Call under the engine's append lock, after the record went in.
    pub(crate) fn set_in_flight(&self, in_flight: usize, outcome_logged: bool) {
        let mut state = self.shared.lock();
        state.in_flight = in_flight as u64;
        if outcome_logged {
            state.outcomes += 1;
            // A flusher holding an fsync for the commits in flight may be done waiting. It sets `delaying`
            // under this lock before it waits, so the notification cannot fall between the two.
            if state.delaying {
                self.shared.work.notify_one();
            }
        }
    }

    /// Blocks until everything appended so far is covered by an fsync, whatever the policy.
    pub(crate) fn sync(&self) -> Result<(), LogError> {
        let below = self.shared.lock().appended_below;
        match below.checked_sub(1) {
            Some(last) => wait_blocking(&self.shared, last, false),
            None => Ok(()),
        }
    }

    /// The first sequence number not yet covered by an fsync.
    pub(crate) fn durable_below(&self) -> u64 {
        self.shared.lock().durable_below
    }

    /// A snapshot of the counters.
    pub(crate) fn stats(&self) -> LogStats {
        self.shared.counters.snapshot()
    }

    /// Makes everything appended durable, stops the flusher and wakes every waiter. Idempotent.
    pub(crate) fn shutdown(&self) -> Result<(), LogError> {
        {
            let mut state = self.shared.lock();
            state.shutdown = true;
            state.wanted_below = state.wanted_below.max(state.appended_below);
        }
        self.shared.work.notify_all();
        let handle = self.flusher.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = handle {
            handle.join().map_err(|_| LogError::Storage("the log flusher thread panicked".into()))?;
        }
        let state = self.shared.lock();
        match &state.failed {
            Some(reason) => Err(LogError::FsyncFailed(reason.clone())),
            None => Ok(()),
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        // Never leave the flusher thread running behind a dropped log; errors were reported by `close`.
        let _ = self.shutdown();
    }
}

fn flusher_loop(shared: &Shared, policy: FlushPolicy, commit_delay: Duration, flush: &FlushFn) {
    let mut last_flush = Instant::now();
    loop {
        // Set when a waiter's fsync starts waiting for commits in flight: until when, and the count of
        // outcomes that covers every commit that was in flight then.
        let mut delay: Option<(Instant, u64)> = None;
        let target = {
            let mut state = shared.lock();
            loop {
                if state.failed.is_some() {
                    return;
                }
                let wanted = state.wanted_below > state.durable_below;
                let dirty = state.appended_below > state.durable_below;
                if wanted && dirty {
                    // Commit delay: other transactions' COMMITs are at the database (intent logged, no
                    // outcome yet), so their outcomes, and their waiters, come within about one database
                    // commit. Waiting for them (never longer than `commit_delay`) lets one fsync cover
                    // them all; without it each commit of a steady stream gets an fsync of its own.
                    let undelayed = state.undelayed_below > state.durable_below;
                    if !state.shutdown && !commit_delay.is_zero() && !undelayed {
                        let now = Instant::now();
                        let (until, covered) =
                            *delay.get_or_insert((now + commit_delay, state.outcomes + state.in_flight));
                        if state.outcomes < covered && now < until {
                            state.delaying = true;
                            state = shared
                                .work
                                .wait_timeout(state, until - now)
                                .unwrap_or_else(|p| p.into_inner())
                                .0;
                            state.delaying = false;
                            continue;
                        }
                    }
                    break;
                }
                if wanted {
                    // Asked for something already durable (recovered records): nothing to fsync.
                    state.wanted_below = state.durable_below;
                    continue;
                }
                if state.shutdown {
                    return;
                }
                match policy {
                    FlushPolicy::OnDemand => match state.soon_since {
                        Some(since) if state.soon_below > state.durable_below => {
                            let now = Instant::now();
                            let due = since + SOON;
                            if dirty && now >= due {
                                break;
                            }
                            let sleep = due.saturating_duration_since(now).max(Duration::from_micros(100));
                            state =
                                shared.work.wait_timeout(state, sleep).unwrap_or_else(|p| p.into_inner()).0;
                        }
                        _ => {
                            state.soon_since = None;
                            state = shared.work.wait(state).unwrap_or_else(|p| p.into_inner());
                        }
                    },
                    FlushPolicy::Every(interval) => {
                        let due = last_flush + interval;
                        let now = Instant::now();
                        if dirty && now >= due {
                            break;
                        }
                        let sleep = if now >= due { interval } else { due - now };
                        state = shared.work.wait_timeout(state, sleep).unwrap_or_else(|p| p.into_inner()).0;
                    }
                }
            }
            // Everything below `appended_below` is already in the engine's buffers (appends update it
            // after the engine accepted the record), so one fsync started now covers all of it.
            state.appended_below
        };

        let started = Instant::now();
        let result = flush();
        let took = started.elapsed();
        last_flush = Instant::now();

        let woken = {
            let mut state = shared.lock();
            match result {
                Ok(()) => {
                    shared.counters.record_fsync(took);
                    state.durable_below = state.durable_below.max(target);
                    if state.soon_below <= state.durable_below {
                        state.soon_since = None;
                    }
                }
                Err(reason) => {
                    shared.counters.fsync_failures.fetch_add(1, Ordering::Relaxed);
                    state.failed = Some(reason);
                }
            }
            let durable = state.durable_below;
            let all = state.failed.is_some();
            let mut woken = Vec::new();
            state.wakers.retain(|(_, seq, waker)| {
                if all || *seq < durable {
                    woken.push(waker.clone());
                    false
                } else {
                    true
                }
            });
            woken
        };
        shared.done.notify_all();
        for waker in woken {
            waker.wake();
        }
    }
}

/// Registers the need for `seq` to be durable and reports whether it is (`Ready`) or not yet (`None`).
fn poll_durable(state: &mut State, shared: &Shared, seq: u64) -> Option<Result<(), LogError>> {
    if seq < state.durable_below {
        return Some(Ok(()));
    }
    if let Some(reason) = &state.failed {
        return Some(Err(LogError::FsyncFailed(reason.clone())));
    }
    if state.wanted_below <= seq {
        state.wanted_below = seq + 1;
        shared.work.notify_one();
    }
    // After shutdown the flusher has made everything appended durable and exited; a seq still not durable
    // can only be one appended after that, which appends refuse.
    if state.shutdown && seq >= state.appended_below {
        return Some(Err(LogError::Closed));
    }
    None
}

fn wait_blocking(shared: &Shared, seq: u64, count: bool) -> Result<(), LogError> {
    if count {
        shared.counters.durable_waits.fetch_add(1, Ordering::Relaxed);
    }
    let mut state = shared.lock();
    loop {
        if let Some(result) = poll_durable(&mut state, shared, seq) {
            return result;
        }
        state = shared.done.wait(state).unwrap_or_else(|p| p.into_inner());
    }
}

/// Proof that a record was appended, and the way to wait until it is as durable as the log's
/// [`super::Durability`] promises: under `strict`, until an fsync covers it; under `group` and `none`, not
/// at all (the record is in the engine's buffers and `group` fsyncs it within its interval).
#[must_use = "under strict durability, an outcome must not be acknowledged before its ticket is waited on"]
#[derive(Clone)]
pub struct DurabilityTicket {
    seq: u64,
    shared: Option<Arc<Shared>>,
}

impl std::fmt::Debug for DurabilityTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurabilityTicket")
            .field("seq", &self.seq)
            .field("waits", &self.shared.is_some())
            .finish()
    }
}

impl DurabilityTicket {
    /// A ticket that needs no waiting, for engines without group commit.
    pub fn ready(seq: u64) -> Self {
        DurabilityTicket { seq, shared: None }
    }

    /// The sequence number the record was appended under.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Blocks the calling thread until the record is durable. Do not call it on an async executor thread;
    /// use [`DurabilityTicket::wait_async`] there.
    pub fn wait(self) -> Result<(), LogError> {
        match &self.shared {
            None => Ok(()),
            Some(shared) => wait_blocking(shared, self.seq, true),
        }
    }

    /// Asks for the record to be made durable soon (within [`SOON`]), without waiting. For records no one
    /// is acknowledged on (a session's end, an abort, a fence, a commit that wrote nothing): a tailing
    /// verifier reads only durable records, and under `strict` the flusher fsyncs only when asked, so such a
    /// record at the end of the traffic would otherwise stay unread (and counted as lag) until the next
    /// commit asked for an fsync. Not at once: under a read-only load that would be one fsync per
    /// transaction, which no one waits for; many requests share one fsync instead.
    pub fn request(self) {
        if let Some(shared) = &self.shared {
            let mut state = shared.lock();
            if self.seq >= state.durable_below && self.seq >= state.soon_below {
                state.soon_below = self.seq + 1;
                if state.soon_since.is_none() {
                    state.soon_since = Some(Instant::now());
                    shared.work.notify_one();
                }
            }
        }
    }

    /// As [`DurabilityTicket::wait_async`], for a record whose own transaction's outcome comes only once it
    /// is durable (a fence's intent, whose COMMIT waits for it): the fsync it asks for does not wait for
    /// the commits in flight ([`super::LogOptions::commit_delay`]), which count that very transaction and
    /// would hold it for the whole delay.
    pub fn wait_async_undelayed(self) -> DurableFuture {
        if let Some(shared) = &self.shared {
            let mut state = shared.lock();
            if state.undelayed_below <= self.seq {
                state.undelayed_below = self.seq + 1;
            }
        }
        self.wait_async()
    }

    /// A future that resolves when the record is durable. It works on any executor: it needs no runtime,
    /// only the waker it is polled with, and it never blocks the polling thread.
    pub fn wait_async(self) -> DurableFuture {
        if let Some(shared) = &self.shared {
            shared.counters.durable_waits.fetch_add(1, Ordering::Relaxed);
        }
        DurableFuture { seq: self.seq, shared: self.shared, waker_id: None }
    }
}

/// The future of [`DurabilityTicket::wait_async`].
#[must_use = "futures do nothing unless polled"]
pub struct DurableFuture {
    seq: u64,
    shared: Option<Arc<Shared>>,
    waker_id: Option<u64>,
}

impl Future for DurableFuture {
    type Output = Result<(), LogError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(shared) = this.shared.clone() else {
            return Poll::Ready(Ok(()));
        };
        let mut state = shared.lock();
        if let Some(result) = poll_durable(&mut state, &shared, this.seq) {
            if let Some(id) = this.waker_id.take() {
                state.wakers.retain(|(w, _, _)| *w != id);
            }
            return Poll::Ready(result);
        }
        let seq = this.seq;
        match this.waker_id {
            Some(id) => match state.wakers.iter_mut().find(|(w, _, _)| *w == id) {
                Some(entry) => entry.2.clone_from(cx.waker()),
                None => state.wakers.push((id, seq, cx.waker().clone())),
            },
            None => {
                let id = state.next_waker_id;
                state.next_waker_id += 1;
                this.waker_id = Some(id);
                state.wakers.push((id, seq, cx.waker().clone()));
            }
        }
        Poll::Pending
    }
}

impl Drop for DurableFuture {
    fn drop(&mut self) {
        if let (Some(shared), Some(id)) = (&self.shared, self.waker_id) {
            shared.lock().wakers.retain(|(w, _, _)| *w != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    #[test]
    fn waiters_that_arrive_during_a_slow_fsync_share_the_next_one() {
        // An fsync slow enough that every session queues behind it: 8 sessions × 5 commits must take far
        // fewer than 40 fsyncs.
        let flush: FlushFn = Box::new(|| {
            std::thread::sleep(Duration::from_millis(5));
            Ok(())
        });
        let gc = Arc::new(GroupCommit::start(0, FlushPolicy::OnDemand, true, Duration::ZERO, flush).unwrap());
        let next = Arc::new(Mutex::new(0u64));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (gc, next) = (Arc::clone(&gc), Arc::clone(&next));
                std::thread::spawn(move || {
                    for _ in 0..5 {
                        let ticket = {
                            let mut n = next.lock().unwrap();
                            let t = gc.appended(*n);
                            *n += 1;
                            t
                        };
                        let seq = ticket.seq();
                        ticket.wait().unwrap();
                        assert!(gc.durable_below() > seq);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let stats = gc.stats();
        assert_eq!(stats.durable_waits, 40);
        assert!(stats.fsyncs <= 20, "{} fsyncs for 40 commits", stats.fsyncs);
        assert!(stats.fsync_ns_mean() >= 5_000_000);
    }

    #[test]
    fn an_fsync_failure_fails_every_waiter_and_every_later_append() {
        let fail = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&fail);
        let flush: FlushFn = Box::new(move || match flag.load(Ordering::SeqCst) {
            true => Err("EIO".into()),
            false => Ok(()),
        });
        let gc = GroupCommit::start(0, FlushPolicy::OnDemand, true, Duration::ZERO, flush).unwrap();
        gc.appended(0).wait().unwrap();
        fail.store(true, Ordering::SeqCst);
        let err = gc.appended(1).wait().unwrap_err();
        assert!(matches!(err, LogError::FsyncFailed(ref r) if r == "EIO"), "{err}");
        // Even if the disk "recovers", nothing later is acknowledged.
        fail.store(false, Ordering::SeqCst);
        assert!(matches!(gc.check_usable(), Err(LogError::FsyncFailed(_))));
        assert!(matches!(gc.sync(), Err(LogError::FsyncFailed(_))));
        assert_eq!(gc.durable_below(), 1);
        assert_eq!(gc.stats().fsync_failures, 1);
        assert_eq!(gc.failure().as_deref(), Some("EIO"));
        assert!(gc.shutdown().is_err());
    }

    #[test]
    fn a_write_failure_stops_the_log_as_an_fsync_failure_does() {
        let gc =
            GroupCommit::start(0, FlushPolicy::OnDemand, true, Duration::ZERO, Box::new(|| Ok(()))).unwrap();
        gc.appended(0).wait().unwrap();
        assert_eq!(gc.failure(), None);
        let pending = gc.appended(1);
        gc.fail("ENOSPC".into());
        gc.fail("a later failure".into());
        assert!(matches!(pending.wait(), Err(LogError::FsyncFailed(ref r)) if r == "ENOSPC"));
        assert!(matches!(gc.check_usable(), Err(LogError::FsyncFailed(_))));
        assert_eq!(gc.failure().as_deref(), Some("ENOSPC"), "the first reason is kept");
        assert_eq!(gc.durable_below(), 1);
        assert_eq!(gc.stats().fsync_failures, 1);
    }

    #[test]
    fn shutdown_makes_everything_durable_and_wakes_waiters() {
        let gc = GroupCommit::start(
            5,
            FlushPolicy::Every(Duration::from_secs(3600)),
            false,
            Duration::ZERO,
            Box::new(|| Ok(())),
        )
        .unwrap();
        for seq in 5..10 {
            gc.appended(seq).wait().unwrap();
        }
        assert_eq!(gc.durable_below(), 5, "group tickets do not wait, and the interval has not passed");
        gc.shutdown().unwrap();
        assert_eq!(gc.durable_below(), 10);
        assert!(matches!(gc.check_usable(), Err(LogError::Closed)));
    }

    /// A fence's intent counts among the transactions in flight, and its outcome comes only after its
    /// COMMIT, which waits for the intent: the commit delay, which waits for the outcomes of the
    /// transactions in flight, would hold it for the whole delay. An undelayed wait is not held.
    #[test]
    fn an_undelayed_wait_is_not_held_for_commits_in_flight() {
        let delay = Duration::from_secs(2);
        let gc = GroupCommit::start(0, FlushPolicy::OnDemand, true, delay, Box::new(|| Ok(()))).unwrap();
        let ticket = gc.appended(0);
        gc.set_in_flight(1, false);
        let started = Instant::now();
        block_on(ticket.clone().wait_async_undelayed()).unwrap();
        assert!(started.elapsed() < delay / 2, "held for {:?}", started.elapsed());
        let ticket = gc.appended(1);
        let started = Instant::now();
        block_on(ticket.wait_async()).unwrap();
        assert!(started.elapsed() >= delay / 2, "a plain wait is held while a commit is in flight");
        gc.shutdown().unwrap();
    }

    /// Polls `future` on this thread until it is ready (the futures here wake their waker from the
    /// flusher thread).
    fn block_on<F: Future>(future: F) -> F::Output {
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut future = std::pin::pin!(future);
        loop {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
            std::thread::park_timeout(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_requested_record_becomes_durable_without_anyone_waiting() {
        // Under `strict` the flusher fsyncs only when asked: a record no one waits on (a session's end, an
        // abort) must still become durable once requested, or a tailing verifier would never read it.
        let gc =
            GroupCommit::start(0, FlushPolicy::OnDemand, true, Duration::ZERO, Box::new(|| Ok(()))).unwrap();
        gc.appended(0).wait().unwrap();
        gc.appended(1).request();
        let deadline = Instant::now() + Duration::from_secs(10);
        while gc.durable_below() < 2 {
            assert!(Instant::now() < deadline, "the requested record never became durable");
            std::thread::sleep(Duration::from_millis(1));
        }
        gc.shutdown().unwrap();
    }

    #[test]
    fn requested_records_share_fsyncs() {
        // A read-only load asks for every commit's record: one fsync each would be an fsync per transaction
        // that no one waits for. Requests made close together share one.
        let gc =
            GroupCommit::start(0, FlushPolicy::OnDemand, true, Duration::ZERO, Box::new(|| Ok(()))).unwrap();
        for seq in 0..100 {
            gc.appended(seq).request();
            std::thread::sleep(Duration::from_micros(200));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while gc.durable_below() < 100 {
            assert!(Instant::now() < deadline, "the requested records never became durable");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(gc.stats().fsyncs < 30, "{} fsyncs for 100 requests", gc.stats().fsyncs);
        gc.shutdown().unwrap();
    }
}
