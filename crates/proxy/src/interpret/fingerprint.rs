//! A statement's fingerprint: its text with the literals cut out (issue 16, item 3). Clients of the simple
//! protocol (`pgbench -M simple`, `psql`, drivers that interpolate values) put their values in the text, so
//! `SELECT abalance FROM pgbench_accounts WHERE aid = 4711` is a new text every time; its fingerprint,
//! `SELECT abalance FROM pgbench_accounts WHERE aid = \0i`, is not, and the plan cache keys templates by it
//! ([`super::plan_template`]).
//!
//! One pass over the bytes, no allocation beyond the key. It only has to find literals where sqlparser's
//! tokenizer finds them, and everything it keeps is compared byte for byte, so it is free to be narrow:
//! whatever it is not sure of makes it give up ([`fingerprint`] returns `None`) and the statement goes the
//! exact-text way. It gives up on dollar quoting, prefixed strings (`E''`, `B''`, `X''`, `U&''`, `N''`), a
//! backslash or line break inside a string, adjacent strings (which PostgreSQL joins across a line break),
//! nested block comments, numbers with an exponent, underscores, a trailing or leading dot, or a suffix,
//! and anything after `.` that looks like a number. Literals it leaves in the text (an integer with a
//! leading zero or more than [`MAX_INT_DIGITS`] digits, a number or string in an unusual place) simply
//! stay part of the key.
//!
//! What counts as a literal: an integer (`42`), a decimal (`4.5`), a standard string (`'it''s'`). A minus
//! sign is an operator in sqlparser's tree as in PostgreSQL's, so it stays in the key.

use std::ops::Range;

/// The longest integer taken out of the text. sqlparser reads the numbers of some clauses (type lengths,
/// precisions) as `u64`; a long one fails to parse, a shorter one does not, so a template made from one must
/// never stand for the other. The template's probe value has this many digits too.
pub const MAX_INT_DIGITS: usize = 15;

/// What kind of literal a slot held; part of the key, so `id = 1` and `id = '1'` never share a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiteralKind {
    /// Digits only, no leading zero, at most [`MAX_INT_DIGITS`].
    Int,
    /// Digits, a dot, digits.
    Decimal,
    /// `'…'` with no prefix, no backslash and no line break; the range includes the quotes.
    Str,
}

impl LiteralKind {
    /// The byte that stands for this kind in a key, after a NUL (which no query text can hold: the
    /// protocol ends its strings with one).
    fn tag(self) -> char {
        match self {
            LiteralKind::Int => 'i',
            LiteralKind::Decimal => 'd',
            LiteralKind::Str => 's',
        }
    }

    /// The value sqlparser gives a literal of this kind whose text is `raw`: a number keeps its text, a
    /// string loses its quotes and has each doubled quote halved.
    pub fn value(self, raw: &str) -> String {
        match self {
            LiteralKind::Int | LiteralKind::Decimal => raw.to_owned(),
            LiteralKind::Str => raw.get(1..raw.len().saturating_sub(1)).unwrap_or("").replace("''", "'"),
        }
    }
}

/// One literal of a statement: its kind and where it is in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Literal {
    /// The kind.
    pub kind: LiteralKind,
    /// Its bytes in the text (a string's quotes included).
    pub range: Range<usize>,
}

/// A text's fingerprint: the key, and the literals it stands for, in text order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// The text with each literal replaced by a NUL and its kind's letter.
    pub key: String,
    /// The literals, in order.
    pub literals: Vec<Literal>,
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// Bytes after which a literal is an operand as the tokenizer sees it. After anything else (a word, a
/// closing bracket, a colon) a quote may start a prefixed string or a number may belong to something else,
/// so a string there makes the fingerprint give up and a number stays in the key.
fn opens_operand(prev: Option<u8>) -> bool {
    match prev {
        None => true,
        Some(b) => b.is_ascii_whitespace() || b"(,=<>[|+-*/%".contains(&b),
    }
}

