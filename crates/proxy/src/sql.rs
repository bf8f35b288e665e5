//! The little SQL the proxy reads: the leading keywords of each statement in a query string.
//!
//! Transaction boundaries and outcomes come from the server (ReadyForQuery status bytes and CommandComplete
//! tags; see [`crate::machine`]), never from here. This module only answers two questions the server cannot
//! answer in advance: "could forwarding this message commit the open transaction?" (so the write-ahead intent
//! goes to the log first, DESIGN.md §3) and "does this ROLLBACK tag mean ROLLBACK TO SAVEPOINT?" (both share the
//! tag `ROLLBACK`). Every answer errs on the safe side: an unknown statement may commit.

/// What a statement does to the transaction it runs in, judged from its leading keywords.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StmtKind {
    /// BEGIN or START TRANSACTION.
    Begin,
    /// COMMIT or END: commits the open transaction block (or the implicit one).
    Commit,
    /// PREPARE TRANSACTION: ends the block; the outcome is decided later by COMMIT/ROLLBACK PREPARED.
    PrepareTxn,
    /// ROLLBACK or ABORT (not ROLLBACK TO).
    Rollback,
    /// ROLLBACK TO SAVEPOINT: stays in the block, though its tag is `ROLLBACK`.
    RollbackTo,
    /// SAVEPOINT or RELEASE.
    Savepoint,
    /// A statement that runs inside the current transaction and cannot end it (DML, DDL, SET, SHOW, ...).
    Plain,
    /// A statement that may commit on its own (CALL, DO, VACUUM, COMMIT PREPARED, ...), or one not recognised.
    Other,
}

impl StmtKind {
    /// Whether running this statement may end the transaction (commit or abort).
    pub fn may_end(self) -> bool {
        matches!(self, StmtKind::Commit | StmtKind::PrepareTxn | StmtKind::Rollback | StmtKind::Other)
    }

    /// Whether running this statement may commit the transaction.
    pub fn may_commit(self) -> bool {
        matches!(self, StmtKind::Commit | StmtKind::PrepareTxn | StmtKind::Other)
    }
}

/// The kind of every statement in a query string, in order (empty statements are skipped).
pub fn classify(sql: &[u8]) -> Vec<StmtKind> {
    split_leading_words(sql).into_iter().map(|words| kind_of(&words)).collect()
}

/// The kind of the first statement of `sql` (Extended-protocol Parse carries exactly one).
pub fn classify_one(sql: &[u8]) -> StmtKind {
    classify(sql).first().copied().unwrap_or(StmtKind::Plain)
}

fn kind_of(words: &[String]) -> StmtKind {
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    match w(0) {
        "BEGIN" => StmtKind::Begin,
        "START" if w(1) == "TRANSACTION" => StmtKind::Begin,
        "COMMIT" if w(1) == "PREPARED" => StmtKind::Other,
        "COMMIT" | "END" => StmtKind::Commit,
        "ABORT" => StmtKind::Rollback,
        "ROLLBACK" if w(1) == "PREPARED" => StmtKind::Other,
        "ROLLBACK" if w(1) == "TO" || w(2) == "TO" => StmtKind::RollbackTo,
        "ROLLBACK" => StmtKind::Rollback,
        "PREPARE" if w(1) == "TRANSACTION" => StmtKind::PrepareTxn,
        "SAVEPOINT" | "RELEASE" => StmtKind::Savepoint,
        "CREATE" | "DROP" if w(1) == "DATABASE" => StmtKind::Other,
        "SELECT" | "INSERT" | "UPDATE" | "DELETE" | "WITH" | "VALUES" | "TABLE" | "MERGE" | "SET"
        | "SHOW" | "RESET" | "COPY" | "EXPLAIN" | "DECLARE" | "FETCH" | "MOVE" | "CLOSE" | "LISTEN"
        | "NOTIFY" | "UNLISTEN" | "LOCK" | "PREPARE" | "EXECUTE" | "DEALLOCATE" | "DISCARD" | "CREATE"
        | "ALTER" | "DROP" | "TRUNCATE" | "COMMENT" | "GRANT" | "REVOKE" | "ANALYZE" => StmtKind::Plain,
        _ => StmtKind::Other,
    }
}

