//! The little SQL the proxy reads: the leading keywords of each statement in a query string.
//!
//! Transaction boundaries and outcomes come from the server (ReadyForQuery status bytes and CommandComplete
//! tags; see [`crate::machine`]), never from here. This module only answers two questions the server cannot
//! answer in advance: "could forwarding this message commit the open transaction?" (so the write-ahead intent
//! goes to the log first, DESIGN.md §3) and "does this ROLLBACK tag mean ROLLBACK TO SAVEPOINT?" (both share the
//! tag `ROLLBACK`). Every answer errs on the safe side: an unknown statement may commit.
//!
//! It also keeps passwords out of what the proxy records ([`redact_secrets`]): statement texts go to the
//! history log, and a password there would be a secret at rest.

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

/// Whether every statement of `sql` only reads or sets session state and touches no data (SET, SHOW,
/// RESET, DISCARD, DEALLOCATE, LISTEN, UNLISTEN): outside a block such a query is not a transaction worth
/// recording.
pub fn session_only(sql: &[u8]) -> bool {
    let all = split_leading_words(sql);
    !all.is_empty()
        && all.iter().all(|words| {
            matches!(
                words.first().map(String::as_str),
                Some("SET" | "SHOW" | "RESET" | "DISCARD" | "DEALLOCATE" | "LISTEN" | "UNLISTEN")
            )
        })
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

/// What a redacted string literal is replaced with.
pub const REDACTED: &str = "'<redacted>'";

/// `sql` with every password it carries replaced by [`REDACTED`], for recording: the string literal right
/// after the keyword `PASSWORD` (`ALTER ROLE alice PASSWORD '…'`, `CREATE USER bob ENCRYPTED PASSWORD '…'`,
/// what psql's `\password` sends, `OPTIONS (password '…')` of a user mapping), and any literal holding a
/// connection string's `password=` (`CREATE SUBSCRIPTION … CONNECTION '…'`, `dblink_connect('…')`). The rest of
/// the statement stays, so the record still reads as what ran. Texts without the word "password" in any case
/// come back borrowed, at the cost of one scan.
///
/// A literal's end is taken as the later of where it ends with and without backslash escapes, so the secret
/// is covered whatever `standard_conforming_strings` says; an unterminated literal is redacted to the end.
pub fn redact_secrets(sql: &str) -> std::borrow::Cow<'_, str> {
    let b = sql.as_bytes();
    if !contains_password(b) {
        return std::borrow::Cow::Borrowed(sql);
    }
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut after_keyword = false;
    let mut i = 0;
    let n = b.len();
    while i < n {
        let c = b[i];
        let literal = match c {
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = skip_line_comment(b, i);
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = skip_block_comment(b, i);
                continue;
            }
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            b'\'' => Some((i, literal_end(b, i))),
            b'$' if dollar_quote_opens(b, i) => Some((i, skip_dollar(b, i))),
            b'"' => {
                let end = skip_quoted(b, i, b'"').max(skip_quoted_plain(b, i, b'"'));
                // A quoted identifier "password" (an option name) is followed by the secret too.
                after_keyword = &b[i..end] == b"\"password\"";
                i = end;
                continue;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < n && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$') {
                    i += 1;
                }
                let word = &b[start..i];
                // E'…', N'…', B'…', X'…' and U&'…': the prefix belongs to the literal.
                if word.len() == 1 && b.get(i) == Some(&b'\'') {
                    Some((start, literal_end(b, i)))
                } else if word.eq_ignore_ascii_case(b"u")
                    && b.get(i) == Some(&b'&')
                    && b.get(i + 1) == Some(&b'\'')
                {
                    Some((start, literal_end(b, i + 1)))
                } else {
                    after_keyword = word.eq_ignore_ascii_case(b"password");
                    continue;
                }
            }
            _ => {
                after_keyword = false;
                i += 1;
                continue;
            }
        };
        if let Some((start, end)) = literal {
            if after_keyword || holds_conninfo_password(&b[start..end]) {
                spans.push((start, end));
            }
            after_keyword = false;
            i = end;
        }
    }
    if spans.is_empty() {
        return std::borrow::Cow::Borrowed(sql);
    }
    // Every span starts and ends at an ASCII byte (a quote, a prefix letter, `$`) or at the end of the text,
    // so slicing the `str` there is safe.
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for (start, end) in spans {
        out.push_str(&sql[at..start]);
        out.push_str(REDACTED);
        at = end;
    }
    out.push_str(&sql[at..]);
    std::borrow::Cow::Owned(out)
}

/// Whether `b` holds the word "password" in any case.
fn contains_password(b: &[u8]) -> bool {
    b.windows(8).any(|w| w.eq_ignore_ascii_case(b"password"))
}

/// Whether a literal's text holds `password` followed by `=` (a libpq connection string's key).
fn holds_conninfo_password(lit: &[u8]) -> bool {
    (0..lit.len().saturating_sub(7)).any(|k| {
        lit[k..k + 8].eq_ignore_ascii_case(b"password")
            && lit[k + 8..].iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'=')
    })
}

