//! Garbage collection between rounds (Cobra §4.3; the longer text's "frozen transactions" and tombstones).
//!
//! In: a round's accepted polygraph (the known graph after pruning, and the constraints pruning left), each
//! vertex's epoch, and `epoch_agree`. Out: a [`Plan`]: which transactions to delete, which of their versions
//! become tombstones, and which become the new *base* (initial) version of their key.
//!
//! The rules, and why each is safe:
//! 1. **Superseded** (§4.3 (2), (3)): a vertex is a candidate when it is *old* and no vertex that is not
//!    old reaches it in the known graph. By the Guarantee of §4.2, an old vertex precedes every future
//!    transaction in the known graph, so no future transaction can precede it. A
//!    vertex is old when its epoch is ≤ `epoch_agree − 2`, and also when it will never have an epoch (its
//!    session ended after its last fence: a connection that closed before it could fence, or every
//!    connection of a proxy that crashed) but reaches, in the known graph, a vertex whose epoch is: it
//!    precedes every future transaction through that one. Cobra's rule has no such case (its clients
//!    never stop), and without it a crashed proxy run's last transactions stayed open for ever and, through
//!    their anti-dependencies on later writers, kept every transaction after them too.
//! 2. **Live constraints go whole, and only when no future can close them** (§4.3 (ii), the trap of the §4.3
//!    counter-example). A live constraint's *participants* are the writers and readers of every version of
//!    its two chains (under `declared`, less the read-committed readers, whose reads are on neither side). They are deleted all together or not at all: a constraint with a participant that is
//!    not a candidate, or that another rule keeps, keeps them all. A constraint all of whose participants are
//!    candidates goes with them only if the side it is taken to have (either; see [`entangled`]) lies on no
//!    cycle of Γ: the known graph, *both* sides of every constraint that stays (the future may still choose
//!    either: a read of one frontier version orders every other old version of its key before it), the taken
//!    side of every constraint that goes, and a vertex Φ for all future transactions, which every vertex
//!    precedes and which precedes every vertex that is not old (by the Guarantee, a future transaction can
//!    precede no old one). A candidate in no live constraint is not constrained by this rule at all. Two
//!    unread blind writes of one key that the known graph leaves unordered count as a live constraint here,
//!    although serializability's polygraph skips them (`constraints`, "Two unread blind writes"): a later
//!    read of either can still order them. The exception is a superseded version, whose place a kept old
//!    writer of its key already holds: see `entangled::unread_pairs`.
//!
//!    Why what it deletes never matters again: take an acyclic compatible graph of the residual history and
//!    any future transactions, and extend it to the whole history with the taken side for every deleted
//!    constraint and, for a constraint between a deleted and a future transaction, the side that puts the
//!    deleted one first. Every edge this graph has among the round's transactions is an edge of Γ, and a
//!    future transaction, merged into Φ, enters the round only at a transaction that is not old. So a cycle
//!    through a deleted constraint's edge would be a cycle of Γ, which the check rules out; a cycle through
//!    none crosses the deleted transactions only along known edges, which the links of rule 6 keep between
//!    the kept ones, so it would be a cycle of the residual graph, which is acyclic. The long form is in
//!    [`entangled`].
//!
//!    **Why Cobra's rule kept nearly everything on chengRW.** Cobra deletes a superseded transaction only
//!    when every transaction on a cycle with it in g′ (the known graph plus both sides of every live
//!    constraint) is superseded too. Both sides of one constraint close a cycle of their own (W1 → r1 → W2 →
//!    r2 → W1 for blind writes W1, W2 of one key and their readers r1, r2), so every transaction on a known
//!    path between two participants joins their strongly connected component, although that cycle needs both
//!    sides of one constraint at once, which no compatible graph has. On chengRW almost every transaction is
//!    on such a path: blind writes of a key are rarely ordered, a version is read about 2,500 transactions
//!    (five epochs) after it is written, so each live constraint spans epochs, the spans overlap, and one
//!    component runs from the start of the history to its newest transactions; the few dozen constraints per
//!    round with a reader that is not old then keep all of it ("on a g′ cycle with kept ones"). On a
//!    100,000-transaction chengRW history in rounds of 10,000, Cobra's rule deleted 7,392 transactions and
//!    held up to 97,617; this one deletes 101,257 and holds at most 6,740 (see the rounds module's notes on
//!    memory).
//!
//!    The check is needed: a rule that judged a constraint by its own participants alone (all candidates)
//!    accepts the history of `an_old_constraint_that_kept_constraints_can_close_both_ways_stays` in
//!    `tests/rounds_chengrw.rs`, where two future reads of kept frontier versions close each side of a
//!    deletable old constraint into a cycle through kept constraints.
//! 3. **Frontier** (§4.3 (1)): a version is superseded when an old transaction the writer reaches wrote a
//!    later version of the key. A future read of a superseded version is a stale read (the later writer
//!    precedes the reader by the Guarantee), so it becomes a **tombstone**, and the admission of a later read
//!    of it is a reject. A *kept* reader of a superseded version loses that read, and keeps what it implied
//!    as links (see the comment at rule 3 in [`plan`]): an rw edge to the later old writer, the edges the
//!    known graph drew from the read, and, through the exits of rule 6, the wr edge from the writer. Cobra
//!    does the same implicitly: condition (i) of §4.3 asks only that no *future* transaction precede or
//!    directly succeed the deleted one, and its known graph keeps the kept reader's edges.
//!
//!    Earlier versions kept the writer instead ("every live reader must be deleted with it"). That is sound
//!    but spreads: on C-Twitter a key's read-modify-write chain is a chain of readers, so one kept
//!    transaction kept every earlier writer of the key, and with them (rules 2 and 4) their g′ components and
//!    other keys' frontiers; on `cobra/scaling/twitter-100000` the live set grew by about 2,200 transactions
//!    per round of 5,000 (to 44% of the history). With the reads dropped it stays at 1,000–3,000.
//! 4. **Frontier versions become the base.** Cobra keeps frontier transactions whole; on C-Twitter that is
//!    half of all transactions (most keys are written once), so Krait deletes a frontier transaction too when
//!    its frontier version can stand in for the key's initial version: every other live version of the key
//!    is written by a transaction the writer reaches (so it is later in every serial order), and no live
//!    transaction reads any other initial version of the key. Live and future reads of the version are
//!    rewritten to read the key's base (`Observed::PreHistory`), which precedes every recorded write, exactly
//!    as the deleted writer did; a later read of any *other* initial version of the key is a stale read.
//!
//! 5. **Fences need no order of their own.** Earlier versions deleted a fence only after everything before it
//!    in its session, so that every kept old transaction still reaches, inside the residual history, its next
//!    fence and through the fence chain every later transaction (the Guarantee of §4.2). Rule 6 already keeps
//!    that: a kept transaction's path to the kept fence of epoch `epoch_agree − 1` runs through its session's
//!    next fence and the chain, and every stretch of it through deleted transactions becomes an exit link, so
//!    the path survives collection (the rule was added together with rule 6, after the differential test
//!    found false accepts without both; with rule 6 alone it passes). Keeping fences in session order made a
//!    single kept old transaction keep every later fence of its session for ever, and through rule 4 (a kept
//!    earlier fence version blocks the frontier fence from becoming the base) the whole fence chain.
//! 6. **Links.** Cobra keeps its known graph between rounds; Krait re-derives it from the residual history,
//!    which loses paths between kept transactions through deleted ones (and with them pruning decisions that
//!    rested on those paths). Each such path, and each decision whose witness cycle may pass through deleted
//!    transactions, is kept as a *link*: a synthetic key (namespace `krait.gc`) written by the source and
//!    read by the target, i.e. a wr edge. Links only add orderings the whole history already implies.
//!
//! **Declared levels.** Under `declared`, while every transaction is held to serializability or to read
//! committed, the round's polygraph is serializability's with no anti-dependencies out of read-committed
//! readers (`pipeline::build_polygraph`), and the rules above run on it unchanged: each is an argument about
//! the known graph, the constraints' sides and the Guarantee, and the Guarantee's path from an old
//! transaction to a future one (session order, the fence chain's reads) is made of dependencies, which
//! every level keeps. Three things differ. A read-committed reader is no participant of a live constraint
//! (rule 2): participants are kept or deleted together because the sides' rw edges leave readers, and its
//! read gives none; its wr edge from the writer is a known edge, which rule 6 keeps. (Counted in, a late
//! read-committed read of an old version kept that version's constraints alive, and on chengRW at READ
//! COMMITTED the live set grew without bound.) A kept read-committed reader of a superseded version keeps
//! no rw link (rule 3): its read ordered it before no later writer. And a future read-committed reader of a
//! tombstone or of a moved-on base is not a stale read (PL-2 allows reading a superseded version): admission
//! counts it unverifiable, since what it read is gone. Its wr edge from the deleted writer could close no
//! cycle: nothing reaches a deleted transaction from a future one but an anti-dependency.
//!
//! The residual history (live transactions, reads rewritten) is closed under reads-from, so a serial order of
//! the whole history restricted to it explains it: collection never causes a false reject. The no-false-
//! accept direction rests on Cobra's argument (Appendix C of the extended version) for rules 1 and 3 and on
//! rule 2's own argument above, both made to hold for a re-derived residual history by rule 6; rule 4 only
//! removes a transaction whose one relation to what stays is the order of its key's versions, which the base
//! keeps.
//! This is argued, not proved: the differential tests in `tests/rounds.rs` and `tests/rounds_chengrw.rs`
//! check both directions against one-shot verification. Random histories of the chengRW shape do not fail
//! when rule 2's cycle check is switched off (the shape it guards against practically never arises in
//! them; they do fail when rule 6's exit links are left out), so `tests/rounds_chengrw.rs` also shakes the
//! counter-example above at random, which fails at once without the check. The random ones of
//! `tests/rounds.rs` do *not* fail when the links of rule 3 are left out:
//! the reader of a superseded version has epoch `epoch_agree − 1` or less (it precedes an old writer), so
//! the fence chain alone orders it before every future transaction, except in a session that ended without
//! a later fence. Such an unfenced reader reaches the old writer, so it is old itself (rule 1) and mostly
//! goes with the writer; the links matter when another rule keeps it (a pin, a live constraint).
//! `tests/rounds_bounded.rs` builds that case, and finds a false accept when both kinds of rule-3 links
//! are left out. (The random variant of `tests/rounds.rs` in which one session ends early found one too,
//! before unfenced transactions could be old; it no longer does.)
//! [`RoundOptions::gc_legacy_rules`](crate::RoundOptions) brings the earlier rules 3 and 5 back, for
//! comparison.
//!
//! **Blind writes (BlindW-RW) and what cannot be collected.** Blind writes of one key by transactions the
//! known graph does not order are all on the frontier (§4.3: "if there are multiple writes to the same key
//! and the verifier cannot distinguish which is the most recent one, the verifier keeps them all"), rule 4
//! keeps them, and rule 2 keeps the readers in their constraints, for as long as the known graph leaves them
//! unordered (a write two epochs later is ordered after them by the fence chain, which can supersede them;
//! this was not measured again on BlindW-RW). Taking the order the solver chose in one round as known edges
//! would collect more, but it is not sound: the solver's model is one of possibly many, and a later
//! transaction can require the other order (the §4.3 counter-example is exactly a future read that resolves
//! an old constraint); with the chosen order fixed, that serializable history would be rejected, and with the
//! other side's transactions already deleted, a non-serializable one could be accepted. Cobra names this case
//! as future work (its longer text: BlindW-RW runs out of GPU memory in rounds); nothing here goes beyond it.

