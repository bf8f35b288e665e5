//! The plan cache's fingerprint way against planning every text afresh (issue 16, item 3): for the
//! statements of pgbench's scripts and of `krait workload run` (with their values as literals, as a
//! simple-protocol client sends them), for hand-picked awkward texts, and for random literals in each, the
//! plan from the cache (a template filled in, most of the time) must equal the full parse's, field for
//! field: the rewritten text the database runs, each statement's plan, the point lookups' key values that
//! become Absent reads, and the splice offset that error positions are moved back by.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use proxy::interpret::plan_cache::PlanCache;
use proxy::interpret::search_path::SearchPath;
use proxy::interpret::{Catalog, PlanOptions, plan_query_with};

fn catalog() -> Catalog {
    let keyed = |t: &str, c: Option<&str>| ("public".to_owned(), t.to_owned(), c.map(str::to_owned));
    Catalog::from_rows(vec![
        keyed("pgbench_accounts", Some("aid")),
        keyed("pgbench_tellers", Some("tid")),
        keyed("pgbench_branches", Some("bid")),
        keyed("pgbench_history", None),
        keyed("t", Some("a")),
        keyed("t", Some("b")),
        keyed("kv", Some("k")),
        keyed("accounts", Some("id")),
        keyed("Mixed Case", Some("Id")),
    ])
}

