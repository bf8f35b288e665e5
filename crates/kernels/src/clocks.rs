//! Per-chain clocks (DESIGN.md §4): for each node and each chain, the first position on that chain the node
//! reaches. Because consecutive chain members are joined by edges, reaching position `p` means reaching every
//! later position too, so one number per chain describes the whole reachable set.

use crate::levels::{LevelRows, fill_by_level};
use crate::{Backend, Graph, KernelError, MAX_CLOSURE_BYTES, Reachability};

/// Below this many nodes in a level, rayon's overhead outweighs its help.
const PARALLEL_LEVEL: usize = 256;

/// A cover of the nodes by disjoint paths of the graph: each node's chain and position on it.
#[derive(Clone, Debug)]
pub(crate) struct ChainCover {
    /// Each node's chain.
    pub(crate) chain: Vec<u32>,
    /// Each node's position on its chain.
    pub(crate) pos: Vec<u32>,
    chains: usize,
}

impl ChainCover {
    /// Uses the hinted paths (checked to be paths of the graph), then covers the rest greedily: each
    /// uncovered node, in topological order, starts a chain that follows uncovered successors.
    pub(crate) fn new(graph: &Graph, order: &[u32], hint: Option<&[Vec<u32>]>) -> Result<Self, KernelError> {
        let n = graph.nodes() as usize;
        let mut chain = vec![u32::MAX; n];
        let mut pos = vec![0u32; n];
        let mut chains = 0u32;
        for path in hint.unwrap_or(&[]) {
            // A one-node path would cost a whole chain for one node; the greedy cover does better with it.
            if path.len() < 2 {
                continue;
            }
            for (i, &v) in path.iter().enumerate() {
                if v >= graph.nodes() || chain[v as usize] != u32::MAX {
                    return Err(KernelError::BadChainHint { node: v });
                }
                if i > 0 && !graph.has_edge(path[i - 1], v) {
                    return Err(KernelError::BadChainHint { node: v });
                }
                chain[v as usize] = chains;
                pos[v as usize] = i as u32;
            }
            chains += 1;
        }
        for &start in order {
            if chain[start as usize] != u32::MAX {
                continue;
            }
            let mut v = start;
            let mut p = 0;
            loop {
                chain[v as usize] = chains;
                pos[v as usize] = p;
                p += 1;
                match graph.successors(v).iter().find(|&&s| chain[s as usize] == u32::MAX) {
                    Some(&s) => v = s,
                    None => break,
                }
            }
            chains += 1;
        }
        Ok(ChainCover { chain, pos, chains: chains as usize })
    }

    /// The number of chains.
    pub(crate) fn len(&self) -> usize {
        self.chains
    }
}

/// Reachability as per-chain clocks.
#[derive(Clone, Debug)]
pub struct ChainClocks {
    cover: ChainCover,
    /// Each node's row index in `clocks` (rows are stored by level).
    rank: Vec<u32>,
    /// `rank × chains` first-reachable positions; `u32::MAX` means the chain is not reached.
    clocks: Vec<u32>,
}

impl ChainClocks {
    /// Computes the clocks for an acyclic graph, with the sessions (or other paths) as chain hints.
    pub fn new(graph: &Graph, chains: Option<&[Vec<u32>]>) -> Result<Self, KernelError> {
        let order = graph.topo_order()?;
        let cover = ChainCover::new(graph, &order, chains)?;
        Self::with_cover(graph, &order, cover)
    }

    pub(crate) fn with_cover(graph: &Graph, order: &[u32], cover: ChainCover) -> Result<Self, KernelError> {
        let n = graph.nodes() as usize;
        let c = cover.len().max(1);
        let bytes = n as u64 * c as u64 * 4;
        if bytes > MAX_CLOSURE_BYTES {
            return Err(KernelError::TooLarge { bytes });
        }
        let LevelRows { rank, rows: clocks } = fill_by_level(
            graph,
            order,
            c,
            u32::MAX,
            PARALLEL_LEVEL,
            |mine, theirs| *mine = (*mine).min(theirs),
            |v, row| row[cover.chain[v as usize] as usize] = cover.pos[v as usize],
        );
        Ok(ChainClocks { cover, rank, clocks })
    }

    /// Clocks filled elsewhere (on a device): `clocks` holds `max(chains, 1)` entries per row, row `rank[v]`
    /// being node `v`'s.
    #[cfg(feature = "gpu")]
    pub(crate) fn from_rows(cover: ChainCover, rank: Vec<u32>, clocks: Vec<u32>) -> Self {
        ChainClocks { cover, rank, clocks }
    }

    /// The number of chains the nodes were covered by.
    pub fn chains(&self) -> usize {
        self.cover.len()
    }
}

impl Reachability for ChainClocks {
    fn reaches(&self, from: u32, to: u32) -> bool {
        if from == to {
            return true;
        }
        let c = self.cover.len().max(1);
        let row = self.rank[from as usize] as usize * c;
        self.clocks[row + self.cover.chain[to as usize] as usize] <= self.cover.pos[to as usize]
    }

    fn backend(&self) -> Backend {
        Backend::ChainClocks
    }
}
