//! A reject report's cycles as a Graphviz graph (`krait report show ID --format dot`, `krait verify --dot
//! FILE`): one cluster per anomaly, a node per transaction, an edge per dependency labelled with its kind and
//! key (`rw(x)`), and the edge's reason as its tooltip.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::Report;

/// Quotes `s` as a Graphviz string.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"))
}

impl Report {
    /// The anomalies' cycles as a Graphviz `digraph` (an accept, or anomalies without cycles, give a graph
    /// with their transactions and no edges). Transactions are labelled `T1`, `T2`, … in the order the cycles
    /// name them, with the real id in the tooltip.
    pub fn to_dot(&self) -> String {
        let mut out = String::from(
            "digraph krait_report {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n",
        );
        let _ = writeln!(out, "  label={};", quoted(&self.verdict_line()));
        let mut labels: HashMap<u64, String> = HashMap::new();
        let mut label = |id: u64| {
            let n = labels.len() + 1;
            labels.entry(id).or_insert_with(|| format!("T{n}")).clone()
        };
        for (i, a) in self.anomalies.iter().enumerate() {
            let _ = writeln!(out, "  subgraph cluster_{i} {{");
            let _ = writeln!(out, "    label={};", quoted(&format!("{}: {}", a.class.name(), a.summary)));
            let mut txns: Vec<u64> = a.cycle.iter().flat_map(|e| [e.from.0, e.to.0]).collect();
            txns.extend(a.ops.iter().map(|o| o.txn.0));
            let mut seen = Vec::new();
            for id in txns {
                if !seen.contains(&id) {
                    seen.push(id);
                    let l = label(id);
                    let _ = writeln!(
                        out,
                        "    {} [label={}, tooltip={}];",
                        quoted(&format!("{i}:{l}")),
                        quoted(&l),
                        quoted(&format!("T{id}"))
                    );
                }
            }
            for e in &a.cycle {
                let key = e.key.as_deref().map(|k| format!("({k})")).unwrap_or_default();
                let (from, to) = (label(e.from.0), label(e.to.0));
                let _ = writeln!(
                    out,
                    "    {} -> {} [label={}, tooltip={}];",
                    quoted(&format!("{i}:{from}")),
                    quoted(&format!("{i}:{to}")),
                    quoted(&format!("{}{key}", e.kind.name())),
                    quoted(&e.reason)
                );
            }
            out.push_str("  }\n");
        }
        out.push_str("}\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use history::HistoryBuilder;

    use crate::{Options, verify};

    #[test]
    fn a_write_skew_is_two_nodes_and_two_labelled_edges() {
        let h = HistoryBuilder::new()
            .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
            .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
            .build();
        let dot = verify(&h, &Options::default()).unwrap().to_dot();
        assert!(dot.starts_with("digraph krait_report {") && dot.trim_end().ends_with('}'), "{dot}");
        assert_eq!(dot.matches(" -> ").count(), 2, "{dot}");
        assert!(dot.contains("label=\"rw(x)\"") && dot.contains("label=\"rw(y)\""), "{dot}");
        assert!(dot.contains("\"0:T1\" [label=\"T1\"") && dot.contains("\"0:T2\" [label=\"T2\""), "{dot}");
        assert!(dot.contains("write skew"), "{dot}");
    }
}
