"""The output topics as the governance report reads them: typed messages, decoded once.

Each topic's JSON (``streams.edge.wire``) is decoded into a frozen ``msgspec.Struct``
that keeps only the fields the report and the demo's tally use; unknown fields are ignored,
so a newer worker's extra fields do not stop an older report. These are the reader's side of
the contract whose writer's side is ``streams.edge.formats``: the two list some of the same
fields, alike in form, and stay two, since the writer's structs hold every field of every
kind in the order it is encoded and the reader's one kind each, with defaults. :func:`decode_values`
decodes a whole fetched batch in one call; :func:`keep_first` drops the
duplicates that at-least-once delivery leaves (SPEC section 7: consumers drop
duplicates by ``id``).

>>> import numpy as np
>>> from drift.model import DriftConfig
>>> from drift.replay import replay
>>> from drift.simulation import Scenario, simulate_user
>>> from streams.edge.wire import encode
>>> events, _ = simulate_user(np.random.default_rng(5), Scenario.SAFETY_MISMATCH, "u", 1.7e9)
>>> scores = [encode(o) for o in replay(events, DriftConfig()) if o.kind.value == "score"]
>>> decoded, bad = decode_values(SCORES, scores + scores[:1] + [b"{oops"])
>>> bad, len(decoded) == len(scores) + 1
(1, True)
>>> kept, dropped = keep_first(decoded)
>>> dropped, type(kept[-1]).__name__, kept[-1].tier
(1, 'DriftScoreMsg', 'high')
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from drift.outputs import Output
from streams import topics
from streams.edge.wire import encode

SCORES, RESPONSES, ESCALATIONS = topics.SCORES, topics.RESPONSES, topics.ESCALATIONS
VIOLATIONS, RECEIPTS, DEADLETTER = topics.VIOLATIONS, topics.RECEIPTS, topics.DEADLETTER

#: The topics the report reads: everything every worker of the group published.
REPORT_TOPICS = (SCORES, RESPONSES, ESCALATIONS, VIOLATIONS, RECEIPTS, DEADLETTER)


class _Msg(msgspec.Struct, frozen=True, kw_only=True):
    """What every output carries: its id, the user, and the event time (``streams.edge.wire.iso``)."""

    id: str
    user_id: str
    session_id: str = ""
    event_ts: str


class Ref(msgspec.Struct, frozen=True):
    baseline_id: str
    version: int


class FeatureMoved(msgspec.Struct, frozen=True, kw_only=True):
    feature: str
    z: float = 0.0
    direction: str = ""


class StatisticMsg(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    value: float | None = None
    p_adjusted: float | None = None


class AttributionMsg(msgspec.Struct, frozen=True, kw_only=True):
    component: str
    features: tuple[FeatureMoved, ...] = ()
    statistic: StatisticMsg | None = None
    baseline: Ref | None = None


class ComponentsMsg(msgspec.Struct, frozen=True, kw_only=True):
    attunement_drift: float | None = None
    semantic_drift: float | None = None
    safety_drift: float | None = None


class ThresholdsMsg(msgspec.Struct, frozen=True, kw_only=True):
    medium: float = 0.5
    high: float = 0.8


class DriftScoreMsg(_Msg, frozen=True, tag_field="score_kind", tag="continuity_drift"):
    """A ``continuity_drift`` score on ``drift.scores``: the only output that names the mode."""

    turn: int
    checkpoint: str
    mode: str
    components: ComponentsMsg
    continuity_drift_score: float
    tier: str
    effective_tier: str
    attribution: AttributionMsg
    thresholds: ThresholdsMsg = ThresholdsMsg()


class ReattuneScoreMsg(_Msg, frozen=True, tag_field="score_kind", tag="reattune_quality"):
    """The re-attunement quality of a session with a prior session and no model change."""

    reattune_quality_score: float
    reattune_turns_to_baseline: int | None = None
    threshold: float = 0.6


ScoreMsg = DriftScoreMsg | ReattuneScoreMsg


class ModelMsg(msgspec.Struct, frozen=True, kw_only=True):
    model_version: str


class ReattunePartsMsg(msgspec.Struct, frozen=True, kw_only=True):
    convergence: float | None = None
    semantic_consistency: float | None = None
    trust_continuity: float | None = None


class ResponseMsg(_Msg, frozen=True):
    """A ``drift.responses`` action; which optional fields are set depends on ``action``."""

    action: str
    score_id: str | None = None
    score: float | None = None
    tier: str | None = None
    hold_kinds: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    previous_model: ModelMsg | None = None
    model: ModelMsg | None = None
    reattune_quality_score: float | None = None
    reattune_turns_to_baseline: int | None = None
    threshold: float | None = None
    components: ReattunePartsMsg | None = None


class EscalationMsg(_Msg, frozen=True):
    kind: str
    sessions: int = 0
    last_quality: float | None = None
    threshold: float | None = None
    route: str = ""


class ViolationMsg(_Msg, frozen=True):
    rule: str
    reason: str


class TargetMsg(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    versions: int = 0
    outcome: str


class ReplacementMsg(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    features: tuple[str, ...] = ()


class ReceiptMsg(_Msg, frozen=True):
    reason: str
    outcome: str
    targets: tuple[TargetMsg, ...] = ()
    replacement: ReplacementMsg | None = None


class DeadLetterMsg(msgspec.Struct, frozen=True, kw_only=True):
    """A dead letter. It has no user and no event time of its own (the record may not have
    had a readable one): the reader fills ``event_ts`` from the Kafka timestamp of the
    dead-letter record, the time the worker published it."""

    id: str
    reason: str
    fields: tuple[str, ...] = ()
    event_ts: str = ""


Message = ScoreMsg | ResponseMsg | EscalationMsg | ViolationMsg | ReceiptMsg | DeadLetterMsg

_TYPES: dict[str, Any] = {
    SCORES: ScoreMsg, RESPONSES: ResponseMsg, ESCALATIONS: EscalationMsg,
    VIOLATIONS: ViolationMsg, RECEIPTS: ReceiptMsg, DEADLETTER: DeadLetterMsg,
}
_BATCH = {topic: msgspec.json.Decoder(list[t])  # type: ignore[valid-type]
          for topic, t in _TYPES.items()}
_ONE = {topic: msgspec.json.Decoder(t) for topic, t in _TYPES.items()}


def decode_values(topic: str, values: Sequence[bytes | None]) -> tuple[list[Any], int]:
    """The messages of ``values`` (one fetched batch of ``topic``) and how many did not decode.

    The batch is decoded as one JSON array; only when that fails is each value tried
    on its own, so one unreadable record costs its batch a second pass, not the report.
    """
    present = [v for v in values if v]
    missing = len(values) - len(present)
    if not present:
        return [], missing
    try:
        return _BATCH[topic].decode(b"[" + b",".join(present) + b"]"), missing
    except msgspec.DecodeError:
        pass
    one = _ONE[topic].decode
    out = []
    for value in present:
        try:
            out.append(one(value))
        except msgspec.DecodeError:
            missing += 1
    return out, missing


M = TypeVar("M", bound=msgspec.Struct)


def keep_first(messages: Sequence[M]) -> tuple[list[M], int]:
    """``messages`` without repeats of an ``id`` seen before, and how many were dropped.

    >>> a, b = ViolationMsg(id="1", user_id="u", event_ts="t", rule="r", reason="x"), \\
    ...     ViolationMsg(id="2", user_id="u", event_ts="t", rule="r", reason="x")
    >>> [m.id for m in keep_first([a, b, a])[0]], keep_first([a, b, a])[1]
    (['1', '2'], 1)
    """
    seen: set[str] = set()
    out = []
    for m in messages:
        key = m.id  # type: ignore[attr-defined]
        if key not in seen:
            seen.add(key)
            out.append(m)
    return out, len(messages) - len(out)


@dataclass(frozen=True, slots=True)
class TopicRead:
    """What was read from one topic: for the report's "source" section."""

    partitions: int
    records: int
    duplicates: int
    undecodable: int


