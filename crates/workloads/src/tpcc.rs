//! TPC-C (Cobra §6): one warehouse with 10 districts, and the five transaction types at their standard
//! frequencies: new order 45%, payment 43%, order status 4%, delivery 4%, stock level 4%.
//!
//! Every statement is a point read, insert or update by primary key, as in Cobra's key-value translation
//! (Cobra §6; L2 of its limitations). Where the specification uses a predicate, this version keeps the
//! answer in a row instead:
//! - Order status finds the customer's latest order through `c_last_o_id`, which new order maintains.
//! - Delivery finds each district's oldest undelivered order through `tpcc_delivery.dl_next_o_id` and marks
//!   the new-order row delivered instead of deleting it (histories have no deletes).
//! - Stock level reads the last 20 orders' lines one by one.
//! - Payment picks the customer by id (the specification's 60% by last name needs a secondary-index scan).
//! - The initial state has no orders; otherwise it follows the specification's cardinalities (3,000 customers
//!   per district, 100,000 items), scalable down for tests.

use std::collections::BTreeSet;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::schema::{TableDef, int, text};
use crate::{Row, StoreError, Txn, TxnEnd, Val, filler, pick, read_existing};

/// The warehouse (there is one).
pub static WAREHOUSE: TableDef = TableDef {
    name: "tpcc_warehouse",
    columns: &[int("w_id"), text("w_name"), int("w_tax"), int("w_ytd")],
    pk_len: 1,
};
/// The ten districts.
pub static DISTRICT: TableDef = TableDef {
    name: "tpcc_district",
    columns: &[int("d_w_id"), int("d_id"), text("d_name"), int("d_tax"), int("d_ytd"), int("d_next_o_id")],
    pk_len: 2,
};
/// Customers.
pub static CUSTOMER: TableDef = TableDef {
    name: "tpcc_customer",
    columns: &[
        int("c_w_id"),
        int("c_d_id"),
        int("c_id"),
        text("c_last"),
        text("c_credit"),
        int("c_discount"),
        int("c_balance"),
        int("c_ytd_payment"),
        int("c_payment_cnt"),
        int("c_delivery_cnt"),
        int("c_last_o_id"),
    ],
    pk_len: 3,
};
/// Payment history; keyed by the customer and its payment count, which payment increments.
pub static HISTORY: TableDef = TableDef {
    name: "tpcc_history",
    columns: &[
        int("h_c_w_id"),
        int("h_c_d_id"),
        int("h_c_id"),
        int("h_seq"),
        int("h_amount"),
        text("h_data"),
    ],
    pk_len: 4,
};
/// The item catalogue (read-only).
pub static ITEM: TableDef = TableDef {
    name: "tpcc_item",
    columns: &[int("i_id"), text("i_name"), int("i_price"), text("i_data")],
    pk_len: 1,
};
/// Stock of each item in the warehouse.
pub static STOCK: TableDef = TableDef {
    name: "tpcc_stock",
    columns: &[
        int("s_w_id"),
        int("s_i_id"),
        int("s_quantity"),
        int("s_ytd"),
        int("s_order_cnt"),
        text("s_dist_info"),
    ],
    pk_len: 2,
};
/// Orders.
pub static ORDERS: TableDef = TableDef {
    name: "tpcc_orders",
    columns: &[
        int("o_w_id"),
        int("o_d_id"),
        int("o_id"),
        int("o_c_id"),
        int("o_carrier_id"),
        int("o_ol_cnt"),
    ],
    pk_len: 3,
};
/// Orders not delivered yet (`no_delivered` = 1 once delivered).
pub static NEW_ORDER: TableDef = TableDef {
    name: "tpcc_new_order",
    columns: &[int("no_w_id"), int("no_d_id"), int("no_o_id"), int("no_delivered")],
    pk_len: 3,
};
/// Order lines.
pub static ORDER_LINE: TableDef = TableDef {
    name: "tpcc_order_line",
    columns: &[
        int("ol_w_id"),
        int("ol_d_id"),
        int("ol_o_id"),
        int("ol_number"),
        int("ol_i_id"),
        int("ol_quantity"),
        int("ol_amount"),
        int("ol_delivery_d"),
    ],
    pk_len: 4,
};
/// Each district's oldest undelivered order: the answer to the specification's `min(no_o_id)` query.
pub static DELIVERY: TableDef = TableDef {
    name: "tpcc_delivery",
    columns: &[int("dl_w_id"), int("dl_d_id"), int("dl_next_o_id")],
    pk_len: 2,
};

