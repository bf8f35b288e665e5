//! The native decoder: checks the magic and version, walks the chunks and rebuilds the history, reading
//! every format version from [`OLDEST_VERSION`] on.

use super::framing::{Chunks, Rd};
use super::{
    CLASS_FOREIGN, CLASS_PRE_HISTORY, CLASS_UNRECORDED, Delta, KEY_ESCAPE, KEY_FRONTIER, KEY_IMPLIED,
    KEY_NEAR_FIRST, KEY_PREVIOUS, MAGIC, NativeError, NativeErrorKind, OLDEST_VERSION, OP_HAS_STMT,
    OP_READ_KNOWN, OP_READ_NEW_DELTA, OP_READ_NEW_RAW, OP_READ_PRE, OP_WRITE_KNOWN, OP_WRITE_NEW_DELTA,
    OP_WRITE_NEW_RAW, TAG_END, TAG_GAPS, TAG_HEADER, TAG_KEYS, TAG_LEVELS, TAG_NAMESPACES, TAG_STATEMENTS,
    TAG_TXNS, TXN_EXPLICIT_SEQ, TXN_FENCE, TXN_HAS_COLLECTOR, TXN_HAS_COMMIT, TXN_HAS_START,
    TXN_SAME_SESSION, VERSION, level_of_code,
};
use crate::codec::bytes::{Cursor, unzigzag};
use crate::model::{
    CollectorId, History, KeyName, KeyTable, LogGap, Observed, Op, Outcome, RecordingHorizon, SessionId,
    StmtRef, Transaction, TxnId, WriteId,
};

