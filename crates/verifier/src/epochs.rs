//! Epochs from fence transactions (Cobra §4.2), kept incrementally as transactions are admitted round by
//! round.
//!
//! A fence touches one dedicated key (`krait_fence` from the proxy, `FZVERSION` in Cobra's logs). Fences that
//! read-modify-write it chain through their read-modify-writes: the one that overwrote the version of epoch
//! `e` has epoch `e + 1` (the initial version has epoch 0). Cobra's own logs also have *read-only* fences
//! (one session advances the key, the others read it): a read-only fence gets the epoch of the version it
//! read, and it precedes the next epoch's fence through the rw edge of the chain, so the Guarantee below
//! holds for it too. A normal transaction between two fences of its session with epochs `i` and `j` gets
//! epoch `j − 1`; one after its session's latest fence has no epoch yet ("open"): it can only get later
//! epochs, so it is never old.
//!
//! `epoch_agree` is the largest epoch that every *open* session has reached with a fence. Then (the
//! Guarantee of §4.2) every transaction with epoch ≤ `epoch_agree − 2` precedes, in the known graph, every
//! transaction admitted later from any open session, because that session's later transactions follow its
//! fence of epoch ≥ `epoch_agree` in session order.
//!
//! **Sessions that go quiet.** A `History` has no session-end marker, so the caller says when a session has
//! ended ([`crate::rounds::OnlineVerifier::session_ended`]: `krait serve` calls it on the log's
//! `SessionEnded` record, which the proxy appends when a client connection closes, and `verify --rounds` when
//! a session's last transaction has been admitted). An ended session no
//! longer holds `epoch_agree` back: it will add no transaction, so the Guarantee needs nothing from it. Its
//! transactions after its last fence never get an epoch ([`EpochState::Unfenced`]). Garbage collection
//! counts one as old once it reaches an old transaction in the known graph (its rule 1: through that one it
//! precedes every future transaction too); until then it stays, and so does every transaction it reaches,
//! which on a key updated in a read-modify-write chain is every later writer of it. A proxy that crashed
//! leaves every session it had in that state. So that collection need not wait, the proxy fences a
//! connection that committed since its last fence as it closes. A session that stays open but idle (a pooled
//! connection) would hold `epoch_agree` at its last fence for as long as it stays idle; the proxy fences such
//! a connection on its own once the others' fences have moved on (`[fence] idle_ms`).
//!
//! **Sessions that start late.** A session that has not yet run a fence holds `epoch_agree` at 0 while it
//! is open. A session first seen *after* garbage collection began is covered by the Guarantee only from its
//! first fence on (see the rounds module's notes). So the proxy fences a connection before its first client
//! message (`[fence] at_open`, one more transaction per connection); with that off, its first fence comes
//! after `[fence] every` commits or when it idles.

use std::collections::{HashMap, HashSet};

use history::{Key, Observed, Op, Outcome, SessionId, Transaction, TxnId, WriteId};
use serde::{Deserialize, Serialize};

/// Where one transaction stands in the epochs ([`Epochs::state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EpochState {
    /// Followed by a fence of its session: its epoch.
    Fenced(u64),
    /// After its session's latest fence, in a session that goes on: its epoch is still to come.
    Open,
    /// After its session's latest fence, in a session that has ended without another (its connection
    /// closed before it could fence, or the proxy crashed): it never gets an epoch of its own.
    Unfenced,
}

/// The epoch state of one session.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct SessionEpochs {
    /// The epoch of the session's latest admitted fence.
    last_fence: Option<u64>,
    /// Transactions admitted after that fence: their epoch waits for the next fence.
    open: Vec<TxnId>,
    /// The session has ended: it adds no more transactions.
    ended: bool,
}

