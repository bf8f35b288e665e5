//! C-RUBiS (Cobra §6): a bidding system like eBay. Users register accounts, register items, bid for items
//! and comment on them; they also view items (with their latest bids) and users (with their latest
//! comments). Cobra initialised the market with 20k users and 200k items; the default here is 2k and 20k,
//! and both are configurable.
//!
//! The mix is 30% view item, 15% view user, 25% bid, 10% comment, 10% register item and 10% register user;
//! the paper does not give one.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::schema::{TableDef, int, text};
use crate::{Row, StoreError, Txn, TxnEnd, Val, filler, pick, read_existing};

/// `rb_user(uid, name, rating, nb_comments)`.
pub static USER: TableDef = TableDef {
    name: "rb_user",
    columns: &[int("uid"), text("name"), int("rating"), int("nb_comments")],
    pk_len: 1,
};
/// `rb_item(iid, seller, name, initial_price, max_bid, nb_bids)`.
pub static ITEM: TableDef = TableDef {
    name: "rb_item",
    columns: &[int("iid"), int("seller"), text("name"), int("initial_price"), int("max_bid"), int("nb_bids")],
    pk_len: 1,
};
/// `rb_bid(iid, seq, bidder, amount)`: an item's `seq`-th bid.
pub static BID: TableDef = TableDef {
    name: "rb_bid",
    columns: &[int("b_iid"), int("b_seq"), int("bidder"), int("amount")],
    pk_len: 2,
};
/// `rb_comment(to_uid, seq, from_uid, iid, rating, body)`: the `seq`-th comment about a user.
pub static COMMENT: TableDef = TableDef {
    name: "rb_comment",
    columns: &[int("c_to"), int("c_seq"), int("c_from"), int("c_iid"), int("rating"), text("body")],
    pk_len: 2,
};
/// `rb_idgen(slot, next_user, next_item)`: each client's own id counter, so that registrations by
/// different clients never collide and a second run on the same data continues where the first stopped.
pub static IDGEN: TableDef =
    TableDef { name: "rb_idgen", columns: &[int("slot"), int("next_user"), int("next_item")], pk_len: 1 };

/// The tables of C-RUBiS.
pub static TABLES: &[&TableDef] = &[&USER, &ITEM, &BID, &COMMENT, &IDGEN];

/// The transaction mix, in percent.
pub const MIX: &[(&str, u32)] = &[
    ("view_item", 30),
    ("view_user", 15),
    ("store_bid", 25),
    ("store_comment", 10),
    ("register_item", 10),
    ("register_user", 10),
];

/// Default initial users.
pub const DEFAULT_USERS: u64 = 2_000;
/// Default initial items.
pub const DEFAULT_ITEMS: u64 = 20_000;
/// Ids of registered users and items are `(client + 1) * ID_SPACE + n`, above every initial id.
pub const ID_SPACE: i64 = 1_000_000_000;
/// Views show this many of the latest bids or comments.
pub const VIEW_LATEST: i64 = 5;

/// The C-RUBiS workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Rubis {
    /// Initial users `0..users`.
    pub users: u64,
    /// Initial items `0..items`.
    pub items: u64,
}

/// One C-RUBiS transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// Show an item, its seller and its latest bids.
    ViewItem {
        /// The item.
        item: i64,
    },
    /// Show a user and the latest comments about them.
    ViewUser {
        /// The user.
        user: i64,
    },
    /// `bidder` outbids the current maximum on `item` by `raise` cents.
    StoreBid {
        /// The item.
        item: i64,
        /// The bidder.
        bidder: i64,
        /// Cents above the current maximum.
        raise: i64,
    },
    /// `from` comments on the seller of `item`.
    StoreComment {
        /// The item.
        item: i64,
        /// The author.
        from: i64,
        /// −1, 0 or 1.
        rating: i64,
    },
    /// `seller` puts a new item up for sale.
    RegisterItem {
        /// The client's id slot.
        slot: u32,
        /// The seller.
        seller: i64,
    },
    /// A new user registers.
    RegisterUser {
        /// The client's id slot.
        slot: u32,
    },
}

impl Spec {
    /// The transaction type.
    pub fn kind(&self) -> &'static str {
        match self {
            Spec::ViewItem { .. } => "view_item",
            Spec::ViewUser { .. } => "view_user",
            Spec::StoreBid { .. } => "store_bid",
            Spec::StoreComment { .. } => "store_comment",
            Spec::RegisterItem { .. } => "register_item",
            Spec::RegisterUser { .. } => "register_user",
        }
    }
}

fn col(row: &[Val], table: &TableDef, i: usize) -> Result<i64, StoreError> {
    let what = table.columns.get(i).map_or("?", |c| c.name);
    row.get(i).ok_or_else(|| StoreError::Data(format!("{}: short row", table.name)))?.int(what)
}

/// Takes the next user (column 1) or item (column 2) id of `slot`.
async fn next_id<T: Txn>(t: &mut T, slot: u32, column: usize) -> Result<i64, StoreError> {
    use Val::Int;
    let n = match t.read(&IDGEN, &[Int(i64::from(slot))]).await? {
        Some(mut row) => {
            let n = col(&row, &IDGEN, column)?;
            row[column] = Int(n + 1);
            t.update(&IDGEN, row).await?;
            n
        }
        None => {
            let mut row = vec![Int(i64::from(slot)), Int(0), Int(0)];
            row[column] = Int(1);
            t.insert(&IDGEN, row).await?;
            0
        }
    };
    Ok((i64::from(slot) + 1) * ID_SPACE + n)
}

