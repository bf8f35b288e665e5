//! Which schema an unqualified table name means, per session: PostgreSQL resolves it through the session's
//! `search_path` (first schema on the path that has the table), so the proxy follows the path too. Without
//! it, `SET search_path = app` and a table `t` in both `app` and `public` made the proxy record `app.t`'s rows
//! as `public.t`'s: two tables' versions under one key, which can fake a stale read.
//!
//! The path comes from the startup packet (a `search_path` parameter, or `-c search_path=…` in `options`)
//! and from `SET [SESSION] search_path …`, `SET LOCAL search_path …` (until the transaction ends),
//! `RESET search_path`, `RESET ALL` and `DISCARD ALL` ([`SessionPath`]). Anything else that mentions
//! `search_path` (`set_config(…)`, a value the proxy cannot read) makes the path unknown: then a name found
//! in several schemas is ambiguous and its statement is not checked, never guessed. A block that rolls back
//! takes its `SET`s back with it, and `ROLLBACK TO SAVEPOINT` returns to the path the savepoint saw, as in
//! PostgreSQL (the session's tagger keeps those paths).

use super::catalog::Catalog;

/// The session's `search_path`, as far as the proxy knows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum SearchPath {
    /// PostgreSQL's default, `"$user", public`.
    #[default]
    Default,
    /// These schemas, in order (`$user` stands for the session user).
    Schemas(Vec<String>),
    /// Changed in a way the proxy could not follow.
    Unknown,
}

/// The schema name `$user` stands for in a path.
const USER: &str = "$user";

/// A session's path in two layers, as PostgreSQL keeps it: what `SET` made it for the session, and what
/// `SET LOCAL` made it for the open transaction only.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionPath {
    /// The session's path, which outlives transactions (a block that rolls back takes its changes back:
    /// the tagger sees to that).
    pub session: SearchPath,
    /// `SET LOCAL`'s path, in force until the open transaction ends.
    pub local: Option<SearchPath>,
}

impl SessionPath {
    /// A session whose path is `session`, with no `SET LOCAL` in force.
    pub fn new(session: SearchPath) -> Self {
        SessionPath { session, local: None }
    }

    /// The path names resolve through now.
    pub fn current(&self) -> &SearchPath {
        self.local.as_ref().unwrap_or(&self.session)
    }

    /// The path while the query string `sql` is planned, and the session's paths after it ran. A query that
    /// changes a path is planned with an unknown one (its statements may come before or after the change).
    /// A session-level change (`SET`, `RESET`, `DISCARD ALL`) also ends a `SET LOCAL`, as in PostgreSQL.
    pub fn through(&self, sql: &str) -> (SearchPath, SessionPath) {
        let lower = sql.to_ascii_lowercase();
        let resets = lower.contains("reset") || lower.contains("discard");
        if !lower.contains("search_path") && !resets {
            return (self.current().clone(), self.clone());
        }
        let mut after = self.clone();
        let mut changed = false;
        for piece in lower.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let words: Vec<&str> = piece.split_whitespace().collect();
            match words.as_slice() {
                ["reset", "search_path"] | ["reset", "all"] | ["discard", "all"] => {
                    after = SessionPath::new(SearchPath::Default);
                }
                ["show", "search_path"] => continue,
                _ if !piece.contains("search_path") => continue,
                ["set", "local", ..] => {
                    after.local = Some(set_local_statement(piece).unwrap_or(SearchPath::Unknown));
                }
                _ => after = SessionPath::new(set_statement(piece).unwrap_or(SearchPath::Unknown)),
            }
            changed = true;
        }
        let during = if changed { SearchPath::Unknown } else { self.current().clone() };
        (during, after)
    }

    /// The open transaction ended: its `SET LOCAL` ends with it.
    pub fn transaction_ended(&mut self) {
        self.local = None;
    }
}

impl SearchPath {
    /// The path a session starts with, from its startup parameters.
    pub fn from_startup(search_path: Option<&str>, options: Option<&str>) -> Self {
        if let Some(value) = search_path {
            return parse_value(value);
        }
        let Some(options) = options.filter(|o| o.contains("search_path")) else { return SearchPath::Default };
        // `-c search_path=a,b` or `--search_path=a,b`, one word (an escaped space is not followed).
        let words: Vec<&str> = options.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            let setting = match *w {
                "-c" => words.get(i + 1).copied(),
                w => w.strip_prefix("--").or_else(|| w.strip_prefix("-c")),
            };
            if let Some(value) = setting.and_then(|s| s.strip_prefix("search_path=")) {
                if value.ends_with('\\') {
                    return SearchPath::Unknown;
                }
                return parse_value(value);
            }
        }
        SearchPath::Unknown
    }

    /// The schemas in order, with `$user` replaced by `user`; `None` when the path is unknown.
    pub fn schemas(&self, user: &str) -> Option<Vec<String>> {
        let list = match self {
            SearchPath::Default => vec![USER.to_owned(), "public".to_owned()],
            SearchPath::Schemas(s) => s.clone(),
            SearchPath::Unknown => return None,
        };
        Some(list.into_iter().map(|s| if s == USER { user.to_owned() } else { s }).collect())
    }

    /// The catalog as this session resolves unqualified names.
    pub fn resolve(&self, catalog: &Catalog, user: &str) -> Catalog {
        catalog.with_search_path(self.schemas(user).as_deref())
    }
}

