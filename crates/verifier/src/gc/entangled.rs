//! Rule 2 of garbage collection (Cobra §4.3 (ii)): which live constraints may be deleted together with their
//! transactions, and the argument that deleting them never changes a verdict. The `gc` module states the
//! rule; this file computes it.
//!
//! In: the round's accepted polygraph, its known graph, which vertices are old and which are candidates (rule
//! 1), and the set to delete as the fixpoint with rules 3 and 4 shrinks it. Out: the participants of every
//! *entangled* live constraint kept. A constraint is entangled when a participant is kept, or when the side
//! it is taken to have lies on a cycle of Γ:
//! - the known graph g of the round (with pruning's decisions);
//! - both sides of every live constraint that has a kept participant (a *kept constraint*);
//! - the taken side of every other live constraint (a *deleted constraint*: all its participants go);
//! - a vertex Φ for every future transaction, with an edge from every vertex to Φ and from Φ to every vertex
//!   that is not old.
//!
//! **The argument.** Let D be what collection deletes and K what it keeps. Suppose the residual history (K,
//! with the links and rewritten reads of rules 3, 4 and 6) plus some future transactions F has an acyclic
//! compatible graph G_R. Build a compatible graph G of the whole history plus F: G_R's choice for every
//! constraint among K ∪ F; the taken side for every deleted constraint; for a new constraint between a
//! version or read of D and one of F, the side that puts D's first (the other side has an edge from a future
//! transaction to the old writer or reader, which the Guarantee of §4.2 already orders before it; a future
//! read of a superseded version of D is a tombstone read and rejected at admission); pruning's decisions as
//! they were. Suppose G has a cycle C.
//! 1. Every edge of G between two of the round's transactions is an edge of Γ: a known edge, a side of a kept
//!    constraint (both are in Γ), or a taken side. No constraint joins D and K (rule 2 keeps or deletes a
//!    constraint's participants together), so every edge between D and K is a known edge. An edge of G from F
//!    into the round goes to a transaction that is not old: every old one precedes every future one in R
//!    (the Guarantee, which rules 5 and 6 keep inside the residual history), and G_R is acyclic.
//! 2. If C has an edge a → h of a deleted constraint, the rest of C is a path from h to a through the round
//!    and F; replacing each stretch through F by Φ makes it a path of Γ, so a → h lies on a cycle of Γ, and
//!    the constraint would have been kept.
//! 3. Otherwise C enters D only from K and only by known edges (F has no edge into D, by the choice above),
//!    from an old transaction (rule 1: nothing that is not old reaches D in g), and leaves D by known edges
//!    or into F. Each stretch through D from kept u to kept w is a path of g, which rule 6 keeps as links, so
//!    u reaches w in G_R; a stretch from u into F is covered by the Guarantee. So C becomes a closed walk in
//!    G_R, which is acyclic. Nor can C lie inside D: D's known edges and taken sides are edges of Γ that
//!    step 2 already covers, or known edges, which are acyclic.
//!
//! So G is acyclic, and the whole history plus F is serializable whenever the residual one plus F is.
//!
//! **Why F has no edge into D** (used in step 3). A future transaction reaches D only through a version of
//! D's. A superseded one is a tombstone, and reading it is a reject in both histories. A frontier version x
//! of a deleted constraint's chain c1 stays readable (rule 4 makes it the base), and a future read of it
//! draws an rw edge to the writer of every version after x. Rule 4 lets x become the base only if every other
//! version y of the key with a deleted writer is superseded, and a superseded y's writer reaches an old
//! writer of a later version: a kept one would be reached from x's writer too (rule 4 again) and make x
//! superseded, and a deleted one is superseded in turn, so the chain ends at x's writer. So every deleted
//! writer of the key reaches x's writer in g, and every deleted version precedes x in G (the opposite order
//! closes a cycle with that path). In particular the side of c1's constraint that puts c1 before the other
//! chain c2 lies on a cycle of g ⊆ Γ, so a deleted constraint has the other side taken, and the future read
//! draws no edge into D. This was found in review, not by a test.
//!
//! **Φ is not exercised by the tests.** Replacing Φ's out-edges with none changes no verdict in
//! `tests/rounds_chengrw.rs`: a path through F into a transaction that is not old usually exists in g
//! already, through the fence chain. It stays, because the argument needs it when it does not (a session
//! whose last fence of epoch `epoch_agree − 1` comes late in the chain).
//!
//! **Both sides of kept constraints, and Φ.** The future can decide a kept constraint either way (reading
//! the older of two unordered frontier versions orders the other before it), so Γ has both of its sides; a
//! path through Φ stands for a future transaction that follows one transaction of the round and precedes
//! another that is not old. Both are needed: `tests/rounds_chengrw.rs` has a history whose deleted constraint
//! is closed on each side through a kept constraint that two future reads decide.
//!
//! **Which side is taken.** Any side works for the argument; the one that goes least far back in a
//! topological order of g is taken, because a side whose edges run from late readers back to early writers
//! is the one that encloses the most of Γ. Unlike Cobra's g′, Γ never holds both sides of a deleted
//! constraint, so a transaction on a known path between two participants of one constraint is not on a
//! cycle because of it (see `gc`, "Why Cobra's rule kept nearly everything on chengRW").