impl Rubis {
    /// C-RUBiS with `users` (default 2,000) and `items` (default 20,000) initially.
    pub fn new(users: Option<u64>, items: Option<u64>) -> Self {
        let users = users.unwrap_or(DEFAULT_USERS).clamp(1, ID_SPACE as u64 - 1);
        let items = items.unwrap_or(DEFAULT_ITEMS).clamp(1, ID_SPACE as u64 - 1);
        Rubis { users, items }
    }

    pub(crate) fn initial_row(&self, table: &TableDef, pk: &[Val]) -> Option<Row> {
        use Val::{Int, Text};
        match (table.name, pk) {
            ("rb_user", [Int(u)]) if (0..self.users as i64).contains(u) => {
                Some(vec![Int(*u), Text(format!("user{u}")), Int(0), Int(0)])
            }
            ("rb_item", [Int(i)]) if (0..self.items as i64).contains(i) => Some(vec![
                Int(*i),
                Int(i * 7919 % self.users as i64),
                Text(filler(*i, 20)),
                Int(100 + i % 1000),
                Int(0),
                Int(0),
            ]),
            _ => None,
        }
    }

    pub(crate) fn initial_keys(&self, table: &TableDef) -> Box<dyn Iterator<Item = Vec<Val>> + '_> {
        match table.name {
            "rb_user" => Box::new((0..self.users as i64).map(|u| vec![Val::Int(u)])),
            "rb_item" => Box::new((0..self.items as i64).map(|i| vec![Val::Int(i)])),
            _ => Box::new(std::iter::empty()),
        }
    }

    pub(crate) fn next_txn(&self, rng: &mut ChaCha8Rng, client: u32) -> Spec {
        let item = rng.gen_range(0..self.items as i64);
        let user = rng.gen_range(0..self.users as i64);
        match pick(rng, MIX) {
            "view_item" => Spec::ViewItem { item },
            "view_user" => Spec::ViewUser { user },
            "store_bid" => Spec::StoreBid { item, bidder: user, raise: rng.gen_range(1..=500) },
            "store_comment" => Spec::StoreComment { item, from: user, rating: rng.gen_range(-1..=1) },
            "register_item" => Spec::RegisterItem { slot: client, seller: user },
            _ => Spec::RegisterUser { slot: client },
        }
    }

    pub(crate) async fn execute<T: Txn>(&self, t: &mut T, spec: &Spec) -> Result<TxnEnd, StoreError> {
        use Val::{Int, Text};
        match *spec {
            Spec::ViewItem { item } => {
                let row = read_existing(t, &ITEM, &[Int(item)]).await?;
                t.read(&USER, &[Int(col(&row, &ITEM, 1)?)]).await?;
                let bids = col(&row, &ITEM, 5)?;
                for seq in ((bids - VIEW_LATEST + 1).max(1)..=bids).rev() {
                    t.read(&BID, &[Int(item), Int(seq)]).await?;
                }
            }
            Spec::ViewUser { user } => {
                let row = read_existing(t, &USER, &[Int(user)]).await?;
                let comments = col(&row, &USER, 3)?;
                for seq in ((comments - VIEW_LATEST + 1).max(1)..=comments).rev() {
                    t.read(&COMMENT, &[Int(user), Int(seq)]).await?;
                }
            }
            Spec::StoreBid { item, bidder, raise } => {
                // The item is updated before the bid is inserted, so that concurrent bids on one item
                // conflict on the item row (a serialization failure) rather than on the new bid's key.
                let mut row = read_existing(t, &ITEM, &[Int(item)]).await?;
                read_existing(t, &USER, &[Int(bidder)]).await?;
                let amount = col(&row, &ITEM, 4)?.max(col(&row, &ITEM, 3)?) + raise;
                let seq = col(&row, &ITEM, 5)? + 1;
                row[4] = Int(amount);
                row[5] = Int(seq);
                t.update(&ITEM, row).await?;
                t.insert(&BID, vec![Int(item), Int(seq), Int(bidder), Int(amount)]).await?;
            }
            Spec::StoreComment { item, from, rating } => {
                let row = read_existing(t, &ITEM, &[Int(item)]).await?;
                let seller = col(&row, &ITEM, 1)?;
                let mut to = read_existing(t, &USER, &[Int(seller)]).await?;
                let seq = col(&to, &USER, 3)? + 1;
                to[2] = Int(col(&to, &USER, 2)? + rating);
                to[3] = Int(seq);
                t.update(&USER, to).await?;
                let body = Text(filler(item + from, 60));
                t.insert(&COMMENT, vec![Int(seller), Int(seq), Int(from), Int(item), Int(rating), body])
                    .await?;
            }
            Spec::RegisterItem { slot, seller } => {
                let iid = next_id(t, slot, 2).await?;
                read_existing(t, &USER, &[Int(seller)]).await?;
                let price = 100 + iid % 1000;
                t.insert(
                    &ITEM,
                    vec![Int(iid), Int(seller), Text(filler(iid, 20)), Int(price), Int(0), Int(0)],
                )
                .await?;
            }
            Spec::RegisterUser { slot } => {
                let uid = next_id(t, slot, 1).await?;
                // RUBiS checks that the nickname is free before registering it.
                if t.read(&USER, &[Int(uid)]).await?.is_some() {
                    return Err(StoreError::Data(format!("rb_user: new user id {uid} is taken")));
                }
                t.insert(&USER, vec![Int(uid), Text(format!("user{uid}")), Int(0), Int(0)]).await?;
            }
        }
        Ok(TxnEnd::Commit)
    }
}
