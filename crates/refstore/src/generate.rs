//! Running clients against the reference store and recording what they observed as a [`History`].
//!
//! Every nondeterministic choice (which client runs next, which keys its transaction touches, which allowed
//! view it takes, how read committed interleaves) is drawn from one ChaCha8 generator seeded by
//! [`GenConfig::seed`], so a run replays exactly: the same configuration gives the same history.
//!
//! **Failed execution tests.** When a transaction's can-commit test fails, the attempt is recorded in the
//! history as `Aborted` (with the reads it made and the write ids it would have installed, which nobody can
//! ever observe), and its client moves on to a fresh transaction with newly drawn keys. So aborts count
//! towards nothing: [`GenConfig::txns`] is the number of *committed* transactions. Set
//! [`GenConfig::record_aborted`] to `false` to leave aborted attempts out of the history altogether.

use history::{History, Key, KeyName, Observed, Op, Outcome, SessionId, Transaction, TxnId, WriteId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::model::{ClientState, Model};
use crate::store::{KvStore, key_at};

/// Everything that shapes a generated history. Small `keys`, many `clients`, many `ops_per_txn` and a low
/// `fresh_view_share` mean high contention and, under weak models, many anomalies.
#[derive(Clone, Debug, PartialEq)]
pub struct GenConfig {
    /// The consistency model the store runs under.
    pub model: Model,
    /// The number of clients; each is one session of the history.
    pub clients: usize,
    /// The number of committed transactions to produce.
    pub txns: usize,
    /// The number of keys (`k0`, `k1`, …).
    pub keys: usize,
    /// The most ops a transaction has; each transaction draws its count from `1..=ops_per_txn`.
    pub ops_per_txn: usize,
    /// The probability that an op is a read rather than a write.
    pub read_ratio: f64,
    /// The seed of every random choice.
    pub seed: u64,
    /// The probability that a view shift takes the freshest view the model allows; otherwise it takes a
    /// random allowed one. Lower means staler views, more concurrency and more conflicts.
    pub fresh_view_share: f64,
    /// The probability that an op targets the hot key `k0` instead of a uniformly drawn key: a contention
    /// knob for histories with many keys.
    pub hot_key_share: f64,
    /// Whether transactions that fail the execution test appear in the history as `Aborted`.
    pub record_aborted: bool,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            model: Model::Serializable,
            clients: 3,
            txns: 6,
            keys: 3,
            ops_per_txn: 4,
            read_ratio: 0.5,
            seed: 0,
            fresh_view_share: 0.5,
            hot_key_share: 0.0,
            record_aborted: true,
        }
    }
}

impl GenConfig {
    /// A small, high-contention configuration (3 clients, 2 keys, up to 4 ops, stale views): under every
    /// weak model a good share of its histories are not serializable, and at 6 committed transactions a
    /// brute-force oracle still checks them in microseconds.
    pub fn high_contention(model: Model, seed: u64) -> Self {
        GenConfig {
            model,
            clients: 3,
            txns: 6,
            keys: 2,
            ops_per_txn: 4,
            read_ratio: 0.5,
            seed,
            fresh_view_share: 0.3,
            hot_key_share: 0.0,
            record_aborted: true,
        }
    }
}

/// Why a history could not be generated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenError {
    /// A configuration field is out of range.
    #[error("invalid generator configuration: {0}")]
    InvalidConfig(&'static str),
    /// So many transactions failed the execution test that the run gave up (raise `fresh_view_share`).
    #[error("gave up after {attempts} attempts with {committed} of {wanted} transactions committed")]
    TooManyAborts {
        /// Attempts made.
        attempts: usize,
        /// Transactions committed by then.
        committed: usize,
        /// Transactions asked for.
        wanted: usize,
    },
}

/// A finished run: the history the clients observed, and the store they ran against (whose version order
/// the history does not reveal, which tests use to check the generator itself).
#[derive(Clone, Debug)]
pub struct Simulation {
    /// What the clients observed.
    pub history: History,
    /// The final kv-store: every key's versions in version order, and the committed transactions.
    pub store: KvStore,
}

/// Generates a history under `config.model`. See [`simulate`] for the store behind it.
///
/// ```
/// use refstore::{GenConfig, Model, generate};
///
/// let config = GenConfig { model: Model::SnapshotIsolation, seed: 7, ..GenConfig::default() };
/// let history = generate(&config).unwrap();
/// assert_eq!(history, generate(&config).unwrap(), "a seed replays exactly");
/// ```
pub fn generate(config: &GenConfig) -> Result<History, GenError> {
    simulate(config).map(|s| s.history)
}

/// Runs the clients and returns both the history and the final store.
pub fn simulate(config: &GenConfig) -> Result<Simulation, GenError> {
    validate(config)?;
    let mut run = Run::new(config);
    if config.model == Model::ReadCommitted {
        run.read_committed()?;
    } else {
        run.with_views()?;
    }
    Ok(Simulation { history: run.history, store: run.store })
}