/// The fingerprint of `text`, or `None` when it holds no literal or anything [`fingerprint`]'s module
/// docs say it gives up on.
pub fn fingerprint(text: &str) -> Option<Fingerprint> {
    let b = text.as_bytes();
    let n = b.len();
    let mut literals = Vec::new();
    // The last byte that was not whitespace or a comment: a number after a dot may be a field or a fraction.
    let mut last_solid: Option<u8> = None;
    let mut i = 0;
    while i < n {
        let c = b[i];
        let prev = i.checked_sub(1).map(|p| b[p]);
        match c {
            // Whitespace and comments do not count as `last_solid`: `t. 1` is as much a field as `t.1`.
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = b[i..].iter().position(|&x| x == b'\n').map_or(n, |p| i + p);
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let body = i + 2;
                let end = b[body..].windows(2).position(|w| w == b"*/")? + body;
                // PostgreSQL nests block comments; rather than follow, give up on a comment inside one.
                if b[body..end].windows(2).any(|w| w == b"/*") {
                    return None;
                }
                i = end + 2;
                continue;
            }
            b'\'' => {
                if !opens_operand(prev) {
                    return None;
                }
                let mut j = i + 1;
                loop {
                    match b.get(j)? {
                        b'\'' if b.get(j + 1) == Some(&b'\'') => j += 2,
                        b'\'' => break,
                        b'\\' | b'\n' | b'\r' => return None,
                        _ => j += 1,
                    }
                }
                let end = j + 1;
                // `'a'\n'b'` is one string to PostgreSQL.
                if b[end..].iter().find(|x| !x.is_ascii_whitespace()) == Some(&b'\'') {
                    return None;
                }
                literals.push(Literal { kind: LiteralKind::Str, range: i..end });
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                loop {
                    match b.get(j)? {
                        b'"' if b.get(j + 1) == Some(&b'"') => j += 2,
                        b'"' => break,
                        _ => j += 1,
                    }
                }
                i = j + 1;
            }
            b'$' => {
                // `$1` is a parameter; anything else is dollar quoting (or worse).
                let digits = b[i + 1..].iter().take_while(|x| x.is_ascii_digit()).count();
                if digits == 0 {
                    return None;
                }
                i += 1 + digits;
            }
            b'0'..=b'9' => {
                if last_solid == Some(b'.') {
                    return None;
                }
                let int_end = i + b[i..].iter().take_while(|x| x.is_ascii_digit()).count();
                let mut end = int_end;
                let mut kind = LiteralKind::Int;
                if b.get(end) == Some(&b'.') {
                    let frac = b[end + 1..].iter().take_while(|x| x.is_ascii_digit()).count();
                    if frac == 0 {
                        return None;
                    }
                    end += 1 + frac;
                    kind = LiteralKind::Decimal;
                }
                if b.get(end).is_some_and(|&x| is_ident(x) || x == b'.') {
                    return None;
                }
                let plain_int = int_end - i <= MAX_INT_DIGITS && (b[i] != b'0' || int_end - i == 1);
                if opens_operand(prev) && (kind == LiteralKind::Decimal || plain_int) {
                    literals.push(Literal { kind, range: i..end });
                }
                i = end;
            }
            b'.' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => return None,
            c if is_ident(c) => {
                let end = i + b[i..].iter().take_while(|&&x| is_ident(x)).count();
                if b.get(end) == Some(&b'\'') {
                    return None;
                }
                i = end;
            }
            _ => i += 1,
        }
        last_solid = Some(b[i - 1]);
    }
    if literals.is_empty() {
        return None;
    }
    let mut key = String::with_capacity(n);
    let mut at = 0;
    for lit in &literals {
        key.push_str(&text[at..lit.range.start]);
        key.push('\0');
        key.push(lit.kind.tag());
        at = lit.range.end;
    }
    key.push_str(&text[at..]);
    Some(Fingerprint { key, literals })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> Option<String> {
        fingerprint(text).map(|f| f.key.replace('\0', "?"))
    }

    #[test]
    fn literals_are_cut_out_and_everything_else_kept() {
        assert_eq!(
            key("SELECT abalance FROM pgbench_accounts WHERE aid = 4711;").as_deref(),
            Some("SELECT abalance FROM pgbench_accounts WHERE aid = ?i;")
        );
        assert_eq!(
            key("UPDATE t SET a = a + -12, b = 'it''s', c = 1.50 WHERE k = 7").as_deref(),
            Some("UPDATE t SET a = a + -?i, b = ?s, c = ?d WHERE k = ?i")
        );
        assert_eq!(
            key("SELECT \"a'1\", x1 FROM t -- 'no' 5\nWHERE k = 5 /* 6 */ AND v = $1::int").as_deref(),
            Some("SELECT \"a'1\", x1 FROM t -- 'no' 5\nWHERE k = ?i /* 6 */ AND v = $1::int")
        );
        assert_eq!(key("SELECT '5'::int, ARRAY[1,2]").as_deref(), Some("SELECT ?s::int, ARRAY[?i,?i]"));
        // Left in the key: a leading zero, a long integer, a number after a word-like context.
        assert_eq!(
            key("SELECT 007, 1234567890123456, x::varchar(20), a[1:2] WHERE a = 1").as_deref(),
            Some("SELECT 007, 1234567890123456, x::varchar(?i), a[?i:2] WHERE a = ?i")
        );
        assert_eq!(key("SELECT a FROM t"), None, "no literal");
    }

    #[test]
    fn what_it_is_not_sure_of_makes_it_give_up() {
        for text in [
            "SELECT E'a\\'b' WHERE a = 1",
            "SELECT X'ff', 1",
            "SELECT U&'d\\0061t' , 1",
            "SELECT 'a\\' , 1",
            "SELECT 'a'\n'b', 1",
            "SELECT $$x$$, 1",
            "SELECT $tag$x$tag$, 1",
            "SELECT 1e5",
            "SELECT 1_000",
            "SELECT 1.",
            "SELECT .5",
            "SELECT 0x1F",
            "SELECT 5L",
            "SELECT t. 1 FROM t WHERE a = 2",
            "SELECT /* /* */ 1 */ 2",
            "SELECT 'unterminated",
            "SELECT \"unterminated, 1",
            "SELECT 1 /* unterminated",
            "SELECT 'two\nlines', 1",
        ] {
            assert_eq!(key(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_strings_value_is_what_the_parser_makes_of_it() {
        assert_eq!(LiteralKind::Str.value("'it''s'"), "it's");
        assert_eq!(LiteralKind::Str.value("''"), "");
        assert_eq!(LiteralKind::Int.value("42"), "42");
        let f = fingerprint("SELECT 'é', 12 FROM t").unwrap_or_else(|| panic!("no fingerprint"));
        let raw: Vec<&str> = f.literals.iter().map(|l| &"SELECT 'é', 12 FROM t"[l.range.clone()]).collect();
        assert_eq!(raw, ["'é'", "12"]);
    }
}
