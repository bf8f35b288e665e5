//! The demo's transfer workload as four concurrent SERIALIZABLE clients against the machine's database
//! (127.0.0.1:5432, database `test`; override with `KRAIT_TEST_PG_URL`): every transaction ends committed
//! or rolled back, nothing fails, and the money taken is exactly one unit per commit.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use workloads::sql::{Isolation, SchemaName};
use workloads::transfer::{self, START_BALANCE, Table, Transfers};

fn url() -> String {
    std::env::var("KRAIT_TEST_PG_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=10".into())
}

#[test]
fn serializable_transfers_take_one_unit_per_commit() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let (admin, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
            .await
            .expect("PostgreSQL is up on 127.0.0.1:5432 with database `test`");
        tokio::spawn(conn);
        let schema: SchemaName = "krait_wltest_transfer".parse().unwrap();
        let keys = 4;
        admin.batch_execute(&transfer::accounts_setup_sql(&schema, keys)).await.unwrap();
        let run = Arc::new(Transfers {
            txns: 60,
            keys,
            isolation: Isolation::Serializable,
            table: Table::Accounts { schema: schema.clone() },
            seed: 3,
            counts: Default::default(),
        });
        let mut clients = Vec::new();
        for c in 0..4 {
            let (db, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            clients.push(tokio::spawn(transfer::run_client(run.clone(), c, db)));
        }
        for c in clients {
            c.await.unwrap();
        }
        let counts = &run.counts;
        assert_eq!(counts.finished(), 60);
        assert_eq!(counts.errors.load(Ordering::Relaxed), 0);
        let row =
            admin.query_one(&format!("SELECT sum(balance)::int8 FROM {schema}.accounts"), &[]).await.unwrap();
        let left: i64 = row.get(0);
        let committed = counts.committed.load(Ordering::Relaxed) as i64;
        assert_eq!(left, i64::from(keys) * START_BALANCE - committed);
        admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await.unwrap();
    });
}
