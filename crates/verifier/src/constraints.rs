//! Stage 4: constraints (Cobra §3.2, `Coalesce`; §2.3 without coalescing).
//!
//! In: the chains of each key. Out: one constraint per key and unordered pair of chains, deciding which chain
//! comes first. Side A ("first before second") holds the edges from the readers of `first`'s tail to the
//! writer of `second`'s head, or, when that tail has no other reader, the edge from the tail's writer to the
//! head's writer; side B is the mirror image. A chain that starts with an initial version precedes every
//! other chain of its key, so its pairs are not choices: their side-A edges go straight into the known graph.
//!
//! With coalescing off, each pair of chains yields one constraint per pair of edges (one from each side), the
//! uncoalesced form of §2.3; any acyclic choice of these contains one whole coalesced side, so the two forms
//! accept the same histories.

use history::Key;
use solver::Side;

use crate::chains::Chains;
use crate::known_graph::{KnownGraph, Origin};
use crate::normalize::{Label, Normalized};

/// One edge of a constraint side: an rw edge (a reader of `from_version` to the writer of `to_version`) or
/// a ww edge (the writer of `from_version` to the writer of `to_version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CEdge {
    pub from: u32,
    pub to: u32,
    pub rw: bool,
    pub from_version: u32,
    pub to_version: u32,
}

/// A choice between the two orders of two chains of one key. Side A is `first` before `second`, side B the
/// opposite. The edges are not stored: they are recomputed from the chains when needed ([`Constraint::side`]),
/// which keeps a constraint at 16 bytes, as most of them are pruned after one look.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Constraint {
    pub key: Key,
    pub first: u32,
    pub second: u32,
    /// Without coalescing: the one edge of each side this constraint keeps (indices into the full sides).
    pub pick: Option<(u32, u32)>,
}

impl Constraint {
    /// The edges of one side.
    pub(crate) fn side(&self, norm: &Normalized, chains: &Chains, side: Side) -> Vec<CEdge> {
        let (c1, c2, pick) = match side {
            Side::A => (self.first, self.second, self.pick.map(|p| p.0)),
            Side::B => (self.second, self.first, self.pick.map(|p| p.1)),
        };
        let edges = chain_to_chain(norm, chains, c1, c2);
        match pick {
            Some(i) => edges.get(i as usize).copied().into_iter().collect(),
            None => edges,
        }
    }
}

/// The edges implied by chain `c1` preceding chain `c2` (Cobra Fig. 3, GenChainToChainEdges). A reader of the
/// tail that is the head's own writer (a read-modify-write) needs no edge.
pub(crate) fn chain_to_chain(norm: &Normalized, chains: &Chains, c1: u32, c2: u32) -> Vec<CEdge> {
    let (Some(&tail), Some(&head)) =
        (chains.list[c1 as usize].versions.last(), chains.list[c2 as usize].versions.first())
    else {
        return Vec::new();
    };
    let Some(head_writer) = norm.versions[head as usize].writer else { return Vec::new() };
    let mut edges: Vec<CEdge> = norm.versions[tail as usize]
        .readers
        .iter()
        .filter(|&&r| r != head_writer)
        .map(|&r| CEdge { from: r, to: head_writer, rw: true, from_version: tail, to_version: head })
        .collect();
    if edges.is_empty()
        && let Some(tail_writer) = norm.versions[tail as usize].writer
    {
        edges.push(CEdge {
            from: tail_writer,
            to: head_writer,
            rw: false,
            from_version: tail,
            to_version: head,
        });
    }
    edges
}

/// Generates the constraints, and adds the edges that initial versions force to the known graph.
pub(crate) fn generate(
    norm: &Normalized,
    chains: &Chains,
    g: &mut KnownGraph,
    coalesce: bool,
) -> (Vec<Constraint>, u64) {
    let is_initial = |c: u32| {
        matches!(norm.versions[chains.list[c as usize].versions[0] as usize].label, Label::Initial(_))
    };
    let mut out = Vec::new();
    let mut initial_edges = 0;
    for group in &chains.by_key {
        for (i, &c1) in group.iter().enumerate() {
            for &c2 in &group[i + 1..] {
                let key = chains.list[c1 as usize].key;
                let (first, second) = if is_initial(c2) { (c2, c1) } else { (c1, c2) };
                let side_a = chain_to_chain(norm, chains, first, second);
                if is_initial(first) {
                    for e in side_a {
                        let origin = Origin::Initial {
                            first,
                            second,
                            from_version: e.from_version,
                            to_version: e.to_version,
                            rw: e.rw,
                        };
                        g.push(e.from, e.to, origin, 0);
                        initial_edges += 1;
                    }
                    continue;
                }
                let side_b = chain_to_chain(norm, chains, second, first);
                if side_a.is_empty() || side_b.is_empty() {
                    // An empty side can always be chosen, so the constraint constrains nothing.
                    continue;
                }
                if coalesce {
                    out.push(Constraint { key, first, second, pick: None });
                } else {
                    for a in 0..side_a.len() as u32 {
                        for b in 0..side_b.len() as u32 {
                            out.push(Constraint { key, first, second, pick: Some((a, b)) });
                        }
                    }
                }
            }
        }
    }
    (out, initial_edges)
}
