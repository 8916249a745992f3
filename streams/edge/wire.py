"""Output messages as JSON: the one place the core's typed results become bytes.

Each output becomes the ``msgspec.Struct`` of its topic's message (:mod:`streams.edge.formats`,
SPEC section 7's shapes) in :func:`message`, which msgspec encodes in one pass
(:func:`encode`); :func:`payload` is the same message as a dict.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import date
from typing import Any, assert_never

import msgspec
from msgspec import UNSET

from drift.model import ModelTriple
from drift.outputs import (
    Attribution,
    BaselineRef,
    DriftScore,
    ErasureReceipt,
    Escalation,
    LadderDetail,
    ModelChangeDetail,
    Output,
    ReattuneDetail,
    Reattunement,
    ReattuneQualityScore,
    ReleaseDetail,
    Response,
    Violation,
)
from streams.edge.formats import (
    Alphas,
    AnyMismatch,
    AttributionMessage,
    Baselines,
    Components,
    DeadLetterMessage,
    DriftScoreMessage,
    EscalationMessage,
    Feature,
    Message,
    Model,
    PooledStatistic,
    ReattuneParts,
    ReceiptMessage,
    Ref,
    Replacement,
    ResponseMessage,
    Source,
    Target,
    Tiers,
    ValueStatistic,
    ViolationMessage,
    Weights,
)

_encoder = msgspec.json.Encoder()
_EPOCH_DAY = date(1970, 1, 1).toordinal()


@functools.lru_cache(maxsize=1024)
def _day(days: int) -> str:
    return date.fromordinal(_EPOCH_DAY + days).isoformat()


def iso(ts_s: float) -> str:
    """RFC 3339 UTC text of an event time: the text of
    ``datetime.fromtimestamp(ts_s, UTC).isoformat(timespec="microseconds")`` with ``Z``
    for the offset, microseconds rounded as it rounds them (half to even), built from the
    day's text (cached) and the seconds of the day: an output's time is formatted once per
    message, and the datetime costs most of a small message's encoding.

    >>> iso(0.0), iso(1.7e9 + 0.25), iso(86399.9999996)
    ('1970-01-01T00:00:00.000000Z', '2023-11-14T22:13:20.250000Z', '1970-01-02T00:00:00.000000Z')
    """
    frac, whole = math.modf(ts_s)
    micros = round(frac * 1e6)
    seconds = int(whole)
    if micros >= 1_000_000:
        micros -= 1_000_000
        seconds += 1
    elif micros < 0:
        micros += 1_000_000
        seconds -= 1
    days, second = divmod(seconds, 86400)
    hours, second = divmod(second, 3600)
    minutes, second = divmod(second, 60)
    return f"{_day(days)}T{hours:02d}:{minutes:02d}:{second:02d}.{micros:06d}Z"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record that did not become an event: why, where it came from, never its values."""

    id: str
    reason: str
    topic: str
    partition: int
    offset: int
    event_id: str | None
    fields: tuple[str, ...]
    last_offset: int | None = None
    """For a record batch that could not be read: the last offset it held (``offset`` is
    its first)."""


def _ref(ref: BaselineRef | None) -> Ref | None:
    return None if ref is None else Ref(ref.baseline_id, ref.version)


def _model(model: ModelTriple) -> Model:
    return Model(model.model_version, model.tokenizer_id, model.precision_tag, model.adapter_id)


def model_dict(model: ModelTriple) -> dict[str, Any]:
    """A model triple as the output topics and the review API show it.

    >>> model_dict(ModelTriple("m1", "t1", "bf16"))
    {'model_version': 'm1', 'tokenizer_id': 't1', 'precision_tag': 'bf16', 'adapter_id': None}
    """
    built: dict[str, Any] = msgspec.to_builtins(_model(model))
    return built


def _envelope(out: Output) -> dict[str, Any]:
    """The fields every output message starts with (:class:`streams.edge.formats.Envelope`)."""
    return {"id": out.id, "user_id": out.user_id,
            "session_id": UNSET if out.session_id is None else out.session_id,
            "event_ts": iso(out.ts_s)}


def _attribution(a: Attribution, score: DriftScore) -> AttributionMessage:
    if a.test is not None:
        t = a.test
        return AttributionMessage(
            component=a.component.value,
            features=[Feature(f.feature, round(f.z, 4), f.p_value, "up" if f.delta > 0 else "down")
                      for f in t.features[:3]],
            statistic=PooledStatistic("pooled_t_chi2", t.p_value, t.p_adjusted, t.look,
                                    t.window, t.turns),
            threshold=Alphas(a.alpha_medium, a.alpha_high), baseline=_ref(a.baseline))
    if a.component.value == "semantic":
        return AttributionMessage(
            component=a.component.value, statistic=ValueStatistic("share_contradicted", a.value),
            threshold=Tiers(*score.thresholds), baseline=_ref(a.baseline))
    return AttributionMessage(
        component=a.component.value, statistic=ValueStatistic("share_fields_changed", a.value),
        threshold=AnyMismatch(), baseline=_ref(a.baseline))


