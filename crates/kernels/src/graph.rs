//! A directed graph in compressed sparse row form: the input of every backend.

use crate::KernelError;

/// A directed graph on nodes `0..nodes`, stored as sorted adjacency lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    nodes: u32,
    offsets: Vec<usize>,
    targets: Vec<u32>,
}

impl Graph {
    /// Builds the graph from an edge list. Duplicate edges are kept once.
    pub fn from_edges(nodes: u32, edges: &[(u32, u32)]) -> Result<Self, KernelError> {
        let n = nodes as usize;
        for &(from, to) in edges {
            if from >= nodes || to >= nodes {
                return Err(KernelError::NodeOutOfRange { from, to, nodes });
            }
        }
        // Two counting sorts, by target and then (stably) by source, leave every row sorted without a
        // comparison: sorting each row after one counting sort was most of this function's cost on the
        // known graphs of TPC-C's rounds, whose hot rows (a warehouse's) hold thousands of edges.
        let starts = |key: &dyn Fn(&(u32, u32)) -> u32| {
            let mut start = vec![0usize; n + 1];
            for e in edges {
                start[key(e) as usize + 1] += 1;
            }
            for i in 1..start.len() {
                start[i] += start[i - 1];
            }
            start
        };
        let mut sources_by_target = vec![0u32; edges.len()];
        let mut next = starts(&|e| e.1);
        let by_target = next.clone();
        for &(from, to) in edges {
            sources_by_target[next[to as usize]] = from;
            next[to as usize] += 1;
        }
        let degree = starts(&|e| e.0);
        let mut targets = vec![0u32; edges.len()];
        let mut next = degree.clone();
        for to in 0..n {
            for &from in &sources_by_target[by_target[to]..by_target[to + 1]] {
                targets[next[from as usize]] = to as u32;
                next[from as usize] += 1;
            }
        }
        drop(sources_by_target);
        // Deduplicate each sorted row, compacting in place.
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        let mut write = 0;
        for v in 0..n {
            let mut last = None;
            for i in degree[v]..degree[v + 1] {
                let t = targets[i];
                if last != Some(t) {
                    targets[write] = t;
                    write += 1;
                    last = Some(t);
                }
            }
            offsets.push(write);
        }
        targets.truncate(write);
        Ok(Graph { nodes, offsets, targets })
    }

    /// The number of nodes.
    pub fn nodes(&self) -> u32 {
        self.nodes
    }

    /// The number of distinct edges.
    pub fn edges(&self) -> usize {
        self.targets.len()
    }

    /// The successors of `v`, sorted.
    pub fn successors(&self, v: u32) -> &[u32] {
        &self.targets[self.offsets[v as usize]..self.offsets[v as usize + 1]]
    }

    /// Whether the edge `from → to` exists.
    pub fn has_edge(&self, from: u32, to: u32) -> bool {
        from < self.nodes && self.successors(from).binary_search(&to).is_ok()
    }

    /// A topological order (Kahn's algorithm), or one cycle if there is none.
    pub fn topo_order(&self) -> Result<Vec<u32>, KernelError> {
        let n = self.nodes as usize;
        let mut indegree = vec![0u32; n];
        for &t in &self.targets {
            indegree[t as usize] += 1;
        }
        let mut order: Vec<u32> = (0..self.nodes).filter(|&v| indegree[v as usize] == 0).collect();
        let mut head = 0;
        while head < order.len() {
            let v = order[head];
            head += 1;
            for &s in self.successors(v) {
                indegree[s as usize] -= 1;
                if indegree[s as usize] == 0 {
                    order.push(s);
                }
            }
        }
        if order.len() == n {
            Ok(order)
        } else {
            Err(KernelError::Cyclic { cycle: self.find_cycle(&indegree) })
        }
    }

    /// Finds a cycle among the nodes Kahn's algorithm could not remove (those with `indegree > 0`). Every
    /// such node has a predecessor that is also left, so walking predecessors backwards must repeat a node.
    fn find_cycle(&self, indegree: &[u32]) -> Vec<u32> {
        let n = self.nodes as usize;
        // One remaining predecessor for each remaining node.
        let mut pred = vec![u32::MAX; n];
        for v in 0..self.nodes {
            if indegree[v as usize] == 0 {
                continue;
            }
            for &s in self.successors(v) {
                if indegree[s as usize] > 0 && pred[s as usize] == u32::MAX {
                    pred[s as usize] = v;
                }
            }
        }
        let Some(start) = (0..self.nodes).find(|&v| indegree[v as usize] > 0) else {
            return Vec::new();
        };
        let mut seen = vec![false; n];
        let mut v = start;
        while !seen[v as usize] {
            seen[v as usize] = true;
            v = pred[v as usize];
        }
        // `v` is on the cycle; walk predecessors until it comes back, then reverse into edge order.
        let mut cycle = vec![v];
        let mut u = pred[v as usize];
        while u != v {
            cycle.push(u);
            u = pred[u as usize];
        }
        cycle.reverse();
        cycle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn rows_are_each_source_s_distinct_targets_in_order_whatever_the_edge_order() {
        let mut rng = StdRng::seed_from_u64(11);
        for _ in 0..500 {
            let nodes = rng.gen_range(1..30u32);
            let edges: Vec<(u32, u32)> = (0..rng.gen_range(0..120))
                .map(|_| (rng.gen_range(0..nodes), rng.gen_range(0..nodes)))
                .collect();
            let g = Graph::from_edges(nodes, &edges).expect("in range");
            let mut want: Vec<std::collections::BTreeSet<u32>> = vec![Default::default(); nodes as usize];
            for &(from, to) in &edges {
                want[from as usize].insert(to);
            }
            for v in 0..nodes {
                assert_eq!(
                    g.successors(v),
                    want[v as usize].iter().copied().collect::<Vec<_>>(),
                    "{edges:?}"
                );
            }
            assert_eq!(g.edges(), want.iter().map(|row| row.len()).sum::<usize>());
        }
        assert!(Graph::from_edges(3, &[(0, 1), (1, 3)]).is_err());
    }
}