/// Statement shapes, each with whether texts of it must be answered from a template (most are; printed
/// multi-statement rewrites and unparsable texts are not). In a shape, `#i` is an integer, `#z` a signed
/// one, `#d` a decimal, `#s` a string, `#n` any of the three, and `#p` a small positive integer (a type
/// length).
const SHAPES: &[(&str, bool)] = &[
    // pgbench -M simple: tpcb-like and select-only.
    ("SELECT abalance FROM pgbench_accounts WHERE aid = #i;", true),
    ("UPDATE pgbench_accounts SET abalance = abalance + #z WHERE aid = #i;", true),
    ("UPDATE pgbench_tellers SET tbalance = tbalance + #z WHERE tid = #i;", true),
    ("UPDATE pgbench_branches SET bbalance = bbalance + #z WHERE bid = #i;", true),
    (
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (#i, #i, #i, #z, CURRENT_TIMESTAMP);",
        true,
    ),
    // The workloads' statements (crates/workloads/src/schema.rs, transfer.rs) with literals.
    ("SELECT a, b, c FROM t WHERE a = #i AND b = #i", true),
    ("INSERT INTO t (a, b, c) VALUES (#i, #i, #s)", true),
    ("UPDATE t SET c = #s WHERE a = #i AND b = #i", true),
    ("INSERT INTO t (a, b, c) VALUES (#i, #i, #s), (#i, #i, #s), (#i, #i, #s)", true),
    ("SELECT id, balance FROM accounts WHERE id = #i OR id = #i", true),
    ("UPDATE accounts SET balance = #z WHERE id = #i", true),
    ("DELETE FROM t WHERE a = #i AND b = #i", true),
    ("SELECT k, v FROM kv WHERE k = #s", true),
    ("SELECT fingerprint FROM kv WHERE k = #s AND v = #s", true),
    // Literals before and at the splice, casts, comments, quoting, odd spacing.
    ("SELECT #n, c FROM t WHERE a = #i AND b = #i", true),
    ("SELECT c, #s FROM t WHERE a = #i", true),
    ("SELECT c, #n FROM t WHERE a = #i AND b = #i", true),
    ("SELECT 'é→' || #s, c FROM t WHERE a = #i AND b = #i", true),
    ("SELECT c FROM t WHERE a = #i AND b = #i FOR UPDATE", true),
    ("SELECT c FROM t WHERE a IN (#i, #i) ORDER BY a LIMIT #i", true),
    ("SELECT c FROM t WHERE c = #s || #s -- a comment with 'quotes' and 12\n", true),
    ("select  c /* 'x' 5 */ from t where (a) = (#i) and b = #i;", true),
    ("SELECT \"c\" FROM \"t\" WHERE a = #d::bigint AND b = #i", true),
    ("SELECT c FROM t WHERE a = #s::bigint AND b = #i", true),
    ("SELECT c FROM t WHERE a = -#i AND b = (#i)", true),
    ("SELECT x.c FROM t AS x WHERE x.a = #i AND x.b = #i", true),
    ("SELECT c FROM t WHERE b = #i AND a = #i\n;", true),
    ("SELECT c::varchar(#p) FROM t WHERE a = #i AND b = #i", true),
    ("SELECT \"Id\" FROM \"Mixed Case\" WHERE \"Id\" = #n", true),
    ("SELECT c FROM t WHERE a = #i AND c = #s AND b = #i", true),
    ("SELECT c FROM t WHERE a BETWEEN #i AND #i", true),
    ("SELECT c FROM t WHERE a = $1 AND b = #i", true),
    ("SELECT c FROM t WHERE a = #i AND b = #i AND c <> #s ORDER BY c LIMIT #i OFFSET #i", true),
    ("SELECT a FROM t WHERE ARRAY[#i, #i] @> ARRAY[a] AND b = #i", true),
    // Writes with RETURNING, upserts, reads of the replaced row.
    ("INSERT INTO t (a, b, c) VALUES (#i, #i, #s) ON CONFLICT (a, b) DO UPDATE SET c = #s", true),
    ("INSERT INTO t (a, b, c) VALUES (#i, #i, #s) ON CONFLICT DO NOTHING RETURNING c;  ", true),
    ("UPDATE t SET c = c || #s WHERE a = #i AND b = #i RETURNING c", true),
    ("update t set c = #s where a = #i and b = #i -- done\n;", true),
    ("DELETE FROM t WHERE a = #i AND b = #i RETURNING c, #n", true),
    ("UPDATE \"Mixed Case\" SET v = #n WHERE \"Id\" = #n", true),
    // Not rows: control, opaque, unparsed; several statements.
    ("SELECT #n", true),
    ("SET application_name = #s", true),
    ("SELECT count(*) FROM t WHERE a > #i", true),
    ("SELECT c FROM nowhere WHERE a = #i", true),
    ("SELECT nextval(#s)", true),
    ("INSERT INTO pgbench_history (tid, delta) VALUES (#i, #z)", true),
    ("BEGIN; SELECT #n; COMMIT", true),
    ("SELECT c FROM t WHERE a = #i AND b = #i AND", false),
    ("BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT c FROM t WHERE a = #i AND b = #i", false),
    ("UPDATE t SET c = #s WHERE a = #i AND b = #i; COMMIT", false),
    ("SELECT c FROM t WHERE a = #i; SELECT v FROM kv WHERE k = #s", false),
    // Printed as the client wrote it, but sqlparser prints a string value with two quotes in a row (`''''`
    // in the text) as one escaped quote: a printed text is never a template.
    ("SELECT #s; SELECT v FROM kv WHERE k = #s", false),
];

/// A small deterministic generator (xorshift64*), so that a failure names a text that can be rerun. A
/// quarter of the texts are wild: their literals may have a leading zero, more digits than a slot takes, or
/// a backslash or line break in a string, which keep them (or the whole text) out of the shape's
/// fingerprint.
struct Rng(u64, bool);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn digits(&mut self, max: u64) -> String {
        let n = 1 + self.below(max);
        (0..n).map(|_| char::from(b'0' + self.below(10) as u8)).collect()
    }

    fn int(&mut self) -> String {
        match self.below(10) {
            0 => "0".to_owned(),
            1 if self.1 => format!("0{}", self.digits(3)),
            2 if self.1 => self.digits(20),
            _ => {
                let d = self.digits(15);
                let d = d.trim_start_matches('0');
                if d.is_empty() { "1".to_owned() } else { d.to_owned() }
            }
        }
    }

    fn string(&mut self) -> String {
        const PIECES: &[&str] = &[
            "a",
            "Z",
            " ",
            "''",
            ";",
            "--",
            "/*",
            "*/",
            "\"",
            "$",
            "$$",
            "7",
            "97315",
            "é",
            "→",
            ":",
            "::",
            "?",
            "%",
            "\t",
            ",",
            "(",
            "RETURNING",
            "0000000001",
        ];
        const WILD: &[&str] = &["\\", "\n", "\r\n"];
        let n = self.below(8);
        let mut s = String::from("'");
        for _ in 0..n {
            let wild = self.1 && self.below(4) == 0;
            let pieces = if wild { WILD } else { PIECES };
            s.push_str(pieces[self.below(pieces.len() as u64) as usize]);
        }
        s.push('\'');
        s
    }

    fn literal(&mut self, kind: char) -> String {
        match kind {
            'i' => self.int(),
            'z' if self.below(2) == 0 => format!("-{}", self.int()),
            'z' => self.int(),
            'd' => format!("{}.{}", self.digits(6), self.digits(6)),
            's' => self.string(),
            'p' => (1 + self.below(500)).to_string(),
            _ => match self.below(3) {
                0 => self.literal('i'),
                1 => self.literal('d'),
                _ => self.literal('s'),
            },
        }
    }

    fn fill(&mut self, shape: &str) -> String {
        self.1 = self.below(4) == 0;
        let mut out = String::new();
        let mut parts = shape.split('#');
        out.push_str(parts.next().unwrap_or(""));
        for part in parts {
            let mut chars = part.chars();
            let kind = chars.next().unwrap_or('n');
            out.push_str(&self.literal(kind));
            out.push_str(chars.as_str());
        }
        out
    }
}

/// Plans `text` through `cache` and afresh, and says where they differ. `cache` holds plans made with
/// `options` only (a proxy plans with one set of options).
fn check_with(cache: &PlanCache, cat: &Arc<Catalog>, text: &str, options: PlanOptions) {
    let full = plan_query_with(text, cat, options);
    let cached =
        cache.get_or_plan(cat, "u", &SearchPath::Default, text, |t| Some(plan_query_with(t, cat, options)));
    assert_eq!(
        cached.as_ref(),
        Some(&full),
        "the cache's plan differs from the full parse of {text:?} ({options:?})"
    );
}