/// Where the string literal whose opening quote is at `i` ends: the later of the ends with and without
/// backslash escapes, so that the whole literal is covered whichever way the server reads it.
fn literal_end(b: &[u8], i: usize) -> usize {
    skip_quoted(b, i, b'\'').max(skip_quoted_plain(b, i, b'\''))
}

/// Skips a quoted string or identifier starting at `i` where only a doubled quote escapes a quote.
fn skip_quoted_plain(b: &[u8], mut i: usize, q: u8) -> usize {
    i += 1;
    while i < b.len() {
        if b[i] == q {
            if b.get(i + 1) == Some(&q) {
                i += 2;
            } else {
                return i + 1;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

fn skip_line_comment(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i] != b'\n' {
        i += 1;
    }
    i
}

/// Skips a block comment starting at `i`; they nest in PostgreSQL.
fn skip_block_comment(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            depth += 1;
            i += 2;
        } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// Whether a `$tag$` dollar quote (not a `$1` parameter) opens at `i`.
fn dollar_quote_opens(b: &[u8], i: usize) -> bool {
    let mut j = i + 1;
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
        j += 1;
    }
    j < b.len() && b[j] == b'$' && !b[i + 1..j].first().is_some_and(u8::is_ascii_digit)
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

    #[test]
    fn passwords_of_roles_and_users_are_redacted_and_the_statement_stays_readable() {
        let r = |s: &str| redact_secrets(s).into_owned();
        assert_eq!(r("ALTER ROLE alice PASSWORD 's3cret'"), "ALTER ROLE alice PASSWORD '<redacted>'");
        assert_eq!(
            r("alter role alice with login password 's3cret' valid until '2030-01-01'"),
            "alter role alice with login password '<redacted>' valid until '2030-01-01'"
        );
        assert_eq!(
            r("CREATE ROLE bob WITH LOGIN ENCRYPTED PASSWORD 's3cret'"),
            "CREATE ROLE bob WITH LOGIN ENCRYPTED PASSWORD '<redacted>'"
        );
        assert_eq!(r("CREATE USER \"Bob\" PASSWORD 'it''s'"), "CREATE USER \"Bob\" PASSWORD '<redacted>'");
        assert_eq!(r("ALTER USER carol PASSWORD $p$s3cret$p$;"), "ALTER USER carol PASSWORD '<redacted>';");
        assert_eq!(
            r("ALTER USER carol PASSWORD /* c */ 's3cret'"),
            "ALTER USER carol PASSWORD /* c */ '<redacted>'"
        );
        assert_eq!(r("ALTER USER carol PASSWORD NULL"), "ALTER USER carol PASSWORD NULL");
        assert_eq!(
            r("select 1; alter role a password 'x'; select 2"),
            "select 1; alter role a password '<redacted>'; select 2"
        );
    }

    #[test]
    fn what_psql_password_sends_is_redacted() {
        // psql's \password sends the SCRAM verifier, quoted as PQescapeLiteral does (E'…' with backslashes).
        let scram = "SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy";
        let sent = format!("ALTER USER postgres PASSWORD '{scram}'");
        assert_eq!(redact_secrets(&sent), "ALTER USER postgres PASSWORD '<redacted>'");
        assert_eq!(
            redact_secrets("ALTER USER \"al ice\" PASSWORD  E'a\\\\b'"),
            "ALTER USER \"al ice\" PASSWORD  '<redacted>'"
        );
        assert_eq!(
            redact_secrets("ALTER USER u PASSWORD U&'d\\0061t'"),
            "ALTER USER u PASSWORD '<redacted>'"
        );
    }

    #[test]
    fn a_literal_is_covered_however_backslashes_are_read() {
        // With standard_conforming_strings on, 'a\''b' is one literal; reading \' as an escape would end it early.
        assert_eq!(redact_secrets("ALTER ROLE a PASSWORD 'a\\''b'"), "ALTER ROLE a PASSWORD '<redacted>'");
        // With it off, 'a\'b' is one literal.
        assert_eq!(redact_secrets("ALTER ROLE a PASSWORD 'a\\'b'"), "ALTER ROLE a PASSWORD '<redacted>'");
        // Unterminated: to the end.
        assert_eq!(redact_secrets("ALTER ROLE a PASSWORD 'abc"), "ALTER ROLE a PASSWORD '<redacted>'");
    }

    #[test]
    fn connection_strings_and_option_passwords_are_redacted() {
        assert_eq!(
            redact_secrets("CREATE USER MAPPING FOR bob SERVER s OPTIONS (user 'bob', password 'pw')"),
            "CREATE USER MAPPING FOR bob SERVER s OPTIONS (user 'bob', password '<redacted>')"
        );
        assert_eq!(
            redact_secrets("CREATE SUBSCRIPTION s CONNECTION 'host=h password = pw' PUBLICATION p"),
            "CREATE SUBSCRIPTION s CONNECTION '<redacted>' PUBLICATION p"
        );
    }

    #[test]
    fn texts_without_a_password_are_left_alone() {
        for s in
            ["select 1", "select 'password'", "select password from users where password = 'x'", "é PASSWORD"]
        {
            assert_eq!(redact_secrets(s), s);
            assert!(matches!(redact_secrets(s), std::borrow::Cow::Borrowed(_)));
        }
    }
}
