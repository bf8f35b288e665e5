//! Plans by statement text, shared by every session (issue 16, item 3): a statement is parsed and rewritten
//! once per distinct text, not once per execution.
//!
//! Most drivers send the same parameterized texts over and over: an unnamed Parse per execution (psycopg
//! before its prepare threshold, node-postgres, pgjdbc before `prepareThreshold`, `pgbench -M extended`),
//! or a named Parse per connection. A plan depends only on the text, the catalog, and the `search_path` and
//! user that resolve the text's names against it, so those four are the key, and a new catalog (after a
//! reload) empties the cache.
//!
//! Clients of the simple protocol put their values in the text (`pgbench -M simple`, `psql`, drivers that
//! interpolate), so their texts are rarely sent twice. A text with literals is looked up first by its
//! fingerprint ([`super::fingerprint`]), whose entry is a plan template ([`super::plan_template`]) filled in
//! with the text's literals; a fingerprint whose plan could not be made a template is remembered as such,
//! and its texts take the exact-text way. `hits`/`misses` count the exact-text lookups, `fingerprint_hits`
//! and `fingerprint_misses` the lookups of texts with literals; a text whose fingerprint has no template
//! counts in both.
//!
//! The bound: two generations of at most [`GENERATION_BYTES`] each, counting the text, the rewritten text
//! and the plans, a cheap approximation of LRU (a hit in the older generation moves the entry to the newer;
//! when the newer is full, the older is dropped and the newer becomes the older). Exact texts, templates and
//! fingerprints without one share it. Texts longer than [`MAX_TEXT`] are not cached: a client decides how
//! long a query string is and how many statements it holds, and a long one is rarely sent twice. So clients
//! together can make the cache hold at most about twice [`GENERATION_BYTES`].

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::catalog::Catalog;
use super::fingerprint::{Fingerprint, fingerprint};
use super::plan::{PlannedQuery, RowPlan, StmtPlan};
use super::plan_template::PlanTemplate;
use super::search_path::SearchPath;

/// The most one generation holds, in bytes (as [`cost`] counts them).
pub const GENERATION_BYTES: usize = 4 << 20;

/// The longest text cached, in bytes.
pub const MAX_TEXT: usize = 8 * 1024;

/// What a plan was made from, besides the catalog.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Key {
    /// `text` is a fingerprint's key, not a statement's text.
    fingerprint: bool,
    text: String,
    user: String,
    path: SearchPath,
}

#[derive(Debug, Default)]
struct Generations {
    /// The catalog every entry was planned against.
    catalog: Option<Arc<Catalog>>,
    newer: HashMap<u64, (Key, Entry)>,
    /// What `newer` holds, by [`cost`].
    newer_bytes: usize,
    older: HashMap<u64, (Key, Entry)>,
}

/// What the cache holds for a key.
#[derive(Debug, Clone)]
enum Entry {
    /// An exact text's plan.
    Plan(PlannedQuery),
    /// A fingerprint's template, shared so that a lookup under the lock copies a pointer.
    Template(Arc<PlanTemplate>),
    /// A fingerprint whose plan could not be made a template: its texts take the exact-text way.
    NoTemplate,
}

/// About how many bytes an entry holds: its strings and its plans (a row plan is boxed, with its tables).
fn cost(key: &Key, entry: &Entry) -> usize {
    let (stmts, text) = match entry {
        Entry::Plan(p) => (&p.stmts[..], p.rewritten.as_ref().map_or(0, String::len)),
        Entry::Template(t) => (t.stmts(), t.text_bytes()),
        Entry::NoTemplate => (&[][..], 0),
    };
    let plans: usize = stmts
        .iter()
        .map(|s| {
            std::mem::size_of::<StmtPlan>()
                + match s {
                    StmtPlan::Rows(r) => std::mem::size_of::<RowPlan>() + r.tables.len() * 64,
                    _ => 0,
                }
        })
        .sum();
    let path = match &key.path {
        SearchPath::Schemas(s) => s.iter().map(String::len).sum(),
        _ => 0,
    };
    key.text.len() + key.user.len() + path + text + plans + 128
}

/// The shared plan cache.
#[derive(Debug, Default)]
pub struct PlanCache {
    inner: Mutex<Generations>,
    /// Lookups answered from the cache.
    pub hits: AtomicU64,
    /// Lookups that had to plan.
    pub misses: AtomicU64,
    /// Texts with literals answered from their fingerprint's template.
    pub fingerprint_hits: AtomicU64,
    /// Texts with literals whose fingerprint had no template (yet, or ever).
    pub fingerprint_misses: AtomicU64,
}

/// A lookup's key, borrowed.
#[derive(Clone, Copy)]
struct Wanted<'a> {
    fingerprint: bool,
    text: &'a str,
    user: &'a str,
    path: &'a SearchPath,
}