/// The most clients a configuration may ask for.
pub const MAX_CLIENTS: usize = 1 << 20;
/// The most keys a configuration may ask for.
pub const MAX_KEYS: usize = 1 << 24;
/// The most ops a transaction may be asked to have.
pub const MAX_OPS_PER_TXN: usize = 1 << 16;

fn validate(config: &GenConfig) -> Result<(), GenError> {
    let probability = |p: f64| (0.0..=1.0).contains(&p);
    // The store allocates per key, per client and per op up front, so all three are capped well below what
    // would exhaust memory.
    if config.clients == 0 || config.clients > MAX_CLIENTS {
        return Err(GenError::InvalidConfig("clients must be between 1 and 2^20"));
    }
    if config.keys == 0 || config.keys > MAX_KEYS {
        return Err(GenError::InvalidConfig("keys must be between 1 and 2^24"));
    }
    if config.ops_per_txn == 0 || config.ops_per_txn > MAX_OPS_PER_TXN {
        return Err(GenError::InvalidConfig("ops_per_txn must be between 1 and 2^16"));
    }
    if !probability(config.read_ratio) {
        return Err(GenError::InvalidConfig("read_ratio must be between 0 and 1"));
    }
    if !probability(config.fresh_view_share) {
        return Err(GenError::InvalidConfig("fresh_view_share must be between 0 and 1"));
    }
    if !probability(config.hot_key_share) {
        return Err(GenError::InvalidConfig("hot_key_share must be between 0 and 1"));
    }
    Ok(())
}

/// One planned op: the generator fixes a transaction's keys before it runs, so its write set is known.
#[derive(Clone, Copy, Debug)]
enum Planned {
    Read(Key),
    Write(Key),
}

/// A transaction being executed: the ops it issued so far and what it will hand to the store at commit.
#[derive(Debug, Default)]
struct Execution {
    ops: Vec<Op>,
    /// External reads: (key, version index), the first read of each key before any own write.
    reads: Vec<(Key, usize)>,
    /// The last write of each key, in first-write order.
    writes: Vec<(Key, WriteId)>,
    start_ns: u64,
}

impl Execution {
    fn own_write(&self, key: Key) -> Option<WriteId> {
        self.writes.iter().find(|(k, _)| *k == key).map(|&(_, w)| w)
    }

    /// Issues a read that did not hit an own write: it observes version `index` of `key`.
    fn read_version(&mut self, store: &KvStore, key: Key, index: usize) {
        let observed = store.versions(key).get(index).map_or(Observed::PreHistory(0), |v| v.observed);
        if !self.reads.iter().any(|&(k, i)| k == key && i == index) {
            self.reads.push((key, index));
        }
        self.ops.push(Op::Read { key, observed, stmt: None });
    }

    fn write(&mut self, key: Key, write: WriteId) {
        match self.writes.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = write,
            None => self.writes.push((key, write)),
        }
        self.ops.push(Op::Write { key, write, stmt: None });
    }
}

struct Run<'c> {
    config: &'c GenConfig,
    rng: ChaCha8Rng,
    store: KvStore,
    history: History,
    clients: Vec<ClientState>,
    /// The next sequence number of each session.
    seqs: Vec<u64>,
    next_write: u64,
    /// A logical clock: one tick per scheduling step. Timestamps are ticks times 1000 ns.
    clock: u64,
    committed: usize,
}

