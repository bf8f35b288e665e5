//! Reachability backends for pruning (Cobra §3.3, §5).
//!
//! Pruning asks one question many times: in the known graph, does `v` reach `u`? Cobra answers it with the
//! transitive closure, computed on a GPU by repeated squaring of the adjacency matrix (§5). Krait's CPU
//! backends exploit the shape of real histories instead (DESIGN.md §4): transactions lie on a few *chains*
//! (sessions, RMW chains), so a node's reachable set is described by, for each chain, the first position on
//! it that the node reaches ([`Backend::ChainClocks`]). When there are many chains, one bit per node pair is
//! cheaper ([`Backend::BitsetRows`]). Both fill their rows level by level (all successors of a level lie on
//! lower levels), so each level is computed in parallel with rayon. [`Backend::Cuda`] runs the same level
//! fill on a CUDA device, for live sets so large that `nodes × chains` words outgrow a CPU's caches; it
//! works only in builds with the cargo feature `gpu` (the `gpu` module). [`Backend::Dfs`] answers each
//! query with a plain depth-first search; it exists to test the others.
//!
//! ```
//! use kernels::{Backend, Graph, reachability};
//!
//! let g = Graph::from_edges(3, &[(0, 1), (1, 2)]).unwrap();
//! let r = reachability(&g, None, Backend::Auto).unwrap();
//! assert!(r.reaches(0, 2));
//! assert!(!r.reaches(2, 0));
//! ```

mod bitset;
mod clocks;
mod dfs;
#[cfg(feature = "gpu")]
#[allow(unsafe_code)] // Kernel launches and the driver's loader are `unsafe` in cudarc; see the module.
pub mod gpu;
mod graph;
mod levels;

use thiserror::Error;

pub use bitset::BitsetRows;
pub use clocks::ChainClocks;
pub use dfs::Dfs;
pub use graph::Graph;

/// Which reachability backend to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Choose by memory: chain clocks when `nodes × chains` words are fewer than `nodes²` bits. In a build
    /// with the `gpu` feature, the rows are filled on a CUDA device when one is present and the graph is
    /// large enough to pay for the transfers; anything the device cannot do falls back to the CPU.
    #[default]
    Auto,
    /// Per-chain clocks: for each node and chain, the first position on the chain the node reaches.
    ChainClocks,
    /// One bitset row per node, OR-ed over its successors.
    BitsetRows,
    /// The rows Auto's memory rule picks (chain clocks or bitset rows), filled level by level on a CUDA
    /// device. An error where the build has no `gpu` feature or no device is present.
    Cuda,
    /// A depth-first search per query; for tests.
    Dfs,
}

impl Backend {
    /// The backend's name, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::ChainClocks => "chain-clocks",
            Backend::BitsetRows => "bitset-rows",
            Backend::Cuda => "cuda",
            Backend::Dfs => "dfs",
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;

    /// Parses a backend's [`name`](Backend::name).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Backend::Auto, Backend::ChainClocks, Backend::BitsetRows, Backend::Cuda, Backend::Dfs]
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| {
                format!("unknown reachability backend {s:?} (auto, chain-clocks, bitset-rows, cuda, dfs)")
            })
    }
}

/// Why reachability could not be computed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KernelError {
    /// An edge names a node outside `0..nodes`.
    #[error("edge {from} -> {to} names a node outside 0..{nodes}")]
    NodeOutOfRange {
        /// The edge's tail.
        from: u32,
        /// The edge's head.
        to: u32,
        /// The number of nodes.
        nodes: u32,
    },
    /// The graph has a cycle; these nodes form one, in order (the last has an edge to the first).
    #[error("the graph has a cycle through {} nodes", cycle.len())]
    Cyclic {
        /// The nodes of one cycle, in edge order.
        cycle: Vec<u32>,
    },
    /// A chain hint lists two consecutive nodes without an edge between them, or a node twice.
    #[error("chain hint is not a path of the graph at node {node}")]
    BadChainHint {
        /// The offending node.
        node: u32,
    },
    /// The closure would not fit in memory.
    #[error("the closure needs {bytes} bytes, more than the limit")]
    TooLarge {
        /// The bytes it would take.
        bytes: u64,
    },
    /// [`Backend::Cuda`] was asked for, but no CUDA device can be used.
    #[error("no CUDA device for reachability: {reason}")]
    NoDevice {
        /// Why: a build without the `gpu` feature, no driver, no device, or a failure on the device.
        reason: String,
    },
}

