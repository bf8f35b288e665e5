//! The tokenizer: SQL text to tokens (identifiers, lower-cased unless quoted; numbers; strings; parameters;
//! casts; symbols), and the tokens of the statements that are matched whole.

use std::fmt;
use std::sync::OnceLock;

use super::{CATALOG_QUERY, CREATE_FENCE, SqlError, syntax};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Tok {
    /// An identifier or keyword; unquoted ones are lower-cased.
    Ident {
        name: String,
        quoted: bool,
    },
    Number(String),
    Str(String),
    Param(usize),
    Cast,
    Sym(char),
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident { name, quoted: false } => f.write_str(name),
            Tok::Ident { name, quoted: true } => write!(f, "\"{name}\""),
            Tok::Number(n) => f.write_str(n),
            Tok::Str(s) => write!(f, "'{s}'"),
            Tok::Param(n) => write!(f, "${}", n + 1),
            Tok::Cast => f.write_str("::"),
            Tok::Sym(c) => write!(f, "{c}"),
        }
    }
}

/// The most parameters a statement may use (the protocol counts them in 16 bits).
const MAX_PARAMS: usize = u16::MAX as usize;

pub(super) fn tokenize(sql: &str) -> Result<Vec<Tok>, SqlError> {
    let chars: Vec<char> = sql.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            let end =
                (i + 2..chars.len().saturating_sub(1)).find(|&j| chars[j] == '*' && chars[j + 1] == '/');
            i = end.ok_or_else(|| syntax("unterminated /* comment"))? + 2;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '$')
            {
                i += 1;
            }
            let name = chars[start..i].iter().collect::<String>().to_ascii_lowercase();
            toks.push(Tok::Ident { name, quoted: false });
        } else if c == '"' || c == '\'' {
            let mut text = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(syntax("unterminated quoted string or identifier")),
                    Some(&q) if q == c && chars.get(i + 1) == Some(&c) => {
                        text.push(c);
                        i += 2;
                    }
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(&other) => {
                        text.push(other);
                        i += 1;
                    }
                }
            }
            toks.push(if c == '"' { Tok::Ident { name: text, quoted: true } } else { Tok::Str(text) });
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            toks.push(Tok::Number(chars[start..i].iter().collect()));
        } else if c == '$' {
            let start = i + 1;
            i = start;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            let n: usize = chars[start..i]
                .iter()
                .collect::<String>()
                .parse()
                .ok()
                .filter(|n| (1..=MAX_PARAMS).contains(n))
                .ok_or_else(|| syntax("a parameter must be written $1 to $65535"))?;
            toks.push(Tok::Param(n - 1));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            toks.push(Tok::Cast);
            i += 2;
        } else if "(),=;*+-.<>!/%^|&~[]:{}?@#".contains(c) {
            toks.push(Tok::Sym(c));
            i += 1;
        } else {
            return Err(syntax(format!("syntax error at or near \"{c}\"")));
        }
    }
    Ok(toks)
}

/// The tokens of a statement matched whole, computed once.
fn whole(cell: &'static OnceLock<Vec<Tok>>, sql: &str) -> &'static [Tok] {
    cell.get_or_init(|| tokenize(sql).unwrap_or_default())
}

pub(super) fn catalog_tokens() -> &'static [Tok] {
    static CELL: OnceLock<Vec<Tok>> = OnceLock::new();
    whole(&CELL, CATALOG_QUERY)
}

pub(super) fn create_fence_tokens() -> &'static [Tok] {
    static CELL: OnceLock<Vec<Tok>> = OnceLock::new();
    whole(&CELL, CREATE_FENCE)
}