impl<'c> Run<'c> {
    fn new(config: &'c GenConfig) -> Self {
        let mut history = History::default();
        for i in 0..config.keys {
            history.keys.intern(KeyName { namespace: String::new(), bytes: format!("k{i}").into_bytes() });
        }
        Run {
            config,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            store: KvStore::new(config.keys),
            history,
            clients: vec![ClientState::new(); config.clients],
            seqs: vec![0; config.clients],
            next_write: 1,
            clock: 0,
            committed: 0,
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock * 1000
    }

    fn fresh_write_id(&mut self) -> WriteId {
        let w = WriteId(self.next_write);
        self.next_write += 1;
        w
    }

    fn plan(&mut self) -> Vec<Planned> {
        let n = self.rng.gen_range(1..=self.config.ops_per_txn);
        (0..n)
            .map(|_| {
                let hot = self.rng.gen_bool(self.config.hot_key_share);
                let key = if hot { key_at(0) } else { key_at(self.rng.gen_range(0..self.config.keys)) };
                if self.rng.gen_bool(self.config.read_ratio) {
                    Planned::Read(key)
                } else {
                    Planned::Write(key)
                }
            })
            .collect()
    }

    fn attempt_limit(&self) -> usize {
        self.config.txns.saturating_mul(50).saturating_add(100)
    }

    /// Appends a transaction to the history (if it is to be recorded) and returns its id.
    fn record(&mut self, client: usize, exec: Execution, outcome: Outcome, commit_ns: u64) -> TxnId {
        let id = TxnId(self.history.transactions.len() as u64 + 1);
        if outcome == Outcome::Aborted && !self.config.record_aborted {
            return id;
        }
        let mut txn = Transaction::new(id, SessionId(client as u64), self.seqs[client]);
        self.seqs[client] += 1;
        txn.ops = exec.ops;
        txn.outcome = outcome;
        txn.start_ns = Some(exec.start_ns);
        txn.commit_ns = Some(commit_ns);
        self.history.transactions.push(txn);
        id
    }

    /// The models with views (§3, rule CAtomicTrans): each step, one client shifts its view, runs a whole
    /// transaction on the snapshot of that view, and commits if the execution test allows it.
    fn with_views(&mut self) -> Result<(), GenError> {
        let model = self.config.model;
        let mut attempts = 0;
        while self.committed < self.config.txns {
            if attempts >= self.attempt_limit() {
                return Err(GenError::TooManyAborts {
                    attempts,
                    committed: self.committed,
                    wanted: self.config.txns,
                });
            }
            attempts += 1;
            let c = self.rng.gen_range(0..self.config.clients);
            let plan = self.plan();
            let mut write_keys: Vec<Key> = Vec::new();
            for op in &plan {
                if let Planned::Write(k) = *op
                    && !write_keys.contains(&k)
                {
                    write_keys.push(k);
                }
            }
            let is_update = !write_keys.is_empty();
            let view = model.choose_view(
                &self.store,
                &self.clients[c],
                is_update,
                self.config.fresh_view_share,
                &mut self.rng,
            );
            debug_assert!(
                model.vshift(&self.store, &self.clients[c], &view, is_update),
                "{model}: the chosen view is not one vshift allows"
            );

            let mut exec = Execution { start_ns: self.tick(), ..Execution::default() };
            for op in plan {
                match op {
                    Planned::Read(key) => match exec.own_write(key) {
                        Some(w) => {
                            exec.ops.push(Op::Read { key, observed: Observed::Version(w), stmt: None })
                        }
                        None => {
                            let index = self.store.snapshot(&view, key);
                            exec.read_version(&self.store, key, index);
                        }
                    },
                    Planned::Write(key) => {
                        let w = self.fresh_write_id();
                        exec.write(key, w);
                    }
                }
            }
            let commit_ns = exec.start_ns + 500;

            if model.can_commit(&self.store, &view, &write_keys) {
                let reads = std::mem::take(&mut exec.reads);
                let writes = exec.writes.clone();
                let id = self.record(c, exec, Outcome::Committed, commit_ns);
                let t = self.store.commit(id, c, &reads, &writes, self.clients[c].last);
                self.clients[c].committed(view, t, is_update);
                self.committed += 1;
            } else {
                self.record(c, exec, Outcome::Aborted, commit_ns);
            }
        }
        Ok(())
    }

    /// Read committed: each client has at most one open transaction, and each step either issues the next
    /// op of one client's transaction or commits it, so ops of concurrent transactions interleave. A read
    /// takes the latest committed version at that moment (own writes shadow it); writes stay private until
    /// commit, so nothing uncommitted is ever read.
    fn read_committed(&mut self) -> Result<(), GenError> {
        struct Open {
            plan: Vec<Planned>,
            next: usize,
            exec: Execution,
        }
        let mut open: Vec<Option<Open>> = (0..self.config.clients).map(|_| None).collect();
        let mut opened = 0usize;
        while self.committed < self.config.txns {
            let ready: Vec<usize> = (0..self.config.clients)
                .filter(|&c| open[c].is_some() || opened < self.config.txns)
                .collect();
            let Some(&c) = ready.get(self.rng.gen_range(0..ready.len().max(1))) else {
                // Unreachable while fewer than `txns` have committed: the open ones can always progress.
                return Err(GenError::InvalidConfig("txns cannot be reached"));
            };
            let now = self.tick();
            let slot = &mut open[c];
            let mut txn = match slot.take() {
                Some(txn) => txn,
                None => {
                    opened += 1;
                    let plan = self.plan();
                    Open { plan, next: 0, exec: Execution { start_ns: now, ..Execution::default() } }
                }
            };
            if let Some(&op) = txn.plan.get(txn.next) {
                txn.next += 1;
                match op {
                    Planned::Read(key) => match txn.exec.own_write(key) {
                        Some(w) => {
                            txn.exec.ops.push(Op::Read { key, observed: Observed::Version(w), stmt: None })
                        }
                        None => {
                            let index = self.store.latest(key);
                            txn.exec.read_version(&self.store, key, index);
                        }
                    },
                    Planned::Write(key) => {
                        let w = self.fresh_write_id();
                        txn.exec.write(key, w);
                    }
                }
                open[c] = Some(txn);
            } else {
                let reads = std::mem::take(&mut txn.exec.reads);
                let writes = txn.exec.writes.clone();
                let wrote = !writes.is_empty();
                let id = self.record(c, txn.exec, Outcome::Committed, now);
                let t = self.store.commit(id, c, &reads, &writes, self.clients[c].last);
                let view = self.store.full_view();
                self.clients[c].committed(view, t, wrote);
                self.committed += 1;
            }
        }
        Ok(())
    }
}
