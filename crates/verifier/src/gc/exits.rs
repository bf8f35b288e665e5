//! Rule 6 of garbage collection: the exit links, which keep every path between kept transactions through
//! deleted ones (see the `gc` module). In: the known graph's adjacency (with rule 3's extra edges) and which
//! vertices are deleted. Out: for each kept vertex with a deleted successor, one link to the earliest kept
//! vertex of each session it reaches through deleted vertices only; session order, which the residual history
//! re-derives, reaches the rest.

use std::collections::HashMap;

/// For each kept vertex `u` with a deleted successor, the earliest kept vertex of each session that `u`
/// reaches through deleted vertices only (rule 6), as pairs `(u, exit)`.
///
/// The known graph of an accepted round is acyclic, so each deleted vertex's exits are computed once, in
/// reverse topological order of the deleted subgraph, and merged into its predecessors': the cost is the
/// deleted vertices' edges times the sessions, not one search per kept vertex. Should the deleted subgraph
/// have a cycle after all, every kept vertex gets its own search instead (the same answer, slower).
pub(super) fn exit_links(
    adj: &[Vec<u32>],
    del: &[bool],
    session_pos: &[(usize, usize)],
    sessions: usize,
) -> Vec<(u32, u32)> {
    let n = adj.len();
    // Kahn's algorithm over the deleted subgraph.
    let mut indegree = vec![0u32; n];
    for d in (0..n).filter(|&d| del[d]) {
        for &w in &adj[d] {
            if del[w as usize] {
                indegree[w as usize] += 1;
            }
        }
    }
    let mut order: Vec<u32> =
        (0..n as u32).filter(|&d| del[d as usize] && indegree[d as usize] == 0).collect();
    let mut i = 0;
    while i < order.len() {
        let d = order[i] as usize;
        i += 1;
        for &w in &adj[d] {
            if del[w as usize] {
                indegree[w as usize] -= 1;
                if indegree[w as usize] == 0 {
                    order.push(w);
                }
            }
        }
    }
    if order.len() != del.iter().filter(|&&d| d).count() {
        return exit_links_by_search(adj, del, session_pos);
    }
    // best[si]: the earliest exit found in session si so far, while merging one vertex's lists.
    let mut best: Vec<Option<(usize, u32)>> = vec![None; sessions];
    let mut touched: Vec<usize> = Vec::new();
    let mut merge = |succ: &[u32], exits: &[Vec<(usize, usize, u32)>]| -> Vec<(usize, usize, u32)> {
        let mut offer = |si: usize, pos: usize, w: u32, touched: &mut Vec<usize>| match &mut best[si] {
            Some((p, x)) => {
                if pos < *p {
                    *p = pos;
                    *x = w;
                }
            }
            slot @ None => {
                *slot = Some((pos, w));
                touched.push(si);
            }
        };
        for &w in succ {
            if del[w as usize] {
                for &(si, pos, x) in &exits[w as usize] {
                    offer(si, pos, x, &mut touched);
                }
            } else {
                let (si, pos) = session_pos[w as usize];
                offer(si, pos, w, &mut touched);
            }
        }
        // In no particular order: merging takes the earliest per session whatever the order, and the links
        // are sorted at the end.
        touched.drain(..).filter_map(|si| best[si].take().map(|(pos, w)| (si, pos, w))).collect()
    };
    // Only deleted vertices that some kept vertex reaches through deleted ones need their exits, and a
    // needed vertex's deleted successors are needed too. Those are the deleted vertices any kept vertex
    // reaches at all: a path from a kept vertex goes on from its last kept vertex through deleted ones only.
    // Online, a round deletes mostly old transactions that no kept one reaches (kept ones are mostly newer),
    // so most merges were for nothing.
    let needed = super::reached_from(adj, del.iter().map(|&d| !d).collect());
    let mut exits: Vec<Vec<(usize, usize, u32)>> = vec![Vec::new(); n];
    for &d in order.iter().rev().filter(|&&d| needed[d as usize]) {
        exits[d as usize] = merge(&adj[d as usize], &exits);
    }
    let mut links = Vec::new();
    for u in 0..n as u32 {
        if del[u as usize] {
            continue;
        }
        let through: Vec<u32> = adj[u as usize].iter().copied().filter(|&w| del[w as usize]).collect();
        if through.is_empty() {
            continue;
        }
        let found = merge(&through, &exits);
        if found.iter().any(|&(_, _, w)| w == u) {
            // Only a cycle through `u` could lead back to it; search the plain way.
            return exit_links_by_search(adj, del, session_pos);
        }
        links.extend(found.into_iter().map(|(_, _, w)| (u, w)));
    }
    links
}

/// [`exit_links`] by one depth-first search per kept vertex.
fn exit_links_by_search(adj: &[Vec<u32>], del: &[bool], session_pos: &[(usize, usize)]) -> Vec<(u32, u32)> {
    let n = adj.len();
    let mut links = Vec::new();
    let mut seen = vec![u32::MAX; n];
    let mut exits: HashMap<usize, (usize, u32)> = HashMap::new();
    for u in 0..n as u32 {
        if del[u as usize] || !adj[u as usize].iter().any(|&w| del[w as usize]) {
            continue;
        }
        exits.clear();
        let mut stack: Vec<u32> = adj[u as usize].iter().copied().filter(|&w| del[w as usize]).collect();
        for &w in &stack {
            seen[w as usize] = u;
        }
        while let Some(d) = stack.pop() {
            for &w in &adj[d as usize] {
                if seen[w as usize] == u {
                    continue;
                }
                seen[w as usize] = u;
                if del[w as usize] {
                    stack.push(w);
                } else if w != u {
                    let (si, pos) = session_pos[w as usize];
                    let e = exits.entry(si).or_insert((pos, w));
                    if pos < e.0 {
                        *e = (pos, w);
                    }
                }
            }
        }
        links.extend(exits.values().map(|&(_, w)| (u, w)));
    }
    links
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::{exit_links, exit_links_by_search};

    /// The merged exits of rule 6 equal one search per kept vertex, on random DAGs of a few sessions.
    #[test]
    fn exit_links_match_the_search() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..300 {
            let n: usize = rng.gen_range(2..40);
            let sessions: usize = rng.gen_range(1..5);
            // Vertices in topological order 0..n; each in a session, positions in index order.
            let mut next_pos = vec![0usize; sessions];
            let session_pos: Vec<(usize, usize)> = (0..n)
                .map(|_| {
                    let si = rng.gen_range(0..sessions);
                    next_pos[si] += 1;
                    (si, next_pos[si] - 1)
                })
                .collect();
            let mut adj: Vec<Vec<u32>> = vec![Vec::new(); n];
            for (u, out) in adj.iter_mut().enumerate() {
                for w in u + 1..n {
                    if rng.gen_bool(0.15) {
                        out.push(w as u32);
                    }
                }
            }
            let del: Vec<bool> = (0..n).map(|_| rng.gen_bool(0.5)).collect();
            let mut fast = exit_links(&adj, &del, &session_pos, sessions);
            let mut slow = exit_links_by_search(&adj, &del, &session_pos);
            fast.sort_unstable();
            slow.sort_unstable();
            assert_eq!(fast, slow, "adj {adj:?} del {del:?} sessions {session_pos:?}");
        }
    }
}
