//! Bitset rows: one bit per node pair, each row the OR of its successors' rows. Quadratic memory, but
//! independent of how many chains the graph has.

use rayon::prelude::*;

use crate::{Backend, Graph, KernelError, MAX_CLOSURE_BYTES, Reachability, levels};

/// Below this many nodes in a level, rayon's overhead outweighs its help.
const PARALLEL_LEVEL: usize = 64;

/// Reachability as bitset rows.
#[derive(Clone, Debug)]
pub struct BitsetRows {
    words: usize,
    rank: Vec<u32>,
    rows: Vec<u64>,
}

impl BitsetRows {
    /// Computes the rows for an acyclic graph.
    pub fn new(graph: &Graph, order: &[u32]) -> Result<Self, KernelError> {
        let n = graph.nodes() as usize;
        let words = n.div_ceil(64).max(1);
        let bytes = n as u64 * words as u64 * 8;
        if bytes > MAX_CLOSURE_BYTES {
            return Err(KernelError::TooLarge { bytes });
        }
        let (by_level, starts) = levels(graph, order);
        let mut rank = vec![0u32; n];
        for (r, &v) in by_level.iter().enumerate() {
            rank[v as usize] = r as u32;
        }
        let mut rows = vec![0u64; n * words];
        let fill = |v: u32, row: &mut [u64], done: &[u64]| {
            for &s in graph.successors(v) {
                let r = rank[s as usize] as usize * words;
                for (mine, theirs) in row.iter_mut().zip(&done[r..r + words]) {
                    *mine |= *theirs;
                }
            }
            row[v as usize / 64] |= 1 << (v % 64);
        };
        for w in starts.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            let (done, rest) = rows.split_at_mut(lo * words);
            let level = &mut rest[..(hi - lo) * words];
            let nodes = &by_level[lo..hi];
            if hi - lo >= PARALLEL_LEVEL {
                level.par_chunks_mut(words).zip(nodes.par_iter()).for_each(|(row, &v)| fill(v, row, done));
            } else {
                for (row, &v) in level.chunks_mut(words).zip(nodes) {
                    fill(v, row, done);
                }
            }
        }
        Ok(BitsetRows { words, rank, rows })
    }
}

impl Reachability for BitsetRows {
    fn reaches(&self, from: u32, to: u32) -> bool {
        let row = self.rank[from as usize] as usize * self.words;
        self.rows[row + to as usize / 64] & (1 << (to % 64)) != 0
    }

    fn backend(&self) -> Backend {
        Backend::BitsetRows
    }
}
