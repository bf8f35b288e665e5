//! The importers against the labelled corpus: every history's counts must equal the corpus README's table,
//! and every history must survive a native and a JSON Lines roundtrip unchanged.

use std::path::PathBuf;
use std::sync::OnceLock;

use history::codec::{self, Format, jsonl, native};
use history::{History, HistoryStats, Outcome};

/// The corpus: `$KRAIT_CORPUS`, or `<workspace root>/../shared/corpus`.
fn corpus() -> PathBuf {
    let dir = match std::env::var_os("KRAIT_CORPUS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus"),
    };
    assert!(
        dir.join("README.md").is_file(),
        "the corpus is missing: set KRAIT_CORPUS or put it at {} (see common notes)",
        dir.display()
    );
    dir
}

fn import(rel: &str) -> History {
    let path = corpus().join(rel);
    codec::read_history(&path, None).unwrap_or_else(|e| panic!("importing {rel}: {e}"))
}

/// The 100k-transaction history is imported once and shared by the tests that need it.
fn twitter_100k() -> &'static History {
    static H: OnceLock<History> = OnceLock::new();
    H.get_or_init(|| import("cobra/scaling/twitter-100000"))
}

/// The README's counts: sessions, txns, reads, writes, keys, fence ops.
const TABLE: [(&str, [u64; 6]); 6] = [
    ("cobra/ser-violation/cock-G2", [10, 446, 892, 446, 890, 0]),
    ("cobra/ser-violation/cock-blog", [13, 21, 18, 3, 3, 0]),
    ("cobra/one-shot-chengRW/chengRW-100", [24, 100, 408, 392, 763, 0]),
    ("cobra/one-shot-10k/twitter-10000", [24, 9_990, 32_067, 15_913, 36_882, 0]),
    ("cobra/one-shot-10k/rubis-10000", [24, 9_358, 35_770, 11_257, 31_235, 0]),
    ("cobra/scaling/twitter-100000", [24, 100_184, 406_249, 159_456, 83_925, 4_794]),
];

const CHENG_RW: [u64; 6] = [200, 300, 400, 500, 1000, 2000];

fn counts(s: &HistoryStats) -> [u64; 6] {
    [s.sessions, s.transactions, s.reads, s.writes, s.keys, s.fence_ops]
}

#[test]
fn cobra_imports_match_the_readme_counts() {
    for (rel, expected) in TABLE {
        let h = if rel.ends_with("twitter-100000") { twitter_100k().clone() } else { import(rel) };
        let stats = h.stats();
        assert_eq!(counts(&stats), expected, "{rel}: [sessions, txns, reads, writes, keys, fence ops]");
        // Cobra logs hold committed transactions only.
        assert_eq!(stats.committed, stats.transactions, "{rel}");
    }
}

#[test]
fn cheng_rw_histories_have_24_sessions_and_about_n_transactions() {
    for n in CHENG_RW {
        let rel = format!("cobra/one-shot-chengRW/chengRW-{n}");
        let s = import(&rel).stats();
        assert_eq!(s.sessions, 24, "{rel}");
        assert_eq!(s.fence_ops, 0, "{rel}");
        let off = (s.transactions as f64 - n as f64).abs() / n as f64;
        assert!(off <= 0.05, "{rel}: {} transactions is more than 5% from {n}", s.transactions);
    }
}

#[test]
fn cobra_fences_are_the_transactions_on_fzversion() {
    let h = twitter_100k();
    let fence_key = h.keys.get(&history::KeyName {
        namespace: String::new(),
        bytes: codec::cobra::FENCE_KEY_HASH.to_be_bytes().to_vec(),
    });
    let fence_key = fence_key.expect("twitter-100000 has the FZVERSION key");
    for t in &h.transactions {
        let touches = t.ops.iter().any(|op| op.key() == fence_key);
        assert_eq!(t.fence, touches, "{}", t.id);
    }
    assert!(h.transactions.iter().filter(|t| t.fence).count() > 4000);
}

#[test]
fn cobra_sessions_follow_file_numbers_and_seq_counts_up() {
    let h = import("cobra/ser-violation/cock-blog");
    let sessions: Vec<u64> = h.sessions().keys().map(|s| s.0).collect();
    assert_eq!(sessions, [0, 1, 5, 6, 7, 8, 9, 15, 16, 17, 18, 19, 20]);
    for txns in h.sessions().values() {
        for (i, t) in txns.iter().enumerate() {
            assert_eq!(t.seq, i as u64);
        }
    }
    // cock-blog is read-uncommitted: some reads observed writes that no logged transaction made.
    let written: std::collections::HashSet<_> = h
        .transactions
        .iter()
        .flat_map(|t| &t.ops)
        .filter_map(|op| match op {
            history::Op::Write { write, .. } => Some(*write),
            _ => None,
        })
        .collect();
    let dangling = h
        .transactions
        .iter()
        .flat_map(|t| &t.ops)
        .filter(|op| matches!(op, history::Op::Read { observed: history::Observed::Version(w), .. } if !written.contains(w)))
        .count();
    assert_eq!(dangling, 8, "the reads of unlogged writes are kept for the verifier");
}

fn all_cobra() -> Vec<String> {
    let mut v: Vec<String> = TABLE.iter().map(|(r, _)| (*r).to_owned()).collect();
    v.extend(CHENG_RW.iter().map(|n| format!("cobra/one-shot-chengRW/chengRW-{n}")));
    v
}

fn roundtrip(rel: &str, h: &History) {
    let bytes = native::encode(h).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let back = native::decode(&bytes).unwrap_or_else(|e| panic!("{rel}: {e}"));
    assert!(back == *h, "{rel}: the native roundtrip changed the history");
    let text = jsonl::encode_to_vec(h).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let back = jsonl::decode_bytes(&text).unwrap_or_else(|e| panic!("{rel}: {e}"));
    assert!(back == *h, "{rel}: the JSON Lines roundtrip changed the history");
}

#[test]
fn every_corpus_history_roundtrips_exactly() {
    for rel in all_cobra() {
        if rel.ends_with("twitter-100000") {
            roundtrip(&rel, twitter_100k());
        } else {
            roundtrip(&rel, &import(&rel));
        }
    }
    for rel in ["polysi/galera-lost-update.txt", "polysi/yugabyte-si.txt"] {
        roundtrip(rel, &import(rel));
    }
}

#[test]
fn native_format_stays_under_60_kb_per_1k_transactions() {
    let h = twitter_100k();
    let bytes = native::encode(h).expect("encodes");
    let per_1k = bytes.len() as f64 / (h.transactions.len() as f64 / 1000.0);
    assert!(per_1k <= 60_000.0, "{per_1k:.0} bytes per 1k transactions");
}

#[test]
fn polysi_histories_import_with_global_txn_ids() {
    let h = import("polysi/galera-lost-update.txt");
    let s = h.stats();
    assert_eq!((s.sessions, s.transactions, s.reads, s.writes, s.keys), (2, 7, 4, 10, 1));
    let ids: Vec<u64> = h.transactions.iter().map(|t| t.id.0).collect();
    assert_eq!(ids, [1, 2, 3, 4, 8, 9, 10]);

    let h = import("polysi/yugabyte-si.txt");
    let s = h.stats();
    assert_eq!((s.transactions, s.reads + s.writes), (20, 200));
    assert!(h.transactions.iter().all(|t| t.outcome == Outcome::Committed && t.ops.len() == 10));
    assert_eq!(codec::detect_format(&corpus().join("polysi/yugabyte-si.txt")).ok(), Some(Format::Polysi));
}
