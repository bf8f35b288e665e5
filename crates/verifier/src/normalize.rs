//! Stage 1: normalisation and the anomalies that need no cycle (DESIGN.md §3; Cobra §2.2's assumptions).
//!
//! In: the raw history. Out: the *included* transactions (committed ones, plus indeterminate ones that some
//! included transaction read from), each with at most one external read and one visible write per key, and a
//! dense table of versions with their writers and readers. Cobra assumes each transaction reads and writes a
//! key at most once (§2.2); SQL transactions do not, so this stage discharges the assumption and reports what
//! breaks it. Every anomaly found here is a reject on its own, reported with the ops involved:
//! garbage reads, aborted reads (G1a), intermediate reads (G1b), duplicate write ids, future reads (a read
//! of the transaction's own later write), internal reads (a read after an own write that returns something
//! else), non-repeatable reads, and reads of two different initial versions of one key.

use crate::{FastMap, FastSet, Few};
use history::{History, Key, Observed, Op, Outcome, WriteId};

use crate::report::{AnomalyClass, OpRef, UnverifiableCause};

/// Which version a read or write names, before it is given a dense index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Label {
    /// A recorded write.
    Write(WriteId),
    /// A version from before recording began (Cobra's INIT); `Absent` is the initial "no row" version.
    Initial(Observed),
}

/// One version of one key.
#[derive(Clone, Debug)]
pub(crate) struct Version {
    pub key: Key,
    pub label: Label,
    /// The vertex that wrote it; `None` for initial versions (they precede every recorded write, so their
    /// writer never needs to be a vertex: it would have no incoming edge and lie on no cycle).
    pub writer: Option<u32>,
    /// The vertices whose external read of `key` returned this version.
    pub readers: Few,
}

impl Version {
    /// The version as the history names it.
    pub fn observed(&self) -> Observed {
        match self.label {
            Label::Write(w) => Observed::Version(w),
            Label::Initial(o) => o,
        }
    }
}

/// An included transaction after normalisation.
#[derive(Clone, Debug, Default)]
pub(crate) struct NTxn {
    /// Its index in `History::transactions`.
    pub hist: usize,
    /// Its external reads: at most one per key, as version indices.
    pub reads: Vec<(Key, u32)>,
    /// Its visible writes (the last write of each key), as version indices.
    pub writes: Vec<(Key, u32)>,
    /// Every external read that was resolved to a version, in program order: (op index, key, version).
    /// With repeatable reads required, one per key (as `reads`); without (read committed), a later read
    /// of a key that returned another version is here too.
    pub ordered_reads: Vec<(usize, Key, u32)>,
}

/// A read the verifier cannot judge, listed in the report instead of rejecting.
#[derive(Clone, Debug)]
pub(crate) struct Unverified {
    pub op: OpRef,
    pub cause: UnverifiableCause,
    pub why: String,
}

/// A non-cycle anomaly with the ops that show it.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub class: AnomalyClass,
    pub summary: String,
    pub ops: Vec<OpRef>,
}

/// The normalised history.
#[derive(Clone, Debug, Default)]
pub(crate) struct Normalized {
    /// Included transactions; a transaction's vertex is its index here.
    pub txns: Vec<NTxn>,
    pub versions: Vec<Version>,
    /// Indeterminate transactions nobody read from: dropped (history indices).
    pub dropped: Vec<usize>,
    pub unverified: Vec<Unverified>,
    pub anomalies: Vec<Found>,
    /// Each history index's vertex, if included.
    pub vertex_of: Vec<Option<u32>>,
    /// The vertices held to read committed in a polygraph that stands for `declared` as serializability's
    /// (see `pipeline::build_polygraph`): their reads give no anti-dependencies. Empty everywhere else.
    pub read_committed: Vec<bool>,
}

impl Normalized {
    /// Whether `v`'s reads give anti-dependencies (rw edges) in a polygraph of serializability's shape: all
    /// but those of a transaction held to read committed, which PL-2 never orders before a later writer of
    /// what it read (Adya's thesis §4.3: a transaction's own level decides which of its conflicts count).
    pub(crate) fn counts_anti_dependencies(&self, v: u32) -> bool {
        !self.read_committed.get(v as usize).copied().unwrap_or(false)
    }
}

