"""Erasure in the store: every version of the erased kinds goes, a tombstone stays under the
user's pseudonymous reference, and each target is ``verified`` only after a re-read finds
nothing left. The result of a request is kept, so a repeated request gets the first one.

>>> user_ref("u-1") == user_ref("u-1"), user_ref("u-1") == user_ref("u-2"), len(user_ref("u-1"))
(True, False, 32)
"""

from __future__ import annotations

import duckdb

from baselines.columns import baseline_table
from baselines.rows import Rows
from baselines.writes import apply
from drift.baseline import derive_id
from drift.model import BaselineKind
from drift.outputs import ErasureCommand, ErasureOutcome, ErasureResult, ErasureTarget


def user_ref(user_id: str) -> str:
    """The pseudonymous reference that audit records keep instead of the user id."""
    return derive_id("user-ref", user_id)


def cause_ref(cause_event_id: str) -> str:
    """The pseudonymous reference to the event that carried a request out."""
    return derive_id("cause-ref", cause_event_id)


def previous_erasure(con: duckdb.DuckDBPyConnection, request_id: str,
                     cause_event_id: str | None = None) -> ErasureResult | None:
    """The result of an erasure request already carried out, or None; ``repeat`` when
    another event than ``cause_event_id`` carried it out."""
    rows = con.execute(
        "SELECT kind, baseline_id, versions, outcome FROM erasure_targets "
        "WHERE request_id = ? ORDER BY kind", [request_id]).fetchall()
    seen = con.execute(
        "SELECT cause_ref FROM erasure_requests WHERE request_id = ?", [request_id]).fetchone()
    if not seen:
        return None
    repeat = cause_event_id is not None and seen[0] is not None \
        and seen[0] != cause_ref(cause_event_id)
    return ErasureResult(request_id, tuple(
        ErasureTarget(BaselineKind(k), b, v, ErasureOutcome(o)) for k, b, v, o in rows), True,
        repeat)


def erase(con: duckdb.DuckDBPyConnection, command: ErasureCommand,
          partition: int) -> ErasureResult:
    """Carry out ``command`` inside the caller's transaction (see ``BaselineStore.erase``)."""
    kinds = [k.value for k in command.kinds]
    ref = user_ref(command.user_id)
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
        con.execute("DELETE FROM session_summaries WHERE user_id = ?", [command.user_id])
    if command.replacement is not None:
        apply(con, Rows({"baseline_versions": baseline_table([(partition, command.replacement)])}))
    con.execute("INSERT INTO erasure_requests VALUES (?, ?, ?, ?, ?, ?)",
                [command.request_id, ref, command.reason, command.ts_s, partition,
                 cause_ref(command.cause_event_id)])
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
        outcome = ErasureOutcome.VERIFIED if remaining == 0 else ErasureOutcome.FAILED
        targets.append(ErasureTarget(BaselineKind(kind), baseline_id, versions, outcome))
        con.execute("INSERT INTO erasure_targets VALUES (?, ?, ?, ?, ?)",
                    [command.request_id, kind, baseline_id, versions, outcome.value])
    return ErasureResult(command.request_id, tuple(targets), False)
