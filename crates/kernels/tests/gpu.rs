//! Backend::Cuda against the CPU backends and depth-first search, on a CUDA device (issue 23). Built only
//! with the `gpu` feature, and then it needs a device: where there is none, every test fails with the
//! reason, rather than passing without having checked anything. Run it where a GPU is:
//! `cargo test -p kernels --features gpu --test gpu` (scripts/gpu-check runs it with the benchmark).

mod common;

use common::random_dag;
use kernels::{Backend, ChainClocks, Graph, KernelError, Reachability, gpu, reachability};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn on_device(g: &Graph, chains: &[Vec<u32>]) -> Box<dyn Reachability> {
    let reach = reachability(g, Some(chains), Backend::Cuda).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(reach.backend(), Backend::Cuda);
    reach
}

#[test]
fn the_device_agrees_with_dfs_on_every_pair_of_small_random_dags() {
    println!("device: {}", gpu::device_name().unwrap_or_else(|e| panic!("{e}")));
    let mut rng = StdRng::seed_from_u64(23);
    let (mut clocks, mut bits) = (0, 0);
    for _ in 0..400 {
        let n = rng.gen_range(1..120);
        let extra = rng.gen_range(0..3 * n as usize);
        // Few sessions give chain clocks, many give bitset rows (Auto's memory rule, which Cuda follows).
        let sessions = if rng.gen_bool(0.5) { rng.gen_range(1..6) } else { rng.gen_range(60..120) };
        let (g, chains) = random_dag(&mut rng, n, extra, sessions);
        let reference = reachability(&g, None, Backend::Dfs).unwrap();
        let filled = on_device(&g, &chains);
        let squared = gpu::squaring_closure(&g).unwrap_or_else(|e| panic!("{e}"));
        for u in 0..n {
            for v in 0..n {
                let want = reference.reaches(u, v);
                assert_eq!(filled.reaches(u, v), want, "level fill disagrees on {u} -> {v}");
                assert_eq!(squared.reaches(u, v), want, "squaring disagrees on {u} -> {v}");
            }
        }
        let cover = ChainClocks::new(&g, Some(&chains)).unwrap().chains() as u64;
        if cover * 4 <= u64::from(n).div_ceil(64) * 8 { clocks += 1 } else { bits += 1 }
    }
    println!("{clocks} graphs in chain clocks, {bits} in bitset rows");
    assert!(clocks > 50 && bits > 50, "both layouts must be exercised: {clocks} clocks, {bits} bits");
}

#[test]
fn the_device_agrees_on_large_graphs_with_many_levels() {
    let mut rng = StdRng::seed_from_u64(29);
    // (nodes, extra edges, sessions): chain clocks with few and with many chains, and bitset rows.
    for &(n, extra, sessions) in
        &[(200_000u32, 400_000usize, 24u32), (50_000, 100_000, 1000), (4_000, 6_000, 3_000)]
    {
        let (g, chains) = random_dag(&mut rng, n, extra, sessions);
        let filled = on_device(&g, &chains);
        let cpu = reachability(&g, Some(&chains), Backend::Auto).unwrap();
        let dfs = kernels::Dfs::new(g.clone());
        for i in 0..200_000 {
            let (u, v) = (rng.gen_range(0..n), rng.gen_range(0..n));
            let want = cpu.reaches(u, v);
            assert_eq!(filled.reaches(u, v), want, "{n} nodes: {u} -> {v}");
            if i < 300 {
                assert_eq!(dfs.reaches(u, v), want, "the CPU reference itself is wrong on {u} -> {v}");
            }
        }
    }
}

#[test]
fn auto_fills_large_graphs_on_the_device_and_small_ones_on_the_cpu() {
    let mut rng = StdRng::seed_from_u64(31);
    let (small, small_chains) = random_dag(&mut rng, 1000, 2000, 8);
    assert_ne!(reachability(&small, Some(&small_chains), Backend::Auto).unwrap().backend(), Backend::Cuda);
    // Much work, but rows 24 wide: one block fills most levels, and the CPU's caches do better.
    let (narrow, narrow_chains) = random_dag(&mut rng, 1_000_000, 1_000_000, 24);
    assert_ne!(reachability(&narrow, Some(&narrow_chains), Backend::Auto).unwrap().backend(), Backend::Cuda);
    // Wide rows, but (100k nodes + ~200k edges) × 200 = 60M of work: the transfers cost more than the fill
    // saves.
    let (few, few_chains) = random_dag(&mut rng, 100_000, 100_000, 200);
    assert_ne!(reachability(&few, Some(&few_chains), Backend::Auto).unwrap().backend(), Backend::Cuda);
    // 400k nodes on 400 chains: (400k + ~800k edges) × 400 = 480M of work, past both thresholds, and 160M
    // clock entries (640 MB, so they come back through the staging buffer in three chunks, the last
    // partial).
    let (large, large_chains) = random_dag(&mut rng, 400_000, 400_000, 400);
    let reach = reachability(&large, Some(&large_chains), Backend::Auto).unwrap();
    assert_eq!(reach.backend(), Backend::Cuda);
    let cpu = reachability(&large, Some(&large_chains), Backend::ChainClocks).unwrap();
    for _ in 0..100_000 {
        let (u, v) = (rng.gen_range(0..400_000), rng.gen_range(0..400_000));
        assert_eq!(reach.reaches(u, v), cpu.reaches(u, v), "{u} -> {v}");
    }
}

#[test]
fn an_empty_graph_needs_no_device_memory() {
    let g = Graph::from_edges(0, &[]).unwrap();
    assert_eq!(on_device(&g, &[]).backend(), Backend::Cuda);
    assert!(gpu::squaring_closure(&g).is_ok());
}

#[test]
fn a_cycle_is_refused_before_anything_reaches_the_device() {
    let g = Graph::from_edges(3, &[(0, 1), (1, 2), (2, 0)]).unwrap();
    assert!(matches!(reachability(&g, None, Backend::Cuda), Err(KernelError::Cyclic { .. })));
    assert!(matches!(gpu::squaring_closure(&g), Err(KernelError::Cyclic { .. })));
}
