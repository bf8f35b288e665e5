use history::{Observed, Op};
use std::collections::HashMap;
fn main() {
    let p = std::env::args().nth(1).unwrap();
    let h = history::codec::read_history(std::path::Path::new(&p), None).unwrap();
    println!("txns {}", h.transactions.len());
    let first: Vec<_> =
        h.transactions.iter().take(5).map(|t| (t.id, t.session, t.seq, t.fence, t.start_ns)).collect();
    println!("{first:?}");
    let sessions = h.sessions();
    for (s, ts) in sessions.iter().take(3) {
        println!(
            "{s}: n={} first fence? {} fence positions {:?}",
            ts.len(),
            ts[0].fence,
            ts.iter().enumerate().filter(|(_, t)| t.fence).map(|(i, _)| i).take(6).collect::<Vec<_>>()
        );
    }
    let mut last_writer: HashMap<history::Key, u64> = HashMap::new();
    let mut writes_per_key: HashMap<history::Key, u64> = HashMap::new();
    let mut rmw = 0;
    let mut blind = 0;
    for t in &h.transactions {
        for op in &t.ops {
            if let Op::Write { key, .. } = op {
                last_writer.insert(*key, t.id.0);
                *writes_per_key.entry(*key).or_default() += 1;
                if t.ops.iter().any(|o| matches!(o, Op::Read{key: k, ..} if k == key)) {
                    rmw += 1
                } else {
                    blind += 1
                }
            }
        }
    }
    let lw: std::collections::HashSet<u64> = last_writer.values().copied().collect();
    let once = writes_per_key.values().filter(|&&n| n == 1).count();
    println!(
        "keys written {} once {} last-writer txns {} rmw writes {rmw} blind {blind}",
        writes_per_key.len(),
        once,
        lw.len()
    );
    let init_reads = h
        .transactions
        .iter()
        .flat_map(|t| t.ops.iter())
        .filter(|o| matches!(o, Op::Read { observed: Observed::PreHistory(_) | Observed::Absent, .. }))
        .count();
    println!("init reads {init_reads}");
    // txn kinds by op signature
    let mut kinds: HashMap<String, usize> = HashMap::new();
    for t in &h.transactions {
        let sig: String = t
            .ops
            .iter()
            .map(|o| match o {
                Op::Read { .. } => 'r',
                Op::Write { .. } => 'w',
            })
            .collect();
        *kinds.entry(sig).or_default() += 1;
    }
    let mut k: Vec<_> = kinds.into_iter().collect();
    k.sort_by_key(|x| std::cmp::Reverse(x.1));
    println!("{:?}", &k[..k.len().min(12)]);
}