/// The answer to "does `from` reach `to`?" for every pair of nodes of one acyclic graph. Reachability is
/// reflexive: every node reaches itself.
pub trait Reachability: Send + Sync {
    /// Whether a path (possibly empty) leads from `from` to `to`.
    fn reaches(&self, from: u32, to: u32) -> bool;
    /// The backend that computed it.
    fn backend(&self) -> Backend;
}

/// The most memory a closure may take (8 GiB), so that a huge history fails cleanly instead of thrashing.
const MAX_CLOSURE_BYTES: u64 = 8 << 30;

/// Computes reachability for the acyclic graph `graph` with the chosen backend.
///
/// `chains` optionally lists paths of the graph (each consecutive pair joined by an edge), such as sessions;
/// the chain-clock backend uses them as its chains and covers the remaining nodes greedily. A good hint keeps
/// the number of chains near the number of sessions.
pub fn reachability(
    graph: &Graph,
    chains: Option<&[Vec<u32>]>,
    backend: Backend,
) -> Result<Box<dyn Reachability>, KernelError> {
    let order = graph.topo_order()?;
    match backend {
        Backend::Auto => {
            let layout = Layout::for_graph(graph, &order, chains)?;
            #[cfg(feature = "gpu")]
            if gpu::worth_it(graph, &layout) {
                // The device is an accelerator, not a dependency: whatever it cannot do, the CPU does.
                if let Ok(reach) = gpu::reachability(graph, &order, layout.clone()) {
                    return Ok(reach);
                }
            }
            Ok(layout.fill_on_cpu(graph, &order)?)
        }
        Backend::ChainClocks => {
            let cover = clocks::ChainCover::new(graph, &order, chains)?;
            Ok(Box::new(ChainClocks::with_cover(graph, &order, cover)?))
        }
        Backend::BitsetRows => Ok(Box::new(BitsetRows::new(graph, &order)?)),
        Backend::Cuda => on_device(graph, &order, Layout::for_graph(graph, &order, chains)?),
        Backend::Dfs => Ok(Box::new(Dfs::new(graph.clone()))),
    }
}

#[cfg(feature = "gpu")]
fn on_device(graph: &Graph, order: &[u32], layout: Layout) -> Result<Box<dyn Reachability>, KernelError> {
    gpu::reachability(graph, order, layout)
}

#[cfg(not(feature = "gpu"))]
fn on_device(_: &Graph, _: &[u32], _: Layout) -> Result<Box<dyn Reachability>, KernelError> {
    Err(KernelError::NoDevice {
        reason: "this build has no GPU support (build with the cargo feature `gpu`)".to_string(),
    })
}

/// Which rows a closure is stored in: whichever takes less memory.
#[derive(Clone, Debug)]
pub(crate) enum Layout {
    /// Per-chain clocks over this cover: `nodes × chains` 32-bit words.
    Clocks(clocks::ChainCover),
    /// Bitset rows: `nodes²` bits.
    Bits,
}

impl Layout {
    /// Chain clocks when `nodes × chains` words take no more memory than `nodes²` bits, else bitset rows.
    fn for_graph(graph: &Graph, order: &[u32], chains: Option<&[Vec<u32>]>) -> Result<Self, KernelError> {
        let cover = clocks::ChainCover::new(graph, order, chains)?;
        let n = u64::from(graph.nodes());
        let clock_bytes = n * cover.len() as u64 * 4;
        let bit_bytes = n * n.div_ceil(64) * 8;
        Ok(if clock_bytes <= bit_bytes { Layout::Clocks(cover) } else { Layout::Bits })
    }

    fn fill_on_cpu(self, graph: &Graph, order: &[u32]) -> Result<Box<dyn Reachability>, KernelError> {
        Ok(match self {
            Layout::Clocks(cover) => Box::new(ChainClocks::with_cover(graph, order, cover)?),
            Layout::Bits => Box::new(BitsetRows::new(graph, order)?),
        })
    }
}