/// The tables of TPC-C.
pub static TABLES: &[&TableDef] =
    &[&WAREHOUSE, &DISTRICT, &CUSTOMER, &HISTORY, &ITEM, &STOCK, &ORDERS, &NEW_ORDER, &ORDER_LINE, &DELIVERY];

/// The transaction mix, in percent (Cobra §6).
pub const MIX: &[(&str, u32)] =
    &[("new_order", 45), ("payment", 43), ("order_status", 4), ("delivery", 4), ("stock_level", 4)];

const W: i64 = 1;
const DISTRICTS: i64 = 10;

/// TPC-C with one warehouse.
#[derive(Clone, Debug, PartialEq)]
pub struct Tpcc {
    /// Customers per district.
    pub customers: u64,
    /// Items in the catalogue.
    pub items: u64,
}

/// One TPC-C transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// New order: the items (id, quantity), sorted by item, then (for the 1% that roll back) an unused id.
    NewOrder {
        /// District.
        d: i64,
        /// Customer.
        c: i64,
        /// (item id, quantity) per order line.
        lines: Vec<(i64, i64)>,
    },
    /// Payment of `amount` cents by a customer.
    Payment {
        /// District.
        d: i64,
        /// Customer.
        c: i64,
        /// Cents.
        amount: i64,
    },
    /// The status of a customer's latest order.
    OrderStatus {
        /// District.
        d: i64,
        /// Customer.
        c: i64,
    },
    /// Deliver the oldest undelivered order of every district.
    Delivery {
        /// The carrier.
        carrier: i64,
    },
    /// Count recently ordered items whose stock is below `threshold`.
    StockLevel {
        /// District.
        d: i64,
        /// Stock threshold.
        threshold: i64,
    },
}

impl Spec {
    /// The transaction type.
    pub fn kind(&self) -> &'static str {
        match self {
            Spec::NewOrder { .. } => "new_order",
            Spec::Payment { .. } => "payment",
            Spec::OrderStatus { .. } => "order_status",
            Spec::Delivery { .. } => "delivery",
            Spec::StockLevel { .. } => "stock_level",
        }
    }
}

/// TPC-C's non-uniform random number, NURand(A, x, y) (clause 2.1.6), with a fixed C.
fn nurand(rng: &mut ChaCha8Rng, a: i64, x: i64, y: i64) -> i64 {
    const C: i64 = 42;
    (((rng.gen_range(0..=a) | rng.gen_range(x..=y)) + C) % (y - x + 1)) + x
}

/// The last-name syllables of clause 4.3.2.3.
fn last_name(n: i64) -> String {
    const SYL: [&str; 10] = ["BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"];
    let n = n.rem_euclid(1000) as usize;
    format!("{}{}{}", SYL[n / 100], SYL[n / 10 % 10], SYL[n % 10])
}

fn ints(row: &[Val], table: &TableDef, col: usize) -> Result<i64, StoreError> {
    let what = table.columns.get(col).map_or("?", |c| c.name);
    row.get(col).ok_or_else(|| StoreError::Data(format!("{}: short row", table.name)))?.int(what)
}

impl Tpcc {
    /// TPC-C with `customers` per district (default 3,000) and `items` (default 100,000).
    pub fn new(customers: Option<u64>, items: Option<u64>) -> Self {
        Tpcc { customers: customers.unwrap_or(3000).max(1), items: items.unwrap_or(100_000).max(1) }
    }

