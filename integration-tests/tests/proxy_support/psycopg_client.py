"""A psycopg 3 client for proxy_psycopg.rs: the extended protocol with server-side parameters, libpq pipeline
mode, COPY FROM STDIN, a failed transaction, and LISTEN/NOTIFY, all through the proxy."""

import sys

import psycopg

dsn, t = sys.argv[1], sys.argv[2]

with psycopg.connect(dsn) as conn:  # one transaction, committed when the block ends
    conn.execute(f"drop table if exists {t}")
    conn.execute(f"create table {t} (id int primary key, v text)")

conn = psycopg.connect(dsn)
with conn.transaction():
    conn.cursor().executemany(f"insert into {t} values (%s, %s)", [(i, f"v{i}") for i in range(10)])
with conn.pipeline():
    for i in range(10, 15):
        conn.execute(f"insert into {t} values (%s, %s)", (i, "p"))
conn.commit()
with conn.cursor() as cur:
    with cur.copy(f"copy {t} (id, v) from stdin") as copy:
        for i in range(100, 103):
            copy.write_row((i, "c"))
conn.commit()
print("count", conn.execute(f"select count(*) from {t}").fetchone()[0])
conn.commit()
try:
    with conn.transaction():
        conn.execute(f"insert into {t} values (1, 'dup')")
except psycopg.errors.UniqueViolation:
    print("dup rejected")
conn.autocommit = True
conn.execute(f"listen {t}")
with psycopg.connect(dsn, autocommit=True) as other:
    other.execute(f"notify {t}, 'hello'")
for n in conn.notifies(timeout=5, stop_after=1):
    print("notify", n.payload)
conn.close()