/// What one transaction did so far to one key, as normalisation walks its ops.
#[derive(Clone, Copy, Default)]
struct SeenHere {
    /// Its latest write of the key, and where.
    own: Option<(WriteId, usize)>,
    /// Its first external read of the key (before any own write), and where.
    external: Option<(Observed, usize)>,
}

/// Where a write op sits.
#[derive(Clone, Copy, Debug)]
struct WriteSite {
    /// u32s, not usizes: a round's sites are read once per read, and smaller entries miss the cache
    /// less (a history index fits: the verifier numbers vertices in u32 too).
    txn: u32,
    op: u32,
    key: Key,
    /// Whether it is the transaction's last write of `key` (the only one others may see).
    visible: bool,
    /// Whether the writer aborted: kept here, where a read's resolution looks anyway, rather than in the
    /// writer's transaction, a cache miss of its own for every read.
    aborted: bool,
    /// The version it made, once versions are numbered: the one a read of its write id resolves to.
    version: Option<u32>,
}

impl WriteSite {
    /// The writer's index in the history.
    fn txn(&self) -> usize {
        self.txn as usize
    }

    /// The write's index in the writer's ops.
    fn op(&self) -> usize {
        self.op as usize
    }
}

/// The most anomalies of one stage kept in a report; the count beyond is still reported.
pub(crate) const MAX_ANOMALIES: usize = 100;

/// Runs stage 1, with non-repeatable reads an anomaly (every level but read committed).
pub(crate) fn normalize(h: &History) -> Normalized {
    normalize_with(h, &|_| true)
}

/// Fills `into` with each key `ops` write and the index of its last write there: the one write of the key
/// other transactions can see (the earlier ones are intermediate).
fn last_writes(ops: &[Op], into: &mut FastMap<Key, usize>) {
    into.clear();
    into.extend(
        ops.iter().enumerate().filter(|(_, op)| matches!(op, Op::Write { .. })).map(|(i, op)| (op.key(), i)),
    );
}