/// Epochs of the live transactions, and `epoch_agree`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Epochs {
    /// The fence key, fixed by the first fence.
    fence_key: Option<Key>,
    /// The version each recent fence wrote, with the fence's epoch.
    fence_epoch: HashMap<WriteId, u64>,
    /// The largest fence epoch so far.
    max_epoch: u64,
    sessions: HashMap<SessionId, SessionEpochs>,
    /// Epochs assigned so far (transactions absent here are open).
    txn_epoch: HashMap<TxnId, u64>,
    /// Why epochs cannot be trusted any more, if they cannot (garbage collection then stops).
    broken: Option<String>,
    /// Fences admitted without an outcome, by the version they wrote, until a later fence reads it (see
    /// [`Epochs::note_unresolved_fence`]).
    unresolved: HashMap<WriteId, (TxnId, SessionId)>,
}

/// A fence's read of the fence key, and its write if it is a read-modify-write; `None` unless it reads one
/// key first and touches no other.
fn fence_ops(t: &Transaction) -> Option<(Key, Observed, Option<WriteId>)> {
    let Some(&Op::Read { key, observed, .. }) = t.ops.first() else { return None };
    let mut write = None;
    for op in &t.ops {
        match *op {
            Op::Write { key: k, write: w, .. } if k == key => write = Some(w),
            Op::Read { key: k, .. } if k == key => {}
            _ => return None,
        }
    }
    Some((key, observed, write))
}

impl Epochs {
    /// Declares a session, so that it holds `epoch_agree` back until its first fence.
    pub(crate) fn declare(&mut self, session: SessionId) {
        self.sessions.entry(session).or_default();
    }

    /// The session has ended.
    pub(crate) fn end(&mut self, session: SessionId) {
        self.sessions.entry(session).or_default().ended = true;
    }

    /// Whether a session has admitted a fence: its transactions admitted from now on follow a fence, so the
    /// Guarantee covers them.
    pub(crate) fn fenced(&self, session: SessionId) -> bool {
        self.sessions.get(&session).is_some_and(|s| s.last_fence.is_some())
    }

    /// Whether a session has been declared or seen.
    pub(crate) fn knows(&self, session: SessionId) -> bool {
        self.sessions.contains_key(&session)
    }

    /// Records an admitted transaction (in session order).
    pub(crate) fn admit(&mut self, t: &Transaction) {
        if t.fence && t.outcome == Outcome::Indeterminate {
            self.note_unresolved_fence(t);
        }
        let fence = if t.fence && t.outcome == Outcome::Committed { Some(t) } else { None };
        let Some(f) = fence else {
            self.sessions.entry(t.session).or_default().open.push(t.id);
            return;
        };
        let Some((key, observed, wrote)) = fence_ops(f) else {
            self.break_with(format!("fence {} does not read (and maybe write) one key only", f.id));
            self.sessions.entry(t.session).or_default().open.push(t.id);
            return;
        };
        if *self.fence_key.get_or_insert(key) != key {
            self.break_with(format!("fence {} uses a different key from the earlier fences", f.id));
        }
        // The version read has the epoch of the fence that wrote it (0: the initial version).
        let read_epoch = match observed {
            Observed::Version(w) => match self.fence_epoch.get(&w) {
                Some(&e) => {
                    self.resolve_fence(w);
                    e
                }
                None => {
                    self.break_with(format!("fence {} read a version of the fence key no fence wrote", f.id));
                    self.max_epoch
                }
            },
            // Written by no recorded fence: someone else wrote the fence row, and epochs cannot be trusted.
            Observed::Unrecorded(_) | Observed::Foreign(_) => {
                self.break_with(format!("fence {} read a version of the fence key no fence wrote", f.id));
                self.max_epoch
            }
            Observed::Absent | Observed::PreHistory(_) => {
                if wrote.is_some() && self.max_epoch > 0 {
                    self.break_with(format!(
                        "fence {} overwrote the fence key's initial version again",
                        f.id
                    ));
                }
                0
            }
        };
        let epoch = if wrote.is_some() { read_epoch + 1 } else { read_epoch };
        let s = self.sessions.entry(t.session).or_default();
        if s.last_fence.is_some_and(|last| epoch < last) {
            self.broken.get_or_insert_with(|| {
                format!("fence {} has an epoch earlier than its session's previous fence", f.id)
            });
        }
        for id in std::mem::take(&mut s.open) {
            self.txn_epoch.insert(id, epoch.saturating_sub(1));
        }
        s.last_fence = Some(epoch);
        self.txn_epoch.insert(t.id, epoch);
        if let Some(w) = wrote {
            self.fence_epoch.insert(w, epoch);
        }
        self.max_epoch = self.max_epoch.max(epoch);
    }