use std::collections::HashSet;

use history::{History, Key, Observed, Op, Outcome, WriteId};
use kernels::reachability;

use crate::epochs::EpochState;
use crate::error::VerifyError;
use crate::normalize::Label;
use crate::options::Options;
use crate::pipeline::{Accepted, Polygraph};

mod entangled;
mod exits;
mod frontier;

use exits::exit_links;

/// What one collection does.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Indices into the round's `History::transactions` to delete.
    pub delete: Vec<usize>,
    /// Versions that become tombstones: (write id, key, the deleted writer's index).
    pub tombstones: Vec<(WriteId, Key, usize)>,
    /// Versions that become their key's base: (key, write id, the deleted writer's index).
    pub promote: Vec<(Key, WriteId, usize)>,
    /// Aborted transactions' writes, now tombstones of aborted versions.
    pub aborted: Vec<(WriteId, Key, usize)>,
    /// Orderings between kept transactions to keep as links (indices into the round's history).
    pub links: Vec<(usize, usize)>,
    /// Reads to remove from kept transactions: (index into the round's history, the version read), each a
    /// read of a deleted writer's superseded version, replaced by links (rule 3).
    pub drop_reads: Vec<(usize, WriteId)>,
    /// Why each kept vertex was kept (the first rule that kept it).
    pub kept: KeptReasons,
    /// Live constraints deleted with all their participants (rule 2).
    pub constraints: usize,
}

