//! Rounds under `declared` (the level `krait serve` checks by default): garbage collection runs while every
//! transaction is held to serializability (fences too, whatever level their `BEGIN` names) or to read
//! committed, and stops for good at the first transaction that asked for REPEATABLE READ. A read-committed
//! or snapshot reader's read of a collected version is unverifiable, never a stale read (read committed may
//! read a superseded version). Against one-shot verification at `declared` (the split polygraph, which
//! collection never uses) on random histories of mixed levels, and of levels that change part-way.

use history::{History, HistoryBuilder, IsolationLevel};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use verifier::{AnomalyClass, Level, Options, RoundOptions, verify};

mod common;

fn declared() -> Options {
    Options { level: Level::Declared, ..Options::default() }
}

fn rounds(size: usize) -> RoundOptions {
    RoundOptions { verify: declared(), ..RoundOptions::offline(size) }
}

/// Every transaction of `h` at `level`, and its fences at READ COMMITTED, as the proxy records them.
fn at(mut h: History, level: IsolationLevel) -> History {
    for t in &mut h.transactions {
        t.isolation = Some(if t.fence { IsolationLevel::ReadCommitted } else { level });
    }
    h
}

/// Fences alternating between sessions 1 and 2, `count` of them, with write ids from 1000.
fn fences(mut b: HistoryBuilder, count: u64) -> HistoryBuilder {
    for i in 0..count {
        let prev = if i == 0 { 0 } else { 1000 + i - 1 };
        b = common::fence(b, 1 + i % 2, prev, 1000 + i);
    }
    b
}

fn online(h: &History, size: usize) -> common::Online {
    common::online(h, rounds(size))
}

/// T1 writes x=1, T2 read-modify-writes it to x=2, then ten fences; a reader of x=1 at `reader` comes last.
fn collected_x1_then(reader: IsolationLevel) -> History {
    let b = HistoryBuilder::new().txn(1, |t| t.write("x", 1)).txn(1, |t| t.read("x", 1).write("x", 2));
    let mut h =
        at(fences(b, 10).txn(2, |t| t.read("x", 1).write("y", 99)).build(), IsolationLevel::Serializable);
    h.transactions.last_mut().expect("the reader").isolation = Some(reader);
    h
}

#[test]
fn declared_collects_while_every_transaction_is_serializable_and_judges_a_stale_read() {
    let h = collected_x1_then(IsolationLevel::Serializable);
    assert!(!verify(&h, &declared()).unwrap().is_accept(), "a serializable reader of x=1 cannot go last");
    let out = online(&h, 2);
    assert!(out.deleted > 0, "collection runs under declared while every transaction is serializable");
    assert_eq!(out.gc_disabled, None);
    let [report] = &out.rejects[..] else { panic!("one reject: {}", out.rejects.len()) };
    assert_eq!(report.anomalies[0].class, AnomalyClass::StaleRead, "{}", report.render_text());
    assert_eq!(report.level, Level::Declared);
}

#[test]
fn a_read_committed_reader_of_a_collected_version_is_unverifiable_and_collection_goes_on() {
    let h = collected_x1_then(IsolationLevel::ReadCommitted);
    assert!(verify(&h, &declared()).unwrap().is_accept(), "PL-2 lets a reader see a superseded version");
    let out = online(&h, 2);
    assert!(out.deleted > 0, "x=1's writer was collected before the read-committed reader came");
    assert!(out.rejects.is_empty(), "{}", out.rejects[0].render_text());
    assert_eq!(out.unverifiable, 1);
    assert_eq!(out.gc_disabled, None, "read committed does not stop collection");
}

#[test]
fn a_repeatable_read_transaction_stops_collection_for_good() {
    let h = collected_x1_then(IsolationLevel::RepeatableRead);
    assert!(!verify(&h, &declared()).unwrap().is_accept(), "x=2's writer precedes the snapshot reader");
    let out = online(&h, 2);
    assert!(out.deleted > 0, "x=1's writer was collected before the snapshot reader came");
    assert!(out.rejects.is_empty(), "{}", out.rejects[0].render_text());
    assert_eq!(out.unverifiable, 1, "the snapshot reader's read of a collected version is not judged");
    let why = out.gc_disabled.expect("collection stopped");
    assert!(why.contains("asked for REPEATABLE READ"), "{why}");
}

/// A kept read-committed reader of a version that collection supersedes keeps no rw link to the later
/// writer. T2 read-modify-writes x=1 to x=2 and writes y=3; T3 (read committed) reads y=3 and then x=1, as
/// read committed may; T4 writes y blind, which keeps T2 (its y=3 cannot become the base). T3 and T4 never
/// fence, so they stay; T1 is collected, and T3 loses its read of x=1. A link T3 → T2 for that read would
/// close a cycle with T2 → T3 (wr on y): a false reject.
#[test]
fn a_kept_read_committed_reader_of_a_superseded_version_keeps_no_anti_dependency() {
    let mut b = HistoryBuilder::new()
        .txn(1, |t| t.write("x", 1))
        .txn(3, |t| t.read("x", 1).write("x", 2).write("y", 3))
        .txn(2, |t| t.read("y", 3).read("x", 1).write("w", 5))
        .txn(4, |t| t.write("y", 6));
    for i in 0..10 {
        let prev = if i == 0 { 0 } else { 1000 + i - 1 };
        b = common::fence(b, [1, 3][i as usize % 2], prev, 1000 + i);
    }
    let mut h = at(b.build(), IsolationLevel::Serializable);
    h.transactions[2].isolation = Some(IsolationLevel::ReadCommitted);
    let r = verify(&h, &declared()).unwrap();
    assert!(r.is_accept(), "read committed may read x=1 after reading T2's y: {}", r.render_text());
    let mut serializable = h.clone();
    serializable.transactions[2].isolation = Some(IsolationLevel::Serializable);
    assert!(!verify(&serializable, &declared()).unwrap().is_accept(), "a serializable T3 cannot");
    for size in 1..=4 {
        let out = online(&h, size);
        assert!(out.rejects.is_empty(), "round size {size}: {}", out.rejects[0].render_text());
        assert!(out.deleted > 0 && out.gc_disabled.is_none(), "round size {size}");
    }
}

