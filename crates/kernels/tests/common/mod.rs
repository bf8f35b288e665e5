//! Random graphs shaped like histories, shared by the backend tests.

use kernels::Graph;
use rand::Rng;
use rand::rngs::StdRng;

/// A random DAG: edges only go from lower to higher numbers under a random relabelling, plus `sessions`
/// session-like paths that are returned as chain hints.
pub fn random_dag(rng: &mut StdRng, n: u32, extra: usize, sessions: u32) -> (Graph, Vec<Vec<u32>>) {
    let mut label: Vec<u32> = (0..n).collect();
    for i in (1..n as usize).rev() {
        let j = rng.gen_range(0..=i);
        label.swap(i, j);
    }
    let mut edges = Vec::new();
    let mut chains = vec![Vec::new(); sessions.max(1) as usize];
    for i in 0..n {
        let k = rng.gen_range(0..chains.len());
        chains[k].push(i);
    }
    for chain in &chains {
        for w in chain.windows(2) {
            edges.push((label[w[0] as usize], label[w[1] as usize]));
        }
    }
    for _ in 0..extra {
        let a = rng.gen_range(0..n);
        let b = rng.gen_range(0..n);
        if a < b {
            edges.push((label[a as usize], label[b as usize]));
        }
    }
    let chains = chains.into_iter().map(|c| c.into_iter().map(|v| label[v as usize]).collect()).collect();
    (Graph::from_edges(n, &edges).unwrap(), chains)
}
