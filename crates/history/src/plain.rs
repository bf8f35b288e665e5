//! Transactions in a plain shape for compact binary encodings (postcard), as `#[serde(with = …)]` adapters.
//!
//! [`Transaction`] and [`Op`] serialize for people and for JSON: an op is tagged by a field (`"op": "read"`)
//! and empty fields are left out, which only a self-describing format can read back. What stores
//! transactions in postcard (the online verifier's checkpoint) goes through these adapters instead: every
//! field, in order, and an op as a plain enum.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::values::TxnValues;
use crate::{
    CollectorId, IsolationLevel, Key, Observed, Op, Outcome, SessionId, StmtRef, Transaction, TxnId, WriteId,
};

/// An [`Op`], with its fields in order.
#[derive(Serialize, Deserialize)]
enum PlainOp {
    Read(Key, Observed, Option<StmtRef>),
    Write(Key, WriteId, Option<StmtRef>),
}

/// A [`Transaction`], with every field.
#[derive(Serialize, Deserialize)]
struct PlainTransaction {
    id: TxnId,
    session: SessionId,
    seq: u64,
    ops: Vec<PlainOp>,
    outcome: Outcome,
    start_ns: Option<u64>,
    commit_ns: Option<u64>,
    collector: CollectorId,
    fence: bool,
    isolation: Option<IsolationLevel>,
    values: Option<Box<TxnValues>>,
}

impl From<&Transaction> for PlainTransaction {
    fn from(t: &Transaction) -> Self {
        let ops = t
            .ops
            .iter()
            .map(|op| match *op {
                Op::Read { key, observed, stmt } => PlainOp::Read(key, observed, stmt),
                Op::Write { key, write, stmt } => PlainOp::Write(key, write, stmt),
            })
            .collect();
        PlainTransaction {
            id: t.id,
            session: t.session,
            seq: t.seq,
            ops,
            outcome: t.outcome,
            start_ns: t.start_ns,
            commit_ns: t.commit_ns,
            collector: t.collector,
            fence: t.fence,
            isolation: t.isolation,
            values: t.values.clone(),
        }
    }
}

impl From<PlainTransaction> for Transaction {
    fn from(t: PlainTransaction) -> Self {
        let ops = t
            .ops
            .into_iter()
            .map(|op| match op {
                PlainOp::Read(key, observed, stmt) => Op::Read { key, observed, stmt },
                PlainOp::Write(key, write, stmt) => Op::Write { key, write, stmt },
            })
            .collect();
        Transaction {
            id: t.id,
            session: t.session,
            seq: t.seq,
            ops,
            outcome: t.outcome,
            start_ns: t.start_ns,
            commit_ns: t.commit_ns,
            collector: t.collector,
            fence: t.fence,
            isolation: t.isolation,
            values: t.values,
        }
    }
}

/// One transaction.
pub mod transaction {
    use super::*;

    /// Serializes `t` in the plain shape.
    pub fn serialize<S: Serializer>(t: &Transaction, serializer: S) -> Result<S::Ok, S::Error> {
        PlainTransaction::from(t).serialize(serializer)
    }

    /// Reads what [`serialize`] wrote.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Transaction, D::Error> {
        PlainTransaction::deserialize(deserializer).map(Transaction::from)
    }
}

/// A sequence of transactions, as a `Vec`.
pub mod transactions {
    use super::*;

    /// Serializes `ts` in the plain shape, one at a time.
    pub fn serialize<S: Serializer>(ts: &[Transaction], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(ts.iter().map(PlainTransaction::from))
    }

    /// Reads what [`serialize`] wrote.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Transaction>, D::Error> {
        let plain = Vec::<PlainTransaction>::deserialize(deserializer)?;
        Ok(plain.into_iter().map(Transaction::from).collect())
    }
}

/// Transactions queued per session (the online verifier's transactions waiting for admission).
pub mod queues {
    use super::*;

    /// Serializes `queues` in the plain shape.
    pub fn serialize<S: Serializer>(
        queues: &BTreeMap<SessionId, VecDeque<Transaction>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_map(
            queues.iter().map(|(s, q)| (s, q.iter().map(PlainTransaction::from).collect::<Vec<_>>())),
        )
    }

    /// Reads what [`serialize`] wrote.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<SessionId, VecDeque<Transaction>>, D::Error> {
        let plain = BTreeMap::<SessionId, Vec<PlainTransaction>>::deserialize(deserializer)?;
        Ok(plain.into_iter().map(|(s, q)| (s, q.into_iter().map(Transaction::from).collect())).collect())
    }
}