/// [`check_with`] with the default options.
fn check(cache: &PlanCache, cat: &Arc<Catalog>, text: &str) {
    check_with(cache, cat, text, PlanOptions::default());
}

#[test]
fn the_fingerprint_way_plans_as_a_full_parse_does() {
    let cat = Arc::new(catalog());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15, false);
    let rounds = 150;
    for (shape, templated) in SHAPES {
        let cache = PlanCache::default();
        // Writes also return the row they wrote when values are recorded: the same templates must hold.
        let with_rows = PlanCache::default();
        for _ in 0..rounds {
            let text = rng.fill(shape);
            check(&cache, &cat, &text);
            check_with(&with_rows, &cat, &text, PlanOptions { write_rows: true });
        }
        let with_rows_hits = with_rows.fingerprint_hits.load(Ordering::Relaxed);
        let hits = cache.fingerprint_hits.load(Ordering::Relaxed);
        eprintln!("{hits:>4} of {rounds} from a template: {shape:?}");
        if *templated {
            // Wild texts make other fingerprints, or none; the others share the shape's.
            assert!(hits >= rounds / 2, "{shape}: only {hits} of {rounds} texts filled in a template");
            assert!(with_rows_hits >= rounds / 2, "{shape}: {with_rows_hits} of {rounds} with written rows");
        } else {
            assert_eq!(hits, 0, "{shape}: no template expected");
        }
    }
}

#[test]
fn awkward_texts_plan_as_a_full_parse_does() {
    let cat = Arc::new(catalog());
    let cache = PlanCache::default();
    let texts = [
        "SELECT abalance FROM pgbench_accounts WHERE aid = 1;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 123456789012345;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 973150000000000;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 9731500000000001;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 007;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 1e3;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 1.5;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = '1';",
        "SELECT abalance FROM pgbench_accounts WHERE aid = E'1';",
        "SELECT abalance FROM pgbench_accounts WHERE aid = $$1$$;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 1 -- 2\n",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 1 /* 2 */",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 1 /* /* 2 */ */",
        "SELECT abalance, '97315' FROM pgbench_accounts WHERE aid = 1",
        "SELECT abalance, 'x' FROM pgbench_accounts WHERE aid = 1",
        "SELECT abalance, 'xx' FROM pgbench_accounts WHERE aid = 1",
        "SELECT abalance, 'a''b' FROM pgbench_accounts WHERE aid = 1",
        "SELECT abalance, 'é' FROM pgbench_accounts WHERE aid = 1",
        "SELECT abalance, 'éé' FROM pgbench_accounts WHERE aid = 22",
        "SELECT abalance, 'a'\n'b' FROM pgbench_accounts WHERE aid = 1",
        "SELECT v FROM kv WHERE k = 'it''s'",
        "SELECT v FROM kv WHERE k = 'its'",
        "SELECT v FROM kv WHERE k = ''",
        "SELECT v FROM kv WHERE k = ''''",
        "SELECT v FROM kv WHERE k = 'a\\'",
        "SELECT v FROM kv WHERE k = U&'a'",
        "SELECT v FROM kv WHERE k = N'a'",
        "SELECT v FROM kv WHERE k = 'a'::text",
        "SELECT t.1 FROM t WHERE a = 1",
        "SELECT c FROM t WHERE a = 1 AND b = 2 AND",
        "SELECT c FROM t WHERE a = 1 AND b = 2 AND a = 3",
        "SELECT c FROM t WHERE a = 10 AND b = 20 AND a = 30",
        "SELECT c::varchar(20) FROM t WHERE a = 1 AND b = 2",
        "SELECT c::varchar(2000) FROM t WHERE a = 1 AND b = 2",
        "SELECT c::varchar(020) FROM t WHERE a = 1 AND b = 2",
        "SELECT c::varchar(99999999999999999999) FROM t WHERE a = 1 AND b = 2",
        "SELECT c::varchar(2.5) FROM t WHERE a = 1 AND b = 2",
        "SELECT c FROM t WHERE a = 1\r\n AND b = 2",
        "SELECT c FROM t WHERE a = 1\r AND b = 2",
        "SELECT 'x\ry', c FROM t WHERE a = 1 AND b = 2",
        "SELECT \"a\"\"b\", c FROM t WHERE a = 1 AND b = 2",
        "INSERT INTO t (a, b, c) VALUES (1, 2, 'x') RETURNING c",
        "INSERT INTO t (a, b, c) VALUES (1, 2, 'x') RETURNING c;;",
        "INSERT INTO t (a, b, c) VALUES (1, 2, 'x');;",
        "SAVEPOINT s1",
        "ROLLBACK TO SAVEPOINT s1",
        "BEGIN; SELECT 1; COMMIT",
        "BEGIN; SELECT 12; COMMIT",
        "SELECT 'a'; SELECT v FROM kv WHERE k = 'b'",
        "SELECT 'a''''b'; SELECT v FROM kv WHERE k = 'b'",
        "",
        ";;",
        "5",
        "'x'",
    ];
    for _ in 0..2 {
        for text in texts {
            check(&cache, &cat, text);
        }
    }
}