use kernels::Reachability;
use solver::Side;

use super::Refusal;
use crate::constraints;
use crate::pipeline::Polygraph;

/// The live constraints pruning left, as rule 2 sees them.
pub(super) struct LiveConstraints {
    /// Each live constraint's participants: the writers and readers of every version of its two chains.
    participants: Vec<Vec<u32>>,
    /// The edges of each side of each live constraint.
    sides: Vec<[Vec<(u32, u32)>; 2]>,
    /// The side (0: A, 1: B) a constraint whose participants are deleted is taken to have.
    taken: Vec<usize>,
    /// Whether a constraint's participants are kept already (then it needs no more looks).
    settled: Vec<bool>,
}

impl LiveConstraints {
    /// The live constraints of `p`, and one for every pair of its unread chains on the frontier (`frontier`,
    /// by version) that the known graph (`adj`, reachability `reach`) leaves unordered and that has a
    /// `candidate` among its writers (see [`unread_pairs`]).
    pub(super) fn new(
        p: &Polygraph,
        adj: &[Vec<u32>],
        reach: &dyn Reachability,
        frontier: &[bool],
        candidate: &[bool],
    ) -> Self {
        let norm = &p.norm;
        let position = topological_positions(adj);
        let mut participants = Vec::new();
        let mut sides = Vec::new();
        let mut taken = Vec::new();
        // Any side would do for the argument; the one that goes least far back in a topological order of the
        // known graph closes the fewest cycles, so it is the one most often found not entangled.
        let back = |edges: &[(u32, u32)]| {
            edges
                .iter()
                .map(|&(a, h)| i64::from(position[a as usize]) - i64::from(position[h as usize]))
                .max()
        };
        for (v, u) in unread_pairs(p, reach, frontier, candidate) {
            participants.push(if v < u { vec![v, u] } else { vec![u, v] });
            let both = [vec![(v, u)], vec![(u, v)]];
            taken.push(if back(&both[1]) < back(&both[0]) { 1 } else { 0 });
            sides.push(both);
        }
        for (c, _) in p.constraints.iter().zip(&p.live).filter(|&(_, &live)| live) {
            // Every reader and writer of every version of both chains, not only the ends of the side edges:
            // rule 3 drops a kept reader's read of a deleted version, which is sound only if no live
            // constraint concerns that version's chain (see rule 3 in `gc`). A read-committed reader is no
            // participant: its read is on no side (`Normalized::counts_anti_dependencies`), so dropping it
            // loses nothing a constraint needs, and its wr edge from the writer is a known edge, which rule 6
            // keeps as links. Counted in, a late read-committed read of an old frontier version kept the
            // version's constraints, and through them their mates, for as long as it stayed.
            let mut who: Vec<u32> = Vec::new();
            for chain in [c.first, c.second] {
                for &x in &p.chains.list[chain as usize].versions {
                    let version = &norm.versions[x as usize];
                    who.extend(version.writer);
                    who.extend(version.readers.iter().copied().filter(|&r| norm.counts_anti_dependencies(r)));
                }
            }
            who.sort_unstable();
            who.dedup();
            participants.push(who);
            let edges = |side| -> Vec<(u32, u32)> {
                c.side(norm, &p.chains, side).iter().map(|e| (e.from, e.to)).collect()
            };
            let both = [edges(Side::A), edges(Side::B)];
            taken.push(if back(&both[1]) < back(&both[0]) { 1 } else { 0 });
            sides.push(both);
        }
        let settled = vec![false; participants.len()];
        LiveConstraints { participants, sides, taken, settled }
    }

