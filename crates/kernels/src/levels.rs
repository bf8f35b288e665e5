//! The level-by-level fill both closure backends share ([`ChainClocks`](crate::ChainClocks) and
//! [`BitsetRows`](crate::BitsetRows); Cobra §5 computes the closure on a GPU by repeated squaring instead,
//! DESIGN.md §4 says why Krait does not, and the `gpu` module runs this same fill on a CUDA device). Nodes
//! are grouped by height, so every successor of a node lies in an earlier group; one group's rows depend
//! only on rows already filled, so each group is filled in parallel with rayon.

use rayon::prelude::*;

use crate::Graph;

/// Groups nodes by height (the longest path to a sink), lowest first, so that every successor of a node lies
/// in an earlier group. Returns the nodes in that order and the start of each group.
pub(crate) fn levels(graph: &Graph, order: &[u32]) -> (Vec<u32>, Vec<usize>) {
    let n = graph.nodes() as usize;
    let mut height = vec![0u32; n];
    for &v in order.iter().rev() {
        let h = graph.successors(v).iter().map(|&s| height[s as usize] + 1).max().unwrap_or(0);
        height[v as usize] = h;
    }
    let max = height.iter().copied().max().unwrap_or(0) as usize;
    let mut count = vec![0usize; max + 2];
    for &h in &height {
        count[h as usize + 1] += 1;
    }
    for i in 1..count.len() {
        count[i] += count[i - 1];
    }
    let starts = count.clone();
    let mut next = count;
    let mut by_level = vec![0u32; n];
    for (v, &h) in height.iter().enumerate() {
        by_level[next[h as usize]] = v as u32;
        next[h as usize] += 1;
    }
    (by_level, starts)
}

/// Rows of reachability facts, one row of `width` values per node, stored in level order.
pub(crate) struct LevelRows<T> {
    /// Each node's row index in `rows`.
    pub(crate) rank: Vec<u32>,
    /// `rank × width` values.
    pub(crate) rows: Vec<T>,
}

/// Fills one row of `width` values per node of the acyclic `graph` (`order`: a topological order). Each row
/// starts as `empty`, takes in every successor's row value by value with `merge`, then gets the node's own
/// entry from `own`. A level of at least `parallel_from` nodes is filled in parallel (below that, rayon's
/// overhead outweighs its help).
pub(crate) fn fill_by_level<T: Copy + Send + Sync>(
    graph: &Graph,
    order: &[u32],
    width: usize,
    empty: T,
    parallel_from: usize,
    merge: impl Fn(&mut T, T) + Sync,
    own: impl Fn(u32, &mut [T]) + Sync,
) -> LevelRows<T> {
    let n = graph.nodes() as usize;
    let (by_level, starts) = levels(graph, order);
    let mut rank = vec![0u32; n];
    for (r, &v) in by_level.iter().enumerate() {
        rank[v as usize] = r as u32;
    }
    let mut rows = vec![empty; n * width];
    let fill = |v: u32, row: &mut [T], done: &[T]| {
        for &s in graph.successors(v) {
            let r = rank[s as usize] as usize * width;
            for (mine, theirs) in row.iter_mut().zip(&done[r..r + width]) {
                merge(mine, *theirs);
            }
        }
        own(v, row);
    };
    for w in starts.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        let (done, rest) = rows.split_at_mut(lo * width);
        let level = &mut rest[..(hi - lo) * width];
        let nodes = &by_level[lo..hi];
        if hi - lo >= parallel_from {
            level.par_chunks_mut(width).zip(nodes.par_iter()).for_each(|(row, &v)| fill(v, row, done));
        } else {
            for (row, &v) in level.chunks_mut(width).zip(nodes) {
                fill(v, row, done);
            }
        }
    }
    LevelRows { rank, rows }
}