    pub(crate) fn initial_row(&self, table: &TableDef, pk: &[Val]) -> Option<Row> {
        use Val::{Int, Text};
        let (c_max, i_max) = (self.customers as i64, self.items as i64);
        let row = match (table.name, pk) {
            ("tpcc_warehouse", [Int(W)]) => vec![Int(W), Text("W1".into()), Int(1000), Int(30_000_000)],
            ("tpcc_district", [Int(W), Int(d)]) if (1..=DISTRICTS).contains(d) => {
                vec![Int(W), Int(*d), Text(format!("D{d}")), Int(d * 37 % 2000), Int(3_000_000), Int(1)]
            }
            ("tpcc_customer", [Int(W), Int(d), Int(c)])
                if (1..=DISTRICTS).contains(d) && (1..=c_max).contains(c) =>
            {
                let credit = if c % 10 == 0 { "BC" } else { "GC" };
                vec![
                    Int(W),
                    Int(*d),
                    Int(*c),
                    Text(last_name(c - 1)),
                    Text(credit.into()),
                    Int((c * 7919 + d) % 5000),
                    Int(-1000),
                    Int(1000),
                    Int(1),
                    Int(0),
                    Int(0),
                ]
            }
            ("tpcc_item", [Int(i)]) if (1..=i_max).contains(i) => {
                vec![Int(*i), Text(filler(*i, 14)), Int(100 + i * 7 % 9901), Text(filler(i + 1, 26))]
            }
            ("tpcc_stock", [Int(W), Int(i)]) if (1..=i_max).contains(i) => {
                vec![Int(W), Int(*i), Int(10 + i * 13 % 91), Int(0), Int(0), Text(filler(i + 2, 24))]
            }
            ("tpcc_delivery", [Int(W), Int(d)]) if (1..=DISTRICTS).contains(d) => {
                vec![Int(W), Int(*d), Int(1)]
            }
            _ => return None,
        };
        Some(row)
    }

    pub(crate) fn initial_keys(&self, table: &TableDef) -> Box<dyn Iterator<Item = Vec<Val>> + '_> {
        use Val::Int;
        let (c_max, i_max) = (self.customers as i64, self.items as i64);
        match table.name {
            "tpcc_warehouse" => Box::new(std::iter::once(vec![Int(W)])),
            "tpcc_district" | "tpcc_delivery" => Box::new((1..=DISTRICTS).map(|d| vec![Int(W), Int(d)])),
            "tpcc_customer" => Box::new(
                (1..=DISTRICTS).flat_map(move |d| (1..=c_max).map(move |c| vec![Int(W), Int(d), Int(c)])),
            ),
            "tpcc_item" => Box::new((1..=i_max).map(|i| vec![Int(i)])),
            "tpcc_stock" => Box::new((1..=i_max).map(|i| vec![Int(W), Int(i)])),
            _ => Box::new(std::iter::empty()),
        }
    }

    fn customer(&self, rng: &mut ChaCha8Rng) -> i64 {
        nurand(rng, 1023, 1, self.customers as i64)
    }

    pub(crate) fn next_txn(&self, rng: &mut ChaCha8Rng) -> Spec {
        let d = rng.gen_range(1..=DISTRICTS);
        match pick(rng, MIX) {
            "new_order" => {
                let c = self.customer(rng);
                let n = rng.gen_range(5..=15);
                let mut lines: Vec<(i64, i64)> = (0..n)
                    .map(|_| (nurand(rng, 8191, 1, self.items as i64), rng.gen_range(1..=10)))
                    .collect();
                // Sorted, so that concurrent new orders lock stock rows in one order (fewer deadlocks).
                lines.sort_unstable();
                // Clause 2.4.1.4: 1% of new orders name an unused item and roll back.
                if rng.gen_range(0..100) == 0 {
                    lines.push((self.items as i64 + 1, 1));
                }
                Spec::NewOrder { d, c, lines }
            }
            "payment" => Spec::Payment { d, c: self.customer(rng), amount: rng.gen_range(100..=500_000) },
            "order_status" => Spec::OrderStatus { d, c: self.customer(rng) },
            "delivery" => Spec::Delivery { carrier: rng.gen_range(1..=10) },
            _ => Spec::StockLevel { d, threshold: rng.gen_range(10..=20) },
        }
    }

    pub(crate) async fn execute<T: Txn>(&self, t: &mut T, spec: &Spec) -> Result<TxnEnd, StoreError> {
        match *spec {
            Spec::NewOrder { d, c, ref lines } => new_order(t, d, c, lines).await,
            Spec::Payment { d, c, amount } => payment(t, d, c, amount).await,
            Spec::OrderStatus { d, c } => order_status(t, d, c).await,
            Spec::Delivery { carrier } => delivery(t, carrier).await,
            Spec::StockLevel { d, threshold } => stock_level(t, d, threshold).await,
        }
    }
}