    /// A fence whose outcome is unknown: a recorder that crashed as the fence committed logged its intent
    /// and no outcome (Krait's proxy logs a fence's intent, durably, before sending its COMMIT, so a crash
    /// leaves it there rather than losing its record). Its write gets the epoch it would have (one past the
    /// version it read), so that the next fence, which reads it if it did commit (a read of it proves it
    /// did), continues the chain instead of breaking epochs ([`Epochs::resolve_fence`]). Until then nothing
    /// else counts it: it and its session's transactions since the last fence stay open (never old), which
    /// claims less, never more. A fence that did not commit is never read, and its entry never looked at.
    fn note_unresolved_fence(&mut self, f: &Transaction) {
        let Some((key, observed, Some(wrote))) = fence_ops(f) else { return };
        if self.fence_key.is_some_and(|k| k != key) {
            return;
        }
        let read_epoch = match observed {
            Observed::Version(w) => self.fence_epoch.get(&w).copied(),
            Observed::Absent | Observed::PreHistory(_) if self.max_epoch == 0 => Some(0),
            _ => None,
        };
        if let Some(e) = read_epoch {
            self.fence_epoch.insert(wrote, e + 1);
            self.unresolved.insert(wrote, (f.id, f.session));
        }
    }

    /// A fence read `w`, the version of a fence admitted without an outcome: that fence committed, and
    /// gets what its admission would have given it had its outcome been known. It takes its epoch, its
    /// session's transactions before it take the one before, and its session has reached it.
    fn resolve_fence(&mut self, w: WriteId) {
        let Some((id, session)) = self.unresolved.remove(&w) else { return };
        let Some(&epoch) = self.fence_epoch.get(&w) else { return };
        let Some(s) = self.sessions.get_mut(&session) else { return };
        let Some(at) = s.open.iter().position(|&t| t == id) else { return };
        for before in s.open.drain(..at) {
            self.txn_epoch.insert(before, epoch.saturating_sub(1));
        }
        s.open.remove(0);
        self.txn_epoch.insert(id, epoch);
        s.last_fence = Some(s.last_fence.map_or(epoch, |last| last.max(epoch)));
        self.max_epoch = self.max_epoch.max(epoch);
    }

    fn break_with(&mut self, why: String) {
        self.broken.get_or_insert(why);
    }

    /// Why epochs are unusable, if they are.
    pub(crate) fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Where a transaction stands in the epochs, as garbage collection needs to know.
    pub(crate) fn state(&self, t: &Transaction) -> EpochState {
        match self.txn_epoch.get(&t.id) {
            Some(&e) => EpochState::Fenced(e),
            None if self.sessions.get(&t.session).is_some_and(|s| s.ended) => EpochState::Unfenced,
            None => EpochState::Open,
        }
    }

    /// The largest epoch every open session has reached with a fence (Cobra §4.2). With no open session
    /// left, every fence so far counts.
    pub(crate) fn epoch_agree(&self) -> u64 {
        self.sessions
            .values()
            .filter(|s| !s.ended)
            .map(|s| s.last_fence.unwrap_or(0))
            .min()
            .unwrap_or(self.max_epoch)
    }

    /// Forgets collected transactions. (Fence versions are kept: one per epoch, a few hundred per 100k
    /// transactions.) Collection deletes a transaction without an epoch only in an ended session
    /// ([`EpochState::Unfenced`]), whose list of open transactions no fence will ever empty.
    pub(crate) fn forget(&mut self, ids: impl IntoIterator<Item = TxnId>) {
        let mut gone = HashSet::new();
        for id in ids {
            if self.txn_epoch.remove(&id).is_none() {
                gone.insert(id);
            }
        }
        if !gone.is_empty() {
            for s in self.sessions.values_mut().filter(|s| s.ended) {
                s.open.retain(|id| !gone.contains(id));
            }
        }
    }
}