/// Runs stage 1. Where `repeatable` says no for a transaction (its index in the history), two external reads
/// of one key that return different versions are not an anomaly (read committed allows them); both are
/// resolved and kept in `ordered_reads`.
pub(crate) fn normalize_with(h: &History, repeatable: &dyn Fn(usize) -> bool) -> Normalized {
    let mut out = Normalized::default();
    let txns = &h.transactions;

    // Index every write, and find duplicate write ids. Two writes of one key in one transaction may share
    // an id (an `xmin` cannot tell them apart); that is one version, not a duplicate. The map holds each
    // id's index in `sites`, so the passes below that already know a write's site reach it without hashing
    // its id again.
    // Sized for every write at once: online, a round's history holds about a hundred thousand writes
    // (TPC-C), and growing to that by doubling rehashed and copied each table many times.
    let n_writes: usize =
        txns.iter().map(|t| t.ops.iter().filter(|op| matches!(op, Op::Write { .. })).count()).sum();
    let mut site_of: FastMap<WriteId, u32> = FastMap::with_capacity_and_hasher(n_writes, Default::default());
    let mut sites: Vec<WriteSite> = Vec::with_capacity(n_writes);
    let mut duplicates: Vec<(WriteId, usize, usize, usize, usize)> = Vec::new();
    // Every visible write, in history order (transaction, then op), with its site (`None` when another
    // transaction wrote the id first): the versions below, without finding each transaction's last writes
    // a second time.
    let mut visible_writes: Vec<(usize, usize, Option<u32>)> = Vec::with_capacity(n_writes);
    // One map for every transaction's last writes, cleared between them: online, this runs every round
    // over the whole residual history, and a map per transaction was a fifth of normalisation's time.
    let mut last_write: FastMap<Key, usize> = FastMap::default();
    for (ti, t) in txns.iter().enumerate() {
        last_writes(&t.ops, &mut last_write);
        for (oi, op) in t.ops.iter().enumerate() {
            let Op::Write { key, write, .. } = *op else { continue };
            let visible = last_write.get(&key) == Some(&oi);
            let site = match site_of.get(&write).copied() {
                Some(s) if sites[s as usize].txn() == ti && sites[s as usize].key == key => {
                    let site = &mut sites[s as usize];
                    site.op = oi as u32;
                    site.visible |= visible;
                    Some(s)
                }
                Some(s) => {
                    let first = &sites[s as usize];
                    duplicates.push((write, first.txn(), first.op(), ti, oi));
                    None
                }
                None => {
                    let s = sites.len() as u32;
                    site_of.insert(write, s);
                    let aborted = t.outcome == Outcome::Aborted;
                    sites.push(WriteSite {
                        txn: ti as u32,
                        op: oi as u32,
                        key,
                        visible,
                        aborted,
                        version: None,
                    });
                    Some(s)
                }
            };
            if visible {
                visible_writes.push((ti, oi, site));
            }
        }
    }
    let site = |w: &WriteId| site_of.get(w).map(|&s| &sites[s as usize]);

    // A read of a write id that is written more than once cannot be resolved; the duplicate is reported
    // (below) and such reads are left unjudged.
    let ambiguous: FastSet<WriteId> = duplicates.iter().map(|d| d.0).collect();

    // Included: committed transactions, and indeterminate ones an included transaction read from (a read
    // from one proves it committed). The rest of the indeterminate ones are dropped (DESIGN.md §3). Only
    // the writes of indeterminate transactions can include one, so the reads are searched only when some
    // transaction is indeterminate, and against those writes alone (most rounds have none).
    let mut included: Vec<bool> = txns.iter().map(|t| t.outcome == Outcome::Committed).collect();
    let undecided: FastSet<WriteId> = txns
        .iter()
        .enumerate()
        .filter(|(_, t)| t.outcome == Outcome::Indeterminate)
        .flat_map(|(ti, t)| {
            t.ops.iter().filter_map(move |op| match *op {
                Op::Write { write, .. } => Some((ti, write)),
                _ => None,
            })
        })
        .filter(|&(ti, write)| site(&write).is_some_and(|s| s.txn() == ti))
        .map(|(_, write)| write)
        .collect();
    let mut work: Vec<usize> =
        if undecided.is_empty() { Vec::new() } else { (0..txns.len()).filter(|&i| included[i]).collect() };
    while let Some(ti) = work.pop() {
        for op in &txns[ti].ops {
            if let Op::Read { observed: Observed::Version(w), .. } = *op
                && undecided.contains(&w)
                && !ambiguous.contains(&w)
                && let Some(site) = site(&w)
                && site.txn() != ti
                && !included[site.txn()]
            {
                included[site.txn()] = true;
                work.push(site.txn());
            }
        }
    }
    out.vertex_of = vec![None; txns.len()];
    for (ti, t) in txns.iter().enumerate() {
        if included[ti] {
            out.vertex_of[ti] = Some(out.txns.len() as u32);
            out.txns.push(NTxn { hist: ti, ..NTxn::default() });
        } else if t.outcome == Outcome::Indeterminate {
            out.dropped.push(ti);
        }
    }

    // A dropped indeterminate transaction never causes a reject on its own, so its duplicates do not count.
    for (write, t1, o1, t2, o2) in duplicates {
        let counts = |t: usize| included[t] || txns[t].outcome == Outcome::Aborted;
        if counts(t1) && counts(t2) {
            out.anomalies.push(Found {
                class: AnomalyClass::DuplicateWrite,
                summary: format!(
                    "write id {write} is written twice: by {} and by {}",
                    txns[t1].id, txns[t2].id
                ),
                ops: vec![OpRef::new(txns[t1].id, o1), OpRef::new(txns[t2].id, o2)],
            });
        }
    }

    // Versions: the last write of each key by each included transaction (whatever its id, so that a
    // duplicated id never hides a write), then initial versions as reads find them.
    // A transaction's visible writes are adjacent, so each gets its list made at its size at once.
    out.versions.reserve(visible_writes.len());
    for one_txn in visible_writes.chunk_by(|a, b| a.0 == b.0) {
        let Some(vertex) = out.vertex_of[one_txn[0].0] else { continue };
        let mut writes = Vec::with_capacity(one_txn.len());
        for &(ti, oi, site) in one_txn {
            let Op::Write { key, write, .. } = txns[ti].ops[oi] else { continue };
            let idx = out.versions.len() as u32;
            out.versions.push(Version {
                key,
                label: Label::Write(write),
                writer: Some(vertex),
                readers: Few::new(),
            });
            if let Some(s) = site
                && !ambiguous.contains(&write)
            {
                sites[s as usize].version = Some(idx);
            }
            writes.push((key, idx));
        }
        out.txns[vertex as usize].writes = writes;
    }
    let gap_start = h.gaps.iter().map(|g| g.after_txns).min();
    let mut initial_of: FastMap<(Key, Observed), u32> = FastMap::default();
    // Per key, in the transaction at hand: the own write seen so far, and the first external read. One map
    // for both, so that a read looks its key up once (three lookups were a third of this stage's hashing).
    let mut seen: FastMap<Key, SeenHere> = FastMap::default();
    // A transaction's reads are gathered here and then copied out at their size: grown in place from
    // empty, each took several reallocations (TPC-C's transactions read about thirty keys).
    let mut reads: Vec<(Key, u32)> = Vec::new();
    let mut ordered: Vec<(usize, Key, u32)> = Vec::new();
    for vertex in 0..out.txns.len() {
        let ti = out.txns[vertex].hist;
        let t = &txns[ti];
        let repeatable = repeatable(ti);
        let after_gap = gap_start.is_some_and(|g| ti as u64 >= g);
        seen.clear();
        reads.clear();
        ordered.clear();
        for (oi, op) in t.ops.iter().enumerate() {
            match *op {
                Op::Write { key, write, .. } => {
                    seen.entry(key).or_default().own = Some((write, oi));
                }
                Op::Read { key, observed, .. } => {
                    let here = OpRef::new(t.id, oi);
                    // An unknown owner is never evidence (DESIGN.md §3): the read is counted, and takes no
                    // part in any check below, not even the repeatable-read ones (its writer may be this
                    // very transaction, through a function or trigger).
                    if let Observed::Unrecorded(tag) = observed {
                        out.unverified.push(Unverified {
                            op: here,
                            cause: UnverifiableCause::UnrecordedWriter,
                            why: format!(
                                "read of {}={}, a version no recorded transaction wrote",
                                key_name(h, key),
                                show(Observed::Unrecorded(tag))
                            ),
                        });
                        continue;
                    }
                    // Under `[record] exclusive`, a version no recorded transaction wrote (replay already
                    // resolved those some transaction did write) is evidence of its own: the database, or a
                    // writer behind the proxy's back, made it. After a log gap its writer may be lost.
                    if let Observed::Foreign(tag) = observed {
                        if after_gap {
                            out.unverified.push(Unverified {
                                op: here,
                                cause: UnverifiableCause::LogGap,
                                why: format!(
                                    "read of foreign#{tag} after a log gap: its writer may have been lost"
                                ),
                            });
                        } else {
                            out.anomalies.push(Found {
                                class: AnomalyClass::UnownedVersion,
                                summary: format!(
                                    "{} read {}={}, a version no recorded transaction wrote, though every writer \
                                     was to go through the proxy ([record] exclusive)",
                                    t.id,
                                    key_name(h, key),
                                    show(observed)
                                ),
                                ops: vec![here],
                            });
                        }
                        continue;
                    }
                    let seen = seen.entry(key).or_default();
                    if let Some((w, wi)) = seen.own {
                        if observed != Observed::Version(w) {
                            out.anomalies.push(Found {
                                class: AnomalyClass::InternalRead,
                                summary: format!(
                                    "{} wrote {}={} and then read {}={}, not its own write",
                                    t.id,
                                    key_name(h, key),
                                    w,
                                    key_name(h, key),
                                    show(observed)
                                ),
                                ops: vec![OpRef::new(t.id, wi), here],
                            });
                        }
                        continue;
                    }
                    let first_read = match seen.external {
                        None => true,
                        Some((first, _)) if first == observed && repeatable => continue,
                        // Read committed: every read counts, even one that returns what an earlier read of
                        // the key returned: writes seen in between may make it stale.
                        Some(_) if !repeatable => false,
                        Some((first, fi)) => {
                            let mut ops = vec![OpRef::new(t.id, fi), here];
                            // The write of the second version, where another recorded transaction made it:
                            // a replay commits it between the two reads.
                            if let Observed::Version(w) = observed
                                && !ambiguous.contains(&w)
                                && let Some(s) = site_of.get(&w).map(|&s| &sites[s as usize])
                                && s.txn() != ti
                                && s.key == key
                            {
                                ops.push(OpRef::new(txns[s.txn()].id, s.op()));
                            }
                            out.anomalies.push(Found {
                                class: AnomalyClass::NonRepeatableRead,
                                summary: format!(
                                    "{} read {} twice and got {} and then {}",
                                    t.id,
                                    key_name(h, key),
                                    show(first),
                                    show(observed)
                                ),
                                ops,
                            });
                            continue;
                        }
                    };
                    if first_read {
                        seen.external = Some((observed, oi));
                    }
                    let version = match observed {
                        Observed::Version(w) if ambiguous.contains(&w) => {
                            out.unverified.push(Unverified {
                                op: here,
                                cause: UnverifiableCause::DuplicateWriteId,
                                why: format!("read of {w}, a write id written more than once"),
                            });
                            continue;
                        }
                        Observed::Version(w) => match site_of.get(&w).map(|&s| &sites[s as usize]) {
                            None if after_gap => {
                                out.unverified.push(Unverified {
                                    op: here,
                                    cause: UnverifiableCause::LogGap,
                                    why: format!(
                                        "read of {} after a log gap: its writer may have been lost",
                                        w
                                    ),
                                });
                                continue;
                            }
                            None => {
                                out.anomalies.push(Found {
                                    class: AnomalyClass::GarbageRead,
                                    summary: format!(
                                        "{} read {}={}, a write id no transaction wrote",
                                        t.id,
                                        key_name(h, key),
                                        w
                                    ),
                                    ops: vec![here],
                                });
                                continue;
                            }
                            Some(site) if site.key != key => {
                                out.anomalies.push(Found {
                                    class: AnomalyClass::GarbageRead,
                                    summary: format!(
                                        "{} read {}={}, but {} wrote {} to {}, a different key",
                                        t.id,
                                        key_name(h, key),
                                        w,
                                        txns[site.txn()].id,
                                        w,
                                        key_name(h, site.key)
                                    ),
                                    ops: vec![here, OpRef::new(txns[site.txn()].id, site.op())],
                                });
                                continue;
                            }
                            Some(site) if site.txn() == ti => {
                                out.anomalies.push(Found {
                                    class: AnomalyClass::FutureRead,
                                    summary: format!(
                                        "{} read {}={} before writing that version itself",
                                        t.id,
                                        key_name(h, key),
                                        w
                                    ),
                                    ops: vec![here, OpRef::new(t.id, site.op())],
                                });
                                continue;
                            }
                            Some(site) if site.aborted => {
                                out.anomalies.push(Found {
                                    class: AnomalyClass::G1a,
                                    summary: format!(
                                        "{} read {}={}, written by {}, which aborted",
                                        t.id,
                                        key_name(h, key),
                                        w,
                                        txns[site.txn()].id
                                    ),
                                    ops: vec![OpRef::new(txns[site.txn()].id, site.op()), here],
                                });
                                continue;
                            }
                            Some(site) if !site.visible => {
                                out.anomalies.push(Found {
                                    class: AnomalyClass::G1b,
                                    summary: format!(
                                        "{} read {}={}, an intermediate write of {}, which later wrote {} again",
                                        t.id,
                                        key_name(h, key),
                                        w,
                                        txns[site.txn()].id,
                                        key_name(h, key)
                                    ),
                                    ops: vec![OpRef::new(txns[site.txn()].id, site.op()), here],
                                });
                                continue;
                            }
                            Some(site) => match site.version {
                                Some(v) => v,
                                // Unreachable in practice: every visible write of an included
                                // transaction has a version. Treat it as unverifiable, not a panic.
                                None => {
                                    out.unverified.push(Unverified {
                                        op: here,
                                        cause: UnverifiableCause::WriterNotIncluded,
                                        why: format!("read of {w}, whose writer is not included"),
                                    });
                                    continue;
                                }
                            },
                        },
                        initial => *initial_of.entry((key, initial)).or_insert_with(|| {
                            out.versions.push(Version {
                                key,
                                label: Label::Initial(initial),
                                writer: None,
                                readers: Few::new(),
                            });
                            out.versions.len() as u32 - 1
                        }),
                    };
                    if first_read {
                        reads.push((key, version));
                    }
                    ordered.push((oi, key, version));
                }
            }
        }
        for &(_, _, v) in &ordered {
            let readers = &mut out.versions[v as usize].readers;
            if readers.last() != Some(&(vertex as u32)) {
                readers.push(vertex as u32);
            }
        }
        out.txns[vertex].reads = reads.clone();
        out.txns[vertex].ordered_reads = ordered.clone();
    }

    // Initial versions all precede every recorded write, so two different initial versions of one key
    // cannot both be read: whichever came first was overwritten before recording began.
    let mut first_initial: FastMap<Key, u32> = FastMap::default();
    for (i, v) in out.versions.iter().enumerate() {
        if !matches!(v.label, Label::Initial(_)) {
            continue;
        }
        match first_initial.get(&v.key) {
            None => {
                first_initial.insert(v.key, i as u32);
            }
            Some(&other) => {
                let o = &out.versions[other as usize];
                let op_of = |ver: &Version| {
                    let r = ver.readers[0] as usize;
                    let t = &txns[out.txns[r].hist];
                    let oi = t
                        .ops
                        .iter()
                        .position(|op| {
                            matches!(*op, Op::Read { key, observed, .. } if key == ver.key && observed == ver.observed())
                        })
                        .unwrap_or(0);
                    OpRef::new(t.id, oi)
                };
                out.anomalies.push(Found {
                    class: AnomalyClass::StaleRead,
                    summary: format!(
                        "{} was read both as {} and as {}: two versions from before recording began, so one \
                         of the reads returned a version that was already overwritten",
                        key_name(h, v.key),
                        show(o.observed()),
                        show(v.observed())
                    ),
                    ops: vec![op_of(o), op_of(v)],
                });
            }
        }
    }
    out
}

