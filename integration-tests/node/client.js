// A node-postgres client for proxy_node_postgres.rs: transactions, named prepared statements, an error in
// the middle of a transaction, and a cancel sent with the cancel key the proxy handed out.
const pg = require("pg");

async function main(port, t, database) {
  const config = { host: "127.0.0.1", port, user: "postgres", database };
  const client = new pg.Client(config);
  await client.connect();
  await client.query(`drop table if exists ${t}`);
  await client.query(`create table ${t} (id int primary key, v int not null)`);
  await client.query("begin isolation level serializable");
  for (let i = 0; i < 10; i++) {
    await client.query({ name: "ins", text: `insert into ${t} values ($1, $2)`, values: [i, i * 10] });
  }
  await client.query("commit");
  let sum = 0;
  for (let i = 0; i < 10; i++) {
    const r = await client.query({ name: "read", text: `select v from ${t} where id = $1`, values: [i] });
    sum += r.rows[0].v;
  }
  console.log("sum", sum);
  for (let i = 0; i < 3; i++) {
    await client.query("begin isolation level serializable");
    const r = await client.query({ name: "read", text: `select v from ${t} where id = $1`, values: [i] });
    await client.query(`update ${t} set v = $2 where id = $1`, [i, r.rows[0].v + 1]);
    await client.query("commit");
  }
  await client.query("begin");
  try {
    await client.query(`insert into ${t} values ($1, $2)`, [5, 1]);
  } catch (e) {
    if (e.code === "23505") console.log("dup rejected");
    await client.query("rollback");
  }
  console.log("count", (await client.query(`select count(*)::int as n from ${t}`)).rows[0].n);
  // A cancel: a second connection sends a CancelRequest with the key the proxy gave this session.
  const sleeping = client.query("select pg_sleep(10)").then(
    () => "finished",
    (e) => (e.code === "57014" ? "cancelled" : `error ${e.code}`),
  );
  await new Promise((r) => setTimeout(r, 300));
  const canceller = new pg.Connection();
  canceller.connect(port, "127.0.0.1");
  canceller.on("connect", () => canceller.cancel(client.processID, client.secretKey));
  console.log(await sleeping);
  console.log("after cancel", (await client.query("select 7 as n")).rows[0].n);
  await client.end();
}

main(Number(process.argv[2]), process.argv[3], process.argv[4]).catch((e) => {
  console.error(e);
  process.exit(1);
});
