"""The columns of the stored rows: typed values to Arrow tables, and stored baselines back.

A checkpoint's rows (:meth:`~baselines.store.BaselineStore.rows_of`) are built table by
table here; a baseline's values are one blob per version (``vals``). An attunement
version's is msgpack (:class:`_AttunementBlob`): its table of window statistics as the
little-endian doubles it holds, not as JSON text. A checkpoint at full speed writes a
version per closed session, and the JSON of its 195 numbers cost 15-20 us of Python each
in the checkpoint's thread, where the loop waits for the interpreter's lock
(docs/performance.md, "A checkpoint's CPU"). Versions written
as JSON (rows of version 2 and before) are read as they are. Semantic and safety versions
are JSON.

>>> from drift.model import Mode, Tier
>>> from drift.outputs import SessionSummary
>>> summary = SessionSummary("u", "s1", Mode.FULL, 10.0, 70.0, 12, Tier.LOW, 3,
...                          False, None)
>>> table = session_table([(2, summary)])
>>> table.num_rows, table.column("max_tier").to_pylist(), table.column("partition").to_pylist()
(1, ['low'], [2])
>>> offset_table("fhr.events", {0: 41, 3: 7}, {}).column("next_offset").to_pylist()
[41, 7]
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec
import pyarrow as pa

from baselines.snapshot import encode_state, encode_taken
from drift.baseline import (
    AttunementBaseline,
    Baseline,
    BaselineMeta,
    SafetyBaseline,
    SemanticBaseline,
    UserBaselines,
)
from drift.features import WindowStats
from drift.model import BaselineKind, Mode, ModelTriple
from drift.outputs import SessionSummary
from drift.state import UserState

if TYPE_CHECKING:  # a state taken from the kernel's columns, read by attribute
    from drift.kernel.parts import TakenState

StagedState: TypeAlias = "UserState | TakenState"
"""A state staged for a checkpoint: its object, or its parts as the kernel's columns held them."""


_json = msgspec.json.Encoder()


class _AttunementValues(msgspec.Struct, frozen=True):
    features: tuple[str, ...]
    sessions: tuple[tuple[WindowStats | None, ...], ...]
    late_profile: tuple[float, ...]


class _AttunementBlob(msgspec.Struct, frozen=True, array_like=True):
    """An attunement version's values as stored: a msgpack array, so its first byte is never
    the ``{`` of the JSON of :class:`_AttunementValues` that older rows hold."""

    features: tuple[str, ...]
    shape: tuple[int, ...]
    table: bytes
    """:attr:`AttunementBaseline.table`'s doubles, little-endian."""
    late_profile: tuple[float, ...]


_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder(_AttunementBlob).decode


def _little_endian(table: array[float]) -> bytes:
    if sys.byteorder == "little":
        return table.tobytes()
    swapped = array("d", table)
    swapped.byteswap()
    return swapped.tobytes()


def _table_of(data: bytes) -> array[float]:
    table = array("d")
    table.frombytes(data)
    if sys.byteorder != "little":
        table.byteswap()
    return table


class _SemanticValues(msgspec.Struct, frozen=True):
    items: tuple[tuple[str, str], ...]


class _SafetyValues(msgspec.Struct, frozen=True):
    gate_config_id: str
    drift_policy_id: str
    consent_state_id: str


def _values(b: Baseline) -> bytes:
    if isinstance(b, AttunementBaseline):
        return _pack(_AttunementBlob(b.features, b.shape, _little_endian(b.table),
                                     b.late_profile))
    if isinstance(b, SemanticBaseline):
        return _json.encode(_SemanticValues(b.items))
    return _json.encode(_SafetyValues(b.gate_config_id, b.drift_policy_id, b.consent_state_id))


def baseline_of(row: Sequence[Any]) -> Baseline:
    """A stored version (a row of :data:`BASELINE_COLUMNS`) as its typed baseline."""
    (user_id, kind, baseline_id, version, created_at, source_session, model_version,
     tokenizer_id, precision_tag, adapter_id, policy, mode, expires_at, values) = row
    meta = BaselineMeta(user_id, BaselineKind(kind), baseline_id, version, created_at,
                        source_session, ModelTriple(model_version, tokenizer_id, precision_tag,
                                                    adapter_id),
                        policy, Mode(mode), expires_at)
    if meta.kind is BaselineKind.ATTUNEMENT:
        if values[:1] == b"{":  # written as JSON (rows of version 2 and before)
            a = msgspec.json.decode(values, type=_AttunementValues)
            return AttunementBaseline.of(meta, a.features, a.sessions, a.late_profile)
        t = _unpack(values)
        return AttunementBaseline(meta, t.features, _table_of(t.table), t.shape,
                                  t.late_profile)
    if meta.kind is BaselineKind.SEMANTIC:
        s = msgspec.json.decode(values, type=_SemanticValues)
        return SemanticBaseline(meta, s.items)
    f = msgspec.json.decode(values, type=_SafetyValues)
    return SafetyBaseline(meta, f.gate_config_id, f.drift_policy_id, f.consent_state_id)


