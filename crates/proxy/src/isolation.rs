//! Which isolation level each transaction asked for (issue 17, item 4), so the verifier can check each one
//! at its own level.
//!
//! A transaction runs at the level its `BEGIN`/`START TRANSACTION` names, or a `SET TRANSACTION` inside the
//! block sets, else at the session's `default_transaction_isolation`. The session starts with the default
//! the database reports when asked once, before the client's first message (`SHOW
//! default_transaction_isolation`, which already reflects the startup packet's options and the role's and
//! database's settings); the client changes it with `SET [SESSION] default_transaction_isolation`, `SET
//! SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL`, `RESET` and `DISCARD ALL`.
//!
//! The machine ([`crate::machine`]) feeds this module at two points:
//! - when a statement is forwarded ([`Levels::forwarded`]): a write-ahead intent may be logged before the
//!   server answers (`BEGIN ISOLATION LEVEL SERIALIZABLE; UPDATE …; COMMIT` in one Query), so the open
//!   transaction's level is predicted from the statements forwarded so far, as if they succeed;
//! - when the server answers ([`Levels::completed`], [`Levels::error`], [`Levels::ready`]): only a statement
//!   that completed changes anything for good. An error takes the open transaction's level back to what the
//!   server confirmed. A changed session default is held until the transaction it ran in ends: PostgreSQL
//!   undoes a `SET` whose transaction rolls back, and `SET LOCAL` lasts only until then, so it changes no
//!   later transaction's level.
//!
//! Not followed: a `ROLLBACK TO SAVEPOINT` does not undo a `SET` made after the savepoint; changes made
//! inside functions (`EXECUTE 'SET …'`, a function's `SET` clause) are not seen; `set_config(…)` and values the
//! proxy cannot read make the level unknown.

use history::IsolationLevel;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};
use wire::pg::TxnStatus;

use crate::sql::StmtKind;

/// The query `crate::session` runs once per session, before the client's first message, to learn the
/// default its transactions start with.
pub const SHOW_DEFAULT: &str = "SHOW default_transaction_isolation";

/// A level a statement asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// The session's default (`BEGIN` without a level), or for the default itself the value the session
    /// started with (`RESET`, `SET … TO DEFAULT`).
    Default,
    /// This level.
    Level(IsolationLevel),
    /// A value the proxy cannot read: the level becomes unknown.
    Unknown,
}

/// What one statement does to isolation levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LevelEffect {
    /// `BEGIN`/`START TRANSACTION`: the block runs at this level.
    Begin(Asked),
    /// `SET TRANSACTION ISOLATION LEVEL`, `SET transaction_isolation`: the open block runs at this level.
    Transaction(Asked),
    /// Changes the session default, for the transactions that start after the one it ran in commits.
    SessionDefault(Asked),
    /// `COMMIT AND CHAIN`, `ROLLBACK AND CHAIN`: the next block runs at the level of the one it ends.
    Chain,
}

/// The effect of each statement of a query string, aligned with `kinds` ([`crate::sql::classify`]); empty
/// when no statement has one, which is every query that does not mention isolation, `RESET`, `DISCARD` or
/// (ending a transaction) `CHAIN`: those cost one scan and no tokenizing.
pub fn effects(sql: &[u8], kinds: &[StmtKind]) -> Vec<Option<LevelEffect>> {
    let ends = kinds.iter().any(|k| matches!(k, StmtKind::Commit | StmtKind::Rollback));
    let words: &[&[u8]] = match ends {
        true => &[b"isolation", b"reset", b"discard", b"chain"],
        false => &[b"isolation", b"reset", b"discard"],
    };
    if !mentions_any(sql, words) {
        return Vec::new();
    }
    let text = wire::pg::text(sql);
    match split_tokens(&text) {
        Some(statements) if statements.len() == kinds.len() => {
            statements.iter().map(|t| effect_of(t)).collect()
        }
        // The tokens do not line up with the statements the server runs (or do not tokenize, so the
        // server refuses them too): nothing is known of which statement asked what.
        _ => unaligned(&text, kinds),
    }
}

/// The effect of a Parse's single statement.
pub fn effect_of_one(sql: &[u8]) -> Option<LevelEffect> {
    effects(sql, &[crate::sql::classify_one(sql)]).first().copied().flatten()
}

/// Effects for a query string whose statements could not be told apart: a BEGIN that names a level asks
/// for an unknown one, and a query that mentions the session default leaves it unknown.
fn unaligned(text: &str, kinds: &[StmtKind]) -> Vec<Option<LevelEffect>> {
    let lower = text.to_ascii_lowercase();
    let mut out: Vec<Option<LevelEffect>> = kinds
        .iter()
        .map(|k| {
            (*k == StmtKind::Begin && lower.contains("isolation"))
                .then_some(LevelEffect::Begin(Asked::Unknown))
        })
        .collect();
    let mentions_default =
        lower.contains("default_transaction_isolation") || lower.contains("characteristics");
    if let (true, Some(last)) = (mentions_default, out.last_mut()) {
        *last = Some(LevelEffect::SessionDefault(Asked::Unknown));
    }
    out
}