/// Clause 2.4: take the district's next order number, then order each line from stock.
async fn new_order<T: Txn>(t: &mut T, d: i64, c: i64, lines: &[(i64, i64)]) -> Result<TxnEnd, StoreError> {
    use Val::Int;
    read_existing(t, &WAREHOUSE, &[Int(W)]).await?;
    let mut district = read_existing(t, &DISTRICT, &[Int(W), Int(d)]).await?;
    let o_id = ints(&district, &DISTRICT, 5)?;
    district[5] = Int(o_id + 1);
    t.update(&DISTRICT, district).await?;
    let mut customer = read_existing(t, &CUSTOMER, &[Int(W), Int(d), Int(c)]).await?;
    customer[10] = Int(o_id);
    t.update(&CUSTOMER, customer).await?;
    t.insert(&ORDERS, vec![Int(W), Int(d), Int(o_id), Int(c), Int(0), Int(lines.len() as i64)]).await?;
    t.insert(&NEW_ORDER, vec![Int(W), Int(d), Int(o_id), Int(0)]).await?;
    for (n, &(i, qty)) in lines.iter().enumerate() {
        let Some(item) = t.read(&ITEM, &[Int(i)]).await? else {
            return Ok(TxnEnd::Rollback);
        };
        let price = ints(&item, &ITEM, 2)?;
        let mut stock = read_existing(t, &STOCK, &[Int(W), Int(i)]).await?;
        let s_qty = ints(&stock, &STOCK, 2)?;
        stock[2] = Int(if s_qty >= qty + 10 { s_qty - qty } else { s_qty - qty + 91 });
        stock[3] = Int(ints(&stock, &STOCK, 3)? + qty);
        stock[4] = Int(ints(&stock, &STOCK, 4)? + 1);
        t.update(&STOCK, stock).await?;
        let line =
            vec![Int(W), Int(d), Int(o_id), Int(n as i64 + 1), Int(i), Int(qty), Int(qty * price), Int(0)];
        t.insert(&ORDER_LINE, line).await?;
    }
    Ok(TxnEnd::Commit)
}

/// Clause 2.5: add the payment to the warehouse's, the district's and the customer's totals.
async fn payment<T: Txn>(t: &mut T, d: i64, c: i64, amount: i64) -> Result<TxnEnd, StoreError> {
    use Val::{Int, Text};
    let mut district = read_existing(t, &DISTRICT, &[Int(W), Int(d)]).await?;
    district[4] = Int(ints(&district, &DISTRICT, 4)? + amount);
    t.update(&DISTRICT, district).await?;
    let mut customer = read_existing(t, &CUSTOMER, &[Int(W), Int(d), Int(c)]).await?;
    customer[6] = Int(ints(&customer, &CUSTOMER, 6)? - amount);
    customer[7] = Int(ints(&customer, &CUSTOMER, 7)? + amount);
    let seq = ints(&customer, &CUSTOMER, 8)? + 1;
    customer[8] = Int(seq);
    t.update(&CUSTOMER, customer).await?;
    t.insert(&HISTORY, vec![Int(W), Int(d), Int(c), Int(seq), Int(amount), Text(format!("W1 D{d}"))]).await?;
    // The one warehouse row is every payment's hot spot, so it is updated last: the row lock is then held
    // for one statement instead of the whole transaction (the specification's order is warehouse first;
    // the effects are the same).
    let mut warehouse = read_existing(t, &WAREHOUSE, &[Int(W)]).await?;
    warehouse[3] = Int(ints(&warehouse, &WAREHOUSE, 3)? + amount);
    t.update(&WAREHOUSE, warehouse).await?;
    Ok(TxnEnd::Commit)
}

