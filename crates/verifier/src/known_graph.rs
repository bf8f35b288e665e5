//! Stage 2: the known graph (Cobra Fig. 3, `CreateKnownGraph`; §2.3, §4.2).
//!
//! In: the normalised history. Out: a graph whose vertices are the included transactions and whose edges
//! must hold in every serial order that explains the history: wr edges (a reader follows the writer it read),
//! session-order edges (Cobra §4.2: serializable databases preserve session order), and, for strict
//! serializability, real-time edges (`realtime`). Also the ww pairs: a read-modify-write that read version v
//! and wrote w puts w directly after v (Cobra §3.1). Two read-modify-writes of one version are a lost update
//! (Fig. 3, line 21), reported here.

use history::{History, Key};
use solver::Side;

use crate::normalize::{Found, Normalized};
use crate::report::{AnomalyClass, OpRef};

/// Why a known edge exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The head read `version`, which the tail wrote.
    Wr { version: u32 },
    /// Session order.
    So,
    /// Real time (with the clock-drift threshold).
    Rt,
    /// Inside a chain: the tail read `read`, and the head wrote `next`, the version right after it
    /// (Cobra §3.1, InferRWEdges).
    ChainRw { read: u32, next: u32 },
    /// The chain `first` starts with an initial version, so it precedes the chain `second`; `edge` is one of
    /// the edges that order implies.
    Initial { first: u32, second: u32, from_version: u32, to_version: u32, rw: bool },
    /// Pruning chose `side` of constraint `constraint` (decision number `decision`); this is its edge number
    /// `edge` (Cobra §3.3).
    Decided { decision: u32, side: Side, edge: u32 },
}

impl Origin {
    /// Explanations prefer simple edges: observed ones first, then inferred ones.
    pub(crate) fn priority(&self) -> u8 {
        match self {
            Origin::Wr { .. } => 0,
            Origin::So => 1,
            Origin::Rt => 2,
            Origin::ChainRw { .. } => 3,
            Origin::Initial { .. } => 4,
            Origin::Decided { .. } => 5,
        }
    }
}

/// One known edge. `round` is the pruning pass that added it (0: before pruning).
#[derive(Clone, Copy, Debug)]
pub(crate) struct KEdge {
    pub from: u32,
    pub to: u32,
    pub origin: Origin,
    pub round: u32,
}

/// The known graph.
#[derive(Clone, Debug, Default)]
pub(crate) struct KnownGraph {
    pub vertices: u32,
    pub edges: Vec<KEdge>,
    /// Each session's vertices in session order: paths of the graph, used as chain hints for reachability.
    pub sessions: Vec<Vec<u32>>,
    /// `place[v]`: the session (an index into `sessions`) and the position in it of vertex `v`.
    pub place: Vec<Option<(u32, u32)>>,
    /// `next[v]`: the version a read-modify-write put directly after version `v`.
    pub next: Vec<Option<u32>>,
    pub ww_pairs: u64,
}

impl KnownGraph {
    /// Adds an edge unless it is a self-loop of observation (a transaction reading its own write never
    /// reaches here, so a self-loop would only come from malformed input).
    pub(crate) fn push(&mut self, from: u32, to: u32, origin: Origin, round: u32) {
        self.edges.push(KEdge { from, to, origin, round });
    }
}

/// Builds the known graph. `detect_lost_updates` is off when combining writes is off, so that differential
/// runs exercise the encoding alone. Only the read-modify-writes of vertices `orders_rmw` accepts put their
/// version directly after the one they read. That holds at snapshot isolation and above (a writer in
/// between would be a lost update); at read committed it does not, so under `declared` such a transaction's
/// read-modify-writes form no ww pair, and two of them are no lost update.
pub(crate) fn create_known_graph_with(
    h: &History,
    norm: &Normalized,
    detect_lost_updates: bool,
    orders_rmw: &dyn Fn(u32) -> bool,
) -> (KnownGraph, Vec<Found>) {
    let mut g = KnownGraph { vertices: norm.txns.len() as u32, ..KnownGraph::default() };
    let mut anomalies = Vec::new();
    // wr edges, from every external read (a read-committed transaction may read a key twice).
    for (v, nt) in norm.txns.iter().enumerate() {
        let mut last = None;
        for &(_, _, ver) in &nt.ordered_reads {
            if let Some(w) = norm.versions[ver as usize].writer
                && w != v as u32
                && last != Some(ver)
            {
                g.push(w, v as u32, Origin::Wr { version: ver }, 0);
                last = Some(ver);
            }
        }
    }
    // Session order, over included transactions only (consecutive ones are joined).
    g.place = vec![None; norm.txns.len()];
    for path in crate::normalize::session_paths(h, norm) {
        for w in path.windows(2) {
            g.push(w[0], w[1], Origin::So, 0);
        }
        for (i, &v) in path.iter().enumerate() {
            g.place[v as usize] = Some((g.sessions.len() as u32, i as u32));
        }
        g.sessions.push(path);
    }
    // ww pairs from read-modify-writes.
    g.next = vec![None; norm.versions.len()];
    let mut rmw_of: Vec<Option<u32>> = vec![None; norm.versions.len()];
    // A transaction's writes sorted by key (one per key): finding each read's key among the writes one by
    // one was quadratic per transaction, a twentieth of a TPC-C round (a new order reads about thirty keys
    // and writes about twenty).
    let mut writes_by_key: Vec<(Key, u32)> = Vec::new();
    for (v, nt) in norm.txns.iter().enumerate().filter(|&(v, _)| orders_rmw(v as u32)) {
        writes_by_key.clear();
        writes_by_key.extend_from_slice(&nt.writes);
        writes_by_key.sort_unstable_by_key(|&(k, _)| k);
        for &(key, read) in &nt.reads {
            let Ok(i) = writes_by_key.binary_search_by_key(&key, |&(k, _)| k) else { continue };
            let wrote = writes_by_key[i].1;
            match rmw_of[read as usize] {
                Some(other) if detect_lost_updates => {
                    let (a, b) = (&h.transactions[norm.txns[other as usize].hist], &h.transactions[nt.hist]);
                    let kname = crate::normalize::key_name(h, key);
                    let shown = crate::normalize::show(norm.versions[read as usize].observed());
                    let op = |t: &history::Transaction, pred: &dyn Fn(&history::Op) -> bool| {
                        OpRef::new(t.id, t.ops.iter().position(pred).unwrap_or(0))
                    };
                    let is_read =
                        |o: &history::Op| matches!(o, history::Op::Read { key: k, .. } if *k == key);
                    let is_write =
                        |o: &history::Op| matches!(o, history::Op::Write { key: k, .. } if *k == key);
                    anomalies.push(Found {
                        class: AnomalyClass::LostUpdate,
                        summary: format!(
                            "{} and {} both read {kname}={shown} and then both wrote {kname}; one of the two \
                             updates is lost",
                            a.id, b.id
                        ),
                        ops: vec![op(a, &is_read), op(a, &is_write), op(b, &is_read), op(b, &is_write)],
                    });
                }
                Some(_) => {}
                None => {
                    rmw_of[read as usize] = Some(v as u32);
                    g.next[read as usize] = Some(wrote);
                    g.ww_pairs += 1;
                }
            }
        }
    }
    (g, anomalies)
}
