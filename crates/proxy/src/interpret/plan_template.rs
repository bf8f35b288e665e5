//! A plan with holes where the statement's literals were (issue 16, item 3): made once per fingerprint
//! ([`super::fingerprint`]), filled in with each execution's literals, and equal to what planning that
//! execution's text would give.
//!
//! Literals reach a plan in three places: the rewritten text (the client's text with the version columns
//! spliced in, so the literals are where the client put them), a point lookup's key values, and the
//! character offset of the splice (which moves with the lengths of the literals before it). A template
//! keeps the rewritten text as pieces of fixed text and slots, the key values and the offset as references
//! to slots, and everything else as planned.
//!
//! How it is made: the statement is planned a second time with each literal replaced by a probe value no
//! text holds (`97315` and ten digits, one per slot), and the probe values are looked for in that plan.
//! A template is made only when the plan's shape leaves no doubt:
//! - the text parsed, and any rewritten text is one statement's, spliced ([`PlannedQuery::spliced`]): the
//!   probe text's own bytes around a middle that holds no probe value (a statement sqlparser had to print
//!   could show a literal otherwise than the client wrote it: it prints the value `a''b` as `'a''b'`);
//! - no probe value is cut by the splice, and none is anywhere else in the plan (an error message, say);
//! - filled in with the literals of the text being planned, it equals that text's full plan.
//!
//! Otherwise the fingerprint is marked as having no template and its texts take the exact-text way.

use super::fingerprint::{Fingerprint, LiteralKind};
use super::plan::{PkValue, PlannedQuery, StmtPlan};

/// The digits every probe value starts with; a plan that shows them anywhere a slot does not explain
/// gets no template.
const MARK: &str = "97315";

/// The probe value of slot `slot` as it appears in a text: [`MARK`] and ten digits, as many digits as the
/// longest integer a slot takes ([`super::fingerprint::MAX_INT_DIGITS`]).
fn probe_literal(kind: LiteralKind, slot: usize) -> String {
    match kind {
        LiteralKind::Int => format!("{MARK}{slot:010}"),
        LiteralKind::Decimal => format!("{MARK}{slot:010}.5"),
        LiteralKind::Str => format!("'{MARK}{slot:010}'"),
    }
}

/// Fixed text or a literal of the text being planned, as the client wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Slot(usize),
}

/// A point lookup's key value that is a literal: statement, value index, slot.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PointSlot {
    stmt: usize,
    value: usize,
    slot: usize,
}

/// Where the splice is: `fixed` characters of the client's text before it besides the first `before`
/// literals.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SpliceSlot {
    stmt: usize,
    fixed: usize,
    before: usize,
}

/// A plan with literal slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanTemplate {
    rewritten: Option<Vec<Piece>>,
    stmts: Vec<StmtPlan>,
    points: Vec<PointSlot>,
    splice: Option<SpliceSlot>,
}

/// A probe text: `fp`'s text with probe values for its literals, each value's byte range and character
/// range in it.
struct Probe {
    text: String,
    bytes: Vec<std::ops::Range<usize>>,
    chars: Vec<std::ops::Range<usize>>,
}

fn probe(text: &str, fp: &Fingerprint) -> Probe {
    let mut out = String::with_capacity(text.len() + 16 * fp.literals.len());
    let (mut bytes, mut chars) = (Vec::new(), Vec::new());
    let (mut at, mut nchars) = (0, 0);
    for (slot, lit) in fp.literals.iter().enumerate() {
        let fixed = &text[at..lit.range.start];
        out.push_str(fixed);
        nchars += fixed.chars().count();
        let value = probe_literal(lit.kind, slot);
        bytes.push(out.len()..out.len() + value.len());
        chars.push(nchars..nchars + value.len());
        nchars += value.len();
        out.push_str(&value);
        at = lit.range.end;
    }
    out.push_str(&text[at..]);
    Probe { text: out, bytes, chars }
}

/// The pieces of `probe.text[range]`, its probe values as slots; `None` if the range cuts one.
fn pieces(probe: &Probe, range: std::ops::Range<usize>, out: &mut Vec<Piece>) -> Option<()> {
    let mut at = range.start;
    for (slot, r) in probe.bytes.iter().enumerate() {
        if r.end <= range.start || r.start >= range.end {
            continue;
        }
        if r.start < range.start || r.end > range.end {
            return None;
        }
        push_text(out, &probe.text[at..r.start]);
        out.push(Piece::Slot(slot));
        at = r.end;
    }
    push_text(out, &probe.text[at..range.end]);
    Some(())
}

fn push_text(out: &mut Vec<Piece>, text: &str) {
    if text.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(Piece::Text(t)) => t.push_str(text),
        _ => out.push(Piece::Text(text.to_owned())),
    }
}

/// The longest common prefix of `a` and `b` in bytes, on a character boundary of both.
fn common_prefix(a: &str, b: &str) -> usize {
    let mut n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    while !a.is_char_boundary(n) {
        n -= 1;
    }
    n
}

/// The longest common suffix of `a` and `b` in bytes, on a character boundary of both.
fn common_suffix(a: &str, b: &str) -> usize {
    let mut n = a.bytes().rev().zip(b.bytes().rev()).take_while(|(x, y)| x == y).count();
    while !a.is_char_boundary(a.len() - n) {
        n -= 1;
    }
    n
}