/// How many live transactions each rule kept in one collection: the first rule that kept each one. They say
/// which rule holds the live set up (see the rounds module's notes on memory).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeptReasons {
    /// Not a vertex of the polygraph (an indeterminate transaction nobody read from) and not collected.
    pub not_vertex: usize,
    /// Its epoch is later than `epoch_agree − 2`, or it has none yet (Cobra §4.3 (2)).
    pub not_old: usize,
    /// Of those, how many never get an epoch (in a session that ended after its last fence) and reach no
    /// old transaction yet (rule 1).
    #[serde(default)]
    pub unfenced: usize,
    /// Old, but a vertex that is not old reaches it in the known graph (Cobra §4.3 (3)).
    pub reached_from_new: usize,
    /// In a live constraint with a transaction that is not a candidate, which the future may still order
    /// (rule 2, Cobra §4.3 (ii)).
    #[serde(default)]
    pub constraint_with_new: usize,
    /// In a live constraint among candidates whose taken side lies on a cycle of Γ, which the future may
    /// still close (rule 2).
    #[serde(default)]
    pub entangled_constraint: usize,
    /// A fence after a kept transaction of its session (rule 5).
    pub fence_order: usize,
    /// It wrote a version a live transaction outside the polygraph read.
    pub pinned: usize,
    /// It wrote a superseded version that a kept transaction read (rule 3).
    pub reader_kept: usize,
    /// It wrote a frontier version that cannot become its key's base (rule 4).
    pub not_base: usize,
    /// In a live constraint with a participant kept by rules 3–5, or by rule 2 through another constraint.
    #[serde(default)]
    pub constraint_mate: usize,
}