/// `set [session] search_path {to | =} value` (already lower case), or `None` for any other form.
fn set_statement(piece: &str) -> Option<SearchPath> {
    let rest = piece.strip_prefix("set")?.trim_start();
    assignment(rest.strip_prefix("session").map(str::trim_start).unwrap_or(rest))
}

/// `set local search_path {to | =} value` (already lower case), or `None` for any other form.
fn set_local_statement(piece: &str) -> Option<SearchPath> {
    assignment(piece.strip_prefix("set")?.trim_start().strip_prefix("local")?.trim_start())
}

/// `search_path {to | =} value`, or `None` for any other form.
fn assignment(rest: &str) -> Option<SearchPath> {
    let rest = rest.strip_prefix("search_path")?.trim_start();
    let value =
        rest.strip_prefix('=').or_else(|| rest.strip_prefix("to ")).or_else(|| rest.strip_prefix("to\t"))?;
    Some(parse_value(value.trim()))
}

/// A path value: `DEFAULT`, or a comma-separated list of identifiers (unquoted ones fold to lower case;
/// `"quoted"` ones keep their case) or of string literals holding such lists. Anything else is unknown.
fn parse_value(value: &str) -> SearchPath {
    let value = value.trim();
    if value.eq_ignore_ascii_case("default") {
        return SearchPath::Default;
    }
    let mut schemas = Vec::new();
    for item in value.split(',').map(str::trim) {
        let item = match item.strip_prefix('\'').and_then(|i| i.strip_suffix('\'')) {
            // A literal holding one name (a literal holding a list is split with the others above only when
            // it has no comma; otherwise it is not followed).
            Some(inner) if !inner.contains('\'') => inner.trim(),
            Some(_) => return SearchPath::Unknown,
            None => item,
        };
        let name = if let Some(quoted) = item.strip_prefix('"').and_then(|i| i.strip_suffix('"')) {
            if quoted.is_empty() || quoted.contains('"') {
                return SearchPath::Unknown;
            }
            quoted.to_owned()
        } else if item == USER {
            USER.to_owned()
        } else if !item.is_empty()
            && item.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && item.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        {
            item.to_ascii_lowercase()
        } else {
            return SearchPath::Unknown;
        };
        schemas.push(name);
    }
    if schemas.is_empty() { SearchPath::Unknown } else { SearchPath::Schemas(schemas) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schemas(v: &[&str]) -> SearchPath {
        SearchPath::Schemas(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn startup_parameters_and_options_set_the_first_path() {
        assert_eq!(SearchPath::from_startup(None, None), SearchPath::Default);
        assert_eq!(SearchPath::from_startup(Some("app, public"), None), schemas(&["app", "public"]));
        assert_eq!(SearchPath::from_startup(None, Some("-c search_path=app")), schemas(&["app"]));
        assert_eq!(SearchPath::from_startup(None, Some("--search_path=App,\"Q\"")), schemas(&["app", "Q"]));
        assert_eq!(SearchPath::from_startup(None, Some("-c statement_timeout=5")), SearchPath::Default);
        assert_eq!(SearchPath::from_startup(None, Some("-c search_path=a\\ b")), SearchPath::Unknown);
    }

    #[test]
    fn set_reset_and_discard_are_followed_and_anything_else_is_unknown() {
        let d = SessionPath::default();
        let session = |p: SearchPath| SessionPath::new(p);
        assert_eq!(d.through("SELECT 1"), (SearchPath::Default, d.clone()));
        assert_eq!(d.through("SET search_path = app, public").1, session(schemas(&["app", "public"])));
        assert_eq!(
            d.through("set session search_path to '$user', shop").1,
            session(schemas(&["$user", "shop"]))
        );
        assert_eq!(d.through("SET search_path TO DEFAULT").1, d);
        assert_eq!(d.through("SET search_path = 'app'").1, session(schemas(&["app"])));
        let app = session(schemas(&["app"]));
        assert_eq!(app.through("RESET search_path").1, d);
        assert_eq!(app.through("DISCARD ALL").1, d);
        assert_eq!(app.through("SHOW search_path"), (schemas(&["app"]), app.clone()));
        for other in [
            "SELECT set_config('search_path', 'x', false)",
            "SET search_path = 'a, b'",
            "SET search_path = a-b",
        ] {
            assert_eq!(app.through(other).1, session(SearchPath::Unknown), "{other}");
        }
        // A query that changes the path is planned with an unknown one.
        assert_eq!(d.through("SET search_path = app; SELECT 1").0, SearchPath::Unknown);
        assert_eq!(SearchPath::Default.schemas("alice"), Some(vec!["alice".into(), "public".into()]));
    }

    /// `SET LOCAL` holds until the transaction ends, over the session's path, which it leaves alone; a
    /// session-level `SET` or `RESET` ends it, as in PostgreSQL.
    #[test]
    fn set_local_lasts_until_the_transaction_ends() {
        let app = SessionPath::new(schemas(&["app"]));
        let (_, mut local) = app.through("SET LOCAL search_path = tenant_7, public");
        assert_eq!(local.current(), &schemas(&["tenant_7", "public"]));
        assert_eq!(local.session, schemas(&["app"]));
        assert_eq!(local.through("SELECT 1").0, schemas(&["tenant_7", "public"]));
        assert_eq!(local.through("SET search_path = other").1, SessionPath::new(schemas(&["other"])));
        assert_eq!(local.through("RESET search_path").1, SessionPath::default());
        assert_eq!(local.through("set local search_path to a-b").1.current(), &SearchPath::Unknown);
        local.transaction_ended();
        assert_eq!(local, app);
    }
}
