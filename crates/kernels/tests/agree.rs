//! The backends must agree with each other and with plain depth-first search on random DAGs, with and
//! without chain hints, including graphs large enough to take the parallel paths.

use kernels::{Backend, BitsetRows, ChainClocks, Graph, KernelError, Reachability, reachability};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A random DAG: edges only go from lower to higher numbers under a random relabelling, plus `sessions`
/// session-like paths that are returned as chain hints.
fn random_dag(rng: &mut StdRng, n: u32, extra: usize, sessions: u32) -> (Graph, Vec<Vec<u32>>) {
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

fn assert_agree(g: &Graph, chains: &[Vec<u32>]) {
    let reference = reachability(g, None, Backend::Dfs).unwrap();
    let order = g.topo_order().unwrap();
    let all: Vec<Box<dyn Reachability>> = vec![
        Box::new(ChainClocks::new(g, None).unwrap()),
        Box::new(ChainClocks::new(g, Some(chains)).unwrap()),
        Box::new(BitsetRows::new(g, &order).unwrap()),
        reachability(g, Some(chains), Backend::Auto).unwrap(),
    ];
    for u in 0..g.nodes() {
        for v in 0..g.nodes() {
            let want = reference.reaches(u, v);
            for r in &all {
                assert_eq!(r.reaches(u, v), want, "{:?} disagrees on {u} -> {v}", r.backend());
            }
        }
    }
}

#[test]
fn backends_agree_with_dfs_on_small_random_dags() {
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..300 {
        let n = rng.gen_range(1..40);
        let extra = rng.gen_range(0..3 * n as usize);
        let sessions = rng.gen_range(1..6);
        let (g, chains) = random_dag(&mut rng, n, extra, sessions);
        assert_agree(&g, &chains);
    }
}

#[test]
fn backends_agree_on_dags_wide_enough_for_rayon() {
    let mut rng = StdRng::seed_from_u64(11);
    for &(n, extra, sessions) in &[(1500u32, 3000usize, 600u32), (1200, 200, 1000), (900, 5000, 8)] {
        let (g, chains) = random_dag(&mut rng, n, extra, sessions);
        let reference = kernels::Dfs::new(g.clone());
        let order = g.topo_order().unwrap();
        let clocks = ChainClocks::new(&g, Some(&chains)).unwrap();
        let bits = BitsetRows::new(&g, &order).unwrap();
        for _ in 0..20_000 {
            let u = rng.gen_range(0..n);
            let v = rng.gen_range(0..n);
            let want = reference.reaches(u, v);
            assert_eq!(clocks.reaches(u, v), want, "clocks {u} -> {v}");
            assert_eq!(bits.reaches(u, v), want, "bits {u} -> {v}");
        }
    }
}

#[test]
fn a_cycle_is_reported_with_its_nodes() {
    let g = Graph::from_edges(4, &[(0, 1), (1, 2), (2, 3), (3, 1)]).unwrap();
    match reachability(&g, None, Backend::Auto) {
        Err(KernelError::Cyclic { cycle }) => {
            assert_eq!(cycle.len(), 3);
            for i in 0..cycle.len() {
                assert!(g.has_edge(cycle[i], cycle[(i + 1) % cycle.len()]), "{cycle:?} is not a cycle");
            }
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a cyclic graph was accepted"),
    }
}

#[test]
fn a_chain_hint_that_is_not_a_path_is_refused() {
    let g = Graph::from_edges(3, &[(0, 1), (1, 2)]).unwrap();
    assert!(matches!(ChainClocks::new(&g, Some(&[vec![0, 2]])), Err(KernelError::BadChainHint { node: 2 })));
    assert!(matches!(
        ChainClocks::new(&g, Some(&[vec![0, 1], vec![1, 2]])),
        Err(KernelError::BadChainHint { node: 1 })
    ));
}

#[test]
fn an_edge_out_of_range_is_an_error() {
    assert!(matches!(Graph::from_edges(2, &[(0, 2)]), Err(KernelError::NodeOutOfRange { .. })));
}