#: The columns of ``baseline_versions`` that :func:`baseline_of` reads, in its order.
BASELINE_COLUMNS = ("user_id, kind, baseline_id, version, created_at, source_session, "
                    "model_version, tokenizer_id, precision_tag, adapter_id, drift_policy_id, "
                    "mode, expires_at, vals")


def by_user(rows: Sequence[Sequence[Any]]) -> dict[str, UserBaselines]:
    """Rows of ``BASELINE_COLUMNS`` (one version per user and kind) as each user's baselines."""
    out: dict[str, dict[str, Baseline]] = {}
    for row in rows:
        b = baseline_of(row)
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


def state_table(states: dict[str, tuple[int, StagedState]], as_of: dict[str, int]
                ) -> pa.Table:
    """``user_state`` rows: each user's partition, encoded state and the offset of their
    partition that the state reflects the log up to. A state taken from the kernel's columns
    (:func:`drift.kernel.parts.take_slots`) is encoded from them, with the others taken with
    it (:func:`~baselines.snapshot.encode_taken`)."""
    users = list(states)
    taken: dict[int, list[bytes]] = {}
    blobs = []
    for u in users:
        state = states[u][1]
        if isinstance(state, UserState):
            blobs.append(encode_state(state))
            continue
        of = taken.get(id(state.taken))
        if of is None:
            of = taken[id(state.taken)] = encode_taken(state.taken)
        blobs.append(of[state.i])
    return pa.table({
        "partition": pa.array([states[u][0] for u in users], pa.int32()),
        "user_id": pa.array(users, pa.string()),
        "state": pa.array(blobs, pa.binary()),
        "clock": pa.array([states[u][1].clock_s for u in users], pa.float64()),
        "as_of": pa.array([as_of.get(u, 0) for u in users], pa.int64()),
    })


def baseline_table(baselines: list[tuple[int, Baseline]]) -> pa.Table:
    """``baseline_versions`` rows: one per (partition, version)."""
    metas = [b.meta for _, b in baselines]
    return pa.table({
        "partition": pa.array([p for p, _ in baselines], pa.int32()),
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
        "vals": pa.array([_values(b) for _, b in baselines], pa.binary()),
    })


def session_table(sessions: list[tuple[int, SessionSummary]]) -> pa.Table:
    """``session_summaries`` rows: one per closed session."""
    s = [x for _, x in sessions]
    return pa.table({
        "user_id": pa.array([x.user_id for x in s], pa.string()),
        "session_id": pa.array([x.session_id for x in s], pa.string()),
        "partition": pa.array([p for p, _ in sessions], pa.int32()),
        "mode": pa.array([x.mode.value for x in s], pa.string()),
        "started_at": pa.array([x.started_s for x in s], pa.float64()),
        "ended_at": pa.array([x.ended_s for x in s], pa.float64()),
        "turns": pa.array([x.turns for x in s], pa.int32()),
        "max_tier": pa.array([x.max_tier.label for x in s], pa.string()),
        "scores": pa.array([x.scores for x in s], pa.int32()),
        "model_change": pa.array([x.model_change for x in s], pa.bool_()),
        "reattune_quality": pa.array([x.reattune_quality for x in s], pa.float64()),
    })


def offset_table(topic: str, offsets: dict[int, int], replay_from: dict[int, int]
                 ) -> pa.Table:
    """``partition_offsets`` rows: the next offset to process of each partition of ``topic``,
    and the offset a restore replays memory-only users from (the next offset if none)."""
    parts = list(offsets)
    return pa.table({
        "topic": pa.array([topic] * len(parts), pa.string()),
        "partition": pa.array(parts, pa.int32()),
        "next_offset": pa.array([offsets[p] for p in parts], pa.int64()),
        "replay_from": pa.array([min(replay_from.get(p, offsets[p]), offsets[p])
                                 for p in parts], pa.int64()),
    })