@dataclass(repr=False)
class Outputs:
    """Every output the deployment published, decoded, one list per kind, duplicates dropped.

    Its repr counts instead of listing (asyncio formats the repr of a task's result when
    ``asyncio.run`` restores the SIGINT handler, and a million-event repr takes seconds).
    """

    scores: list[DriftScoreMsg] = field(default_factory=list)
    reattunes: list[ReattuneScoreMsg] = field(default_factory=list)
    responses: list[ResponseMsg] = field(default_factory=list)
    escalations: list[EscalationMsg] = field(default_factory=list)
    violations: list[ViolationMsg] = field(default_factory=list)
    receipts: list[ReceiptMsg] = field(default_factory=list)
    dead_letters: list[DeadLetterMsg] = field(default_factory=list)
    read: dict[str, TopicRead] = field(default_factory=dict)

    def latest_event_ts(self) -> str | None:
        """The latest event time of any output (``streams.edge.wire.iso`` text), None if empty."""
        groups = (self.scores, self.reattunes, self.responses, self.escalations,
                  self.violations, self.receipts, self.dead_letters)
        return max((m.event_ts for g in groups for m in g), default="") or None

    @property
    def records(self) -> int:
        return sum(r.records for r in self.read.values())

    def __repr__(self) -> str:
        return (f"Outputs(scores={len(self.scores)}, reattunes={len(self.reattunes)}, "
                f"responses={len(self.responses)}, escalations={len(self.escalations)}, "
                f"violations={len(self.violations)}, receipts={len(self.receipts)}, "
                f"dead_letters={len(self.dead_letters)})")


