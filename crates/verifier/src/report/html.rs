//! The report as one self-contained HTML page (`krait report show ID --format html`, and the admin server's
//! `/reports/ID`): the verdict, a one-sentence summary, each anomaly's cycle drawn as inline SVG
//! ([`super::svg`]) with the prose for each edge under it, the transactions with their statements, and the
//! whole text report at the end.
//!
//! The page loads nothing: no script, no stylesheet, no font, no image from anywhere, and its
//! Content-Security-Policy forbids them, so it can be mailed, archived, or opened from a disk without a
//! network. A report quotes recorded SQL, which a client wrote, so every piece of report text is escaped
//! with [`escape`] before it goes in; the policy is a second wall should an escape ever be missed.

use std::fmt::Write as _;

use super::labels::{Labels, wall_clock};
use super::svg::{anomaly_svg, colour};
use super::{Anomaly, EdgeKind, Report, Verdict};
pub use history::html::escape;

/// The page's Content-Security-Policy: inline styles only; no scripts, connections, fonts or images.
pub const REPORT_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'";

/// The page's styles, inline so that it needs nothing else.
const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;\
color:#222;line-height:1.45}h1{font-size:1.35em}h1.reject{color:#a4161a}h1.accept{color:#1b7f3b}\
code,pre,td.op,td.sql{font-family:ui-monospace,monospace;font-size:.92em}\
section.anomaly{border-top:1px solid #ccc;margin-top:1.5em}svg.cycle{display:block;max-width:100%;height:auto}\
.txn-label{font:bold 14px ui-monospace,monospace}.edge-label{font:13px ui-monospace,monospace;\
paint-order:stroke;stroke:#fff;stroke-width:4px}table{border-collapse:collapse;margin:.3em 0 1em}\
td,th{border:1px solid #ddd;padding:.2em .5em;text-align:left;vertical-align:top}td.sql{white-space:pre-wrap}\
.legend span{margin-right:1.2em;font-family:ui-monospace,monospace}pre{white-space:pre-wrap;\
background:#f6f6f6;padding:1em}";

impl Report {
    /// One sentence on what the report found, for the top of the HTML page.
    pub fn summary_sentence(&self) -> String {
        match self.verdict {
            Verdict::Accept => format!(
                "A serial order of the {} transactions checked explains every read, so there is no cycle to draw.",
                self.counts.vertices
            ),
            Verdict::Reject => {
                let mut classes: Vec<&str> = Vec::new();
                for a in &self.anomalies {
                    if !classes.contains(&a.class.name()) {
                        classes.push(a.class.name());
                    }
                }
                let found = self.anomalies.len() as u64 + self.anomalies_omitted;
                format!(
                    "{found} anomal{} ({}) among the {} transactions checked: each picture below is a cycle of \
                     transactions that would each have to come before the next in any serial order, and the \
                     list under it says, edge by edge, why.",
                    if found == 1 { "y" } else { "ies" },
                    classes.join(", "),
                    self.counts.vertices
                )
            }
        }
    }

    /// The report as one self-contained HTML page (see the module's documentation). Transactions carry the
    /// short labels of the text report (`T1`, `T2`, … when the real ids are long), with a legend.
    pub fn to_html(&self) -> String {
        let labels = Labels::of(self);
        let verdict = labels.rewrite(&self.verdict_line());
        let mut out = String::with_capacity(16 * 1024);
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta http-equiv=\"Content-Security-Policy\" content=\"{REPORT_CSP}\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>Krait report: {}</title><style>{STYLE}</style></head><body>\n",
            escape(&verdict)
        );
        let class = if self.is_accept() { "accept" } else { "reject" };
        let _ = writeln!(out, "<h1 class=\"verdict {class}\">{}</h1>", escape(&verdict));
        let _ =
            writeln!(out, "<p class=\"summary\">{}</p>", escape(&labels.rewrite(&self.summary_sentence())));
        if self.anomalies.iter().any(|a| !a.cycle.is_empty()) {
            out.push_str("<p class=\"legend\">");
            for kind in [EdgeKind::Wr, EdgeKind::Ww, EdgeKind::Rw, EdgeKind::So, EdgeKind::Rt] {
                let _ = write!(
                    out,
                    "<span style=\"color:{}\">{}</span>",
                    colour(kind),
                    escape(&format!("{}: {}", kind.name(), kind_meaning(kind)))
                );
            }
            out.push_str("</p>\n");
        }
        for (i, a) in self.anomalies.iter().enumerate() {
            write_anomaly(&mut out, self, a, i, &labels);
        }
        if self.anomalies_omitted > 0 {
            let _ =
                writeln!(out, "<p>{} more anomalies were found and left out.</p>", self.anomalies_omitted);
        }
        write_transactions(&mut out, self, &labels);
        let _ = writeln!(
            out,
            "<details><summary>The report as text</summary><pre>{}</pre></details>\n</body></html>",
            escape(&self.render_text())
        );
        out
    }
}

/// What an edge of `kind` from A to B means, for the legend.
fn kind_meaning(kind: EdgeKind) -> &'static str {
    match kind {
        EdgeKind::Wr => "B read what A wrote",
        EdgeKind::Ww => "B overwrote what A wrote",
        EdgeKind::Rw => "B overwrote what A read",
        EdgeKind::So => "A came first in its session",
        EdgeKind::Rt => "A committed before B started",
    }
}

/// One anomaly: its name, its summary, its picture, and its edges or evidence in prose.
fn write_anomaly(out: &mut String, report: &Report, a: &Anomaly, i: usize, labels: &Labels) {
    let _ = writeln!(
        out,
        "<section class=\"anomaly\"><h2>Anomaly {}: {}</h2>\n<p>{}</p>",
        i + 1,
        escape(a.class.name()),
        escape(&labels.rewrite(&a.summary))
    );
    out.push_str(&anomaly_svg(a, i, labels));
    out.push('\n');
    if !a.cycle.is_empty() {
        let ring: Vec<String> =
            a.cycle.iter().map(|e| labels.txn(e.from.0)).chain([labels.txn(a.cycle[0].from.0)]).collect();
        let _ =
            writeln!(out, "<p>Cycle: <code>{}</code></p>\n<ol class=\"edges\">", escape(&ring.join(" → ")));
        for e in &a.cycle {
            let key = e.key.as_deref().map(|k| format!("({k})")).unwrap_or_default();
            let arrow = format!("{} -{}{key}-> {}", labels.txn(e.from.0), e.kind.name(), labels.txn(e.to.0));
            let hyp = if e.hypothetical { " <em>[if the opposite order held]</em>" } else { "" };
            let _ = writeln!(
                out,
                "<li><code style=\"color:{}\">{}</code>{hyp}: {}</li>",
                colour(e.kind),
                escape(&arrow),
                escape(&labels.rewrite(&e.reason))
            );
        }
        out.push_str("</ol>\n");
    }
    if !a.ops.is_empty() {
        out.push_str("<p>Evidence:</p><ul class=\"evidence\">\n");
        for op in &a.ops {
            let text = report
                .transactions
                .iter()
                .find(|t| t.id == op.txn)
                .and_then(|t| t.ops.get(op.op))
                .map_or("", |o| o.text.as_str());
            let _ = writeln!(
                out,
                "<li><code>{} op {}: {}</code></li>",
                escape(&labels.txn(op.txn.0)),
                op.op,
                escape(text)
            );
        }
        out.push_str("</ul>\n");
    }
    if a.uses_real_time
        && let Some(rt) = &report.real_time
    {
        let _ = writeln!(
            out,
            "<p>This cycle uses real-time order, inferred with a {}; if the collectors' clocks differ by \
             more, the reject may be false.</p>",
            rt.threshold()
        );
    }
    out.push_str("</section>\n");
}

/// Every transaction the anomalies name, with its ops and the SQL each came from.
fn write_transactions(out: &mut String, report: &Report, labels: &Labels) {
    if report.transactions.is_empty() {
        return;
    }
    out.push_str("<section class=\"transactions\"><h2>Transactions involved</h2>\n");
    for t in &report.transactions {
        let mut about = format!("session {}, #{}, {:?}", labels.session(t.session.0), t.seq, t.outcome);
        if labels.any() {
            let _ = write!(about, ", id T{}", t.id.0);
        }
        match (t.start_ns, t.commit_ns) {
            (Some(s), Some(c)) => {
                let _ = write!(
                    about,
                    ", started {}, committed {:.3} ms later",
                    wall_clock(s),
                    c.saturating_sub(s) as f64 / 1e6
                );
            }
            (Some(s), None) => {
                let _ = write!(about, ", started {}", wall_clock(s));
            }
            (None, Some(c)) => {
                let _ = write!(about, ", committed {}", wall_clock(c));
            }
            (None, None) => {}
        }
        let _ = writeln!(
            out,
            "<h3>{}</h3><p>{}</p>\n<table class=\"ops\"><tr><th>#</th><th>op</th><th>statement</th></tr>",
            escape(&labels.txn(t.id.0)),
            escape(&about)
        );
        for o in &t.ops {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"op\">{}</td><td class=\"sql\">{}</td></tr>",
                o.index,
                escape(&o.text),
                escape(o.sql.as_deref().unwrap_or(""))
            );
        }
        out.push_str("</table>\n");
    }
    out.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use history::HistoryBuilder;

    use super::*;
    use crate::{Options, verify};

    fn write_skew() -> Report {
        let h = HistoryBuilder::new()
            .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
            .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
            .build();
        verify(&h, &Options::default()).unwrap()
    }

    #[test]
    fn a_write_skew_page_draws_two_transactions_and_two_labelled_edges() {
        let html = write_skew().to_html();
        assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"), "{html}");
        assert_eq!(html.matches("<svg").count(), 1, "{html}");
        assert_eq!(html.matches("class=\"txn\"").count(), 2, "{html}");
        assert_eq!(html.matches("<g class=\"edge rw\"").count(), 2, "{html}");
        assert!(html.contains(">rw(x)</text>") && html.contains(">rw(y)</text>"), "{html}");
        assert!(html.contains(">T1</text>") && html.contains(">T2</text>"), "{html}");
        assert!(html.contains("REJECT: not serializable: write skew"), "{html}");
        // Nothing to fetch: no script, stylesheet link or image source.
        assert!(!html.contains("<script") && !html.contains("<link") && !html.contains("src="), "{html}");
    }

    #[test]
    fn recorded_sql_cannot_inject_markup() {
        let mut r = write_skew();
        let evil = "UPDATE t SET v = '</td><script>alert(1)</script>' WHERE k = \"x\" & 1";
        r.transactions[0].ops[0].sql = Some(evil.to_owned());
        r.anomalies[0].cycle[0].key = Some("<img src=x onerror=alert(1)>".to_owned());
        r.anomalies[0].cycle[0].reason = "it's <b>bold</b>".to_owned();
        let html = r.to_html();
        assert!(!html.contains("<script") && !html.contains("<img") && !html.contains("<b>"), "{html}");
        assert!(html.contains("&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;"), "{html}");
        assert!(html.contains("it&#39;s &lt;b&gt;bold&lt;/b&gt;"), "{html}");
        assert!(html.contains("&quot;x&quot; &amp; 1"), "{html}");
    }

    #[test]
    fn long_ids_are_drawn_with_the_text_reports_short_labels() {
        let (a, b) = (1_796_131_098_927_487u64, 1_796_131_098_927_499u64);
        let mut h = HistoryBuilder::new()
            .txn(1, |t| t.read_init("x").read_init("y").write("x", 1))
            .txn(2, |t| t.read_init("x").read_init("y").write("y", 2))
            .build();
        h.transactions[0].id = history::TxnId(a);
        h.transactions[1].id = history::TxnId(b);
        let r = verify(&h, &Options::default()).unwrap();
        let html = r.to_html();
        let svg = &html[html.find("<svg").unwrap()..html.find("</svg>").unwrap()];
        assert!(svg.contains(">T1</text>") && svg.contains(">T2</text>"), "{svg}");
        let first = r.anomalies[0].cycle[0].from;
        // The text report's T1 is the picture's T1; the real id is in the node's tooltip.
        assert!(r.render_text().contains(&format!("  T1 = {first}")));
        assert!(svg.contains(&format!("<title>{first}</title>")), "{svg}");
    }

    #[test]
    fn an_accept_page_has_no_picture() {
        let h = HistoryBuilder::new().txn(1, |t| t.read_init("x").write("x", 1)).build();
        let html = verify(&h, &Options::default()).unwrap().to_html();
        assert!(html.contains("<h1 class=\"verdict accept\">ACCEPT"), "{html}");
        assert!(!html.contains("<svg"), "{html}");
    }
}
