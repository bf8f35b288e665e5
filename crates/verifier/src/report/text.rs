//! The report as text for a person: the verdict line, each anomaly with its cycle edge by edge, the
//! version-order facts, and the transactions involved.

use std::fmt;

use super::*;

impl Report {
    /// The one-line verdict.
    pub fn verdict_line(&self) -> String {
        let level = match self.level {
            Level::Serializable => "serializable",
            Level::StrictSerializable => "strict serializable",
            Level::SnapshotIsolation => "snapshot isolated",
            Level::Causal => "causally consistent",
            Level::ReadAtomic => "read atomic",
            Level::ReadCommitted => "read committed",
            Level::Declared => "isolated at the levels its transactions asked for",
        };
        match (self.verdict, self.anomalies.first()) {
            (Verdict::Accept, _) => match &self.real_time {
                // Never claim real-time order for transactions it was not checked on.
                Some(rt) if rt.without_timestamps > 0 && rt.without_timestamps >= self.counts.vertices => {
                    format!(
                        "ACCEPT: the history is serializable ({} transactions checked); real-time order was not \
                     checked: none of them has timestamps, so strict serializability is not established",
                        self.counts.vertices
                    )
                }
                Some(rt) if rt.without_timestamps > 0 => format!(
                    "ACCEPT: the history is serializable ({} transactions checked) and respects real time among \
                     those with timestamps; real-time order was not checked for the {} without timestamps",
                    self.counts.vertices, rt.without_timestamps
                ),
                _ => match &self.rounds {
                    Some(r) => format!(
                        "ACCEPT: the history is {level} ({} transactions checked in {} rounds of {})",
                        self.counts.vertices, r.rounds, r.round_size
                    ),
                    None => {
                        format!(
                            "ACCEPT: the history is {level} ({} transactions checked)",
                            self.counts.vertices
                        )
                    }
                },
            },
            (Verdict::Reject, Some(a)) => {
                let mut line = format!("REJECT: not {level}: {}: {}", a.class.name(), a.summary);
                if a.uses_real_time
                    && let Some(rt) = &self.real_time
                {
                    line.push_str(&format!(" (depends on real-time order, {})", rt.threshold()));
                }
                line
            }
            (Verdict::Reject, None) => format!("REJECT: not {level}"),
        }
    }

    /// The report as text for a person: the verdict line, then each anomaly with its cycle, edge by edge,
    /// then the transactions involved.
    /// Long transaction and session ids are shortened to `T1`, `S1`, … with a legend at the end.
    /// Where values were recorded, versions show as the rows behind them instead of their ids.
    pub fn render_text(&self) -> String {
        super::labels::shorten(self, &super::values::with_values(self, &self.to_string()))
    }
}

