//! Primary keys from the database catalog, cached per proxy.
//!
//! The version of a row is (table, primary key, version tag), so the interpreter must know every table's
//! primary key before it can rewrite a statement. The session loads the whole catalog in one query
//! ([`PK_QUERY`]) between two client transactions (never inside one), and reloads it when a statement
//! names a table the cache does not know. Tables without a primary key are known too, so they can be
//! reported as unverifiable rather than unknown.

use std::collections::HashMap;

use sqlparser::ast::ObjectName;

/// Lists every ordinary or partitioned user table with its primary-key columns in key order; a table with no
/// primary key appears once with a NULL column. Columns: schema, table, key column (or NULL).
pub const PK_QUERY: &str = "SELECT n.nspname::text, c.relname::text, a.attname::text \
     FROM pg_catalog.pg_class c \
     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     LEFT JOIN pg_catalog.pg_index i ON i.indrelid = c.oid AND i.indisprimary \
     LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) \
     WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
       AND n.nspname NOT LIKE 'pg_toast%' \
     ORDER BY 1, 2, array_position(i.indkey::int2[], a.attnum)";

/// One table as the catalog describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    /// The name used as the key namespace in the history: `table` for tables in `public`, else
    /// `schema.table`.
    pub namespace: String,
    /// The primary-key columns in key order; `None` when the table has no primary key.
    pub pk: Option<Vec<String>>,
}

/// What a table name in a statement resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// A table with a primary key.
    Keyed(&'a TableInfo),
    /// A table without a primary key: its rows have no stable identity, so it is unverifiable.
    NoPrimaryKey(&'a TableInfo),
    /// The cache does not know this name (created after the last load, a view, or a temporary table).
    Unknown,
    /// An unqualified name found in several schemas, none of them `public`: which table the session means
    /// depends on its `search_path`, which the proxy does not follow. Reloading the catalog cannot help.
    Ambiguous,
}

/// The cached catalog: table names (as `table` and `schema.table`, lower case) to their primary keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    tables: HashMap<String, TableInfo>,
    /// Unqualified names found in several schemas; `public` wins, others are ambiguous.
    ambiguous: Vec<String>,
    /// Every unqualified name with the schemas that have it, for [`Catalog::with_search_path`].
    by_name: HashMap<String, Vec<(String, TableInfo)>>,
}

impl Catalog {
    /// An empty catalog (every table is unknown).
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds the catalog from the rows of [`PK_QUERY`], in its order: (schema, table, key column).
    pub fn from_rows<I>(rows: I) -> Self
    where
        I: IntoIterator<Item = (String, String, Option<String>)>,
    {
        let mut by_qualified: Vec<(String, String, TableInfo)> = Vec::new();
        for (schema, table, column) in rows {
            let same = by_qualified.last().is_some_and(|(s, t, _)| *s == schema && *t == table);
            if !same {
                let namespace = if schema == "public" { table.clone() } else { format!("{schema}.{table}") };
                by_qualified.push((schema.clone(), table.clone(), TableInfo { namespace, pk: None }));
            }
            if let (Some(col), Some((_, _, info))) = (column, by_qualified.last_mut()) {
                info.pk.get_or_insert_with(Vec::new).push(col);
            }
        }
        let mut cat = Catalog::default();
        let mut unqualified: HashMap<String, Vec<(String, TableInfo)>> = HashMap::new();
        for (schema, table, info) in by_qualified {
            cat.tables.insert(format!("{schema}.{table}"), info.clone());
            unqualified.entry(table).or_default().push((schema, info));
        }
        cat.by_name = unqualified.clone();
        for (table, mut found) in unqualified {
            if found.len() == 1 {
                if let Some((_, info)) = found.pop() {
                    cat.tables.insert(table, info);
                }
            } else if let Some((_, info)) = found.into_iter().find(|(s, _)| s == "public") {
                cat.tables.insert(table, info);
            } else {
                cat.ambiguous.push(table);
            }
        }
        cat
    }

    /// This catalog as a session whose `search_path` is `path` (schemas in order; `None`: not known)
    /// resolves unqualified names: a name in one schema only is that table (PostgreSQL fails the statement
    /// when its schema is not on the path, so nothing is recorded); a name in several is the first schema on
    /// the path that has it, or ambiguous when none has it or the path is not known.
    pub fn with_search_path(&self, path: Option<&[String]>) -> Catalog {
        let mut cat = Catalog { by_name: self.by_name.clone(), ..Catalog::default() };
        for (name, info) in self.tables.iter().filter(|(name, _)| name.contains('.')) {
            cat.tables.insert(name.clone(), info.clone());
        }
        for (name, found) in &self.by_name {
            let pick = match found.as_slice() {
                [(_, only)] => Some(only),
                _ => path.and_then(|p| {
                    p.iter().find_map(|schema| found.iter().find(|(s, _)| s == schema).map(|(_, i)| i))
                }),
            };
            match pick {
                Some(info) => {
                    cat.tables.insert(name.clone(), info.clone());
                }
                None => cat.ambiguous.push(name.clone()),
            }
        }
        cat
    }

