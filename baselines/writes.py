"""Rows into DuckDB inside the caller's transaction: a checkpoint, a changelog delta or a
partition's snapshot (:func:`apply`), the history past what a user keeps (:func:`prune`),
and a partition's rows removed (:func:`drop_partition`)."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from baselines.rows import Rows
from baselines.schema import PARTITION_ROWS

#: How rows are written: an id-keyed insert, so writing the same rows twice changes nothing.
#: A user's state row replaces the stored one in place (a delete of every staged user and an
#: insert cost 7 ms more a checkpoint of 1,000 states: docs/performance.md).
_INSERT = {
    "user_state": "INSERT OR REPLACE INTO user_state BY NAME SELECT * FROM incoming",
    "baseline_versions": "INSERT OR IGNORE INTO baseline_versions BY NAME SELECT * FROM incoming",
    "session_summaries": "INSERT OR REPLACE INTO session_summaries BY NAME SELECT * FROM incoming",
    "partition_offsets": "INSERT OR REPLACE INTO partition_offsets BY NAME SELECT * FROM incoming",
    "erasure_requests": "INSERT OR IGNORE INTO erasure_requests BY NAME SELECT * FROM incoming",
    "erasure_targets": "INSERT INTO erasure_targets BY NAME SELECT * FROM incoming",
    "tombstones": "INSERT INTO tombstones BY NAME SELECT * FROM incoming",
}


def apply(con: duckdb.DuckDBPyConnection, rows: Rows) -> None:
    """Write ``rows`` inside the caller's transaction: a user's state row is replaced, and
    the dropped users' rows go."""
    if rows.dropped:
        con.register("gone_ids", pa.table({"user_id": pa.array(sorted(rows.dropped),
                                                               pa.string())}))
        con.execute("DELETE FROM user_state WHERE user_id IN (SELECT user_id FROM gone_ids)")
        con.unregister("gone_ids")
    for table, sql in _INSERT.items():
        incoming = rows.tables.get(table)
        if incoming is None or not incoming.num_rows:
            continue
        con.register("incoming", incoming)
        con.execute(sql)
        con.unregister("incoming")



def prune(con: duckdb.DuckDBPyConnection, rows: Rows, versions: int, sessions: int) -> None:
    """Drop what is past the newest ``versions`` of each baseline kind and the newest
    ``sessions`` session summaries of the users ``rows`` added to (never a current version)."""
    for table, sql, kept in (("baseline_versions", _PRUNE_VERSIONS, versions),
                             ("session_summaries", _PRUNE_SESSIONS, sessions)):
        added = rows.tables.get(table)
        if added is None or not added.num_rows:
            continue
        users = pa.table({"user_id": pc.unique(added.column("user_id"))})
        con.register("pruned_users", users)
        try:
            con.execute(sql, [max(kept, 1)])
        finally:
            con.unregister("pruned_users")


_PRUNE_VERSIONS = (
    "DELETE FROM baseline_versions AS b USING (SELECT baseline_id, version, "
    "row_number() OVER (PARTITION BY user_id, kind ORDER BY version DESC) AS newest "
    "FROM baseline_versions WHERE user_id IN (SELECT user_id FROM pruned_users)) AS o "
    "WHERE b.baseline_id = o.baseline_id AND b.version = o.version AND o.newest > ?")
_PRUNE_SESSIONS = (
    "DELETE FROM session_summaries AS s USING (SELECT user_id, session_id, "
    "row_number() OVER (PARTITION BY user_id ORDER BY started_at DESC, session_id DESC) "
    "AS newest FROM session_summaries "
    "WHERE user_id IN (SELECT user_id FROM pruned_users)) AS o "
    "WHERE s.user_id = o.user_id AND s.session_id = o.session_id AND o.newest > ?")


def drop_partition(con: duckdb.DuckDBPyConnection, partition: int) -> None:
    for table, where in PARTITION_ROWS.items():  # erasure_requests last: the others use it
        con.execute(f"DELETE FROM {table} WHERE {where}", [partition])