/// Decodes a native history. Errors name the byte offset of the problem.
pub fn decode(data: &[u8]) -> Result<History, NativeError> {
    let mut head = Rd { c: Cursor::new(data, 0) };
    let magic = head.bytes(MAGIC.len() as u64, "the magic bytes");
    if magic.ok() != Some(&MAGIC[..]) {
        return Err(NativeError::at(0, NativeErrorKind::BadMagic));
    }
    let version = head.u8("the format version")?;
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(NativeError::at(MAGIC.len() as u64, NativeErrorKind::UnsupportedVersion(version)));
    }
    let mut chunks = Chunks { data, pos: MAGIC.len() + 1, version };

    let mut h = chunks.next(TAG_HEADER)?;
    let n_stmts = h.varint("the statement count")?;
    let n_namespaces = h.varint("the namespace count")?;
    let n_keys = h.varint("the key count")?;
    let n_txns = h.varint("the transaction count")?;
    let n_gaps = h.varint("the gap count")?;
    let horizon = match version {
        1 => None,
        _ => match h.varint("the horizon flag")? {
            0 => None,
            1 if version == 2 => Some(RecordingHorizon::from_xmin(h.varint("the recording horizon")?)),
            1 => {
                let xmin = h.varint("the horizon's xmin")?;
                let xmax = h.varint("the horizon's xmax")?;
                let n = h.varint("the horizon's running count")?;
                // Each id takes at least a byte: a count beyond the chunk is corrupt, not a reason to
                // allocate.
                if n > h.c.remaining() as u64 {
                    return Err(NativeError::invalid(
                        h.offset(),
                        format!("{n} running ids in a shorter chunk"),
                    ));
                }
                let running = (0..n).map(|_| h.varint("a running id")).collect::<Result<Vec<_>, _>>()?;
                Some(RecordingHorizon { xmin, xmax, running })
            }
            other => {
                return Err(NativeError::invalid(h.offset(), format!("horizon flag {other}, not 0 or 1")));
            }
        },
    };
    let n_level_runs = if version >= 4 { h.varint("the isolation-level run count")? } else { 0 };
    if !h.c.is_empty() {
        return Err(NativeError::invalid(h.offset(), "unexpected bytes at the end of the header chunk"));
    }
    // Every item takes at least one byte, so no count may exceed the file's length; this bounds allocation.
    let bound = data.len() as u64;
    for (what, n) in [("statements", n_stmts), ("namespaces", n_namespaces), ("transactions", n_txns)] {
        if n > bound {
            return Err(NativeError::invalid(
                h.offset(),
                format!("the header announces {n} {what}, more than the file could hold"),
            ));
        }
    }
    if n_keys > u64::from(u32::MAX) {
        return Err(NativeError::invalid(h.offset(), format!("{n_keys} keys do not fit 32-bit key ids")));
    }
    if n_stmts > u64::from(u32::MAX) {
        return Err(NativeError::invalid(h.offset(), format!("{n_stmts} statements do not fit 32 bits")));
    }

    let mut history = History::default();
    chunks.section(TAG_STATEMENTS, n_stmts, |c, _| {
        history.statements.push(c.string("a statement text")?);
        Ok(1)
    })?;
    let mut namespaces = Vec::new();
    chunks.section(TAG_NAMESPACES, n_namespaces, |c, _| {
        namespaces.push(c.string("a namespace")?);
        Ok(1)
    })?;
    let mut keys = KeyTable::default();
    chunks.section(TAG_KEYS, n_keys, |c, left| {
        let at = c.offset();
        let run = c.varint("a key run length")?;
        let ns = c.varint("a key run namespace")?;
        let len = c.varint("a key length")?;
        if run == 0 || run > left {
            return Err(NativeError::invalid(at, format!("a key run of {run} keys where {left} remain")));
        }
        let namespace = usize::try_from(ns).ok().and_then(|i| namespaces.get(i)).ok_or_else(|| {
            NativeError::invalid(at, format!("namespace {ns} is not in the namespace table"))
        })?;
        let total =
            run.checked_mul(len).ok_or_else(|| NativeError::invalid(at, "a key run longer than the file"))?;
        let bytes = c.bytes(total, "a key run")?;
        // Zero-length keys take no bytes, but a run of them repeats a name on its second key and fails, so a
        // crafted run cannot build many keys from few bytes.
        for i in 0..run {
            let start = (i * len) as usize;
            let name =
                KeyName { namespace: namespace.clone(), bytes: bytes[start..start + len as usize].to_vec() };
            let before = keys.len();
            keys.intern(name);
            if keys.len() == before {
                return Err(NativeError::invalid(at, "the key table names one key twice"));
            }
        }
        Ok(run)
    })?;
    history.keys = keys;

    let n_keys = n_keys as u32;
    let n_stmts = n_stmts as u32;
    history.horizon = horizon;
    let mut d = Delta { version, ..Delta::default() };
    // The count is only a hint: a crafted header must not make us allocate more than the input justifies.
    history.transactions.reserve(n_txns.min(1 << 16) as usize);
    chunks.section(TAG_TXNS, n_txns, |c, _| {
        history.transactions.push(decode_txn(c, &mut d, n_keys, n_stmts)?);
        Ok(1)
    })?;

    let mut prev = 0u64;
    chunks.section(TAG_GAPS, n_gaps, |c, _| {
        let after = prev.wrapping_add(unzigzag(c.varint("a gap")?) as u64);
        history.gaps.push(LogGap { after_txns: after });
        prev = after;
        Ok(1)
    })?;

    let mut labelled = 0usize;
    chunks.section(TAG_LEVELS, n_level_runs, |c, _| {
        let at = c.offset();
        let count = c.varint("a level run length")?;
        let code = c.u8("a level")?;
        let level = level_of_code(code)
            .map_err(|code| NativeError::invalid(at, format!("isolation level code {code} is undefined")))?;
        let end = usize::try_from(count)
            .ok()
            .and_then(|n| labelled.checked_add(n))
            .filter(|&end| end <= history.transactions.len() && count > 0)
            .ok_or_else(|| {
                NativeError::invalid(
                    at,
                    format!(
                        "a level run of {count} transactions where {} remain",
                        history.transactions.len() - labelled
                    ),
                )
            })?;
        for t in &mut history.transactions[labelled..end] {
            t.isolation = level;
        }
        labelled = end;
        Ok(1)
    })?;
    if n_level_runs > 0 && labelled != history.transactions.len() {
        return Err(NativeError::invalid(
            chunks.offset(),
            format!("the level runs cover {labelled} of {} transactions", history.transactions.len()),
        ));
    }

    let end = chunks.next(TAG_END)?;
    if !end.c.is_empty() {
        return Err(NativeError::invalid(end.offset(), "the end chunk is not empty"));
    }
    let trailing = (data.len() - chunks.pos) as u64;
    if trailing > 0 {
        return Err(NativeError::at(chunks.offset(), NativeErrorKind::TrailingBytes(trailing)));
    }
    Ok(history)
}

fn decode_txn(c: &mut Rd<'_>, d: &mut Delta, n_keys: u32, n_stmts: u32) -> Result<Transaction, NativeError> {
    let at = c.offset();
    let flags = c.u8("transaction flags")?;
    let outcome = match flags & 3 {
        0 => Outcome::Committed,
        1 => Outcome::Aborted,
        2 => Outcome::Indeterminate,
        _ => return Err(NativeError::invalid(at, "transaction outcome code 3 is undefined")),
    };
    let id = d.prev_id.wrapping_add(unzigzag(c.varint("a transaction id")?) as u64);
    d.prev_id = id;
    if flags & TXN_SAME_SESSION == 0 {
        d.prev_session = d.prev_session.wrapping_add(unzigzag(c.varint("a session")?) as u64);
    }
    let session = d.prev_session;
    let seq =
        if flags & TXN_EXPLICIT_SEQ != 0 { c.varint("a sequence number")? } else { d.expected_seq(session) };
    d.next_seq.insert(session, seq.wrapping_add(1));
    let start_ns = if flags & TXN_HAS_START != 0 {
        d.prev_start = d.prev_start.wrapping_add(unzigzag(c.varint("a start time")?) as u64);
        Some(d.prev_start)
    } else {
        None
    };
    let commit_ns = if flags & TXN_HAS_COMMIT != 0 {
        let base = start_ns.unwrap_or(d.prev_commit);
        d.prev_commit = base.wrapping_add(unzigzag(c.varint("a commit time")?) as u64);
        Some(d.prev_commit)
    } else {
        None
    };
    let collector = if flags & TXN_HAS_COLLECTOR != 0 { c.varint_u32("a collector id")? } else { 0 };
    let n_ops = c.varint("an op count")?;
    if n_ops > c.c.remaining() as u64 {
        return Err(NativeError::invalid(
            c.offset(),
            format!("{n_ops} ops announced but only {} bytes left in the chunk", c.c.remaining()),
        ));
    }
    let mut ops = Vec::with_capacity(n_ops as usize);
    for _ in 0..n_ops {
        ops.push(decode_op(c, d, n_keys, n_stmts)?);
    }
    Ok(Transaction {
        id: TxnId(id),
        session: SessionId(session),
        seq,
        ops,
        outcome,
        start_ns,
        commit_ns,
        collector: CollectorId(collector),
        fence: flags & TXN_FENCE != 0,
        isolation: None,
        values: None,
    })
}

