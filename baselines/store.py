"""DuckDB persistence: versioned baselines, tombstones, per-user state, offsets.

All SQL of the project lives in this package. Writes come in batches: one
transaction per processed batch, rows inserted through Arrow tables, never a
row at a time. The processed offset of each input partition is stored in the
same transaction as the state it produced, so a restart resumes exactly there.

:class:`BaselineStore` holds the connection, its lock and the reads; the rest is one
module a concern: ``schema`` (migrations, tables, the compacting rewrite), ``columns``
(typed values to Arrow tables and back), ``writes`` (rows applied, history pruned,
partitions dropped) and ``erasure`` (tombstones and the re-reads that verify them).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from baselines import erasure, schema
from baselines.columns import (
    BASELINE_COLUMNS,
    StagedState,
    baseline_of,
    baseline_table,
    by_user,
    offset_table,
    session_table,
    state_table,
)
from baselines.erasure import user_ref
from baselines.rows import Rows
from baselines.snapshot import decode_state
from baselines.writes import apply, drop_partition, prune
from drift.baseline import Baseline, UserBaselines
from drift.model import Mode, Tier
from drift.outputs import ErasureCommand, ErasureResult, SessionSummary
from drift.state import UserState


@dataclass
class BatchWrite:
    """Everything one processed batch changes, written in one transaction."""

    topic: str
    offsets: dict[int, int] = field(default_factory=dict)
    states: dict[str, tuple[int, StagedState]] = field(default_factory=dict)
    dropped_states: dict[str, int] = field(default_factory=dict)
    baselines: list[tuple[int, Baseline]] = field(default_factory=list)
    sessions: list[tuple[int, SessionSummary]] = field(default_factory=list)
    as_of: dict[str, int] = field(default_factory=dict)
    """The offset of its partition that each staged state reflects the log up to."""
    replay_from: dict[int, int] = field(default_factory=dict)
    """Per partition, the offset a restore replays memory-only users from (default: the
    next offset, nothing to replay)."""

    def empty(self) -> bool:
        return not (self.offsets or self.states or self.dropped_states or self.baselines
                    or self.sessions)

    def stage_state(self, user_id: str, partition: int, state: StagedState | None,
                    as_of: int = 0) -> None:
        """The user's latest state to store (reflecting the partition's log up to offset
        ``as_of``), or None to drop the user's stored state."""
        if state is None:
            self.states.pop(user_id, None)
            self.as_of.pop(user_id, None)
            self.dropped_states[user_id] = partition
        else:
            self.dropped_states.pop(user_id, None)
            self.states[user_id] = (partition, state)
            self.as_of[user_id] = as_of


@dataclass(frozen=True)
class Retention:
    """How much history a user keeps: the newest ``versions`` of each baseline kind (the
    current one and superseded ones) and the newest ``sessions`` session summaries. Older
    rows go at the checkpoint that adds newer ones, so a user's stored rows, the file and a
    partition's changelog snapshot stay bounded however long the user stays."""

    versions: int = 8
    sessions: int = 64


class StoreUnavailable(RuntimeError):
    """The database file is held by a running worker (DuckDB allows one writer process)."""


#: One DuckDB thread: its parallel operators cost more than they save on a checkpoint's rows
#: (docs/design.md), and a second thread would take the core the worker's loop runs on.
_DUCKDB: dict[str, str | bool | int | float | list[str]] = {"threads": 1}