/// The rewritten text of a probe plan as pieces: the probe text's own bytes around a middle with no probe
/// value in it.
fn rewritten_pieces(probe: &Probe, rewritten: &str) -> Option<Vec<Piece>> {
    let k = common_prefix(rewritten, &probe.text);
    let s = common_suffix(&rewritten[k..], &probe.text[k..]);
    let middle = &rewritten[k..rewritten.len() - s];
    let j = probe.text.len() - s;
    if middle.contains(MARK) || probe.text[k..j].contains(MARK) {
        return None;
    }
    let mut out = Vec::new();
    pieces(probe, 0..k, &mut out)?;
    push_text(&mut out, middle);
    pieces(probe, j..probe.text.len(), &mut out)?;
    Some(out)
}

impl PlanTemplate {
    /// The template of `text`'s plan, or `None` when the plan's shape leaves doubt (module docs). `real`
    /// is `text`'s full plan, which the template must reproduce; `plan` plans a text as `real` was planned.
    pub fn make(
        text: &str,
        fp: &Fingerprint,
        real: &PlannedQuery,
        plan: impl FnOnce(&str) -> Option<PlannedQuery>,
    ) -> Option<PlanTemplate> {
        let probe = probe(text, fp);
        if probe.text.matches(MARK).count() != fp.literals.len() {
            return None;
        }
        let planned = plan(&probe.text)?;
        if !planned.aligned {
            return None;
        }
        let rewritten = match &planned.rewritten {
            None => None,
            Some(r) if planned.spliced => Some(rewritten_pieces(&probe, r)?),
            Some(_) => return None,
        };
        let values: std::collections::HashMap<String, usize> = fp
            .literals
            .iter()
            .enumerate()
            .map(|(slot, lit)| (lit.kind.value(&probe_literal(lit.kind, slot)), slot))
            .collect();
        let mut stmts = planned.stmts;
        let (mut points, mut splice) = (Vec::new(), None);
        for (i, stmt) in stmts.iter_mut().enumerate() {
            let StmtPlan::Rows(rows) = stmt else { continue };
            if let Some(point) = &mut rows.point {
                for (v, value) in point.values.iter_mut().enumerate() {
                    if let PkValue::Literal(s) = value
                        && let Some(&slot) = values.get(s.as_str())
                    {
                        points.push(PointSlot { stmt: i, value: v, slot });
                        s.clear();
                    }
                }
            }
            if let Some((at, _)) = &mut rows.splice {
                if probe.chars.iter().any(|r| r.start < *at && *at < r.end) {
                    return None;
                }
                let before: Vec<_> = probe.chars.iter().filter(|r| r.end <= *at).collect();
                let fixed = *at - before.iter().map(|r| r.len()).sum::<usize>();
                splice = Some(SpliceSlot { stmt: i, fixed, before: before.len() });
                *at = 0;
            }
        }
        if format!("{stmts:?}").contains(MARK) {
            return None;
        }
        let template = PlanTemplate { rewritten, stmts, points, splice };
        (template.fill(text, fp).as_ref() == Some(real)).then_some(template)
    }

    /// The plan of `text`, whose fingerprint is `fp` and the template's: the template with `text`'s
    /// literals in its slots. `None` only if `fp` has fewer literals than the template has slots, which a
    /// fingerprint with the template's key cannot.
    pub fn fill(&self, text: &str, fp: &Fingerprint) -> Option<PlannedQuery> {
        let raw =
            |slot: usize| fp.literals.get(slot).and_then(|l| Some((l.kind, text.get(l.range.clone())?)));
        let rewritten = match &self.rewritten {
            None => None,
            Some(pieces) => {
                let mut out = String::with_capacity(text.len() + 256);
                for piece in pieces {
                    match piece {
                        Piece::Text(t) => out.push_str(t),
                        Piece::Slot(slot) => out.push_str(raw(*slot)?.1),
                    }
                }
                Some(out)
            }
        };
        let mut stmts = self.stmts.clone();
        for p in &self.points {
            let (kind, value) = raw(p.slot)?;
            if let Some(StmtPlan::Rows(rows)) = stmts.get_mut(p.stmt)
                && let Some(v) = rows.point.as_mut().and_then(|pt| pt.values.get_mut(p.value))
            {
                *v = PkValue::Literal(kind.value(value));
            }
        }
        if let Some(s) = &self.splice
            && let Some(StmtPlan::Rows(rows)) = stmts.get_mut(s.stmt)
            && let Some((at, _)) = &mut rows.splice
        {
            let mut chars = s.fixed;
            for slot in 0..s.before {
                chars += raw(slot)?.1.chars().count();
            }
            *at = chars;
        }
        let spliced = self.rewritten.is_some();
        Some(PlannedQuery { rewritten, stmts, aligned: true, spliced })
    }

    /// About how many bytes it holds besides its plans (the plan cache counts those).
    pub fn text_bytes(&self) -> usize {
        let pieces = self.rewritten.as_deref().unwrap_or(&[]);
        pieces.iter().map(|p| if let Piece::Text(t) = p { t.len() } else { 16 }).sum::<usize>()
            + 24 * (self.points.len() + 1)
    }

    /// The statements' plans, with the slots' values left empty.
    pub fn stmts(&self) -> &[StmtPlan] {
        &self.stmts
    }
}