/// Each session's included vertices in session order (by `seq`), sessions in id order: session order
/// over the transactions the check includes.
pub(crate) fn session_paths(h: &History, norm: &Normalized) -> Vec<Vec<u32>> {
    let mut sessions: FastMap<u64, Vec<(u64, u32)>> = FastMap::default();
    for (v, nt) in norm.txns.iter().enumerate() {
        let t = &h.transactions[nt.hist];
        sessions.entry(t.session.0).or_default().push((t.seq, v as u32));
    }
    let mut sessions: Vec<(u64, Vec<(u64, u32)>)> = sessions.into_iter().collect();
    sessions.sort_unstable_by_key(|(s, _)| *s);
    sessions
        .into_iter()
        .map(|(_, mut members)| {
            members.sort_unstable();
            members.into_iter().map(|(_, v)| v).collect()
        })
        .collect()
}

/// A key's name for messages.
pub(crate) fn key_name(h: &History, key: Key) -> String {
    h.keys.name(key).map_or_else(|| format!("key#{}", key.0), |n| n.to_string())
}

/// An observed version for messages: `w7`, `init`, `init#3` or `absent`.
pub(crate) fn show(o: Observed) -> String {
    match o {
        Observed::Version(w) => w.to_string(),
        Observed::PreHistory(0) => "init".to_owned(),
        Observed::PreHistory(tag) => format!("init#{tag}"),
        Observed::Absent => "absent".to_owned(),
        Observed::Unrecorded(tag) => format!("unrecorded#{tag}"),
        Observed::Foreign(tag) => format!("foreign#{tag}"),
    }
}
