//! The native encoder: a history's tables and transactions, written as chunks.

use std::collections::HashMap;

use super::framing::ChunkWriter;
use super::{
    CHUNK_TARGET, CLASS_FOREIGN, CLASS_PRE_HISTORY, CLASS_UNRECORDED, Delta, InvalidHistory, KEY_ESCAPE,
    KEY_FRONTIER, KEY_IMPLIED, KEY_NEAR_FIRST, KEY_NEAR_MAX_DISTANCE, KEY_PREVIOUS, MAGIC, OP_HAS_STMT,
    OP_READ_ABSENT, OP_READ_KNOWN, OP_READ_NEW_DELTA, OP_READ_NEW_RAW, OP_READ_PRE, OP_WRITE_KNOWN,
    OP_WRITE_NEW_DELTA, OP_WRITE_NEW_RAW, TAG_END, TAG_GAPS, TAG_HEADER, TAG_KEYS, TAG_LEVELS,
    TAG_NAMESPACES, TAG_STATEMENTS, TAG_TXNS, TXN_EXPLICIT_SEQ, TXN_FENCE, TXN_HAS_COLLECTOR, TXN_HAS_COMMIT,
    TXN_HAS_START, TXN_SAME_SESSION, VERSION, check_references, level_code,
};
use crate::codec::bytes::{put_varint, varint_len, zigzag};
use crate::model::{History, Observed, Op, Outcome, Transaction, WriteId};

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Encodes a history in the native format.
pub fn encode(history: &History) -> Result<Vec<u8>, InvalidHistory> {
    check_references(history)?;
    let mut w = ChunkWriter {
        out: Vec::with_capacity(1024),
        buf: Vec::with_capacity(CHUNK_TARGET + 4096),
        version: VERSION,
    };
    w.out.extend_from_slice(&MAGIC);
    w.out.push(VERSION);

    let names = history.keys.names();
    let mut namespaces: Vec<&str> = Vec::new();
    let mut ns_index: HashMap<&str, u64> = HashMap::new();
    for name in names {
        ns_index.entry(name.namespace.as_str()).or_insert_with(|| {
            namespaces.push(name.namespace.as_str());
            namespaces.len() as u64 - 1
        });
    }

    for n in [
        history.statements.len(),
        namespaces.len(),
        names.len(),
        history.transactions.len(),
        history.gaps.len(),
    ] {
        put_varint(&mut w.buf, n as u64);
    }
    match &history.horizon {
        Some(horizon) => {
            put_varint(&mut w.buf, 1);
            put_varint(&mut w.buf, horizon.xmin);
            put_varint(&mut w.buf, horizon.xmax);
            put_varint(&mut w.buf, horizon.running.len() as u64);
            for &xid in &horizon.running {
                put_varint(&mut w.buf, xid);
            }
        }
        None => put_varint(&mut w.buf, 0),
    }
    // Runs of equal levels: a proxy's history changes level rarely, so this section is a few bytes.
    let mut level_runs: Vec<(u64, u8)> = Vec::new();
    if history.transactions.iter().any(|t| t.isolation.is_some()) {
        for t in &history.transactions {
            let code = level_code(t.isolation);
            match level_runs.last_mut() {
                Some((count, last)) if *last == code => *count += 1,
                _ => level_runs.push((1, code)),
            }
        }
    }
    put_varint(&mut w.buf, level_runs.len() as u64);
    w.flush(TAG_HEADER);

    for s in &history.statements {
        put_str(&mut w.buf, s.as_bytes());
        w.item_done(TAG_STATEMENTS);
    }
    w.section_done(TAG_STATEMENTS);
    for ns in &namespaces {
        put_str(&mut w.buf, ns.as_bytes());
        w.item_done(TAG_NAMESPACES);
    }
    w.section_done(TAG_NAMESPACES);

    // Key runs: consecutive keys that share a namespace and a length are written as one run.
    let mut i = 0;
    while i < names.len() {
        let first = &names[i];
        let run = names[i..]
            .iter()
            .take_while(|n| n.namespace == first.namespace && n.bytes.len() == first.bytes.len())
            .take(4096)
            .count();
        put_varint(&mut w.buf, run as u64);
        put_varint(&mut w.buf, ns_index[first.namespace.as_str()]);
        put_varint(&mut w.buf, first.bytes.len() as u64);
        for n in &names[i..i + run] {
            w.buf.extend_from_slice(&n.bytes);
        }
        i += run;
        w.item_done(TAG_KEYS);
    }
    w.section_done(TAG_KEYS);

    let mut d = Delta::default();
    let mut ord_of: HashMap<u64, u32> = HashMap::new();
    for txn in &history.transactions {
        encode_txn(&mut w.buf, &mut d, &mut ord_of, txn);
        w.item_done(TAG_TXNS);
    }
    w.section_done(TAG_TXNS);

    let mut prev = 0u64;
    for gap in &history.gaps {
        put_varint(&mut w.buf, zigzag(gap.after_txns.wrapping_sub(prev) as i64));
        prev = gap.after_txns;
        w.item_done(TAG_GAPS);
    }
    w.section_done(TAG_GAPS);
    for &(count, code) in &level_runs {
        put_varint(&mut w.buf, count);
        w.buf.push(code);
        w.item_done(TAG_LEVELS);
    }
    w.section_done(TAG_LEVELS);
    w.flush(TAG_END);
    Ok(w.out)
}

