"""DuckDB persistence: versioned baselines, tombstones, per-user state, offsets.

All SQL of the project lives in this package. Writes come in batches: one
transaction per processed batch, rows inserted through Arrow tables, never a
row at a time. The processed offset of each input partition is stored in the
same transaction as the state it produced, so a restart resumes exactly there.
"""

from __future__ import annotations

import os
import threading
from array import array
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from baselines.migrations import MIGRATIONS
from baselines.rows import Rows
from baselines.snapshot import decode_state, encode_state
from drift.baseline import (
    AttunementBaseline,
    Baseline,
    BaselineMeta,
    SafetyBaseline,
    SemanticBaseline,
    UserBaselines,
    derive_id,
)
from drift.model import BaselineKind, Mode, ModelTriple, Tier
from drift.outputs import (
    ErasureCommand,
    ErasureOutcome,
    ErasureResult,
    ErasureTarget,
    SessionSummary,
)
from drift.scoring import WindowStats
from drift.state import UserState


def plain_values(value: object) -> object:
    """msgspec's encoding hook for the arrays of doubles :class:`WindowStats` keeps: a list of
    floats, so the stored JSON is what it was when they were tuples."""
    if isinstance(value, array):
        return value.tolist()
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


_json = msgspec.json.Encoder(enc_hook=plain_values)


def user_ref(user_id: str) -> str:
    """The pseudonymous reference that audit records keep instead of the user id."""
    return derive_id("user-ref", user_id)


class _AttunementValues(msgspec.Struct, frozen=True):
    features: tuple[str, ...]
    sessions: tuple[tuple[WindowStats | None, ...], ...]
    late_profile: tuple[float, ...]


class _SemanticValues(msgspec.Struct, frozen=True):
    items: tuple[tuple[str, str], ...]


class _SafetyValues(msgspec.Struct, frozen=True):
    gate_config_id: str
    drift_policy_id: str
    consent_state_id: str


def _values(b: Baseline) -> bytes:
    if isinstance(b, AttunementBaseline):
        return _json.encode(_AttunementValues(b.features, b.sessions, b.late_profile))
    if isinstance(b, SemanticBaseline):
        return _json.encode(_SemanticValues(b.items))
    return _json.encode(_SafetyValues(b.gate_config_id, b.drift_policy_id, b.consent_state_id))


def _from_row(row: Sequence[Any]) -> Baseline:
    (user_id, kind, baseline_id, version, created_at, source_session, model_version,
     tokenizer_id, precision_tag, adapter_id, policy, mode, expires_at, values) = row
    meta = BaselineMeta(user_id, BaselineKind(kind), baseline_id, version, created_at,
                        source_session, ModelTriple(model_version, tokenizer_id, precision_tag,
                                                    adapter_id),
                        policy, Mode(mode), expires_at)
    if meta.kind is BaselineKind.ATTUNEMENT:
        a = msgspec.json.decode(values, type=_AttunementValues)
        return AttunementBaseline(meta, a.features, a.sessions, a.late_profile)
    if meta.kind is BaselineKind.SEMANTIC:
        s = msgspec.json.decode(values, type=_SemanticValues)
        return SemanticBaseline(meta, s.items)
    f = msgspec.json.decode(values, type=_SafetyValues)
    return SafetyBaseline(meta, f.gate_config_id, f.drift_policy_id, f.consent_state_id)


_BASELINE_COLUMNS = ("user_id, kind, baseline_id, version, created_at, source_session, "
                     "model_version, tokenizer_id, precision_tag, adapter_id, drift_policy_id, "
                     "mode, expires_at, vals")


