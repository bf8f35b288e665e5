//! Plain depth-first search per query: slow, obviously right, and the reference the others are tested
//! against.

use std::sync::Mutex;

use crate::{Backend, Graph, Reachability};

/// Answers each query with a fresh depth-first search.
#[derive(Debug)]
pub struct Dfs {
    graph: Graph,
    scratch: Mutex<Vec<bool>>,
}

impl Dfs {
    /// Wraps a graph (which may be cyclic: the search does not care).
    pub fn new(graph: Graph) -> Self {
        let n = graph.nodes() as usize;
        Dfs { graph, scratch: Mutex::new(vec![false; n]) }
    }

    fn search(&self, from: u32, to: u32, seen: &mut [bool]) -> bool {
        seen.iter_mut().for_each(|s| *s = false);
        let mut stack = vec![from];
        seen[from as usize] = true;
        while let Some(v) = stack.pop() {
            if v == to {
                return true;
            }
            for &s in self.graph.successors(v) {
                if !seen[s as usize] {
                    seen[s as usize] = true;
                    stack.push(s);
                }
            }
        }
        false
    }
}

impl Reachability for Dfs {
    fn reaches(&self, from: u32, to: u32) -> bool {
        match self.scratch.lock() {
            Ok(mut seen) => self.search(from, to, &mut seen),
            Err(_) => self.search(from, to, &mut vec![false; self.graph.nodes() as usize]),
        }
    }

    fn backend(&self) -> Backend {
        Backend::Dfs
    }
}
