//! Plans by statement text, shared by every session (issue 16, item 3): a statement is parsed and rewritten
//! once per distinct text, not once per execution.
//!
//! Most drivers send the same parameterized texts over and over: an unnamed Parse per execution (psycopg
//! before its prepare threshold, node-postgres, pgjdbc before `prepareThreshold`, `pgbench -M extended`),
//! or a named Parse per connection. A plan depends only on the text, the catalog, and the `search_path` and
//! user that resolve the text's names against it, so those four are the key, and a new catalog (after a
//! reload) empties the cache.
//!
//! The bound: two generations of at most [`GENERATION_BYTES`] each, counting the text, the rewritten text
//! and the plans, a cheap approximation of LRU (a hit in the older generation moves the entry to the newer;
//! when the newer is full, the older is dropped and the newer becomes the older). Texts longer than
//! [`MAX_TEXT`] are not cached: a client decides how long a query string is and how many statements it
//! holds, and a long one is rarely sent twice. So clients together can make the cache hold at most about
//! twice [`GENERATION_BYTES`].

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::catalog::Catalog;
use super::plan::{PlannedQuery, RowPlan, StmtPlan};
use super::search_path::SearchPath;

/// The most one generation holds, in bytes (as [`cost`] counts them).
pub const GENERATION_BYTES: usize = 4 << 20;

/// The longest text cached, in bytes.
pub const MAX_TEXT: usize = 8 * 1024;

/// What a plan was made from, besides the catalog.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Key {
    text: String,
    user: String,
    path: SearchPath,
}

#[derive(Debug, Default)]
struct Generations {
    /// The catalog every entry was planned against.
    catalog: Option<Arc<Catalog>>,
    newer: HashMap<u64, (Key, PlannedQuery)>,
    /// What `newer` holds, by [`cost`].
    newer_bytes: usize,
    older: HashMap<u64, (Key, PlannedQuery)>,
}

/// About how many bytes an entry holds: its strings and its plans (a row plan is boxed, with its tables).
fn cost(key: &Key, plan: &PlannedQuery) -> usize {
    let plans: usize = plan
        .stmts
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
    key.text.len() + key.user.len() + path + plan.rewritten.as_ref().map_or(0, String::len) + plans + 128
}

/// The shared plan cache.
#[derive(Debug, Default)]
pub struct PlanCache {
    inner: Mutex<Generations>,
    /// Lookups answered from the cache.
    pub hits: AtomicU64,
    /// Lookups that had to plan.
    pub misses: AtomicU64,
}

fn hash(text: &str, user: &str, path: &SearchPath) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one((text, user, path))
}

fn same(key: &Key, text: &str, user: &str, path: &SearchPath) -> bool {
    key.text == text && key.user == user && key.path == *path
}

impl PlanCache {
    /// The plan of `text` for `user` with `path` against `catalog`, from the cache or from `plan`.
    pub fn get_or_plan(
        &self,
        catalog: &Arc<Catalog>,
        user: &str,
        path: &SearchPath,
        text: &str,
        plan: impl FnOnce() -> Option<PlannedQuery>,
    ) -> Option<PlannedQuery> {
        if text.len() > MAX_TEXT {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return plan();
        }
        let h = hash(text, user, path);
        if let Some(found) = self.lookup(catalog, h, text, user, path) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Some(found);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        // Planned outside the lock: planning takes microseconds, and other sessions need not wait for it.
        let planned = plan()?;
        if let Ok(mut g) = self.inner.lock()
            && g.catalog.as_ref().is_some_and(|c| Arc::ptr_eq(c, catalog))
        {
            let key = Key { text: text.to_owned(), user: user.to_owned(), path: path.clone() };
            insert(&mut g, h, key, planned.clone());
        }
        Some(planned)
    }

    fn lookup(
        &self,
        catalog: &Arc<Catalog>,
        h: u64,
        text: &str,
        user: &str,
        path: &SearchPath,
    ) -> Option<PlannedQuery> {
        let mut g = self.inner.lock().ok()?;
        if !g.catalog.as_ref().is_some_and(|c| Arc::ptr_eq(c, catalog)) {
            // Planned against another catalog: every entry may resolve names differently now.
            *g = Generations { catalog: Some(catalog.clone()), ..Generations::default() };
            return None;
        }
        if let Some((key, p)) = g.newer.get(&h) {
            return same(key, text, user, path).then(|| p.clone());
        }
        let (key, p) = g.older.remove(&h)?;
        let found = same(&key, text, user, path).then(|| p.clone());
        insert(&mut g, h, key, p);
        found
    }
}

/// Puts an entry in the newer generation, turning a full newer generation into the older one first.
fn insert(g: &mut Generations, h: u64, key: Key, plan: PlannedQuery) {
    let bytes = cost(&key, &plan);
    if g.newer_bytes + bytes > GENERATION_BYTES {
        g.older = std::mem::take(&mut g.newer);
        g.newer_bytes = 0;
    }
    g.newer_bytes += bytes;
    if let Some((old_key, old_plan)) = g.newer.insert(h, (key, plan)) {
        g.newer_bytes -= cost(&old_key, &old_plan);
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
            cache.get_or_plan(cat, user, path, text, || {
                planned_count.set(planned_count.get() + 1);
                planned(text)
            })
        };
        let q = "SELECT 1";
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
    fn the_cache_stays_within_two_generations_and_keeps_what_is_used() {
        let cache = PlanCache::default();
        let cat = Arc::new(Catalog::default());
        let hot = "SELECT 0";
        for i in 0..(3 * GENERATION_BYTES / 200) {
            cache.get_or_plan(&cat, "u", &SearchPath::Default, hot, || planned(hot));
            let text = format!("SELECT {}", i + 1);
            cache.get_or_plan(&cat, "u", &SearchPath::Default, &text, || planned(&text));
        }
        let g = cache.inner.lock().unwrap();
        let held = |m: &HashMap<u64, (Key, PlannedQuery)>| m.values().map(|(k, p)| cost(k, p)).sum::<usize>();
        assert!(!g.older.is_empty(), "the generations turned over");
        assert_eq!(held(&g.newer), g.newer_bytes);
        assert!(g.newer_bytes <= GENERATION_BYTES && held(&g.older) <= GENERATION_BYTES);
        drop(g);
        let mut planned_again = false;
        cache.get_or_plan(&cat, "u", &SearchPath::Default, hot, || {
            planned_again = true;
            planned(hot)
        });
        assert!(!planned_again, "a text in use survives generations");
        let long = format!("SELECT {}", "1 + ".repeat(MAX_TEXT));
        let mut long_planned = 0;
        for _ in 0..2 {
            cache.get_or_plan(&cat, "u", &SearchPath::Default, &long, || {
                long_planned += 1;
                planned(&long)
            });
        }
        assert_eq!(long_planned, 2, "a long text is not cached");
    }
}