def _score(s: DriftScore) -> DriftScoreMessage:
    att, sem, saf = s.baselines
    c = s.components
    return DriftScoreMessage(
        **_envelope(s), turn=s.turn, checkpoint=s.checkpoint, mode=s.mode.value,
        baselines=Baselines(_ref(att), _ref(sem), _ref(saf)),
        components=Components(c.attunement, c.semantic, c.safety),
        continuity_drift_score=s.score, tier=s.tier.label, effective_tier=s.effective_tier.label,
        attribution=_attribution(s.attribution, s), weights=Weights(*s.weights),
        thresholds=Tiers(*s.thresholds), drift_policy_id=s.drift_policy_id,
        source_event_id=s.source_event_id)


def _reattunement(r: Reattunement) -> dict[str, Any]:
    """A re-attunement's result: the last fields of its score and of its response."""
    s = r.score
    return {"reattune_quality_score": s.quality, "reattune_turns_to_baseline": s.turns_to_baseline,
            "components": ReattuneParts(s.convergence, s.semantic_consistency,
                                        s.trust_continuity),
            "threshold": r.threshold, "reattune_id": r.reattune_id, "baseline": _ref(r.baseline)}


def _detail(d: LadderDetail | ReleaseDetail | ModelChangeDetail | ReattuneDetail
            ) -> dict[str, Any]:
    """The fields of a response's detail."""
    match d:
        case LadderDetail():
            return {"score_id": d.score_id, "score": d.score, "tier": d.tier.label,
                    "effective_tier": d.effective_tier.label,
                    "hold_kinds": [k.value for k in d.hold_kinds]}
        case ReleaseDetail():
            return {"kinds": [k.value for k in d.kinds],
                    "reconfirmed_event_id": d.reconfirmed_event_id}
        case ModelChangeDetail():
            return {"reattune_required": d.reattune_required,
                    "previous_model": _model(d.previous_model), "model": _model(d.model)}
        case ReattuneDetail():
            return {"offers": [o.value for o in d.offers] if d.offers else UNSET,
                    "posture": d.posture.value, **_reattunement(d.reattunement)}
        case _:
            assert_never(d)


def message(out: Output) -> Message:
    """The message of one output, as published."""
    match out:
        case DriftScore():
            return _score(out)
        case ReattuneQualityScore():
            return ResponseMessage(
                **_envelope(out), score_kind="reattune_quality", turn=out.turn,
                source_event_id=out.source_event_id, **_reattunement(out.reattunement))
        case Response():
            return ResponseMessage(
                **_envelope(out), action=out.action.value,
                cause_event_id=out.cause_event_id, **_detail(out.detail))
        case Escalation():
            return EscalationMessage(
                **_envelope(out), kind=out.escalation.value, route=out.route,
                sessions=out.sessions, last_quality=out.last_quality, threshold=out.threshold,
                cause_event_id=out.cause_event_id)
        case Violation():
            return ViolationMessage(
                **_envelope(out), rule=out.rule.value, reason=out.reason,
                event_id=out.event_id)
        case ErasureReceipt():
            return ReceiptMessage(
                **_envelope(out), request_id=out.request_id, reason=out.reason,
                cause_event_id=out.cause_event_id, outcome=out.outcome.value,
                targets=[Target(t.kind.value, t.baseline_id, t.versions, t.outcome.value)
                         for t in out.targets],
                replacement=(Replacement("attunement", list(out.replacement_features))
                             if out.replacement_features is not None else None),
                checks=list(out.checks))
        case _:
            assert_never(out)


def dead_letter_message(d: DeadLetter) -> DeadLetterMessage:
    source = Source(topic=d.topic, partition=d.partition, offset=d.offset,
                    last_offset=UNSET if d.last_offset is None else d.last_offset)
    return DeadLetterMessage(id=d.id, reason=d.reason, source=source, event_id=d.event_id,
                             fields=list(d.fields))


def payload(out: Output) -> dict[str, Any]:
    """The JSON object of one output, as published, as a dict."""
    built: dict[str, Any] = msgspec.to_builtins(message(out))
    return built


def encode(out: Output | DeadLetter) -> bytes:
    """The message value of one output or dead letter.

    >>> from drift.outputs import Rule
    >>> encode(Violation("v1", "u1", None, 0.0, Rule.UNCONFIRMED, "unconfirmed", "e1"))
    b'{"schema":"drift/1","id":"v1","user_id":"u1","event_ts":"1970-01-01T00:00:00.000000Z","rule":"relational_write_unconfirmed","reason":"unconfirmed","event_id":"e1"}'
    >>> encode(DeadLetter("d1", "batch_corrupt", "fhr.events", 2, 10, None, (), 12))
    b'{"schema":"drift/1","id":"d1","reason":"batch_corrupt","source":{"topic":"fhr.events","partition":2,"offset":10,"last_offset":12},"event_id":null,"fields":[]}'
    """
    if isinstance(out, DeadLetter):
        return _encoder.encode(dead_letter_message(out))
    return _encoder.encode(message(out))
