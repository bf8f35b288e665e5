//! The backends must agree with each other and with plain depth-first search on random DAGs, with and
//! without chain hints, including graphs large enough to take the parallel paths.

mod common;

use common::random_dag;
use kernels::{Backend, BitsetRows, ChainClocks, Graph, KernelError, Reachability, reachability};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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

#[cfg(not(feature = "gpu"))]
#[test]
fn the_cuda_backend_says_the_build_has_no_gpu_support() {
    let g = Graph::from_edges(2, &[(0, 1)]).unwrap();
    match reachability(&g, None, Backend::Cuda) {
        Err(KernelError::NoDevice { reason }) => assert!(reason.contains("feature `gpu`"), "{reason}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a build without the gpu feature claimed a device"),
    }
    // Auto never needs the device.
    assert_eq!(reachability(&g, None, Backend::Auto).unwrap().backend(), Backend::ChainClocks);
}