fn write_edge(f: &mut fmt::Formatter<'_>, indent: &str, e: &CycleEdge) -> fmt::Result {
    let key = e.key.as_deref().map(|k| format!("({k})")).unwrap_or_default();
    let hyp = if e.hypothetical { " [if the opposite order held]" } else { "" };
    writeln!(f, "{indent}{} -{}{key}-> {}{hyp}: {}", e.from, e.kind.name(), e.to, e.reason)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.verdict_line())?;
        if let Some(d) = &self.declared {
            writeln!(
                f,
                "Declared levels: {} serializable, {} repeatable read (checked as snapshot isolation), {} read \
                 committed (checked as Adya's PL-2), {} read uncommitted (PostgreSQL runs it as read committed; \
                 checked as such), {} without a recorded level (checked as serializable), {} fences (checked \
                 as serializable: their one read locks its row).",
                d.serializable,
                d.repeatable_read,
                d.read_committed,
                d.read_uncommitted,
                d.unrecorded,
                d.fences
            )?;
        }
        writeln!(f)?;
        for (i, a) in self.anomalies.iter().enumerate() {
            writeln!(f, "Anomaly {}: {}", i + 1, a.class.name())?;
            writeln!(f, "  {}", a.summary)?;
            if !a.cycle.is_empty() {
                let txns: Vec<String> = a.cycle.iter().map(|e| e.from.to_string()).collect();
                writeln!(f, "  Cycle: {} -> {}", txns.join(" -> "), a.cycle[0].from)?;
                for e in &a.cycle {
                    write_edge(f, "    ", e)?;
                }
            }
            for op in &a.ops {
                if let Some(t) = self.transactions.iter().find(|t| t.id == op.txn)
                    && let Some(o) = t.ops.get(op.op)
                {
                    writeln!(f, "  evidence: {} op {}: {}", op.txn, op.op, o.text)?;
                }
            }
            if a.uses_real_time
                && let Some(rt) = &self.real_time
            {
                writeln!(
                    f,
                    "  This cycle uses real-time order, inferred with a {}; if the collectors' clocks differ by \
                     more, the reject may be false.",
                    rt.threshold()
                )?;
                // Across proxies the two timestamps come from two clocks: say which edges rest on that.
                let collector = |id| self.transactions.iter().find(|t| t.id == id).map(|t| t.collector.0);
                for e in a.cycle.iter().filter(|e| e.kind == EdgeKind::Rt) {
                    if let (Some(from), Some(to)) = (collector(e.from), collector(e.to))
                        && from != to
                    {
                        writeln!(
                            f,
                            "  {} -rt-> {} rests on the clocks of two collectors ({from} and {to}).",
                            e.from, e.to
                        )?;
                    }
                }
            }
            writeln!(f)?;
        }
        let cited: Vec<usize> = (0..self.derivations.len()).collect();
        if !cited.is_empty() {
            writeln!(f, "Version-order facts the cycles rest on:")?;
            for (i, d) in self.derivations.iter().enumerate() {
                let show = |vs: &[Observed]| {
                    vs.iter().map(|v| crate::normalize::show(*v)).collect::<Vec<_>>().join(", ")
                };
                let why = match &d.basis {
                    Basis::Rmw => "a read-modify-write read the first and wrote the second".to_owned(),
                    Basis::InitialFirst => {
                        "versions from before recording precede every recorded write".to_owned()
                    }
                    Basis::OtherOrderCycle { .. } => "the opposite order closes this cycle:".to_owned(),
                    Basis::Solver => {
                        "chosen in the solver's refutation (every other choice also fails)".to_owned()
                    }
                    Basis::Omitted => "derived by pruning (proof omitted for size)".to_owned(),
                    Basis::Seen { reader, read, how } => {
                        let how = match how {
                            SeenHow::EarlierRead { op } => format!("its earlier op {op} read a write of it"),
                            SeenHow::Read { op } => format!("its op {op} read a write of it"),
                            SeenHow::Session => "it follows that writer in its session".to_owned(),
                            SeenHow::HappensBefore { path } => {
                                let p: Vec<String> = path.iter().map(|t| t.to_string()).collect();
                                format!("that writer happens before it ({})", p.join(" -> "))
                            }
                        };
                        format!("{reader} (op {read}) read the second after it saw the first's writer: {how}")
                    }
                };
                writeln!(
                    f,
                    "  [{i}] {}: [{}] before [{}], because {why}",
                    d.key,
                    show(&d.before),
                    show(&d.after)
                )?;
                if let Basis::OtherOrderCycle { cycle } = &d.basis {
                    for e in cycle {
                        write_edge(f, "        ", e)?;
                    }
                }
            }
            writeln!(f)?;
        }
        if !self.transactions.is_empty() {
            writeln!(f, "Transactions involved:")?;
            for t in &self.transactions {
                let ts = match (t.start_ns, t.commit_ns) {
                    (Some(s), Some(c)) => format!(
                        ", started {}, committed {:.3} ms later",
                        super::labels::wall_clock(s),
                        c.saturating_sub(s) as f64 / 1e6
                    ),
                    (Some(s), None) => format!(", started {}", super::labels::wall_clock(s)),
                    _ => String::new(),
                };
                let at = match t.collector.0 {
                    0 => String::new(),
                    c => format!(", collector {c}"),
                };
                writeln!(f, "  {} (session {}, #{}, {:?}{ts}{at})", t.id, t.session, t.seq, t.outcome)?;
                for o in &t.ops {
                    write!(f, "    {}: {}", o.index, o.text)?;
                    // A version with an id of its own shows its row in the id's place (`render_text`);
                    // another (`init`, `absent`, shared by every key) beside it.
                    if let (Some(row), false) =
                        (&o.row, o.version.as_deref().is_some_and(super::values::is_version_id))
                    {
                        write!(f, " ⟨{row}⟩")?;
                    }
                    match (&o.sql, &o.params) {
                        (Some(sql), Some(params)) => writeln!(f, "    -- {sql}  [{params}]")?,
                        (Some(sql), None) => writeln!(f, "    -- {sql}")?,
                        _ => writeln!(f)?,
                    }
                }
            }
            writeln!(f)?;
        }
        let unverifiable = self.unverifiable_total();
        if unverifiable > 0 {
            let by_cause: Vec<String> =
                self.unverifiable_by_cause().iter().map(|(c, n)| format!("{}: {n}", c.as_str())).collect();
            writeln!(
                f,
                "Unverifiable: {unverifiable} read(s), never counted as evidence ({}):",
                by_cause.join(", ")
            )?;
            for u in self.unverifiable.iter().take(20) {
                writeln!(f, "  {} op {}: {}", u.op.txn, u.op.op, u.reason)?;
            }
        }
        if !self.not_checked.is_empty() {
            let total: u64 = self.not_checked.iter().map(|n| n.statements).sum();
            writeln!(
                f,
                "Not checked: {total} statement(s) were recorded in part or not at all; by kind, what was \
                 and was not verified:"
            )?;
            for n in &self.not_checked {
                write!(f, "  {}: {} in {} transaction(s)", n.kind, n.statements, n.transactions)?;
                match &n.example {
                    Some(sql) => writeln!(f, ", e.g. {}", truncate(sql, 100))?,
                    None => writeln!(f)?,
                }
                match n.coverage() {
                    (Some(checked), unchecked) => {
                        writeln!(f, "    checked: {checked}")?;
                        writeln!(f, "    not checked: {unchecked}")?;
                    }
                    (None, unchecked) => writeln!(f, "    {unchecked}")?,
                }
            }
        }
        if !self.dropped_indeterminate.is_empty() {
            writeln!(
                f,
                "Dropped {} indeterminate transaction(s) that nobody read from.",
                self.dropped_indeterminate.len()
            )?;
        }
        let c = &self.counts;
        if let Some(r) = &self.rounds {
            // The stages' sizes and times were per round, and no round's are summed into the report: printing
            // them would claim a polygraph of no constraints, built in no time.
            return writeln!(
                f,
                "Checked {} transactions in {} rounds ({} committed, fences left out); garbage collection \
                 deleted {}, at most {} live after a round. Chains, constraints and timings are per round, not \
                 summed here.",
                c.transactions, r.rounds, c.committed, r.collected, r.max_live
            );
        }
        writeln!(
            f,
            "Checked {} transactions ({} committed, {} aborted, {} indeterminate included, {} dropped); \
             {} chains ({} pairs of unread blind writes need no constraint); constraints {} -> {} after {} \
             pruning pass(es).",
            c.transactions,
            c.committed,
            c.aborted,
            c.indeterminate_included,
            c.indeterminate_dropped,
            c.chains,
            c.unread_pairs,
            c.constraints_before_prune,
            c.constraints_after_prune,
            c.prune_iterations
        )?;
        if let Some(rt) = &self.real_time {
            writeln!(f, "Real-time edges: {} ({}).", rt.edges, rt.threshold())?;
        }
        let t = &self.timings;
        writeln!(
            f,
            "Time: construct {:.1} ms, prune {:.1} ms, solve {:.1} ms, report {:.1} ms.",
            t.construct_ms, t.prune_ms, t.solve_ms, t.report_ms
        )
    }
}

/// The first `max` characters of `text` on one line, with an ellipsis if cut.
fn truncate(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    }
}