fn encode_txn(out: &mut Vec<u8>, d: &mut Delta, ord_of: &mut HashMap<u64, u32>, txn: &Transaction) {
    let session = txn.session.0;
    let mut flags = match txn.outcome {
        Outcome::Committed => 0,
        Outcome::Aborted => 1,
        Outcome::Indeterminate => 2,
    };
    if txn.fence {
        flags |= TXN_FENCE;
    }
    if txn.start_ns.is_some() {
        flags |= TXN_HAS_START;
    }
    if txn.commit_ns.is_some() {
        flags |= TXN_HAS_COMMIT;
    }
    if txn.collector.0 != 0 {
        flags |= TXN_HAS_COLLECTOR;
    }
    let explicit_seq = txn.seq != d.expected_seq(session);
    if explicit_seq {
        flags |= TXN_EXPLICIT_SEQ;
    }
    if session == d.prev_session {
        flags |= TXN_SAME_SESSION;
    }
    out.push(flags);
    put_varint(out, zigzag(txn.id.0.wrapping_sub(d.prev_id) as i64));
    d.prev_id = txn.id.0;
    if session != d.prev_session {
        put_varint(out, zigzag(session.wrapping_sub(d.prev_session) as i64));
        d.prev_session = session;
    }
    if explicit_seq {
        put_varint(out, txn.seq);
    }
    d.next_seq.insert(session, txn.seq.wrapping_add(1));
    if let Some(start) = txn.start_ns {
        put_varint(out, zigzag(start.wrapping_sub(d.prev_start) as i64));
        d.prev_start = start;
    }
    if let Some(commit) = txn.commit_ns {
        let base = txn.start_ns.unwrap_or(d.prev_commit);
        put_varint(out, zigzag(commit.wrapping_sub(base) as i64));
        d.prev_commit = commit;
    }
    if txn.collector.0 != 0 {
        put_varint(out, u64::from(txn.collector.0));
    }
    put_varint(out, txn.ops.len() as u64);
    for op in &txn.ops {
        encode_op(out, d, ord_of, op);
    }
}

/// How an op names its write id.
enum WritePart {
    New { raw: bool, value: u64 },
    Known { distance: u64, key: u32 },
    None,
}

fn encode_op(out: &mut Vec<u8>, d: &mut Delta, ord_of: &mut HashMap<u64, u32>, op: &Op) {
    let key = op.key().0;
    let mut new_or_known = |w: WriteId, d: &mut Delta| -> WritePart {
        if let Some(&ord) = ord_of.get(&w.0) {
            let (_, first_key) = d.ords[ord as usize];
            WritePart::Known { distance: d.ords.len() as u64 - u64::from(ord), key: first_key }
        } else {
            let delta = zigzag(w.0.wrapping_sub(d.last_new_write) as i64);
            let raw = varint_len(delta) > 8;
            ord_of.insert(w.0, d.ords.len() as u32);
            d.ords.push((w.0, key));
            d.last_new_write = w.0;
            WritePart::New { raw, value: if raw { w.0 } else { delta } }
        }
    };
    let (kind, part, tag) = match *op {
        Op::Write { write, .. } => {
            let part = new_or_known(write, d);
            let kind = match part {
                WritePart::New { raw: false, .. } => OP_WRITE_NEW_DELTA,
                WritePart::New { raw: true, .. } => OP_WRITE_NEW_RAW,
                _ => OP_WRITE_KNOWN,
            };
            (kind, part, None)
        }
        Op::Read { observed: Observed::Version(w), .. } => {
            let part = new_or_known(w, d);
            let kind = match part {
                WritePart::New { raw: false, .. } => OP_READ_NEW_DELTA,
                WritePart::New { raw: true, .. } => OP_READ_NEW_RAW,
                _ => OP_READ_KNOWN,
            };
            (kind, part, None)
        }
        Op::Read { observed: Observed::PreHistory(t), .. } => {
            (OP_READ_PRE, WritePart::None, Some((t, CLASS_PRE_HISTORY)))
        }
        Op::Read { observed: Observed::Unrecorded(t), .. } => {
            (OP_READ_PRE, WritePart::None, Some((t, CLASS_UNRECORDED)))
        }
        Op::Read { observed: Observed::Foreign(t), .. } => {
            (OP_READ_PRE, WritePart::None, Some((t, CLASS_FOREIGN)))
        }
        Op::Read { observed: Observed::Absent, .. } => (OP_READ_ABSENT, WritePart::None, None),
    };
    let k = u64::from(key);
    let code = match part {
        WritePart::Known { key: first_key, .. } if first_key == key => KEY_IMPLIED,
        _ if k == d.frontier => KEY_FRONTIER,
        _ if d.prev_key == Some(key) => KEY_PREVIOUS,
        _ if k < d.frontier && d.frontier - k <= KEY_NEAR_MAX_DISTANCE => {
            KEY_NEAR_FIRST + (d.frontier - k - 1) as u8
        }
        _ => KEY_ESCAPE,
    };
    let stmt = op.stmt();
    out.push(kind | if stmt.is_some() { OP_HAS_STMT } else { 0 } | (code << 4));
    match part {
        WritePart::New { raw: true, value } => out.extend_from_slice(&value.to_le_bytes()),
        WritePart::New { raw: false, value } => put_varint(out, value),
        WritePart::Known { distance, .. } => put_varint(out, distance),
        WritePart::None => {}
    }
    if let Some((t, class)) = tag {
        put_varint(out, t);
        out.push(class);
    }
    if code == KEY_ESCAPE {
        put_varint(out, zigzag(k.wrapping_sub(d.frontier) as i64));
    }
    if let Some(s) = stmt {
        put_varint(out, u64::from(s.0));
    }
    d.saw_key(key);
}