    /// Keeps (clears `del` for) the participants of every entangled constraint, noting why in `why` for those
    /// not kept before; returns whether anything changed. `old[v]`: whether `v` is old (Φ cannot precede
    /// it); `candidate[v]`: whether rule 1 let `v` be deleted.
    pub(super) fn keep_entangled(
        &mut self,
        adj: &[Vec<u32>],
        old: &[bool],
        candidate: &[bool],
        del: &mut [bool],
        why: &mut [Option<Refusal>],
    ) -> bool {
        let mut changed = false;
        for ci in 0..self.participants.len() {
            if self.settled[ci] {
                continue;
            }
            let who = &self.participants[ci];
            let reason = if who.iter().any(|&v| !candidate[v as usize]) {
                Refusal::ConstraintWithNew
            } else if who.iter().any(|&v| !del[v as usize]) {
                Refusal::ConstraintMate
            } else {
                continue;
            };
            changed |= self.settle(ci, reason, del, why);
        }
        let open: Vec<usize> = (0..self.participants.len()).filter(|&ci| !self.settled[ci]).collect();
        if open.is_empty() {
            return changed;
        }
        // Γ: the known graph, both sides of the settled constraints, the taken side of the open ones, and Φ.
        let n = adj.len();
        let phi = n as u32;
        let mut gamma: Vec<Vec<u32>> = adj.to_vec();
        for (ci, sides) in self.sides.iter().enumerate() {
            let chosen: &[Vec<(u32, u32)>] =
                if self.settled[ci] { sides } else { std::slice::from_ref(&sides[self.taken[ci]]) };
            for &(a, h) in chosen.iter().flatten() {
                gamma[a as usize].push(h);
            }
        }
        for out in &mut gamma {
            out.push(phi);
        }
        gamma.push((0..n as u32).filter(|&v| !old[v as usize]).collect());
        let comp = solver::strongly_connected_components(n + 1, |v| gamma[v as usize].as_slice());
        for ci in open {
            let on_cycle =
                self.sides[ci][self.taken[ci]].iter().any(|&(a, h)| comp[a as usize] == comp[h as usize]);
            if on_cycle {
                changed |= self.settle(ci, Refusal::EntangledConstraint, del, why);
            }
        }
        changed
    }

    /// How many live constraints are not entangled: deleted with their participants.
    pub(super) fn collected(&self) -> usize {
        self.settled.iter().filter(|&&s| !s).count()
    }

    /// Keeps the participants of constraint `ci`.
    fn settle(&mut self, ci: usize, reason: Refusal, del: &mut [bool], why: &mut [Option<Refusal>]) -> bool {
        self.settled[ci] = true;
        let mut changed = false;
        for &v in &self.participants[ci] {
            if del[v as usize] {
                del[v as usize] = false;
                why[v as usize].get_or_insert(reason);
                changed = true;
            }
        }
        changed
    }
}