fn decode_op(c: &mut Rd<'_>, d: &mut Delta, n_keys: u32, n_stmts: u32) -> Result<Op, NativeError> {
    let at = c.offset();
    let h = c.u8("an op header")?;
    let kind = h & 7;
    let code = h >> 4;
    // The write id part: a new id (delta or raw), or a distance back to a known one.
    let mut new_write = None;
    let mut known: Option<(u64, u32)> = None;
    let mut pre_tag = None;
    match kind {
        OP_WRITE_NEW_DELTA | OP_READ_NEW_DELTA => {
            let delta = unzigzag(c.varint("a write id delta")?);
            new_write = Some(d.last_new_write.wrapping_add(delta as u64));
        }
        OP_WRITE_NEW_RAW | OP_READ_NEW_RAW => new_write = Some(c.u64_le("a write id")?),
        OP_WRITE_KNOWN | OP_READ_KNOWN => {
            let dist_at = c.offset();
            let distance = c.varint("a write id reference")?;
            if distance == 0 || distance > d.ords.len() as u64 {
                return Err(NativeError::invalid(
                    dist_at,
                    format!(
                        "write id reference {distance} back, but only {} write ids are known",
                        d.ords.len()
                    ),
                ));
            }
            known = Some(d.ords[d.ords.len() - distance as usize]);
        }
        OP_READ_PRE => {
            let tag = c.varint("a pre-history tag")?;
            let class = if d.version >= 2 { c.u8("a pre-history class")? } else { CLASS_PRE_HISTORY };
            pre_tag = Some(match class {
                CLASS_PRE_HISTORY => Observed::PreHistory(tag),
                CLASS_UNRECORDED => Observed::Unrecorded(tag),
                CLASS_FOREIGN => Observed::Foreign(tag),
                other => return Err(NativeError::invalid(c.offset(), format!("pre-history class {other}"))),
            });
        }
        _ => {}
    }
    let key = match code {
        KEY_IMPLIED => match known {
            Some((_, k)) => u64::from(k),
            None => return Err(NativeError::invalid(at, "key code 0 on an op without a known write id")),
        },
        KEY_FRONTIER => d.frontier,
        KEY_PREVIOUS => match d.prev_key {
            Some(k) => u64::from(k),
            None => return Err(NativeError::invalid(at, "key code 2 on the first op")),
        },
        KEY_ESCAPE => d.frontier.wrapping_add(unzigzag(c.varint("a key delta")?) as u64),
        near => {
            let distance = u64::from(near - KEY_NEAR_FIRST) + 1;
            d.frontier
                .checked_sub(distance)
                .ok_or_else(|| NativeError::invalid(at, format!("key code {near} reaches below key 0")))?
        }
    };
    if key >= u64::from(n_keys) {
        return Err(NativeError::invalid(at, format!("key {key} is not in the key table of {n_keys} keys")));
    }
    let key32 = key as u32;
    let stmt = if h & OP_HAS_STMT != 0 {
        let s_at = c.offset();
        let s = c.varint("a statement reference")?;
        if s >= u64::from(n_stmts) {
            return Err(NativeError::invalid(
                s_at,
                format!("statement {s} is not among the {n_stmts} statements"),
            ));
        }
        Some(StmtRef(s as u32))
    } else {
        None
    };
    let write = match (new_write, known) {
        (Some(w), _) => {
            d.ords.push((w, key32));
            d.last_new_write = w;
            Some(WriteId(w))
        }
        (None, Some((w, _))) => Some(WriteId(w)),
        (None, None) => None,
    };
    d.saw_key(key32);
    let key = crate::model::Key(key32);
    Ok(match (kind, write) {
        (OP_WRITE_NEW_DELTA | OP_WRITE_NEW_RAW | OP_WRITE_KNOWN, Some(write)) => {
            Op::Write { key, write, stmt }
        }
        (_, Some(w)) => Op::Read { key, observed: Observed::Version(w), stmt },
        (OP_READ_PRE, None) => Op::Read { key, observed: pre_tag.unwrap_or(Observed::PreHistory(0)), stmt },
        _ => Op::Read { key, observed: Observed::Absent, stmt },
    })
}