/// Splits `sql` at top-level semicolons and returns the first three words (upper-cased) of each non-empty
/// statement. Quotes, dollar quotes and comments are skipped, so a `;` inside them does not split.
fn split_leading_words(sql: &[u8]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut nonempty = false;
    let mut i = 0;
    let n = sql.len();
    while i < n {
        let c = sql[i];
        match c {
            b';' => {
                if nonempty {
                    out.push(std::mem::take(&mut words));
                }
                words.clear();
                nonempty = false;
                i += 1;
            }
            b'-' if sql.get(i + 1) == Some(&b'-') => {
                while i < n && sql[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if sql.get(i + 1) == Some(&b'*') => {
                // Block comments nest in PostgreSQL.
                let mut depth = 0usize;
                while i < n {
                    if sql[i] == b'/' && sql.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if sql[i] == b'*' && sql.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'\'' | b'"' => {
                nonempty = true;
                words.push(String::new());
                i = skip_quoted(sql, i, c);
            }
            b'$' => {
                nonempty = true;
                i = skip_dollar(sql, i);
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                nonempty = true;
                let start = i;
                while i < n && (sql[i].is_ascii_alphanumeric() || sql[i] == b'_' || sql[i] == b'$') {
                    i += 1;
                }
                // E'...' and similar prefixed strings: the prefix is not a word.
                if i < n && sql[i] == b'\'' && i - start == 1 {
                    i = skip_quoted(sql, i, b'\'');
                    words.push(String::new());
                    continue;
                }
                if words.len() < 3 {
                    words.push(String::from_utf8_lossy(&sql[start..i]).to_ascii_uppercase());
                }
            }
            c if c.is_ascii_whitespace() => i += 1,
            _ => {
                nonempty = true;
                if words.len() < 3 {
                    words.push(String::new());
                }
                i += 1;
            }
        }
    }
    if nonempty {
        out.push(words);
    }
    out
}

/// Skips a quoted string or identifier starting at `i`, where a doubled quote is an escaped quote. A
/// backslash escapes the next byte too, which is right for E'' strings and harmless elsewhere for our purpose.
fn skip_quoted(sql: &[u8], mut i: usize, q: u8) -> usize {
    i += 1;
    while i < sql.len() {
        if sql[i] == b'\\' && q == b'\'' {
            i += 2;
        } else if sql[i] == q {
            if sql.get(i + 1) == Some(&q) {
                i += 2;
            } else {
                return i + 1;
            }
        } else {
            i += 1;
        }
    }
    sql.len()
}

/// Skips `$tag$ ... $tag$` starting at `i`; a lone `$1` parameter is skipped as a word.
fn skip_dollar(sql: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    while j < sql.len() && (sql[j].is_ascii_alphanumeric() || sql[j] == b'_') {
        j += 1;
    }
    if j >= sql.len() || sql[j] != b'$' || sql[i + 1..j].first().is_some_and(u8::is_ascii_digit) {
        return j.max(i + 1);
    }
    let delim = &sql[i..=j];
    let mut k = j + 1;
    while k + delim.len() <= sql.len() {
        if &sql[k..k + delim.len()] == delim {
            return k + delim.len();
        }
        k += 1;
    }
    sql.len()
}

#[cfg(test)]
mod tests {
    use super::StmtKind::*;
    use super::*;

    #[test]
    fn transaction_control_is_recognised_in_any_case_and_spacing() {
        assert_eq!(classify(b"begin"), vec![Begin]);
        assert_eq!(classify(b"  START TRANSACTION ISOLATION LEVEL SERIALIZABLE"), vec![Begin]);
        assert_eq!(classify(b"commit;"), vec![Commit]);
        assert_eq!(classify(b"END"), vec![Commit]);
        assert_eq!(classify(b"rollback work"), vec![Rollback]);
        assert_eq!(classify(b"abort"), vec![Rollback]);
        assert_eq!(classify(b"ROLLBACK TO SAVEPOINT a"), vec![RollbackTo]);
        assert_eq!(classify(b"rollback transaction to a"), vec![RollbackTo]);
        assert_eq!(classify(b"PREPARE TRANSACTION 'x'"), vec![PrepareTxn]);
        assert_eq!(classify(b"COMMIT PREPARED 'x'"), vec![Other]);
        assert_eq!(classify(b"savepoint a; release a"), vec![Savepoint, Savepoint]);
    }

    #[test]
    fn semicolons_inside_quotes_comments_and_dollar_quotes_do_not_split() {
        assert_eq!(classify(b"select ';commit'; commit"), vec![Plain, Commit]);
        assert_eq!(classify(b"select 1 -- ; commit\n; begin"), vec![Plain, Begin]);
        assert_eq!(classify(b"/* a /* nested ; */ commit; */ select 1"), vec![Plain]);
        assert_eq!(classify(b"do $x$ begin commit; end $x$"), vec![Other]);
        assert_eq!(classify(b"select $1; end"), vec![Plain, Commit]);
        assert_eq!(classify(b"select E'it\\'s;' ; rollback"), vec![Plain, Rollback]);
        assert_eq!(classify(b"select \"a;b\" from t"), vec![Plain]);
    }

    #[test]
    fn empty_statements_are_skipped_and_unknown_ones_may_commit() {
        assert_eq!(classify(b" ;; "), vec![]);
        assert_eq!(classify(b"call do_it()"), vec![Other]);
        assert!(Other.may_commit() && Commit.may_commit() && !Rollback.may_commit());
        assert!(!Plain.may_end() && !Begin.may_end() && Rollback.may_end());
    }
}