@dataclass
class BatchWrite:
    """Everything one processed batch changes, written in one transaction."""

    topic: str
    offsets: dict[int, int] = field(default_factory=dict)
    states: dict[str, tuple[int, UserState]] = field(default_factory=dict)
    dropped_states: dict[str, int] = field(default_factory=dict)
    baselines: list[tuple[int, Baseline]] = field(default_factory=list)
    sessions: list[tuple[int, SessionSummary]] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.offsets or self.states or self.dropped_states or self.baselines
                    or self.sessions)

    def stage_state(self, user_id: str, partition: int, state: UserState | None) -> None:
        """The user's latest state to store, or None to drop the user's stored state."""
        if state is None:
            self.states.pop(user_id, None)
            self.dropped_states[user_id] = partition
        else:
            self.dropped_states.pop(user_id, None)
            self.states[user_id] = (partition, state)


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
        self._con = duckdb.connect(self.path, read_only=read_only)
        if not read_only:
            self.migrate()

    # ------------------------------------------------------------------ schema

    def migrate(self) -> int:
        """Apply pending migrations; returns the schema version."""
        with self._lock:
            return migrate(self._con)

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

    def load_states(self, partitions: Iterable[int]) -> dict[str, UserState]:
        parts = list(partitions)
        if not parts:
            return {}
        with self._lock:
            rows = self._con.execute(
                "SELECT user_id, state FROM user_state WHERE partition IN "
                f"({', '.join('?' * len(parts))})", parts).fetchall()
        return {user_id: decode_state(state) for user_id, state in rows}

    def load_baselines(self, partitions: Iterable[int]) -> dict[str, UserBaselines]:
        """The latest version of each kind for every user of ``partitions``."""
        parts = list(partitions)
        if not parts:
            return {}
        with self._lock:
            rows = self._con.execute(
                f"SELECT {_BASELINE_COLUMNS} FROM baseline_versions "
                f"WHERE partition IN ({', '.join('?' * len(parts))}) "
                "QUALIFY row_number() OVER (PARTITION BY user_id, kind ORDER BY version DESC) = 1",
                parts).fetchall()
        return _group(rows)

    def user_baselines(self, user_id: str) -> UserBaselines:
        with self._lock:
            rows = self._con.execute(
                f"SELECT {_BASELINE_COLUMNS} FROM baseline_versions WHERE user_id = ? "
                "QUALIFY row_number() OVER (PARTITION BY kind ORDER BY version DESC) = 1",
                [user_id]).fetchall()
        return _group(rows).get(user_id, UserBaselines())

    def history(self, user_id: str) -> tuple[list[Baseline], list[dict[str, Any]]]:
        """Every stored version of a user (oldest first) and the user's tombstones."""
        with self._lock:
            rows = self._con.execute(
                f"SELECT {_BASELINE_COLUMNS} FROM baseline_versions WHERE user_id = ? "
                "ORDER BY kind, version", [user_id]).fetchall()
            tombs = self._con.execute(
                "SELECT baseline_id, kind, version, erased_at, reason, request_id "
                "FROM tombstones WHERE user_ref = ? ORDER BY erased_at, kind, version",
                [user_ref(user_id)]).fetchall()
        keys = ("baseline_id", "kind", "version", "erased_at", "reason", "request_id")
        return [_from_row(r) for r in rows], [dict(zip(keys, t)) for t in tombs]

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
        for user_id, kind, version, created in rows:
            entry = users.setdefault(user_id, {"user_id": user_id, "versions": {},
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
            users = list(batch.states)
            tables["user_state"] = pa.table({
                "partition": pa.array([batch.states[u][0] for u in users], pa.int32()),
                "user_id": pa.array(users, pa.string()),
                "state": pa.array([encode_state(batch.states[u][1]) for u in users], pa.binary()),
                "clock": pa.array([batch.states[u][1].clock_s for u in users], pa.float64()),
            })
        if batch.baselines:
            metas = [b.meta for _, b in batch.baselines]
            tables["baseline_versions"] = pa.table({
                "partition": pa.array([p for p, _ in batch.baselines], pa.int32()),
                "user_id": pa.array([m.user_id for m in metas], pa.string()),
                "kind": pa.array([m.kind.value for m in metas], pa.string()),
                "baseline_id": pa.array([m.baseline_id for m in metas], pa.string()),
                "version": pa.array([m.version for m in metas], pa.int32()),
                "created_at": pa.array([m.created_at_s for m in metas], pa.float64()),
                "source_session": pa.array([m.source_session for m in metas], pa.string()),
                "model_version": pa.array([m.model.model_version for m in metas], pa.string()),
                "tokenizer_id": pa.array([m.model.tokenizer_id for m in metas], pa.string()),
                "precision_tag": pa.array([m.model.precision_tag for m in metas], pa.string()),
                "adapter_id": pa.array([m.model.adapter_id for m in metas], pa.string()),
                "drift_policy_id": pa.array([m.drift_policy_id for m in metas], pa.string()),
                "mode": pa.array([m.mode.value for m in metas], pa.string()),
                "expires_at": pa.array([m.expires_at_s for m in metas], pa.float64()),
                "vals": pa.array([_values(b) for _, b in batch.baselines], pa.binary()),
            })
        if batch.sessions:
            s = [x for _, x in batch.sessions]
            tables["session_summaries"] = pa.table({
                "user_id": pa.array([x.user_id for x in s], pa.string()),
                "session_id": pa.array([x.session_id for x in s], pa.string()),
                "partition": pa.array([p for p, _ in batch.sessions], pa.int32()),
                "mode": pa.array([x.mode.value for x in s], pa.string()),
                "started_at": pa.array([x.started_s for x in s], pa.float64()),
                "ended_at": pa.array([x.ended_s for x in s], pa.float64()),
                "turns": pa.array([x.turns for x in s], pa.int32()),
                "max_tier": pa.array([x.max_tier.label for x in s], pa.string()),
                "scores": pa.array([x.scores for x in s], pa.int32()),
                "model_change": pa.array([x.model_change for x in s], pa.bool_()),
                "reattune_quality": pa.array([x.reattune_quality for x in s], pa.float64()),
            })
        if batch.offsets:
            parts = list(batch.offsets)
            tables["partition_offsets"] = pa.table({
                "topic": pa.array([batch.topic] * len(parts), pa.string()),
                "partition": pa.array(parts, pa.int32()),
                "next_offset": pa.array([batch.offsets[p] for p in parts], pa.int64()),
            })
        return Rows(tables, tuple(sorted(batch.dropped_states)))

    def apply_rows(self, rows: Rows) -> None:
        """Write ``rows`` (a checkpoint, or a delta read back from the changelog) atomically."""
        with self._transaction() as con:
            _apply(con, rows)
            _prune(con, rows, self.retention)

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
            for table, where in _PARTITION_ROWS.items():
                tables[table] = self._con.sql(
                    f"SELECT * FROM {table} WHERE {where}", params=[partition]).to_arrow_table()
        return Rows({t: v for t, v in tables.items() if v.num_rows}, ())

    def restore_partition(self, partition: int, rows: Iterable[Rows]) -> None:
        """Replace one partition's rows by a snapshot and the deltas since, in one transaction."""
        with self._transaction() as con:
            _drop_partition(con, partition)
            for part in rows:
                _apply(con, part)
                _prune(con, part, self.retention)

    def drop_partitions(self, partitions: Iterable[int]) -> bool:
        """Remove the rows of partitions this worker no longer owns (their changelog has them);
        returns whether anything was removed. :meth:`compact` then clears the freed pages."""
        held = self.held_partitions() & set(partitions)
        if held:
            with self._transaction() as con:
                for p in sorted(held):
                    _drop_partition(con, p)
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
            rows = self._con.execute(
                "SELECT kind, baseline_id, versions, outcome FROM erasure_targets "
                "WHERE request_id = ? ORDER BY kind", [request_id]).fetchall()
            seen = self._con.execute(
                "SELECT count(*) FROM erasure_requests WHERE request_id = ?",
                [request_id]).fetchone()
        if not seen or not seen[0]:
            return None
        return ErasureResult(request_id, tuple(
            ErasureTarget(BaselineKind(k), b, v, ErasureOutcome(o)) for k, b, v, o in rows), True)

    def erase(self, command: ErasureCommand, partition: int) -> ErasureResult:
        """Remove every version of the command's kinds for its user, leaving tombstones.

        Idempotent by request id: a repeated request returns the first result.
        ``verified`` is set per target only after re-reading it and finding nothing.
        An erasure of every kind also drops the user's state and session rows.
        The freed pages still hold old bytes until :meth:`compact` runs.
        """
        previous = self.previous_erasure(command.request_id)
        if previous is not None:
            return previous
        kinds = [k.value for k in command.kinds]
        ref = user_ref(command.user_id)
        with self._transaction() as con:
            found: dict[str, tuple[str | None, int]] = {k: (None, 0) for k in kinds}
            for kind in kinds:
                rows = con.execute(
                    "SELECT baseline_id, version FROM baseline_versions "
                    "WHERE user_id = ? AND kind = ?", [command.user_id, kind]).fetchall()
                if rows:
                    found[kind] = (rows[0][0], len(rows))
                for baseline_id, version in rows:
                    con.execute(
                        "INSERT INTO tombstones VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [ref, baseline_id, kind, version, command.ts_s, command.reason,
                         command.request_id])
                con.execute("DELETE FROM baseline_versions WHERE user_id = ? AND kind = ?",
                            [command.user_id, kind])
            if command.everything:
                con.execute("DELETE FROM user_state WHERE user_id = ?", [command.user_id])
                con.execute("DELETE FROM session_summaries WHERE user_id = ?",
                            [command.user_id])
            if command.replacement is not None:
                _apply(con, self.rows_of(BatchWrite(topic="", baselines=[
                    (partition, command.replacement)])))
            con.execute("INSERT INTO erasure_requests VALUES (?, ?, ?, ?, ?)",
                        [command.request_id, ref, command.reason, command.ts_s, partition])
            targets = []
            for kind in sorted(kinds):
                baseline_id, versions = found[kind]
                left = con.execute(
                    "SELECT count(*) FROM baseline_versions WHERE user_id = ? AND kind = ? "
                    "AND (? IS NULL OR baseline_id = ?)",
                    [command.user_id, kind, baseline_id, baseline_id]).fetchone()
                remaining = int(left[0]) if left else 0
                if command.replacement is not None and kind == "attunement":
                    remaining -= 1
                outcome = (ErasureOutcome.VERIFIED if remaining == 0
                           else ErasureOutcome.FAILED)
                targets.append(ErasureTarget(BaselineKind(kind), baseline_id, versions,
                                             outcome))
                con.execute("INSERT INTO erasure_targets VALUES (?, ?, ?, ?, ?)",
                            [command.request_id, kind, baseline_id, versions,
                             outcome.value])
        return ErasureResult(command.request_id, tuple(targets), False)

    def compact(self) -> None:
        """Rewrite the database into a fresh file, so freed pages keep no erased bytes.

        DuckDB reuses freed blocks but does not zero them; a checkpoint alone leaves
        deleted values readable in the file. Copying the live rows into a new file
        and swapping it in removes them from the file and its WAL.
        """
        if self.path == ":memory:":
            return
        with self._lock:
            fresh = self.path + ".compact"
            for leftover in (fresh, fresh + ".wal"):
                if os.path.exists(leftover):
                    os.remove(leftover)
            self._con.execute("CHECKPOINT")
            self._con.close()
            new = duckdb.connect(fresh)
            migrate(new)
            new.execute("ATTACH ? AS old (READ_ONLY)", [self.path])
            for table in _TABLES:
                new.execute(f"INSERT INTO {table} SELECT * FROM old.{table}")
            new.execute("DETACH old")
            new.execute("CHECKPOINT")
            new.close()
            os.replace(fresh, self.path)
            wal = self.path + ".wal"
            if os.path.exists(wal):
                os.remove(wal)
            self._con = duckdb.connect(self.path)


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
_PARTITION_ROWS = {
    "baseline_versions": "partition = ?",
    "user_state": "partition = ?",
    "session_summaries": "partition = ?",
    "partition_offsets": "partition = ?",
    "tombstones": _REQUESTS_OF,
    "erasure_targets": _REQUESTS_OF,
    "erasure_requests": "partition = ?",
}
_TABLES = tuple(_PARTITION_ROWS)

#: How rows are written: an id-keyed insert, so writing the same rows twice changes nothing.
_INSERT = {
    "user_state": "INSERT INTO user_state BY NAME SELECT * FROM incoming",
    "baseline_versions": "INSERT OR IGNORE INTO baseline_versions BY NAME SELECT * FROM incoming",
    "session_summaries": "INSERT OR REPLACE INTO session_summaries BY NAME SELECT * FROM incoming",
    "partition_offsets": "INSERT OR REPLACE INTO partition_offsets BY NAME SELECT * FROM incoming",
    "erasure_requests": "INSERT OR IGNORE INTO erasure_requests BY NAME SELECT * FROM incoming",
    "erasure_targets": "INSERT INTO erasure_targets BY NAME SELECT * FROM incoming",
    "tombstones": "INSERT INTO tombstones BY NAME SELECT * FROM incoming",
}


def _apply(con: duckdb.DuckDBPyConnection, rows: Rows) -> None:
    """Write ``rows`` inside the caller's transaction: a user's state row is replaced."""
    states = rows.tables.get("user_state")
    gone = set(rows.dropped)
    if states is not None:
        gone.update(states.column("user_id").to_pylist())
    if gone:
        con.register("gone_ids", pa.table({"user_id": pa.array(sorted(gone), pa.string())}))
        con.execute("DELETE FROM user_state WHERE user_id IN (SELECT user_id FROM gone_ids)")
        con.unregister("gone_ids")
    for table, sql in _INSERT.items():
        incoming = rows.tables.get(table)
        if incoming is None or not incoming.num_rows:
            continue
        con.register("incoming", incoming)
        con.execute(sql)
        con.unregister("incoming")


def _prune(con: duckdb.DuckDBPyConnection, rows: Rows, keep: Retention) -> None:
    """Drop what ``keep`` does not retain of the history of users ``rows`` added to (never a
    current version)."""
    for table, sql, kept in (("baseline_versions", _PRUNE_VERSIONS, keep.versions),
                             ("session_summaries", _PRUNE_SESSIONS, keep.sessions)):
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


def _drop_partition(con: duckdb.DuckDBPyConnection, partition: int) -> None:
    for table, where in _PARTITION_ROWS.items():  # erasure_requests last: the others use it
        con.execute(f"DELETE FROM {table} WHERE {where}", [partition])


def _group(rows: Sequence[Sequence[Any]]) -> dict[str, UserBaselines]:
    out: dict[str, dict[str, Baseline]] = {}
    for row in rows:
        b = _from_row(row)
        out.setdefault(b.meta.user_id, {})[b.meta.kind.value] = b
    result = {}
    for user_id, kinds in out.items():
        att = kinds.get("attunement")
        sem = kinds.get("semantic")
        saf = kinds.get("safety")
        result[user_id] = UserBaselines(
            att if isinstance(att, AttunementBaseline) else None,
            sem if isinstance(sem, SemanticBaseline) else None,
            saf if isinstance(saf, SafetyBaseline) else None,
        )
    return result