/// Clause 2.6: the customer's latest order and its lines (read-only).
async fn order_status<T: Txn>(t: &mut T, d: i64, c: i64) -> Result<TxnEnd, StoreError> {
    use Val::Int;
    let customer = read_existing(t, &CUSTOMER, &[Int(W), Int(d), Int(c)]).await?;
    let o_id = ints(&customer, &CUSTOMER, 10)?;
    if o_id > 0 {
        let order = read_existing(t, &ORDERS, &[Int(W), Int(d), Int(o_id)]).await?;
        for n in 1..=ints(&order, &ORDERS, 5)? {
            t.read(&ORDER_LINE, &[Int(W), Int(d), Int(o_id), Int(n)]).await?;
        }
    }
    Ok(TxnEnd::Commit)
}

/// Clause 2.7: deliver each district's oldest undelivered order, and bill its customer.
async fn delivery<T: Txn>(t: &mut T, carrier: i64) -> Result<TxnEnd, StoreError> {
    use Val::Int;
    for d in 1..=DISTRICTS {
        let mut cursor = read_existing(t, &DELIVERY, &[Int(W), Int(d)]).await?;
        let o_id = ints(&cursor, &DELIVERY, 2)?;
        let Some(mut no) = t.read(&NEW_ORDER, &[Int(W), Int(d), Int(o_id)]).await? else {
            continue; // Nothing to deliver in this district yet.
        };
        no[3] = Int(1);
        t.update(&NEW_ORDER, no).await?;
        let mut order = read_existing(t, &ORDERS, &[Int(W), Int(d), Int(o_id)]).await?;
        order[4] = Int(carrier);
        let c = ints(&order, &ORDERS, 3)?;
        let lines = ints(&order, &ORDERS, 5)?;
        t.update(&ORDERS, order).await?;
        let mut total = 0;
        for n in 1..=lines {
            let mut line = read_existing(t, &ORDER_LINE, &[Int(W), Int(d), Int(o_id), Int(n)]).await?;
            total += ints(&line, &ORDER_LINE, 6)?;
            line[7] = Int(1);
            t.update(&ORDER_LINE, line).await?;
        }
        let mut customer = read_existing(t, &CUSTOMER, &[Int(W), Int(d), Int(c)]).await?;
        customer[6] = Int(ints(&customer, &CUSTOMER, 6)? + total);
        customer[9] = Int(ints(&customer, &CUSTOMER, 9)? + 1);
        t.update(&CUSTOMER, customer).await?;
        cursor[2] = Int(o_id + 1);
        t.update(&DELIVERY, cursor).await?;
    }
    Ok(TxnEnd::Commit)
}

/// Clause 2.8: among the items of the district's last 20 orders, count those low in stock (read-only).
async fn stock_level<T: Txn>(t: &mut T, d: i64, threshold: i64) -> Result<TxnEnd, StoreError> {
    use Val::Int;
    let district = read_existing(t, &DISTRICT, &[Int(W), Int(d)]).await?;
    let next = ints(&district, &DISTRICT, 5)?;
    let mut items = BTreeSet::new();
    for o_id in (next - 20).max(1)..next {
        let Some(order) = t.read(&ORDERS, &[Int(W), Int(d), Int(o_id)]).await? else {
            continue;
        };
        for n in 1..=ints(&order, &ORDERS, 5)? {
            if let Some(line) = t.read(&ORDER_LINE, &[Int(W), Int(d), Int(o_id), Int(n)]).await? {
                items.insert(ints(&line, &ORDER_LINE, 4)?);
            }
        }
    }
    let mut low = 0;
    for i in items {
        if let Some(stock) = t.read(&STOCK, &[Int(W), Int(i)]).await?
            && ints(&stock, &STOCK, 2)? < threshold
        {
            low += 1;
        }
    }
    tracing::trace!(d, threshold, low, "stock level");
    Ok(TxnEnd::Commit)
}