/// Whether `hay` contains one of `words` (lower case ASCII, not empty), in any case, in one pass.
fn mentions_any(hay: &[u8], words: &[&[u8]]) -> bool {
    (0..hay.len()).any(|i| {
        let c = hay[i].to_ascii_lowercase();
        words.iter().any(|w| {
            w.first() == Some(&c) && hay.get(i..i + w.len()).is_some_and(|s| s.eq_ignore_ascii_case(w))
        })
    })
}

/// The tokens of each non-empty statement, whitespace and comments left out; `None` when the text does not
/// tokenize.
fn split_tokens(text: &str) -> Option<Vec<Vec<Token>>> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, text).tokenize().ok()?;
    let mut out = Vec::new();
    let mut current = Vec::new();
    for token in tokens {
        match token {
            Token::SemiColon => {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
            }
            Token::Whitespace(_) | Token::EOF => {}
            t => current.push(t),
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    Some(out)
}

/// Whether `t` is the unquoted keyword `word` (upper case).
fn kw(t: Option<&Token>, word: &str) -> bool {
    matches!(t, Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

/// A setting's name as PostgreSQL compares it (quoted or not, any case).
fn name(t: Option<&Token>) -> Option<String> {
    match t {
        Some(Token::Word(w)) => Some(w.value.to_ascii_lowercase()),
        _ => None,
    }
}

/// What one statement (its tokens) does to isolation levels.
fn effect_of(t: &[Token]) -> Option<LevelEffect> {
    let at = |i: usize| t.get(i);
    if kw(at(0), "BEGIN") {
        let skip = usize::from(kw(at(1), "WORK") || kw(at(1), "TRANSACTION"));
        return Some(LevelEffect::Begin(modes(&t[1 + skip..])));
    }
    if kw(at(0), "START") && kw(at(1), "TRANSACTION") {
        return Some(LevelEffect::Begin(modes(&t[2..])));
    }
    if ["COMMIT", "END", "ROLLBACK", "ABORT"].iter().any(|w| kw(at(0), w)) {
        // `AND NO CHAIN` is the default.
        let n = t.len();
        let chains = n >= 2 && kw(at(n - 2), "AND") && kw(at(n - 1), "CHAIN");
        return chains.then_some(LevelEffect::Chain);
    }
    if kw(at(0), "SET") {
        return set_effect(t);
    }
    if kw(at(0), "RESET") {
        let resets = kw(at(1), "ALL") || name(at(1)).as_deref() == Some("default_transaction_isolation");
        return resets.then_some(LevelEffect::SessionDefault(Asked::Default));
    }
    if kw(at(0), "DISCARD") && kw(at(1), "ALL") {
        return Some(LevelEffect::SessionDefault(Asked::Default));
    }
    set_config_effect(t)
}

/// `SET TRANSACTION …`, `SET SESSION CHARACTERISTICS AS TRANSACTION …` and `SET [SESSION | LOCAL] name
/// { = | TO } value`.
fn set_effect(t: &[Token]) -> Option<LevelEffect> {
    let at = |i: usize| t.get(i);
    if kw(at(1), "TRANSACTION") {
        // `SET TRANSACTION SNAPSHOT` changes no level.
        return match modes(&t[2..]) {
            Asked::Default => None,
            asked => Some(LevelEffect::Transaction(asked)),
        };
    }
    if kw(at(1), "SESSION") && kw(at(2), "CHARACTERISTICS") && kw(at(3), "AS") && kw(at(4), "TRANSACTION") {
        return match modes(&t[5..]) {
            Asked::Default => None,
            asked => Some(LevelEffect::SessionDefault(asked)),
        };
    }
    let local = kw(at(1), "LOCAL");
    let first = if local || kw(at(1), "SESSION") { 2 } else { 1 };
    let assigns = matches!(at(first + 1), Some(Token::Eq)) || kw(at(first + 1), "TO");
    if !assigns {
        return None;
    }
    let asked = value(&t[first + 2..]);
    match name(at(first)).as_deref() {
        // A local default lasts until the end of the transaction it is set in, which already has its level.
        Some("default_transaction_isolation") if !local => Some(LevelEffect::SessionDefault(asked)),
        Some("transaction_isolation") => match asked {
            Asked::Default => None,
            asked => Some(LevelEffect::Transaction(asked)),
        },
        _ => None,
    }
}

/// `set_config('default_transaction_isolation', …)` anywhere in a statement: the proxy does not evaluate it,
/// so the level it sets is unknown.
fn set_config_effect(t: &[Token]) -> Option<LevelEffect> {
    let call = t.windows(3).find_map(|w| match w {
        [Token::Word(f), Token::LParen, Token::SingleQuotedString(setting)]
            if f.value.eq_ignore_ascii_case("set_config") =>
        {
            Some(setting.to_ascii_lowercase())
        }
        _ => None,
    })?;
    match call.as_str() {
        "default_transaction_isolation" => Some(LevelEffect::SessionDefault(Asked::Unknown)),
        "transaction_isolation" => Some(LevelEffect::Transaction(Asked::Unknown)),
        _ => None,
    }
}

/// A setting's value: one string or word; `DEFAULT` unquoted.
fn value(t: &[Token]) -> Asked {
    let text = match t {
        [Token::Word(w)] if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("DEFAULT") => {
            return Asked::Default;
        }
        [Token::Word(w)] => &w.value,
        [Token::SingleQuotedString(s) | Token::EscapedStringLiteral(s)] => s,
        _ => return Asked::Unknown,
    };
    IsolationLevel::parse_sql(text).map_or(Asked::Unknown, Asked::Level)
}

/// The isolation level among transaction modes (`ISOLATION LEVEL …`, `READ ONLY`, `READ WRITE`, `[NOT]
/// DEFERRABLE`, in any order, with or without commas): [`Asked::Default`] when none is named, unknown when
/// the modes do not read as PostgreSQL's.
fn modes(t: &[Token]) -> Asked {
    let mut asked = Asked::Default;
    let mut i = 0;
    while i < t.len() {
        let at = |j: usize| t.get(j);
        if matches!(at(i), Some(Token::Comma)) {
            i += 1;
        } else if kw(at(i), "ISOLATION") && kw(at(i + 1), "LEVEL") {
            let (level, width) = match (at(i + 2), at(i + 3)) {
                (a, _) if kw(a, "SERIALIZABLE") => (IsolationLevel::Serializable, 1),
                (a, b) if kw(a, "REPEATABLE") && kw(b, "READ") => (IsolationLevel::RepeatableRead, 2),
                (a, b) if kw(a, "READ") && kw(b, "COMMITTED") => (IsolationLevel::ReadCommitted, 2),
                (a, b) if kw(a, "READ") && kw(b, "UNCOMMITTED") => (IsolationLevel::ReadUncommitted, 2),
                _ => return Asked::Unknown,
            };
            asked = Asked::Level(level);
            i += 2 + width;
        } else if (kw(at(i), "READ") && (kw(at(i + 1), "ONLY") || kw(at(i + 1), "WRITE")))
            || (kw(at(i), "NOT") && kw(at(i + 1), "DEFERRABLE"))
        {
            i += 2;
        } else if kw(at(i), "DEFERRABLE") {
            i += 1;
        } else {
            return Asked::Unknown;
        }
    }
    asked
}

/// The level of one open transaction: what the statements forwarded so far ask (what an intent records),
/// and what the server confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnLevel {
    asked: Option<IsolationLevel>,
    granted: Option<IsolationLevel>,
    /// Predictions the server has not confirmed yet.
    unconfirmed: u32,
}

impl TxnLevel {
    /// The level to record, `None` when unknown.
    pub fn asked(&self) -> Option<IsolationLevel> {
        self.asked
    }
}

/// One session's isolation levels. See the module docs.
#[derive(Debug, Default)]
pub struct Levels {
    /// The default the session started with: what `RESET` returns to. `None`: unknown.
    start: Option<IsolationLevel>,
    /// The default as of the last transaction that ended.
    default: Option<IsolationLevel>,
    /// The default as changed in the server's open transaction, kept if it commits.
    pending: Option<Option<IsolationLevel>>,
    /// The server's open transaction had an error: it will not commit.
    failed: bool,
    /// The level of the block the server opened with `AND CHAIN`, for the transaction that runs in it.
    chained: Option<Option<IsolationLevel>>,
    /// The level of the transaction that ended last, for `AND CHAIN`.
    last: Option<IsolationLevel>,
    /// A statement that changes the default was forwarded since the last Sync.
    unsynced: bool,
}

impl Levels {
    /// Sets the default the database reported at the session's start (`None` if it could not tell).
    pub fn learnt(&mut self, start: Option<IsolationLevel>) {
        self.start = start;
        self.default = start;
    }

    /// The level of a transaction that opens now, until its statements say otherwise.
    pub fn opening(&mut self) -> TxnLevel {
        // Not a pending default: the transaction that set it is still open, so this one runs in it. One
        // that opens after it (behind a Query, or a Sync, see `Levels::sync_ends`) waits for its end.
        let level = self.chained.take().unwrap_or(self.default);
        TxnLevel { asked: level, granted: level, unconfirmed: 0 }
    }

    /// Whether the Sync about to be forwarded ends the transaction of a statement that changed the default
    /// since the last one. The machine then lets no statement through until that Sync is answered, so a
    /// transaction that opens after it starts at the new default, known by then.
    pub fn sync_ends(&mut self) -> bool {
        std::mem::take(&mut self.unsynced)
    }

    /// Notes the level of a transaction that ended (for `AND CHAIN`).
    pub fn ended(&mut self, level: &TxnLevel) {
        self.last = level.granted;
    }

    fn resolve(&self, asked: Asked, or: Option<IsolationLevel>) -> Option<IsolationLevel> {
        match asked {
            Asked::Default => or,
            Asked::Level(l) => Some(l),
            Asked::Unknown => None,
        }
    }

    /// Statements with `effects` and `kinds` are forwarded, the server being in `status` before them as the
    /// machine predicts it; `txn` is the transaction the first of them runs in. Updates its prediction and
    /// returns the effects that apply, for [`Levels::completed`] to confirm as each statement completes: a
    /// `BEGIN` inside a block and a `SET TRANSACTION` outside one change nothing (PostgreSQL only warns).
    pub fn forwarded(
        &mut self,
        kinds: &[StmtKind],
        effects: &[Option<LevelEffect>],
        mut status: TxnStatus,
        mut txn: Option<&mut TxnLevel>,
    ) -> Vec<Option<LevelEffect>> {
        if effects.is_empty() {
            return Vec::new();
        }
        let mut kept = Vec::with_capacity(kinds.len());
        for (i, kind) in kinds.iter().enumerate() {
            let effect = effects.get(i).copied().flatten().filter(|e| match e {
                LevelEffect::Begin(_) => status == TxnStatus::Idle,
                LevelEffect::Transaction(_) => status == TxnStatus::InTransaction,
                LevelEffect::SessionDefault(_) | LevelEffect::Chain => true,
            });
            if let (Some(LevelEffect::Begin(a) | LevelEffect::Transaction(a)), Some(t)) =
                (effect, txn.as_deref_mut())
            {
                t.asked = self.resolve(a, t.asked);
                t.unconfirmed += 1;
            }
            match kind {
                StmtKind::Begin => status = TxnStatus::InTransaction,
                StmtKind::Commit | StmtKind::PrepareTxn | StmtKind::Rollback => {
                    status = TxnStatus::Idle;
                    // Later statements run in another transaction, which opens when they complete.
                    txn = None;
                }
                _ => {}
            }
            self.unsynced |= matches!(effect, Some(LevelEffect::SessionDefault(_)));
            kept.push(effect);
        }
        kept
    }

    /// A statement completed with the tag `command` (after the machine acted on the tag); `effect` is what
    /// [`Levels::forwarded`] kept for it and `txn` the transaction open now.
    pub fn completed(
        &mut self,
        command: &str,
        kind: Option<StmtKind>,
        effect: Option<LevelEffect>,
        txn: Option<&mut TxnLevel>,
    ) {
        match command {
            "COMMIT" | "PREPARE TRANSACTION" => self.commit(),
            "ROLLBACK" if kind != Some(StmtKind::RollbackTo) => self.pending = None,
            _ => {}
        }
        match effect {
            Some(LevelEffect::Begin(a) | LevelEffect::Transaction(a)) => {
                if let Some(t) = txn {
                    t.granted = self.resolve(a, t.granted);
                    t.unconfirmed = t.unconfirmed.saturating_sub(1);
                    if t.unconfirmed == 0 {
                        t.asked = t.granted;
                    }
                }
            }
            Some(LevelEffect::SessionDefault(a)) => self.pending = Some(self.resolve(a, self.start)),
            Some(LevelEffect::Chain) => self.chained = Some(self.last),
            None => {}
        }
    }

    /// The server reported an error: the open transaction runs at what was confirmed, and whatever default
    /// its transaction set is undone when it ends.
    pub fn error(&mut self, txn: Option<&mut TxnLevel>) {
        self.failed = true;
        if let Some(t) = txn {
            t.asked = t.granted;
            t.unconfirmed = 0;
        }
    }

    /// ReadyForQuery: at `I` the server's transaction is over, and an implicit one commits unless it failed.
    pub fn ready(&mut self, status: TxnStatus) {
        if status == TxnStatus::Idle {
            if self.failed {
                self.pending = None;
            }
            self.commit();
            self.failed = false;
            self.chained = None;
        }
    }

    fn commit(&mut self) {
        if let Some(p) = self.pending.take() {
            self.default = p;
        }
    }
}

#[cfg(test)]
#[path = "isolation_tests.rs"]
mod tests;
