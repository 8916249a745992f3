"""Output messages: what the core asks the shell to publish, with deterministic ids."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from drift.baseline import AttunementBaseline, BaselineMeta, SafetyBaseline, SemanticBaseline
from drift.model import BaselineKind

SCHEMA = "drift/1"


class OutputKind(str, enum.Enum):
    SCORE = "score"
    RESPONSE = "response"
    ESCALATION = "escalation"
    VIOLATION = "violation"
    RECEIPT = "receipt"


@dataclass(frozen=True, slots=True)
class Output:
    kind: OutputKind
    key: str
    payload: dict[str, Any]


Baseline = AttunementBaseline | SemanticBaseline | SafetyBaseline


@dataclass(frozen=True, slots=True)
class ErasureCommand:
    """Remove every stored version of ``kinds`` for a user, leaving tombstones.

    ``replacement`` is written after the removal (a downgrade that keeps a
    restricted attunement baseline).
    """

    user_id: str
    session_id: str
    kinds: tuple[BaselineKind, ...]
    reason: str
    request_id: str
    cause_event_id: str
    ts_s: float
    replacement: AttunementBaseline | None = None


@dataclass
class Effects:
    """Everything one step asks of the shell, in order."""

    outputs: list[Output] = field(default_factory=list)
    baseline_writes: list[Baseline] = field(default_factory=list)
    erasures: list[ErasureCommand] = field(default_factory=list)
    duplicate: bool = False
    orphan: bool = False

    def extend(self, other: Effects) -> None:
        self.outputs.extend(other.outputs)
        self.baseline_writes.extend(other.baseline_writes)
        self.erasures.extend(other.erasures)


def iso(ts_s: float) -> str:
    """RFC 3339 UTC text of an event time.

    >>> iso(0.0)
    '1970-01-01T00:00:00.000000Z'
    """
    return datetime.fromtimestamp(ts_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def baseline_ref(meta: BaselineMeta | None) -> dict[str, Any] | None:
    if meta is None:
        return None
    return {"baseline_id": meta.baseline_id, "version": meta.version}


def envelope(output_id: str, user_id: str, session_id: str | None, ts_s: float
             ) -> dict[str, Any]:
    out: dict[str, Any] = {"schema": SCHEMA, "id": output_id, "user_id": user_id}
    if session_id is not None:
        out["session_id"] = session_id
    out["event_ts"] = iso(ts_s)
    return out