    /// How many tables (counted by qualified name) the catalog knows.
    pub fn len(&self) -> usize {
        self.tables.keys().filter(|k| k.contains('.')).count()
    }

    /// Whether the catalog knows no table.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// Resolves a table name as written in a statement. Unquoted identifiers fold to lower case, as
    /// PostgreSQL folds them; quoted ones keep their case.
    pub fn lookup(&self, name: &ObjectName) -> Lookup<'_> {
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|p| p.as_ident())
            .map(|id| if id.quote_style.is_some() { id.value.clone() } else { id.value.to_lowercase() })
            .collect();
        if parts.len() != name.0.len() || parts.is_empty() || parts.len() > 2 {
            return Lookup::Unknown;
        }
        match self.tables.get(&parts.join(".")) {
            Some(info) if info.pk.is_some() => Lookup::Keyed(info),
            Some(info) => Lookup::NoPrimaryKey(info),
            None if parts.len() == 1 && self.ambiguous.contains(&parts[0]) => Lookup::Ambiguous,
            None => Lookup::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::ast::Ident;

    fn name(parts: &[&str]) -> ObjectName {
        ObjectName::from(parts.iter().map(|p| Ident::new(*p)).collect::<Vec<_>>())
    }

    fn rows() -> Vec<(String, String, Option<String>)> {
        let r = |s: &str, t: &str, c: Option<&str>| (s.to_owned(), t.to_owned(), c.map(str::to_owned));
        vec![
            r("public", "accounts", Some("id")),
            r("public", "history", None),
            r("public", "pairs", Some("a")),
            r("public", "pairs", Some("b")),
            r("shop", "items", Some("sku")),
            r("shop", "accounts", Some("other")),
            r("eu", "orders", Some("id")),
            r("us", "orders", Some("id")),
        ]
    }

    #[test]
    fn keys_in_order_public_wins_and_no_key_is_known() {
        let cat = Catalog::from_rows(rows());
        let Lookup::Keyed(pairs) = cat.lookup(&name(&["pairs"])) else { panic!("pairs should be keyed") };
        assert_eq!(pairs.pk.as_deref(), Some(&["a".to_owned(), "b".to_owned()][..]));
        let Lookup::Keyed(acc) = cat.lookup(&name(&["Accounts"])) else { panic!("accounts") };
        assert_eq!(acc.namespace, "accounts");
        let Lookup::Keyed(other) = cat.lookup(&name(&["shop", "accounts"])) else { panic!("shop.accounts") };
        assert_eq!(other.namespace, "shop.accounts");
        assert!(matches!(cat.lookup(&name(&["items"])), Lookup::Keyed(i) if i.namespace == "shop.items"));
        assert!(matches!(cat.lookup(&name(&["history"])), Lookup::NoPrimaryKey(_)));
        assert_eq!(cat.lookup(&name(&["nope"])), Lookup::Unknown);
        // In two schemas, neither public: without a session's search_path the shared catalog cannot tell.
        assert_eq!(cat.lookup(&name(&["orders"])), Lookup::Ambiguous);
        // A session's search_path picks among schemas; an unknown path picks none.
        let on_path =
            |p: &[&str]| cat.with_search_path(Some(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
        let us = on_path(&["us", "public"]);
        assert!(matches!(us.lookup(&name(&["orders"])), Lookup::Keyed(o) if o.namespace == "us.orders"));
        let shop = on_path(&["shop", "public"]);
        assert!(
            matches!(shop.lookup(&name(&["accounts"])), Lookup::Keyed(a) if a.namespace == "shop.accounts")
        );
        let public = on_path(&["public"]);
        assert!(matches!(public.lookup(&name(&["accounts"])), Lookup::Keyed(a) if a.namespace == "accounts"));
        assert_eq!(public.lookup(&name(&["orders"])), Lookup::Ambiguous);
        assert_eq!(cat.with_search_path(None).lookup(&name(&["accounts"])), Lookup::Ambiguous);
        assert!(matches!(cat.with_search_path(None).lookup(&name(&["items"])), Lookup::Keyed(_)));
        assert!(
            matches!(cat.lookup(&name(&["us", "orders"])), Lookup::Keyed(o) if o.namespace == "us.orders")
        );
        assert_eq!(cat.len(), 7);
    }

    #[test]
    fn quoted_names_keep_their_case() {
        let cat = Catalog::from_rows(rows());
        let quoted = ObjectName::from(vec![Ident::with_quote('"', "Accounts")]);
        assert_eq!(cat.lookup(&quoted), Lookup::Unknown);
    }
}