def gather(raw: dict[str, list[Any]], undecodable: dict[str, int],
           records: dict[str, int], partitions: dict[str, int]) -> Outputs:
    """Sort decoded messages into :class:`Outputs`, dropping repeated ids per topic."""
    out = Outputs()
    for topic in REPORT_TOPICS:
        kept, dropped = keep_first(raw.get(topic, []))
        if topic == SCORES:
            out.scores = [m for m in kept if isinstance(m, DriftScoreMsg)]
            out.reattunes = [m for m in kept if isinstance(m, ReattuneScoreMsg)]
        elif topic == RESPONSES:
            out.responses = kept
        elif topic == ESCALATIONS:
            out.escalations = kept
        elif topic == VIOLATIONS:
            out.violations = kept
        elif topic == RECEIPTS:
            out.receipts = kept
        else:
            out.dead_letters = kept
        out.read[topic] = TopicRead(partitions.get(topic, 0), records.get(topic, 0), dropped,
                                    undecodable.get(topic, 0))
    return out


@dataclass(frozen=True, slots=True)
class BaselineHistory:
    """A user's baseline versions and tombstones as the review API gives them (no values)."""

    versions: tuple[dict[str, Any], ...]
    tombstones: tuple[dict[str, Any], ...]


def outputs_from_values(values: dict[str, list[bytes]]) -> Outputs:
    """:class:`Outputs` of message values by topic, as :func:`streams.report.read.read_outputs`
    would give them for those records (for tests and benchmarks that hold the bytes)."""
    raw: dict[str, list[Any]] = {}
    bad: dict[str, int] = {}
    for topic in REPORT_TOPICS:
        raw[topic], bad[topic] = decode_values(topic, values.get(topic, []))
    return gather(raw, bad, {t: len(v) for t, v in values.items()},
                  {t: 1 for t in values})


def outputs_of(outs: Iterable[Output]) -> Outputs:
    """:class:`Outputs` of the fold's outputs, encoded as a worker publishes them and decoded
    as the report reads them (for examples and tests that run the pure replay)."""
    values: dict[str, list[bytes]] = {}
    for o in outs:
        values.setdefault(topics.OUTPUT_TOPICS[o.kind], []).append(encode(o))
    return outputs_from_values(values)
