"""An asyncpg client for proxy_asyncpg.rs. asyncpg speaks the extended protocol only, in the binary format,
and pipelines: executemany sends every Bind/Execute before the Sync. Through the proxy it runs transactions,
prepared statements, an error in the middle of a pipelined batch, and a cancel of a running statement."""

import asyncio
import sys

import asyncpg


async def main(dsn, t):
    conn = await asyncpg.connect(dsn)
    await conn.execute(f"drop table if exists {t}")
    await conn.execute(f"create table {t} (id int primary key, v bigint not null)")
    async with conn.transaction(isolation="serializable"):
        await conn.executemany(f"insert into {t} values ($1, $2)", [(i, i * 10) for i in range(10)])
    # A prepared statement, run several times with binary parameters and results.
    read = await conn.prepare(f"select v from {t} where id = $1")
    total = 0
    for i in range(10):
        total += await read.fetchval(i)
    print("sum", total)
    # Read-modify-write transactions.
    for i in range(3):
        async with conn.transaction(isolation="serializable"):
            v = await conn.fetchval(f"select v from {t} where id = $1", i)
            await conn.execute(f"update {t} set v = $2 where id = $1", i, v + 1)
    # An error in the middle of a pipelined batch: the key 5 exists, so the transaction aborts.
    try:
        async with conn.transaction():
            await conn.executemany(f"insert into {t} values ($1, $2)", [(20, 1), (5, 1), (21, 1)])
    except asyncpg.UniqueViolationError:
        print("batch rejected")
    print("count", await conn.fetchval(f"select count(*) from {t}"))
    # A cancel: asyncpg sends a CancelRequest when the timeout fires; the connection stays usable.
    try:
        await conn.execute("select pg_sleep(10)", timeout=0.5)
    except asyncio.TimeoutError:
        print("cancelled")
    print("after cancel", await conn.fetchval("select 7"))
    await conn.close()


asyncio.run(main(sys.argv[1], sys.argv[2]))
