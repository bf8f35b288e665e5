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
//! connection that committed since its last fence as it closes. Once an ended session has nothing without
//! an epoch left, only the fact that it ended is kept (a set of session ids), and the versions of fences
//! are forgotten [`FENCE_EPOCHS_KEPT`] epochs after `epoch_agree` passes them: an application that opens a
//! connection per request ends a session per request. A session that stays open but idle (a pooled
//! connection) would hold `epoch_agree` at its last fence for as long as it stays idle; the proxy fences such
//! a connection on its own once the others' fences have moved on (`[fence] idle_ms`).
//!
//! **Sessions that start late.** A session that has not yet run a fence holds `epoch_agree` at 0 while it
//! is open. A session first seen *after* garbage collection began is covered by the Guarantee only from its
//! first fence on (see the rounds module's notes). So the proxy fences a connection before its first client
//! message (`[fence] at_open`, one more transaction per connection); with that off, its first fence comes
//! after `[fence] every` commits or when it idles.

use history::{Key, Observed, Op, Outcome, SessionId, Transaction, TxnId, WriteId};
use serde::{Deserialize, Serialize};

use crate::{FastMap, FastSet};

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

/// How many epochs before `epoch_agree` the versions of fences are remembered for. A fence of an open
/// session reads a version at least as new as its session's latest fence (session order), so at least as
/// new as `epoch_agree`; only a session's first fence could read an older one, and only from a database that
/// served it a version long overwritten. Such a read, like one of a version no fence wrote, breaks epochs
/// (collection stops; nothing is accused). Without a bound, each fence left an entry for ever: two per
/// connection for an application that opens one per request.
pub(crate) const FENCE_EPOCHS_KEPT: u64 = 64;

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
    /// The version each recent fence wrote, with the fence's epoch: those of the last
    /// [`FENCE_EPOCHS_KEPT`] epochs before `epoch_agree` and every one since.
    fence_epoch: FastMap<WriteId, u64>,
    /// The largest fence epoch so far.
    max_epoch: u64,
    sessions: FastMap<SessionId, SessionEpochs>,
    /// Sessions that ended with every transaction given an epoch or collected: nothing of them is left but
    /// the fact that they ended (an application that opens a connection per request ends one per request).
    retired: FastSet<SessionId>,
    /// Epochs assigned so far (transactions absent here are open).
    txn_epoch: FastMap<TxnId, u64>,
    /// Why epochs cannot be trusted any more, if they cannot (garbage collection then stops).
    broken: Option<String>,
    /// Fences admitted without an outcome, by the version they wrote, until a later fence reads it (see
    /// [`Epochs::note_unresolved_fence`]).
    unresolved: FastMap<WriteId, (TxnId, SessionId)>,
    /// The floor of the last [`Epochs::forget_old_fence_versions`] that forgot: while `epoch_agree` stands
    /// still, nothing more can go, and the fence versions are not looked through again.
    fences_forgotten_below: u64,
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
        if !self.retired.contains(&session) {
            self.sessions.entry(session).or_default();
        }
    }

    /// The session has ended.
    pub(crate) fn end(&mut self, session: SessionId) {
        self.session_mut(session).ended = true;
        self.retire(session);
    }

    /// A session's state; one that retired (which should add nothing more) comes back as ended, so that it
    /// never holds `epoch_agree` back again.
    fn session_mut(&mut self, session: SessionId) -> &mut SessionEpochs {
        let retired = self.retired.remove(&session);
        let s = self.sessions.entry(session).or_default();
        s.ended |= retired;
        s
    }

    /// Keeps only the fact that an ended session ended, once none of its transactions waits for an epoch.
    fn retire(&mut self, session: SessionId) {
        if self.sessions.get(&session).is_some_and(|s| s.ended && s.open.is_empty()) {
            self.sessions.remove(&session);
            self.retired.insert(session);
        }
    }

    /// Whether a session has admitted a fence: its transactions admitted from now on follow a fence, so the
    /// Guarantee covers them.
    pub(crate) fn fenced(&self, session: SessionId) -> bool {
        self.sessions.get(&session).is_some_and(|s| s.last_fence.is_some())
    }

    /// Whether a session has been declared or seen.
    pub(crate) fn knows(&self, session: SessionId) -> bool {
        self.sessions.contains_key(&session) || self.retired.contains(&session)
    }

    /// Records an admitted transaction (in session order).
    pub(crate) fn admit(&mut self, t: &Transaction) {
        if t.fence && t.outcome == Outcome::Indeterminate {
            self.note_unresolved_fence(t);
        }
        let fence = if t.fence && t.outcome == Outcome::Committed { Some(t) } else { None };
        let Some(f) = fence else {
            self.session_mut(t.session).open.push(t.id);
            return;
        };
        let Some((key, observed, wrote)) = fence_ops(f) else {
            self.break_with(format!("fence {} does not read (and maybe write) one key only", f.id));
            self.session_mut(t.session).open.push(t.id);
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
                    self.break_with(format!(
                        "fence {} read a version of the fence key no fence wrote, or one more than {} epochs \
                         older than epoch_agree",
                        f.id, FENCE_EPOCHS_KEPT
                    ));
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
        let s = self.session_mut(t.session);
        let earlier = s.last_fence.is_some_and(|last| epoch < last);
        let open = std::mem::take(&mut s.open);
        s.last_fence = Some(epoch);
        if earlier {
            self.break_with(format!("fence {} has an epoch earlier than its session's previous fence", f.id));
        }
        for id in open {
            self.txn_epoch.insert(id, epoch.saturating_sub(1));
        }
        self.txn_epoch.insert(t.id, epoch);
        if let Some(w) = wrote {
            self.fence_epoch.insert(w, epoch);
        }
        self.max_epoch = self.max_epoch.max(epoch);
        self.retire(t.session);
        self.forget_old_fence_versions();
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

    /// Forgets the versions of fences more than [`FENCE_EPOCHS_KEPT`] epochs before `epoch_agree`, all at
    /// once when there are twice that many and the floor has moved since it last did (keeping those of
    /// fences still without an outcome).
    fn forget_old_fence_versions(&mut self) {
        let floor = self.epoch_agree().saturating_sub(FENCE_EPOCHS_KEPT);
        if self.fence_epoch.len() as u64 > 2 * FENCE_EPOCHS_KEPT && floor > self.fences_forgotten_below {
            let unresolved = &self.unresolved;
            self.fence_epoch.retain(|w, e| *e >= floor || unresolved.contains_key(w));
            self.fences_forgotten_below = floor;
        }
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
            None if self.retired.contains(&t.session)
                || self.sessions.get(&t.session).is_some_and(|s| s.ended) =>
            {
                EpochState::Unfenced
            }
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
        let mut gone = FastSet::default();
        for id in ids {
            if self.txn_epoch.remove(&id).is_none() {
                gone.insert(id);
            }
        }
        if !gone.is_empty() {
            let mut emptied = Vec::new();
            for (&id, s) in self.sessions.iter_mut().filter(|(_, s)| s.ended) {
                s.open.retain(|t| !gone.contains(t));
                if s.open.is_empty() {
                    emptied.push(id);
                }
            }
            for id in emptied {
                self.retire(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use history::KeyTable;

    use super::*;

    /// An application that opens a connection per request: each session fences as it opens, runs one
    /// transaction, fences as it closes, and ends.
    fn connection_per_request(sessions: u64) -> (Epochs, Key) {
        let mut keys = KeyTable::default();
        let (f, k) = (keys.intern_str("F"), keys.intern_str("k"));
        let mut epochs = Epochs::default();
        let (mut next, mut seen) = (1u64, Observed::PreHistory(0));
        for s in 0..sessions {
            let session = SessionId(s);
            epochs.declare(session);
            for seq in 0..3 {
                let mut t = Transaction::new(TxnId(next), session, seq);
                if seq == 1 {
                    t.ops.push(Op::Read { key: k, observed: Observed::PreHistory(0), stmt: None });
                } else {
                    t.fence = true;
                    t.ops.push(Op::Read { key: f, observed: seen, stmt: None });
                    t.ops.push(Op::Write { key: f, write: WriteId(next), stmt: None });
                    seen = Observed::Version(WriteId(next));
                }
                next += 1;
                epochs.admit(&t);
            }
            epochs.end(session);
        }
        (epochs, k)
    }

    #[test]
    fn ended_sessions_and_old_fence_versions_are_not_held_for_ever() {
        let (mut epochs, k) = connection_per_request(1_000);
        assert!(epochs.broken().is_none(), "{:?}", epochs.broken());
        assert_eq!(epochs.epoch_agree(), 2_000);
        assert!(epochs.sessions.is_empty(), "{} ended sessions held", epochs.sessions.len());
        assert!(
            epochs.fence_epoch.len() as u64 <= 2 * FENCE_EPOCHS_KEPT + 1,
            "{} fence versions held",
            epochs.fence_epoch.len()
        );
        // A retired session is still known to have ended: a transaction of it (which its recorder should
        // not send) gets no epoch and holds nothing back.
        assert!(epochs.knows(SessionId(7)));
        let mut late = Transaction::new(TxnId(1_000_000), SessionId(7), 3);
        late.ops.push(Op::Read { key: k, observed: Observed::PreHistory(0), stmt: None });
        epochs.admit(&late);
        assert_eq!(epochs.state(&late), EpochState::Unfenced);
        assert_eq!(epochs.epoch_agree(), 2_000);
        // Collected, it leaves its session retired again.
        epochs.forget([late.id]);
        assert!(epochs.sessions.is_empty());
    }
}