/// A fence's one read locks its row (`SELECT … FOR UPDATE`), so `declared` holds it to serializability
/// whatever its `BEGIN` said: two fences that read the same version of the fence row are a lost update, and
/// a history of serializable transactions with read-committed fences is collected.
#[test]
fn fences_are_held_to_serializability_whatever_level_they_asked_for() {
    let b = HistoryBuilder::new().txn(1, |t| t.read_init("F").write("F", 1)).fence();
    let h = at(b.txn(2, |t| t.read_init("F").write("F", 2)).fence().build(), IsolationLevel::ReadCommitted);
    let report = verify(&h, &declared()).unwrap();
    assert!(!report.is_accept(), "two fences read the initial version of their row");
    let d = report.declared.as_ref().expect("declared counts");
    assert_eq!((d.fences, d.read_committed), (2, 0));
    verifier::check_report(&h, &report).expect("the reject re-checks");

    let mut rng = StdRng::seed_from_u64(7);
    let h =
        std::iter::repeat_with(|| at(common::fenced_history(&mut rng, false), IsolationLevel::Serializable))
            .find(|h| h.transactions.len() > 20 && verify(h, &declared()).unwrap().is_accept())
            .expect("an accepted history");
    let out = online(&h, 2);
    assert!(out.deleted > 0 && out.gc_disabled.is_none(), "{:?}", out.gc_disabled);
}

/// Random histories with fences (`common::fenced_history`, about half of them not serializable) whose
/// transactions are all SERIALIZABLE up to a switch point, if any, and of random levels after it, with
/// fences at READ COMMITTED: rounds at `declared` must never reject what one-shot verification accepts, and
/// must reject what it rejects unless a read was counted unverifiable instead.
#[test]
fn rounds_at_declared_give_the_one_shot_verdict_or_say_what_they_could_not_check() {
    let mut rng = StdRng::seed_from_u64(0xdec1_a4ed);
    let cases = 6_000;
    let (mut rejects, mut collected_then_switched, mut unverifiable_accepts) = (0, 0, 0);
    for case in 0..cases {
        let mut h = at(common::fenced_history(&mut rng, case % 2 == 1), IsolationLevel::Serializable);
        let n = h.transactions.len();
        if rng.gen_bool(0.7) {
            let switch = rng.gen_range(n / 3..n);
            for t in h.transactions[switch..].iter_mut().filter(|t| !t.fence) {
                t.isolation = Some(IsolationLevel::ALL[rng.gen_range(0..IsolationLevel::ALL.len())]);
            }
        }
        let one_shot = verify(&h, &declared()).expect("one-shot");
        let size = [1, 2, 3, 5][case % 4];
        let out = online(&h, size);
        let context = || format!("case {case} (round size {size}):\n{:#?}", h.transactions);
        match (one_shot.is_accept(), out.rejects.is_empty()) {
            (true, false) => panic!("a false reject: {}\n{}", out.rejects[0].render_text(), context()),
            (false, true) if out.unverifiable == 0 => {
                panic!("a false accept: {}\n{}", one_shot.render_text(), context())
            }
            (false, true) => unverifiable_accepts += 1,
            _ => {}
        }
        rejects += usize::from(!one_shot.is_accept());
        collected_then_switched += usize::from(out.deleted > 0 && out.gc_disabled.is_some());
    }
    println!(
        "{cases} histories, {rejects} rejected one-shot, {collected_then_switched} collected before REPEATABLE \
         READ stopped collection, {unverifiable_accepts} accepted in rounds with reads left unverified"
    );
    assert!(rejects > cases / 10 && rejects < cases * 9 / 10, "both verdicts: {rejects}");
    assert!(collected_then_switched > cases / 10, "collection then a switch: {collected_then_switched}");
}

/// Random histories with fences whose transactions each ask for SERIALIZABLE, READ COMMITTED, READ
/// UNCOMMITTED or nothing, from the start: rounds collect throughout (on serializability's polygraph with no
/// anti-dependencies out of read-committed readers) and must give one-shot verification's verdict (the split
/// polygraph), save for a reject whose evidence was a read counted unverifiable.
#[test]
fn rounds_at_declared_collect_a_mix_of_serializable_and_read_committed_and_give_the_one_shot_verdict() {
    let mut rng = StdRng::seed_from_u64(0x0c0_11ec7);
    let cases = 12_000;
    let mut case = 0;
    let d = common::declared_differential("mixed levels", cases, &[1, 2, 3, 5], true, || {
        let mut h = common::fenced_history(&mut rng, case % 3 == 2);
        common::mix_serializable_and_read_committed(&mut rng, &mut h, [0.2, 0.5, 0.9][case % 3]);
        case += 1;
        h
    });
    println!(
        "{cases} histories of mixed serializable and read-committed transactions: {} rejected one-shot, {} \
         collected, {} accepted in rounds with reads left unverified",
        d.rejects, d.collected, d.unverifiable_accepts
    );
    assert!(d.rejects > cases / 10 && d.rejects < cases * 9 / 10, "both verdicts: {}", d.rejects);
    assert!(d.collected > cases / 2, "collection ran: {}", d.collected);
}
