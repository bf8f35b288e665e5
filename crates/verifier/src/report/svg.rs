//! One anomaly drawn as an inline SVG graph for the HTML report ([`super::html`]): its transactions on a
//! circle in cycle order, so the cycle reads clockwise round the ring, and each dependency as a curved arrow
//! labelled with its kind and key (`rw(x)`), as the Graphviz output ([`super::dot`]) labels it. The layout
//! is computed here rather than by Graphviz so that the page needs no tool and no network to draw.
//!
//! Every node is a `<g class="txn">` and every edge a `<g class="edge">`, so a test (or a person with the
//! browser's inspector) can count them. All text goes through [`escape`].

use std::f64::consts::PI;
use std::fmt::Write as _;

use super::html::escape;
use super::labels::Labels;
use super::{Anomaly, EdgeKind};

/// The radius of a transaction's circle, in pixels.
const NODE_RADIUS: f64 = 24.0;
/// The arc length between neighbouring transactions on the ring, so labels of adjacent edges do not touch.
const NODE_SPACING: f64 = 170.0;
/// The smallest ring: two transactions still get room for the two curved edges between them.
const MIN_RING_RADIUS: f64 = 110.0;
/// Room around the ring for edge labels that bow outwards.
const MARGIN: f64 = 120.0;
/// The most characters of a key an edge's label shows; the tooltip and the prose under the picture have
/// it whole.
const KEY_CHARS: usize = 16;
/// How far an edge bows off the straight line between its ends; each further edge between the same two
/// transactions in the same direction bows this much more, so none hides another.
const BEND: f64 = 36.0;

/// The colour of an edge of `kind` (also in the page's legend).
pub(super) fn colour(kind: EdgeKind) -> &'static str {
    match kind {
        EdgeKind::Wr => "#1b7f3b",
        EdgeKind::Ww => "#1f5fbf",
        EdgeKind::Rw => "#c0392b",
        EdgeKind::So => "#6b6b6b",
        EdgeKind::Rt => "#8e44ad",
    }
}