impl KeptReasons {
    /// All kept transactions counted.
    pub fn total(&self) -> usize {
        self.not_vertex
            + self.not_old
            + self.reached_from_new
            + self.constraint_with_new
            + self.entangled_constraint
            + self.fence_order
            + self.pinned
            + self.reader_kept
            + self.not_base
            + self.constraint_mate
    }
}

/// Why `can_go` refused a vertex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    ConstraintWithNew,
    EntangledConstraint,
    ConstraintMate,
    FenceOrder,
    Pinned,
    ReaderKept,
    NotBase,
}

/// Plans a collection after an accepted round. `epoch[i]` is where `h.transactions[i]` stands in the epochs.
/// `pinned` lists write ids that live transactions outside the polygraph (indeterminate ones nobody read from
/// yet) read: their writers stay.
pub(crate) fn plan(
    h: &History,
    accepted: &Accepted,
    epoch: &[EpochState],
    epoch_agree: u64,
    pinned: &HashSet<WriteId>,
    options: &Options,
    legacy: bool,
) -> Result<Plan, VerifyError> {
    let (p, graph) = (&accepted.poly, &accepted.known);
    let mut out = Plan::default();
    if epoch_agree < 2 {
        return Ok(out);
    }
    let old_epoch = |i: usize| matches!(epoch[i], EpochState::Fenced(e) if e + 2 <= epoch_agree);
    // Aborted transactions: not vertices; collect them by epoch alone, leaving their writes as tombstones of
    // aborted versions (a later read of one is G1a).
    for (i, t) in h.transactions.iter().enumerate() {
        if t.outcome == Outcome::Aborted && old_epoch(i) {
            out.delete.push(i);
            for op in &t.ops {
                if let Op::Write { key, write, .. } = *op {
                    out.aborted.push((write, key, i));
                }
            }
        }
    }
    let norm = &p.norm;
    let n = norm.txns.len();
    out.kept.not_vertex = h
        .transactions
        .iter()
        .enumerate()
        .filter(|&(i, t)| {
            norm.vertex_of.get(i).copied().flatten().is_none()
                && !(t.outcome == Outcome::Aborted && old_epoch(i))
        })
        .count();
    if n == 0 {
        return Ok(out);
    }
    debug_assert_eq!(graph.nodes() as usize, n);
    // Rows copied from solving's adjacency, each at its size and each edge once: pushed edge by edge from
    // the known graph's edge list, the rows grew by reallocating, 385k times in TPC-C's rounds.
    let known_adj: Vec<Vec<u32>> = (0..n as u32).map(|v| graph.successors(v).to_vec()).collect();
    let old = old_vertices(p, &known_adj, epoch, &old_epoch);
    out.kept.not_old = old.iter().filter(|&&o| !o).count();
    out.kept.unfenced =
        (0..n).filter(|&v| !old[v] && epoch[norm.txns[v].hist] == EpochState::Unfenced).count();
    // Rule 1: reachable in the known graph from a vertex that is not old.
    let tainted = reached_from(&known_adj, old.iter().map(|o| !o).collect());
    let candidate: Vec<bool> = (0..n).map(|v| !tainted[v]).collect();
    out.kept.reached_from_new = (0..n).filter(|&v| old[v] && tainted[v]).count();
    if !candidate.iter().any(|&c| c) {
        return Ok(out);
    }
    // Rules 2 and 3 read reachability in the known graph (`graph`, its adjacency, which solving built).
    let computed;
    let reach = match &accepted.reach {
        Some(reach) => reach.as_ref(),
        None => {
            computed = reachability(graph, Some(&p.g.sessions), options.reachability)?;
            computed.as_ref()
        }
    };
    // Rule 3: frontier, by reachability in the known graph.
    let keys = frontier::KeyVersions::new(&p.chains, norm.versions.len());
    let writer = |x: u32| norm.versions[x as usize].writer;
    let frontier = frontier::frontier(norm, &keys, &old, reach);
    // Rule 2 runs to a fixpoint with rules 3 and 4 below.
    let mut live = entangled::LiveConstraints::new(p, &known_adj, reach, &frontier, &candidate);
    let mut del: Vec<bool> = candidate.clone();
    let mut refused: Vec<Option<Refusal>> = vec![None; n];
    let write_id = |x: u32| match norm.versions[x as usize].label {
        Label::Write(w) => Some(w),
        Label::Initial(_) => None,
    };
    // Rule 5: a fence goes only after everything before it in its session. Deleted fences then always form
    // a prefix of the fence chain (rule 4 keeps a fence whose chain predecessor stays), so every live old
    // transaction still reaches, in the residual history, its session's next fence and through the chain
    // every later transaction: the Guarantee of §4.2 holds inside what is kept, not only in the whole
    // history.
    let mut session_pos: Vec<(usize, usize)> = vec![(0, 0); n];
    for (si, path) in p.g.sessions.iter().enumerate() {
        for (pos, &v) in path.iter().enumerate() {
            session_pos[v as usize] = (si, pos);
        }
    }
    // Rules 2, 3 and 4, to a fixpoint: a vertex that cannot go stays, and with it the participants of its
    // live constraints (rule 2), whose sides then join Γ both ways and may close cycles through other
    // constraints. `first_kept[si]`: the position of the first kept vertex of session si, as of the start of
    // a pass. Within a pass it can only be too late, which lets a fence pass for now; the pass then changed
    // something, so another pass follows and, by the last (unchanged) one, it is exact.
    let can_go = |v: u32, del: &[bool], first_kept: &[usize]| -> Result<(), Refusal> {
        if legacy && h.transactions[norm.txns[v as usize].hist].fence {
            let (si, pos) = session_pos[v as usize];
            if first_kept[si] < pos {
                return Err(Refusal::FenceOrder);
            }
        }
        for &(_, x) in &norm.txns[v as usize].writes {
            // Most rounds pin nothing: then the version's write id (a version looked up at random, for
            // every write, every pass of the fixpoint) is not needed.
            if !pinned.is_empty() && write_id(x).is_some_and(|w| pinned.contains(&w)) {
                return Err(Refusal::Pinned);
            }
            if !frontier[x as usize] {
                if legacy && norm.versions[x as usize].readers.iter().any(|&r| r != v && !del[r as usize]) {
                    return Err(Refusal::ReaderKept);
                }
                continue;
            }
            for y in keys.of(x) {
                if y == x {
                    continue;
                }
                let ok = match writer(y) {
                    Some(u) if del[u as usize] => !frontier[y as usize],
                    Some(u) => reach.reaches(v, u),
                    None => norm.versions[y as usize].readers.iter().all(|&r| del[r as usize]),
                };
                if !ok {
                    return Err(Refusal::NotBase);
                }
            }
        }
        Ok(())
    };
    loop {
        let mut changed = live.keep_entangled(&known_adj, &old, &candidate, &mut del, &mut refused);
        let first_kept: Vec<usize> =
            p.g.sessions
                .iter()
                .map(|path| path.iter().position(|&u| !del[u as usize]).unwrap_or(usize::MAX))
                .collect();
        for v in 0..n as u32 {
            if !del[v as usize] {
                continue;
            }
            if let Err(why) = can_go(v, &del, &first_kept) {
                refused[v as usize] = Some(why);
                del[v as usize] = false;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    for v in 0..n {
        if candidate[v] && !del[v] {
            match refused[v] {
                Some(Refusal::ConstraintWithNew) => out.kept.constraint_with_new += 1,
                Some(Refusal::EntangledConstraint) => out.kept.entangled_constraint += 1,
                Some(Refusal::FenceOrder) => out.kept.fence_order += 1,
                Some(Refusal::Pinned) => out.kept.pinned += 1,
                Some(Refusal::ReaderKept) => out.kept.reader_kept += 1,
                Some(Refusal::NotBase) => out.kept.not_base += 1,
                Some(Refusal::ConstraintMate) | None => out.kept.constraint_mate += 1,
            }
        }
    }
    out.constraints = live.collected();
    // Rule 6: what the residual history cannot re-derive is kept as links. Pruning's decisions between two
    // kept vertices rested on paths that may go through deleted ones, and paths between kept vertices through
    // deleted ones vanish with them; Cobra keeps its known graph from round to round, so both survive there.
    // Each link u → v becomes a write by u and a read by v of a synthetic key (see `rounds`).
    let mut links: Vec<(usize, usize)> = Vec::new();
    let hist = |v: u32| norm.txns[v as usize].hist;
    // A decision rests on its witness: an edge c → e of the other side that closes a cycle e ⇝ c. When that
    // cycle passes through a deleted vertex, e is one of its ancestors and so old; those decisions (between
    // kept vertices) are kept as links, the residual history re-derives the others.
    for e in &p.g.edges {
        if let crate::known_graph::Origin::Decided { decision, .. } = e.origin
            && !del[e.from as usize]
            && !del[e.to as usize]
            && p.decisions.get(decision as usize).is_none_or(|d| old[d.witness.to as usize])
        {
            links.push((hist(e.from), hist(e.to)));
        }
    }
    // Rule 3: a kept reader `r` of a deleted writer's superseded version `x` loses that read (the residual
    // history has no writer for it). What the read implied is kept instead:
    // - `r → u`, where `u` is an old writer of a later version of the key that `x`'s writer reaches (the one
    //   that made `x` superseded): `x` precedes `u`'s version in every serial order, and `r` read `x`, so `r`
    //   precedes `u` (an rw edge). Through `u` and the Guarantee of §4.2, `r` precedes every future writer of
    //   the key, as the read made it. When `u` is deleted too, `r` gets `u`'s exits instead (as an edge of
    //   the adjacency the exits are computed on).
    // - Every edge the known graph drew out of `r` from its reads (rw edges inside chains, edges from initial
    //   chains, pruning's decisions), to kept vertices, as links; to deleted ones, through the exits.
    // - The wr edge from the writer is a path from the writer's kept predecessors to `r` through a deleted
    //   vertex, which the exits below keep.
    // No unresolved constraint can involve the read: the writer and `r` would both be among its participants,
    // which rule 2 deletes together or not at all, and `r` is kept. Future reads of `x` are stale reads, as
    // for any tombstone.
    let mut extra: Vec<(u32, u32)> = Vec::new();
    // Kept readers that lost a read, by vertex: a flag each, tested once per known edge below.
    let mut dangling = vec![false; n];
    let mut any_dangling = false;
    for v in (0..n as u32).filter(|&v| del[v as usize]) {
        for &(_, x) in &norm.txns[v as usize].writes {
            if frontier[x as usize] {
                continue;
            }
            let mut readers =
                norm.versions[x as usize].readers.iter().copied().filter(|&r| r != v && !del[r as usize]);
            let Some(first) = readers.next() else { continue };
            let Some(w) = write_id(x) else { continue };
            let later = keys
                .of(x)
                .filter_map(writer)
                .filter(|&u| u != v && old[u as usize] && reach.reaches(v, u))
                .min_by_key(|&u| del[u as usize]);
            let Some(u) = later else {
                return Err(VerifyError::Internal(format!(
                    "garbage collection: version {w} is superseded but no later old version was found"
                )));
            };
            for r in std::iter::once(first).chain(readers) {
                out.drop_reads.push((hist(r), w));
                dangling[r as usize] = true;
                any_dangling = true;
                // A read-committed reader's read gave no rw edge (`Normalized::counts_anti_dependencies`).
                if u == r || !norm.counts_anti_dependencies(r) {
                    continue;
                }
                if del[u as usize] {
                    extra.push((r, u));
                } else {
                    links.push((hist(r), hist(u)));
                }
            }
        }
    }
    if any_dangling {
        use crate::known_graph::Origin;
        for e in &p.g.edges {
            if dangling[e.from as usize]
                && !del[e.to as usize]
                && !matches!(e.origin, Origin::So | Origin::Wr { .. } | Origin::Rt)
            {
                links.push((hist(e.from), hist(e.to)));
            }
        }
    }
    // Paths between kept vertices through deleted ones. Session order among kept transactions is re-derived,
    // so one link from `u` to the earliest exit in each session keeps every exit reachable.
    let exits = if extra.is_empty() {
        exit_links(&known_adj, &del, &session_pos, p.g.sessions.len())
    } else {
        let mut adj = known_adj.clone();
        for &(r, u) in &extra {
            adj[r as usize].push(u);
        }
        exit_links(&adj, &del, &session_pos, p.g.sessions.len())
    };
    links.extend(exits.into_iter().map(|(u, w)| (hist(u), hist(w))));
    links.sort_unstable();
    links.dedup();
    out.links = links;
    for v in 0..n as u32 {
        if !del[v as usize] {
            continue;
        }
        let i = norm.txns[v as usize].hist;
        out.delete.push(i);
        // Its versions still on the frontier become base versions; its other writes become tombstones. A
        // transaction has few of them, so a list beats a map built per deleted transaction (which, with a
        // scan of it per write, was a tenth of this function on TPC-C).
        let on_frontier: Vec<(Key, WriteId)> = norm.txns[v as usize]
            .writes
            .iter()
            .filter(|&&(_, x)| frontier[x as usize])
            .filter_map(|&(_, x)| Some((norm.versions[x as usize].key, write_id(x)?)))
            .collect();
        for op in &h.transactions[i].ops {
            let Op::Write { key, write, .. } = *op else { continue };
            if on_frontier.contains(&(key, write)) {
                out.promote.push((key, write, i));
            } else {
                out.tombstones.push((write, key, i));
            }
        }
    }
    Ok(out)
}

/// Which vertices are old (rule 1): those with an epoch of at most `epoch_agree − 2`, and the unfenced ones
/// (in a session that ended after its last fence) that reach one of those in the known graph. Through the
/// old one it reaches, an unfenced vertex precedes every future transaction, which is all the Guarantee of
/// §4.2 gives an old one.
fn old_vertices(
    p: &Polygraph,
    known_adj: &[Vec<u32>],
    epoch: &[EpochState],
    old_epoch: &impl Fn(usize) -> bool,
) -> Vec<bool> {
    let n = known_adj.len();
    let hist = |v: usize| p.norm.txns[v].hist;
    let mut old: Vec<bool> = (0..n).map(|v| old_epoch(hist(v))).collect();
    if !(0..n).any(|v| epoch[hist(v)] == EpochState::Unfenced) {
        return old;
    }
    let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (v, succ) in known_adj.iter().enumerate() {
        for &w in succ {
            preds[w as usize].push(v as u32);
        }
    }
    let reaches_old = reached_from(&preds, old.clone());
    for v in 0..n {
        old[v] |= reaches_old[v] && epoch[hist(v)] == EpochState::Unfenced;
    }
    old
}

/// Marks every vertex that `adj`'s edges lead to from a marked one, starting from `marked`.
fn reached_from(adj: &[Vec<u32>], mut marked: Vec<bool>) -> Vec<bool> {
    let mut work: Vec<u32> = (0..adj.len() as u32).filter(|&v| marked[v as usize]).collect();
    while let Some(v) = work.pop() {
        for &w in &adj[v as usize] {
            if !marked[w as usize] {
                marked[w as usize] = true;
                work.push(w);
            }
        }
    }
    marked
}

/// The pre-history tag that stands for a promoted base version: the write id with the top bit set, so it
/// never collides with the small tags importers use.
pub(crate) fn base_tag(w: WriteId) -> u64 {
    w.0 | (1 << 63)
}

/// Whether a read observed one of a key's initial versions.
pub(crate) fn is_initial(o: Observed) -> bool {
    matches!(o, Observed::Absent | Observed::PreHistory(_))
}