/// The pairs of writers of two unread chains of one key (`constraints::is_unread`), both on the frontier,
/// that neither reaches the other in the known graph g. Serializability's polygraph has no constraint for
/// them, since no read can tell their order yet; but a later read of either makes them a constraint of the
/// whole history, decided either way, as the full polygraph would have left it live after pruning (its sides
/// are the two ww edges, and pruning settles a pair of ww edges only when it is ordered already). So rule 2
/// treats each as that live constraint: both its sides join Γ. Its writers are kept anyway: neither frontier
/// version can become the base while the other is unordered with it (rule 4).
///
/// **A pair with a superseded version needs nothing.** Let v's unread version of key k be superseded, and u
/// write another unread version of k, unordered with v.
/// - No accepted future reads v's version: it is a tombstone, or a kept superseded version, whose reader
///   would precede the old writer that supersedes it, which precedes every future transaction (§4.2).
/// - So the pair becomes a constraint only through a future read `r` of u's version. Its side "u before v"
///   has the edge r → v, from a future transaction to an old one, which the Guarantee closes into a cycle;
///   the whole history has v → u.
/// - That edge is implied by edges that stay. Follow what supersedes v: an old writer of k that v reaches is
///   kept, or deleted as a tombstone (superseded again, by one v reaches too), or deleted as the base, which
///   reaches u (rule 4), and then so would v. So v reaches, in g, a kept old writer f of k. When `r` arrives,
///   the constraint between u's chain and f's chain c cannot put u's first: that side has an edge from `r`
///   to c's head, which reaches f along the chain, and f, being old, reaches `r`. (c's head need not be old:
///   its writer, whose version f read-modify-wrote, reaches every future transaction through f.) So c comes
///   first, f ⇝ u in every compatible graph of the residual history and the future, and v ⇝ f ⇝ u. Γ has
///   the path too: f's constraint with u is kept with both sides, or is such a pair, or (f superseded in
///   turn) the same holds of f. If u reaches f instead, u's version is superseded, and `r` closes a cycle in
///   both histories.
///
/// So no cycle needs the edge v → u, in Γ or in the whole history, and rule 2's argument (above) holds
/// without the pair, wherever v and u go. Counting every unordered pair kept every transaction of a pgbench
/// tpcb-like history alive (branches and tellers are written by blind increments, and each unordered pair
/// spans an epoch), as Cobra's rule does with its live constraints.
fn unread_pairs(
    p: &Polygraph,
    reach: &dyn Reachability,
    frontier: &[bool],
    candidate: &[bool],
) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for group in &p.chains.by_key {
        let writers: Vec<u32> = group
            .iter()
            .filter(|&&c| constraints::is_unread(&p.norm, &p.chains, c))
            .map(|&c| p.chains.list[c as usize].versions[0])
            .filter(|&x| frontier[x as usize])
            .filter_map(|x| p.norm.versions[x as usize].writer)
            .collect();
        // A pair of two transactions that are not candidates changes nothing: both are kept, and both lie
        // on a cycle of Γ with Φ already (one that is not old is reached from Φ and reaches it; an old one
        // that rule 1 keeps is reached from one that is not old). So only pairs with a candidate are made,
        // which keeps this linear in the key's writers while epoch_agree stands still and the live set
        // grows. Each pair once: with the lower-placed candidate, or with the candidate alone.
        for (i, &v) in writers.iter().enumerate().filter(|&(_, &v)| candidate[v as usize]) {
            for (j, &u) in writers.iter().enumerate() {
                let once = !candidate[u as usize] || j > i;
                if once && v != u && !reach.reaches(v, u) && !reach.reaches(u, v) {
                    out.push((v, u));
                }
            }
        }
    }
    out
}

/// Each vertex's position in one topological order of the acyclic graph `adj` (Kahn's algorithm).
fn topological_positions(adj: &[Vec<u32>]) -> Vec<u32> {
    let n = adj.len();
    let mut indegree = vec![0u32; n];
    for out in adj {
        for &w in out {
            indegree[w as usize] += 1;
        }
    }
    let mut ready: Vec<u32> = (0..n as u32).filter(|&v| indegree[v as usize] == 0).collect();
    let mut position = vec![0u32; n];
    let mut next = 0;
    let mut i = 0;
    while i < ready.len() {
        let v = ready[i];
        i += 1;
        position[v as usize] = next;
        next += 1;
        for &w in &adj[v as usize] {
            indegree[w as usize] -= 1;
            if indegree[w as usize] == 0 {
                ready.push(w);
            }
        }
    }
    position
}