class BaselineStore:
    """A DuckDB file (or ``:memory:``) holding the worker's durable state."""

    @classmethod
    def open_read_only(cls, path: Path | str) -> BaselineStore:
        try:
            return cls(path, read_only=True)
        except duckdb.IOException as exc:
            raise StoreUnavailable(str(path)) from exc

    def __init__(self, path: Path | str, read_only: bool = False,
                 retention: Retention | None = None) -> None:
        self.path = str(path)
        self.retention = retention or Retention()
        self._lock = threading.RLock()
        self._con = duckdb.connect(self.path, read_only=read_only, config=_DUCKDB)
        if not read_only:
            self.migrate()

    # ------------------------------------------------------------------ schema

    def migrate(self) -> int:
        """Apply pending migrations; returns the schema version."""
        with self._lock:
            return schema.migrate(self._con)

    def close(self) -> None:
        with self._lock:
            try:
                self._con.execute("CHECKPOINT")
            except duckdb.Error:
                pass
            self._con.close()

    def report(self) -> dict[str, Any]:
        """Aggregate counts for a governance summary: no user ids, no values."""
        queries = {
            "users_with_baselines": "SELECT count(DISTINCT user_id) FROM baseline_versions",
            "users_with_state": "SELECT count(*) FROM user_state",
            "sessions_recorded": "SELECT count(*) FROM session_summaries",
            "erasure_requests": "SELECT count(*) FROM erasure_requests",
            "tombstones": "SELECT count(*) FROM tombstones",
        }
        grouped = {
            "baseline_versions_by_kind":
                "SELECT kind, count(*) FROM baseline_versions GROUP BY kind ORDER BY kind",
            "sessions_by_max_effective_tier":
                "SELECT max_tier, count(*) FROM session_summaries GROUP BY 1 ORDER BY 1",
            "tombstones_by_reason":
                "SELECT reason, count(*) FROM tombstones GROUP BY 1 ORDER BY 1",
            "erasure_targets_by_outcome":
                "SELECT outcome, count(*) FROM erasure_targets GROUP BY 1 ORDER BY 1",
            "baselines_by_mode":
                "SELECT mode, count(DISTINCT user_id) FROM baseline_versions GROUP BY 1 ORDER BY 1",
        }
        out: dict[str, Any] = {}
        with self._lock:
            for name, sql in queries.items():
                row = self._con.execute(sql).fetchone()
                out[name] = int(row[0]) if row else 0
            for name, sql in grouped.items():
                out[name] = {str(k): int(v) for k, v in self._con.execute(sql).fetchall()}
            row = self._con.execute(
                "SELECT avg(reattune_quality), count(reattune_quality) FROM session_summaries"
            ).fetchone()
        out["reattune_quality_mean"] = float(row[0]) if row and row[0] is not None else None
        out["reattune_sessions"] = int(row[1]) if row else 0
        return out

    # ------------------------------------------------------------------ reads

    def offsets(self, topic: str) -> dict[int, int]:
        """Next offset to process, per partition of ``topic``."""
        with self._lock:
            rows = self._con.execute(
                "SELECT partition, next_offset FROM partition_offsets WHERE topic = ?",
                [topic]).fetchall()
        return {int(p): int(o) for p, o in rows}

    def replay_offsets(self, topic: str) -> dict[int, int]:
        """Per partition of ``topic``, the offset a restore replays memory-only users from."""
        with self._lock:
            rows = self._con.execute(
                "SELECT partition, coalesce(replay_from, next_offset) FROM partition_offsets "
                "WHERE topic = ?", [topic]).fetchall()
        return {int(p): int(o) for p, o in rows}

    def state_offsets(self, partitions: Iterable[int]) -> dict[str, int]:
        """The offset each stored state of ``partitions`` reflects its partition's log up to."""
        return {u: int(o) for u, o in self._of_partitions(
            "SELECT user_id, as_of FROM user_state", partitions)}

    def load_states(self, partitions: Iterable[int]) -> dict[str, UserState]:
        rows = self._of_partitions("SELECT user_id, state FROM user_state", partitions)
        return {user_id: decode_state(state) for user_id, state in rows}

    def load_baselines(self, partitions: Iterable[int]) -> dict[str, UserBaselines]:
        """The latest version of each kind for every user of ``partitions``."""
        return by_user(self._of_partitions(
            f"SELECT {BASELINE_COLUMNS} FROM baseline_versions", partitions,
            "QUALIFY row_number() OVER (PARTITION BY user_id, kind ORDER BY version DESC) = 1"))

    def _of_partitions(self, select: str, partitions: Iterable[int],
                       then: str = "") -> list[Any]:
        """The rows of ``select`` (then ``then``) in ``partitions``; none for no partition."""
        parts = list(partitions)
        if not parts:
            return []
        with self._lock:
            return self._con.execute(
                f"{select} WHERE partition IN ({', '.join('?' * len(parts))}) {then}",
                parts).fetchall()

    def user_baselines(self, user_id: str) -> UserBaselines:
        with self._lock:
            rows = self._con.execute(
                f"SELECT {BASELINE_COLUMNS} FROM baseline_versions WHERE user_id = ? "
                "QUALIFY row_number() OVER (PARTITION BY kind ORDER BY version DESC) = 1",
                [user_id]).fetchall()
        return by_user(rows).get(user_id, UserBaselines())

    def history(self, user_id: str) -> tuple[list[Baseline], list[dict[str, Any]]]:
        """Every stored version of a user (oldest first) and the user's tombstones."""
        with self._lock:
            rows = self._con.execute(
                f"SELECT {BASELINE_COLUMNS} FROM baseline_versions WHERE user_id = ? "
                "ORDER BY kind, version", [user_id]).fetchall()
            tombs = self._con.execute(
                "SELECT baseline_id, kind, version, erased_at, reason, request_id "
                "FROM tombstones WHERE user_ref = ? ORDER BY erased_at, kind, version",
                [user_ref(user_id)]).fetchall()
        keys = ("baseline_id", "kind", "version", "erased_at", "reason", "request_id")
        return [baseline_of(r) for r in rows], [dict(zip(keys, t)) for t in tombs]

    def list_users(self, limit: int, user_id: str | None = None
                   ) -> tuple[list[dict[str, Any]], int]:
        """Users with baselines (latest version per kind, last creation time), at most
        ``limit`` of them in user id order, and how many there are; ``user_id``: only that one."""
        where, params = ("WHERE user_id = ?", [user_id]) if user_id is not None else ("", [])
        with self._lock:
            total = self._con.execute(
                f"SELECT count(DISTINCT user_id) FROM baseline_versions {where}",
                params).fetchone()
            rows = self._con.execute(
                "SELECT user_id, kind, max(version), max(created_at) FROM baseline_versions "
                f"WHERE user_id IN (SELECT DISTINCT user_id FROM baseline_versions {where} "
                "ORDER BY user_id LIMIT ?) GROUP BY user_id, kind ORDER BY user_id, kind",
                [*params, limit]).fetchall()
        users: dict[str, dict[str, Any]] = {}
        for user, kind, version, created in rows:
            entry = users.setdefault(user, {"user_id": user, "versions": {},
                                            "last_created_at": 0.0})
            entry["versions"][kind] = int(version)
            entry["last_created_at"] = max(entry["last_created_at"], float(created))
        return list(users.values()), int(total[0]) if total else 0

    def session(self, user_id: str, session_id: str) -> SessionSummary | None:
        with self._lock:
            row = self._con.execute(
                "SELECT user_id, session_id, partition, mode, started_at, ended_at, turns, "
                "max_tier, scores, model_change, reattune_quality FROM session_summaries "
                "WHERE user_id = ? AND session_id = ?", [user_id, session_id]).fetchone()
        if not row:
            return None
        (user, session, _, mode, started, ended, turns, max_tier, scores, model_change,
         quality) = row
        return SessionSummary(user, session, Mode(mode), started, ended, turns,
                              Tier[max_tier.upper()], scores, model_change, quality)

    def count_user_rows(self, user_id: str) -> dict[str, int]:
        """Rows that still mention a user, per table (erasure verification)."""
        with self._lock:
            out = {}
            for table in ("baseline_versions", "user_state", "session_summaries"):
                row = self._con.execute(
                    f"SELECT count(*) FROM {table} WHERE user_id = ?", [user_id]).fetchone()
                out[table] = int(row[0]) if row else 0
        return out

    # ------------------------------------------------------------------ writes

    def commit_batch(self, batch: BatchWrite) -> None:
        """Write one batch atomically: states, baselines, sessions and offsets together."""
        if not batch.empty():
            self.apply_rows(self.rows_of(batch))

    def rows_of(self, batch: BatchWrite) -> Rows:
        """The rows ``batch`` writes, as Arrow tables: what DuckDB and the changelog take."""
        tables: dict[str, pa.Table] = {}
        if batch.states:
            tables["user_state"] = state_table(batch.states, batch.as_of)
        if batch.baselines:
            tables["baseline_versions"] = baseline_table(batch.baselines)
        if batch.sessions:
            tables["session_summaries"] = session_table(batch.sessions)
        if batch.offsets:
            tables["partition_offsets"] = offset_table(batch.topic, batch.offsets,
                                                       batch.replay_from)
        return Rows(tables, tuple(sorted(batch.dropped_states)))

    def apply_rows(self, rows: Rows) -> None:
        """Write ``rows`` (a checkpoint, or a delta read back from the changelog) atomically."""
        with self._transaction() as con:
            self._write(con, rows)

    def _write(self, con: duckdb.DuckDBPyConnection, rows: Rows) -> None:
        apply(con, rows)
        prune(con, rows, self.retention.versions, self.retention.sessions)

    @contextmanager
    def _transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One DuckDB transaction, rolled back on any error, under the store's lock."""
        with self._lock:
            con = self._con
            con.execute("BEGIN")
            try:
                yield con
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

    # ------------------------------------------------------------------ partitions

    def export_partition(self, partition: int) -> Rows:
        """Every row of one partition: its snapshot for the changelog.

        Superseded baseline versions, session summaries and erasure records go with
        it, so the history a governance team reads follows the partition too.
        """
        tables: dict[str, pa.Table] = {}
        with self._lock:
            for table, where in schema.PARTITION_ROWS.items():
                tables[table] = self._con.sql(
                    f"SELECT * FROM {table} WHERE {where}", params=[partition]).to_arrow_table()
        return Rows({t: v for t, v in tables.items() if v.num_rows}, ())

    def restore_partition(self, partition: int, rows: Iterable[Rows]) -> None:
        """Replace one partition's rows by a snapshot and the deltas since, in one transaction."""
        with self._transaction() as con:
            drop_partition(con, partition)
            for part in rows:
                self._write(con, part)

    def drop_partitions(self, partitions: Iterable[int]) -> bool:
        """Remove the rows of partitions this worker no longer owns (their changelog has them);
        returns whether anything was removed. :meth:`compact` then clears the freed pages."""
        held = self.held_partitions() & set(partitions)
        if held:
            with self._transaction() as con:
                for p in sorted(held):
                    drop_partition(con, p)
        return bool(held)

    def held_partitions(self) -> set[int]:
        """Partitions with any row in this file."""
        with self._lock:
            rows = self._con.execute(" UNION ".join(
                f"SELECT DISTINCT partition FROM {t}" for t in
                ("baseline_versions", "user_state", "session_summaries", "partition_offsets",
                 "erasure_requests"))).fetchall()
        return {int(p) for (p,) in rows if p is not None and p >= 0}

    # ------------------------------------------------------------------ erasure

    def previous_erasure(self, request_id: str) -> ErasureResult | None:
        with self._lock:
            return erasure.previous_erasure(self._con, request_id)

    def erase(self, command: ErasureCommand, partition: int) -> ErasureResult:
        """Remove every version of the command's kinds for its user, leaving tombstones.

        Idempotent by request id: a repeated request returns the first result (``repeat``
        when another event than the command's carried it out).
        ``verified`` is set per target only after re-reading it and finding nothing.
        An erasure of every kind also drops the user's state and session rows.
        The freed pages still hold old bytes until :meth:`compact` runs.
        """
        with self._lock:
            previous = erasure.previous_erasure(self._con, command.request_id,
                                                command.cause_event_id)
        if previous is not None:
            return previous
        with self._transaction() as con:
            return erasure.erase(con, command, partition)

    def compact(self) -> None:
        """Rewrite the database into a fresh file, so freed pages keep no erased bytes.

        DuckDB reuses freed blocks but does not zero them; a checkpoint alone leaves
        deleted values readable in the file. Copying the live rows into a new file
        and swapping it in removes them from the file and its WAL.
        """
        if self.path == ":memory:":
            return
        with self._lock:
            self._con.execute("CHECKPOINT")
            self._con.close()
            schema.rewrite(self.path)
            self._con = duckdb.connect(self.path, config=_DUCKDB)
