//! Bitset rows: one bit per node pair, each row the OR of its successors' rows. Quadratic memory, but
//! independent of how many chains the graph has.

use crate::levels::{LevelRows, fill_by_level};
use crate::{Backend, Graph, KernelError, MAX_CLOSURE_BYTES, Reachability};

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
        let LevelRows { rank, rows } = fill_by_level(
            graph,
            order,
            words,
            0u64,
            PARALLEL_LEVEL,
            |mine, theirs| *mine |= theirs,
            |v, row| row[v as usize / 64] |= 1 << (v % 64),
        );
        Ok(BitsetRows { words, rank, rows })
    }

    /// Rows filled elsewhere (on a device): `words` 64-bit words per row, row `rank[v]` being node `v`'s.
    #[cfg(feature = "gpu")]
    pub(crate) fn from_rows(words: usize, rank: Vec<u32>, rows: Vec<u64>) -> Self {
        BitsetRows { words, rank, rows }
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
