"""The schema: migrations applied in order, the tables and which rows are a partition's, and
the rewrite into a fresh file that :meth:`~baselines.store.BaselineStore.compact` uses.

>>> import duckdb
>>> con = duckdb.connect(":memory:")
>>> migrate(con) == len(MIGRATIONS), migrate(con) == len(MIGRATIONS)
(True, True)
>>> sorted(TABLES) == sorted(t for (t,) in con.execute("SHOW TABLES").fetchall()
...                          if t != "schema_version")
True
"""

from __future__ import annotations

import os

import duckdb

from baselines.migrations import MIGRATIONS


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Bring the schema of ``con`` to the newest version; returns that version."""
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = con.execute("SELECT max(version) FROM schema_version").fetchone()
    current = int(row[0]) if row and row[0] is not None else 0
    for version, statements in enumerate(MIGRATIONS, start=1):
        if version <= current:
            continue
        con.execute("BEGIN")
        for sql in statements:
            con.execute(sql)
        con.execute("INSERT INTO schema_version VALUES (?)", [version])
        con.execute("COMMIT")
        current = version
    return current


_REQUESTS_OF = "request_id IN (SELECT request_id FROM erasure_requests WHERE partition = ?)"

#: Where-clauses that select one partition's rows (the parameter is the partition).
PARTITION_ROWS = {
    "baseline_versions": "partition = ?",
    "user_state": "partition = ?",
    "session_summaries": "partition = ?",
    "partition_offsets": "partition = ?",
    "tombstones": _REQUESTS_OF,
    "erasure_targets": _REQUESTS_OF,
    "erasure_requests": "partition = ?",
}
TABLES = tuple(PARTITION_ROWS)


def rewrite(path: str) -> None:
    """Copy the live rows of the (closed) database file ``path`` into a fresh file and swap it
    in, so that freed pages keep no erased bytes (see ``BaselineStore.compact``)."""
    fresh = path + ".compact"
    for leftover in (fresh, fresh + ".wal"):
        if os.path.exists(leftover):
            os.remove(leftover)
    new = duckdb.connect(fresh)
    migrate(new)
    new.execute("ATTACH ? AS old (READ_ONLY)", [path])
    for table in TABLES:
        new.execute(f"INSERT INTO {table} SELECT * FROM old.{table}")
    new.execute("DETACH old")
    new.execute("CHECKPOINT")
    new.close()
    os.replace(fresh, path)
    wal = path + ".wal"
    if os.path.exists(wal):
        os.remove(wal)