impl Wanted<'_> {
    fn hash(&self) -> u64 {
        BuildHasherDefault::<DefaultHasher>::default().hash_one((
            self.fingerprint,
            self.text,
            self.user,
            self.path,
        ))
    }

    fn is(&self, key: &Key) -> bool {
        key.fingerprint == self.fingerprint
            && key.text == self.text
            && key.user == self.user
            && key.path == *self.path
    }

    fn owned(&self) -> Key {
        Key {
            fingerprint: self.fingerprint,
            text: self.text.to_owned(),
            user: self.user.to_owned(),
            path: self.path.clone(),
        }
    }
}

impl PlanCache {
    /// The plan of `text` for `user` with `path` against `catalog`, from the cache or from `plan`, which
    /// plans any text the same way (a template is checked against a second text's plan).
    pub fn get_or_plan(
        &self,
        catalog: &Arc<Catalog>,
        user: &str,
        path: &SearchPath,
        text: &str,
        plan: impl Fn(&str) -> Option<PlannedQuery>,
    ) -> Option<PlannedQuery> {
        if text.len() > MAX_TEXT {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return plan(text);
        }
        if let Some(fp) = fingerprint(text) {
            let wanted = Wanted { fingerprint: true, text: &fp.key, user, path };
            match self.lookup(catalog, wanted) {
                Some(Entry::Template(t)) => {
                    if let Some(filled) = t.fill(text, &fp) {
                        self.fingerprint_hits.fetch_add(1, Ordering::Relaxed);
                        return Some(filled);
                    }
                }
                Some(_) => {}
                None => {
                    self.fingerprint_misses.fetch_add(1, Ordering::Relaxed);
                    return self.template(catalog, wanted, text, &fp, plan);
                }
            }
            self.fingerprint_misses.fetch_add(1, Ordering::Relaxed);
        }
        let wanted = Wanted { fingerprint: false, text, user, path };
        if let Some(Entry::Plan(found)) = self.lookup(catalog, wanted) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Some(found);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        // Planned outside the lock: planning takes microseconds, and other sessions need not wait for it.
        let planned = plan(text)?;
        self.insert(catalog, wanted, Entry::Plan(planned.clone()));
        Some(planned)
    }

    /// Plans `text`, whose fingerprint `fp` has no entry yet, and enters the fingerprint's template or
    /// that it has none; in that case the text's own plan is entered too, for the exact-text way.
    fn template(
        &self,
        catalog: &Arc<Catalog>,
        wanted: Wanted<'_>,
        text: &str,
        fp: &Fingerprint,
        plan: impl Fn(&str) -> Option<PlannedQuery>,
    ) -> Option<PlannedQuery> {
        let planned = plan(text)?;
        match PlanTemplate::make(text, fp, &planned, &plan) {
            Some(t) => self.insert(catalog, wanted, Entry::Template(Arc::new(t))),
            None => {
                self.insert(catalog, wanted, Entry::NoTemplate);
                let exact = Wanted { fingerprint: false, text, ..wanted };
                self.insert(catalog, exact, Entry::Plan(planned.clone()));
            }
        }
        Some(planned)
    }

    /// Enters `entry` under `wanted`, unless the catalog changed while it was planned.
    fn insert(&self, catalog: &Arc<Catalog>, wanted: Wanted<'_>, entry: Entry) {
        if let Ok(mut g) = self.inner.lock()
            && g.catalog.as_ref().is_some_and(|c| Arc::ptr_eq(c, catalog))
        {
            insert(&mut g, wanted.hash(), wanted.owned(), entry);
        }
    }

    fn lookup(&self, catalog: &Arc<Catalog>, wanted: Wanted<'_>) -> Option<Entry> {
        let mut g = self.inner.lock().ok()?;
        if !g.catalog.as_ref().is_some_and(|c| Arc::ptr_eq(c, catalog)) {
            // Planned against another catalog: every entry may resolve names differently now.
            *g = Generations { catalog: Some(catalog.clone()), ..Generations::default() };
            return None;
        }
        let h = wanted.hash();
        if let Some((key, e)) = g.newer.get(&h) {
            return wanted.is(key).then(|| e.clone());
        }
        let (key, e) = g.older.remove(&h)?;
        let found = wanted.is(&key).then(|| e.clone());
        insert(&mut g, h, key, e);
        found
    }
}

