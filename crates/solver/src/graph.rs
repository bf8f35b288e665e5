//! Static graph algorithms on plain edge lists: acyclicity tests, explicit cycles and strongly connected
//! components.
//!
//! These are used for the known-graph shortcut (a cyclic known graph is answered without any SAT call), for
//! re-checking models, and by the brute-force oracle. They take `n` and a slice of edges whose endpoints the
//! caller has already checked to be below `n`. [`strongly_connected_components`] is public: the verifier's
//! garbage collection deletes whole components at a time (Cobra §4.3).

use crate::Edge;

/// A compressed sparse row adjacency list: the out-edges of vertex `v` are `targets[start[v]..start[v + 1]]`.
pub(crate) struct Csr {
    start: Vec<usize>,
    targets: Vec<u32>,
}

impl Csr {
    /// The out-adjacency of `edges` over `n` vertices.
    pub(crate) fn out_edges(n: usize, edges: impl Iterator<Item = Edge> + Clone) -> Self {
        let mut start = vec![0usize; n + 1];
        for e in edges.clone() {
            start[e.from as usize + 1] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut targets = vec![0u32; start[n]];
        for e in edges {
            let slot = &mut fill[e.from as usize];
            targets[*slot] = e.to;
            *slot += 1;
        }
        Csr { start, targets }
    }

    /// The heads of the edges leaving `v`.
    pub(crate) fn succ(&self, v: u32) -> &[u32] {
        &self.targets[self.start[v as usize]..self.start[v as usize + 1]]
    }
}

/// Whether the graph `edges` over `n` vertices has no directed cycle (Kahn's algorithm).
pub(crate) fn is_acyclic(n: usize, edges: impl Iterator<Item = Edge> + Clone) -> bool {
    let csr = Csr::out_edges(n, edges.clone());
    let mut indeg = vec![0u32; n];
    for e in edges {
        indeg[e.to as usize] += 1;
    }
    let mut stack: Vec<u32> = (0..n as u32).filter(|&v| indeg[v as usize] == 0).collect();
    let mut seen = 0usize;
    while let Some(v) = stack.pop() {
        seen += 1;
        for &w in csr.succ(v) {
            indeg[w as usize] -= 1;
            if indeg[w as usize] == 0 {
                stack.push(w);
            }
        }
    }
    seen == n
}

/// A topological order of an acyclic graph: `order[v]` is the position of `v`. `None` if it has a cycle.
pub(crate) fn topological_positions(n: usize, edges: &[Edge]) -> Option<Vec<u32>> {
    let csr = Csr::out_edges(n, edges.iter().copied());
    let mut indeg = vec![0u32; n];
    for e in edges {
        indeg[e.to as usize] += 1;
    }
    let mut queue: std::collections::VecDeque<u32> =
        (0..n as u32).filter(|&v| indeg[v as usize] == 0).collect();
    let mut pos = vec![0u32; n];
    let mut next = 0u32;
    while let Some(v) = queue.pop_front() {
        pos[v as usize] = next;
        next += 1;
        for &w in csr.succ(v) {
            indeg[w as usize] -= 1;
            if indeg[w as usize] == 0 {
                queue.push_back(w);
            }
        }
    }
    (next as usize == n).then_some(pos)
}

/// One directed cycle of `edges`, as the list of its edges in order, or `None` if the graph is acyclic.
///
/// Tarjan's strongly connected components find a cyclic component; a breadth-first search inside it from one
/// of its vertices back to itself gives a shortest cycle through that vertex, which keeps certificates short.
pub(crate) fn find_cycle(n: usize, edges: &[Edge]) -> Option<Vec<Edge>> {
    if let Some(&e) = edges.iter().find(|e| e.from == e.to) {
        return Some(vec![e]);
    }
    let csr = Csr::out_edges(n, edges.iter().copied());
    let comp = strongly_connected_components(n, |v| csr.succ(v));
    // A component with two or more vertices has a cycle; find one of its vertices.
    let mut size = vec![0u32; n];
    for &c in &comp {
        size[c as usize] += 1;
    }
    let root = (0..n as u32).find(|&v| size[comp[v as usize] as usize] > 1)?;
    let c = comp[root as usize];
    // BFS from root over edges inside the component until an edge returns to root.
    let mut parent = vec![u32::MAX; n];
    let mut queue = std::collections::VecDeque::from([root]);
    parent[root as usize] = root;
    while let Some(v) = queue.pop_front() {
        for &w in csr.succ(v) {
            if comp[w as usize] != c {
                continue;
            }
            if w == root {
                let mut path = vec![Edge::new(v, root)];
                let mut x = v;
                while x != root {
                    let p = parent[x as usize];
                    path.push(Edge::new(p, x));
                    x = p;
                }
                path.reverse();
                return Some(path);
            }
            if parent[w as usize] == u32::MAX {
                parent[w as usize] = v;
                queue.push_back(w);
            }
        }
    }
    None
}

/// The strongly connected components of the graph on vertices `0..n` whose out-edges from `v` go to
/// `successors(v)`: a component id per vertex, numbered in the order Tarjan's algorithm closes them (so a
/// component's successors' components have smaller ids). The search is iterative, so that long chains
/// cannot overflow the stack.
///
/// ```
/// let adj: Vec<Vec<u32>> = vec![vec![1], vec![0, 2], vec![]];
/// let comp = solver::strongly_connected_components(3, |v| adj[v as usize].as_slice());
/// assert_eq!(comp[0], comp[1]);
/// assert_ne!(comp[1], comp[2]);
/// ```
pub fn strongly_connected_components<'a>(n: usize, successors: impl Fn(u32) -> &'a [u32]) -> Vec<u32> {
    const UNSEEN: u32 = u32::MAX;
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0u32; n];
    let mut on_stack = vec![false; n];
    let mut comp = vec![UNSEEN; n];
    let mut stack: Vec<u32> = Vec::new();
    let mut next_index = 0u32;
    let mut next_comp = 0u32;
    // Call stack of (vertex, next successor offset).
    let mut calls: Vec<(u32, usize)> = Vec::new();
    for s in 0..n as u32 {
        if index[s as usize] != UNSEEN {
            continue;
        }
        calls.push((s, 0));
        index[s as usize] = next_index;
        low[s as usize] = next_index;
        next_index += 1;
        stack.push(s);
        on_stack[s as usize] = true;
        while let Some(&mut (v, ref mut i)) = calls.last_mut() {
            let succ = successors(v);
            if *i < succ.len() {
                let w = succ[*i];
                *i += 1;
                if index[w as usize] == UNSEEN {
                    index[w as usize] = next_index;
                    low[w as usize] = next_index;
                    next_index += 1;
                    stack.push(w);
                    on_stack[w as usize] = true;
                    calls.push((w, 0));
                } else if on_stack[w as usize] {
                    low[v as usize] = low[v as usize].min(index[w as usize]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(parent, _)) = calls.last() {
                low[parent as usize] = low[parent as usize].min(low[v as usize]);
            }
            if low[v as usize] == index[v as usize] {
                while let Some(w) = stack.pop() {
                    on_stack[w as usize] = false;
                    comp[w as usize] = next_comp;
                    if w == v {
                        break;
                    }
                }
                next_comp += 1;
            }
        }
    }
    comp
}

/// Whether `cycle` is a closed walk: non-empty, and each edge's head is the next edge's tail.
pub(crate) fn is_closed_walk(cycle: &[Edge]) -> bool {
    let Some(first) = cycle.first() else { return false };
    let Some(last) = cycle.last() else { return false };
    cycle.windows(2).all(|w| w[0].to == w[1].from) && last.to == first.from
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(a: u32, b: u32) -> Edge {
        Edge::new(a, b)
    }

    #[test]
    fn chain_is_acyclic_and_has_no_cycle() {
        let edges = [e(0, 1), e(1, 2), e(2, 3)];
        assert!(is_acyclic(4, edges.iter().copied()));
        assert!(find_cycle(4, &edges).is_none());
        assert!(topological_positions(4, &edges).is_some());
    }

    #[test]
    fn cycle_is_found_as_closed_walk() {
        let edges = [e(0, 1), e(1, 2), e(2, 3), e(3, 1), e(4, 0)];
        assert!(!is_acyclic(5, edges.iter().copied()));
        let c = find_cycle(5, &edges).expect("cyclic");
        assert!(is_closed_walk(&c));
        assert_eq!(c.len(), 3);
        assert!(c.iter().all(|x| edges.contains(x)));
    }

    #[test]
    fn self_loop_is_a_cycle_of_one_edge() {
        let edges = [e(0, 1), e(2, 2)];
        assert_eq!(find_cycle(3, &edges), Some(vec![e(2, 2)]));
    }

    #[test]
    fn long_chain_does_not_overflow_the_stack() {
        let n = 200_000u32;
        let mut edges: Vec<Edge> = (0..n - 1).map(|i| e(i, i + 1)).collect();
        assert!(find_cycle(n as usize, &edges).is_none());
        edges.push(e(n - 1, 0));
        let c = find_cycle(n as usize, &edges).expect("cyclic");
        assert_eq!(c.len(), n as usize);
        assert!(is_closed_walk(&c));
    }
}