/// The anomaly's transactions in the order the graph places them: the cycle's, in cycle order, then those
/// only its evidence ops name.
pub(super) fn nodes(a: &Anomaly) -> Vec<u64> {
    let mut ids: Vec<u64> = Vec::new();
    let named = a.cycle.iter().flat_map(|e| [e.from.0, e.to.0]).chain(a.ops.iter().map(|o| o.txn.0));
    for id in named {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

/// `key` cut to [`KEY_CHARS`] characters, with an ellipsis if cut.
fn shortened(key: &str) -> String {
    match key.char_indices().nth(KEY_CHARS) {
        Some((at, _)) => format!("{}…", &key[..at]),
        None => key.to_owned(),
    }
}

/// A point on the page.
#[derive(Clone, Copy)]
struct Point {
    x: f64,
    y: f64,
}

impl Point {
    /// The point `distance` further from `from` than `self`, on the line from `from` through `self`.
    fn towards_from(self, from: Point, distance: f64) -> Point {
        from.towards(self, (self.x - from.x).hypot(self.y - from.y) + distance)
    }

    /// The point `distance` from `self` towards `to` (away from it when negative).
    fn towards(self, to: Point, distance: f64) -> Point {
        let (dx, dy) = (to.x - self.x, to.y - self.y);
        let len = dx.hypot(dy).max(f64::EPSILON);
        Point { x: self.x + dx / len * distance, y: self.y + dy / len * distance }
    }
}

/// The SVG of anomaly number `index` (from 0; it keeps the arrow markers' ids unique on the page).
pub(super) fn anomaly_svg(a: &Anomaly, index: usize, labels: &Labels) -> String {
    let ids = nodes(a);
    let n = ids.len().max(1) as f64;
    let ring = (NODE_SPACING * n / (2.0 * PI)).max(MIN_RING_RADIUS);
    let size = 2.0 * (ring + MARGIN);
    let centre = size / 2.0;
    // The first transaction at the top, the rest clockwise.
    let at = |i: usize| {
        let angle = -PI / 2.0 + 2.0 * PI * i as f64 / n;
        Point { x: centre + ring * angle.cos(), y: centre + ring * angle.sin() }
    };
    let place = |id: u64| ids.iter().position(|&x| x == id).map(at);

    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"cycle\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{size:.0}\" height=\"{size:.0}\" \
         viewBox=\"0 0 {size:.0} {size:.0}\" role=\"img\" aria-label=\"{}\">",
        escape(&format!("the {} cycle of anomaly {}", a.class.name(), index + 1))
    );
    out.push_str("<defs>");
    for kind in [EdgeKind::Wr, EdgeKind::Ww, EdgeKind::Rw, EdgeKind::So, EdgeKind::Rt] {
        let _ = write!(
            out,
            "<marker id=\"arrow-{index}-{k}\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"8\" \
             markerHeight=\"8\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"{c}\"/>\
             </marker>",
            k = kind.name(),
            c = colour(kind)
        );
    }
    out.push_str("</defs>");

    // Edges first, so the nodes are drawn over their ends.
    let mut drawn: Vec<(u64, u64)> = Vec::new();
    for e in &a.cycle {
        let (Some(from), Some(to)) = (place(e.from.0), place(e.to.0)) else { continue };
        let repeat = drawn.iter().filter(|&&p| p == (e.from.0, e.to.0)).count() as f64;
        drawn.push((e.from.0, e.to.0));
        let key = e.key.as_deref().map(|k| format!("({})", shortened(k))).unwrap_or_default();
        let label = format!("{}{key}", e.kind.name());
        let (start, control, end) = if e.from == e.to {
            // A transaction that must precede itself: a loop outside the ring.
            let out_dir = from.towards(Point { x: centre, y: centre }, -1.0);
            let tip = from.towards(out_dir, NODE_RADIUS * 4.0 + BEND * repeat);
            let side = Point { x: tip.x + (tip.y - from.y) * 0.5, y: tip.y - (tip.x - from.x) * 0.5 };
            (from.towards(side, NODE_RADIUS), tip, from.towards(tip, NODE_RADIUS))
        } else {
            // Bow to the left of the direction of travel: round the ring (clockwise) that is outwards, where
            // the labels have room, and the two edges of a pair in opposite directions bow apart.
            let (dx, dy) = (to.x - from.x, to.y - from.y);
            let len = dx.hypot(dy).max(f64::EPSILON);
            let bend = BEND * (1.0 + repeat);
            let mid = Point {
                x: (from.x + to.x) / 2.0 + dy / len * bend,
                y: (from.y + to.y) / 2.0 - dx / len * bend,
            };
            (from.towards(mid, NODE_RADIUS), mid, to.towards(mid, NODE_RADIUS + 2.0))
        };
        // The label sits just outside the curve's own midpoint (t = 1/2 of the quadratic Bézier), on the side
        // it bows to, and grows away from the curve: two edges bowing apart never share a label's place.
        let mid = Point {
            x: 0.25 * start.x + 0.5 * control.x + 0.25 * end.x,
            y: 0.25 * start.y + 0.5 * control.y + 0.25 * end.y,
        };
        let chord = Point { x: (start.x + end.x) / 2.0, y: (start.y + end.y) / 2.0 };
        let label_at = if e.from == e.to { control } else { mid.towards_from(chord, 6.0) };
        let (ox, oy) = (label_at.x - chord.x, label_at.y - chord.y);
        let outward = ox.hypot(oy).max(f64::EPSILON);
        let anchor = match ox / outward {
            x if x < -0.35 => "end",
            x if x > 0.35 => "start",
            _ => "middle",
        };
        let baseline = match oy / outward {
            y if y < -0.35 => "auto",
            y if y > 0.35 => "hanging",
            _ => "middle",
        };
        let dash = if e.hypothetical { " stroke-dasharray=\"6 4\"" } else { "" };
        let whole_key = e.key.as_deref().map(|k| format!("({k})")).unwrap_or_default();
        let why = format!(
            "{} -{}{whole_key}-> {}: {}",
            labels.txn(e.from.0),
            e.kind.name(),
            labels.txn(e.to.0),
            labels.rewrite(&e.reason)
        );
        let _ = write!(
            out,
            "<g class=\"edge {k}\"><title>{why}</title><path d=\"M{:.1},{:.1} Q{:.1},{:.1} {:.1},{:.1}\" \
             fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"{dash} marker-end=\"url(#arrow-{index}-{k})\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" dominant-baseline=\"{baseline}\" \
             fill=\"{c}\" class=\"edge-label\">{}</text></g>",
            start.x,
            start.y,
            control.x,
            control.y,
            end.x,
            end.y,
            label_at.x,
            label_at.y,
            escape(&label),
            k = e.kind.name(),
            c = colour(e.kind),
            why = escape(&why),
        );
    }
    for (i, &id) in ids.iter().enumerate() {
        let p = at(i);
        let in_cycle = a.cycle.iter().any(|e| e.from.0 == id || e.to.0 == id);
        let fill = if in_cycle { "#fff8e1" } else { "#eef2f7" };
        let _ = write!(
            out,
            "<g class=\"txn\"><title>{}</title><circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"{NODE_RADIUS}\" \
             fill=\"{fill}\" stroke=\"#333\" stroke-width=\"1.5\"/><text x=\"{:.1}\" y=\"{:.1}\" \
             text-anchor=\"middle\" dominant-baseline=\"central\" class=\"txn-label\">{}</text></g>",
            escape(&format!("T{id}")),
            p.x,
            p.y,
            p.x,
            p.y,
            escape(&labels.txn(id))
        );
    }
    out.push_str("</svg>");
    out
}