/// Puts an entry in the newer generation, turning a full newer generation into the older one first.
fn insert(g: &mut Generations, h: u64, key: Key, entry: Entry) {
    let bytes = cost(&key, &entry);
    if g.newer_bytes + bytes > GENERATION_BYTES {
        g.older = std::mem::take(&mut g.newer);
        g.newer_bytes = 0;
    }
    g.newer_bytes += bytes;
    if let Some((old_key, old_entry)) = g.newer.insert(h, (key, entry)) {
        g.newer_bytes -= cost(&old_key, &old_entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpret::plan::plan_query;

    fn planned(text: &str) -> Option<PlannedQuery> {
        Some(plan_query(text, &Catalog::default()))
    }

    #[test]
    fn a_text_is_planned_once_per_catalog_path_and_user() {
        let cache = PlanCache::default();
        let cat = Arc::new(Catalog::default());
        let planned_count = std::cell::Cell::new(0);
        let get = |cat: &Arc<Catalog>, user: &str, path: &SearchPath, text: &str| {
            cache.get_or_plan(cat, user, path, text, |t| {
                planned_count.set(planned_count.get() + 1);
                planned(t)
            })
        };
        let q = "SELECT now()";
        let first = get(&cat, "u", &SearchPath::Default, q);
        assert_eq!(get(&cat, "u", &SearchPath::Default, q), first);
        assert_eq!(get(&cat, "u", &SearchPath::Default, q), first);
        get(&cat, "other", &SearchPath::Default, q);
        get(&cat, "u", &SearchPath::Schemas(vec!["s".into()]), q);
        assert_eq!(planned_count.get(), 3);
        // A reloaded catalog plans again.
        let reloaded = Arc::new(Catalog::default());
        get(&reloaded, "u", &SearchPath::Default, q);
        assert_eq!(planned_count.get(), 4);
        assert_eq!(cache.hits.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn texts_that_differ_in_literals_share_one_template() {
        let cache = PlanCache::default();
        let cat = Arc::new(Catalog::from_rows(vec![("public".into(), "t".into(), Some("id".into()))]));
        let planned_count = std::cell::Cell::new(0);
        let get = |text: &str| {
            cache.get_or_plan(&cat, "u", &SearchPath::Default, text, |t| {
                planned_count.set(planned_count.get() + 1);
                Some(plan_query(t, &cat))
            })
        };
        for id in [7, 4711, 12, 7] {
            let text = format!("SELECT v FROM t WHERE id = {id}");
            assert_eq!(get(&text), Some(plan_query(&text, &cat)), "{text}");
        }
        // The first text and its probe; every later one from the template.
        assert_eq!(planned_count.get(), 2);
        assert_eq!(cache.fingerprint_hits.load(Ordering::Relaxed), 3);
        assert_eq!(cache.fingerprint_misses.load(Ordering::Relaxed), 1);
        // Several rewritten statements get no template: such texts are planned once per text, as before.
        let multi = "SELECT v FROM t WHERE id = 1; SELECT v FROM t WHERE id = 2";
        for _ in 0..3 {
            assert_eq!(get(multi), Some(plan_query(multi, &cat)));
        }
        assert_eq!(planned_count.get(), 4, "the text and its probe, once");
        assert_eq!(cache.hits.load(Ordering::Relaxed), 2);
        let other = "SELECT v FROM t WHERE id = 3; SELECT v FROM t WHERE id = 2";
        assert_eq!(get(other), Some(plan_query(other, &cat)));
        assert_eq!(planned_count.get(), 5, "no second probe for a fingerprint known to have no template");
    }

    #[test]
    fn the_cache_stays_within_two_generations_and_keeps_what_is_used() {
        let cache = PlanCache::default();
        let cat = Arc::new(Catalog::default());
        let hot = "SELECT c";
        for i in 0..(3 * GENERATION_BYTES / 200) {
            cache.get_or_plan(&cat, "u", &SearchPath::Default, hot, planned);
            let text = format!("SELECT c{i}");
            cache.get_or_plan(&cat, "u", &SearchPath::Default, &text, planned);
            // And as many fingerprints, each with its template.
            let text = format!("SELECT c{i} + 1");
            cache.get_or_plan(&cat, "u", &SearchPath::Default, &text, planned);
        }
        let g = cache.inner.lock().unwrap();
        let held = |m: &HashMap<u64, (Key, Entry)>| m.values().map(|(k, e)| cost(k, e)).sum::<usize>();
        assert!(!g.older.is_empty(), "the generations turned over");
        assert_eq!(held(&g.newer), g.newer_bytes);
        assert!(g.newer_bytes <= GENERATION_BYTES && held(&g.older) <= GENERATION_BYTES);
        assert!(g.newer.values().any(|(_, e)| matches!(e, Entry::Template(_))));
        drop(g);
        let planned_again = std::cell::Cell::new(false);
        cache.get_or_plan(&cat, "u", &SearchPath::Default, hot, |t| {
            planned_again.set(true);
            planned(t)
        });
        assert!(!planned_again.get(), "a text in use survives generations");
        let long = format!("SELECT {}", "1 + ".repeat(MAX_TEXT));
        let long_planned = std::cell::Cell::new(0);
        for _ in 0..2 {
            cache.get_or_plan(&cat, "u", &SearchPath::Default, &long, |t| {
                long_planned.set(long_planned.get() + 1);
                planned(t)
            });
        }
        assert_eq!(long_planned.get(), 2, "a long text is not cached");
    }
}
