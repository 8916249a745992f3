"""Output messages as JSON: the one place the core's typed results become bytes.

:func:`payload` gives the JSON object of SPEC section 7 for any output;
:func:`encode` its bytes. Key order is part of the format (a golden test holds
the bytes), so every object is built field by field.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, assert_never

import msgspec

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

SCHEMA = "drift/1"
_encoder = msgspec.json.Encoder()


def iso(ts_s: float) -> str:
    """RFC 3339 UTC text of an event time.

    >>> iso(0.0)
    '1970-01-01T00:00:00.000000Z'
    """
    return datetime.fromtimestamp(ts_s, UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def model_dict(model: ModelTriple) -> dict[str, Any]:
    """A model triple as the output topics and the review API show it.

    >>> model_dict(ModelTriple("m1", "t1", "bf16"))
    {'model_version': 'm1', 'tokenizer_id': 't1', 'precision_tag': 'bf16', 'adapter_id': None}
    """
    return {"model_version": model.model_version, "tokenizer_id": model.tokenizer_id,
            "precision_tag": model.precision_tag, "adapter_id": model.adapter_id}


def ref_dict(ref: BaselineRef | None) -> dict[str, Any] | None:
    return None if ref is None else {"baseline_id": ref.baseline_id, "version": ref.version}


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


def _envelope(output_id: str, user_id: str, session_id: str | None, ts_s: float
              ) -> dict[str, Any]:
    out: dict[str, Any] = {"schema": SCHEMA, "id": output_id, "user_id": user_id}
    if session_id is not None:
        out["session_id"] = session_id
    out["event_ts"] = iso(ts_s)
    return out


def _attribution(a: Attribution, score: DriftScore) -> dict[str, Any]:
    out: dict[str, Any] = {"component": a.component.value}
    if a.test is not None:
        t = a.test
        out["features"] = [
            {"feature": f.feature, "z": round(f.z, 4), "p_value": f.p_value,
             "direction": "up" if f.delta > 0 else "down"}
            for f in t.features[:3]
        ]
        out["statistic"] = {"name": "pooled_t_chi2", "p_value": t.p_value,
                            "p_adjusted": t.p_adjusted, "look": t.look, "window": t.window,
                            "turns": t.turns}
        out["threshold"] = {"alpha_medium": a.alpha_medium, "alpha_high": a.alpha_high}
    elif a.component.value == "semantic":
        out["statistic"] = {"name": "share_contradicted", "value": a.value}
        out["threshold"] = {"medium": score.thresholds[0], "high": score.thresholds[1]}
    else:
        out["statistic"] = {"name": "share_fields_changed", "value": a.value}
        out["threshold"] = {"any_mismatch": "high"}
    out["baseline"] = ref_dict(a.baseline)
    return out


def _score(s: DriftScore) -> dict[str, Any]:
    out = _envelope(s.id, s.user_id, s.session_id, s.ts_s)
    att, sem, saf = s.baselines
    out.update(
        score_kind="continuity_drift", turn=s.turn, checkpoint=s.checkpoint, mode=s.mode.value,
        baselines={"attunement": ref_dict(att), "semantic": ref_dict(sem),
                   "safety": ref_dict(saf)},
        components={c.value: v for c, v in s.components.items()},
        continuity_drift_score=s.score, tier=s.tier.label, effective_tier=s.effective_tier.label,
        attribution=_attribution(s.attribution, s),
        weights={"attunement": s.weights[0], "semantic": s.weights[1], "safety": s.weights[2]},
        thresholds={"medium": s.thresholds[0], "high": s.thresholds[1]},
        drift_policy_id=s.drift_policy_id, source_event_id=s.source_event_id,
    )
    return out


def _reattunement(r: Reattunement) -> dict[str, Any]:
    s = r.score
    return {"reattune_quality_score": s.quality, "reattune_turns_to_baseline": s.turns_to_baseline,
            "components": {"convergence": s.convergence,
                           "semantic_consistency": s.semantic_consistency,
                           "trust_continuity": s.trust_continuity},
            "threshold": r.threshold, "reattune_id": r.reattune_id,
            "baseline": ref_dict(r.baseline)}


def _response(r: Response) -> dict[str, Any]:
    out = _envelope(r.id, r.user_id, r.session_id, r.ts_s)
    out.update(action=r.action.value, cause_event_id=r.cause_event_id)
    d = r.detail
    match d:
        case LadderDetail():
            out.update(score_id=d.score_id, score=d.score, tier=d.tier.label,
                       effective_tier=d.effective_tier.label,
                       hold_kinds=[k.value for k in d.hold_kinds])
        case ReleaseDetail():
            out.update(kinds=[k.value for k in d.kinds],
                       reconfirmed_event_id=d.reconfirmed_event_id)
        case ModelChangeDetail():
            out.update(reattune_required=d.reattune_required,
                       previous_model=model_dict(d.previous_model), model=model_dict(d.model))
        case ReattuneDetail():
            if d.offers:
                out["offers"] = [o.value for o in d.offers]
            out["posture"] = d.posture.value
            out.update(_reattunement(d.reattunement))
        case _:
            assert_never(d)
    return out


def payload(out: Output) -> dict[str, Any]:
    """The JSON object of one output, as published."""
    match out:
        case DriftScore():
            return _score(out)
        case ReattuneQualityScore():
            p = _envelope(out.id, out.user_id, out.session_id, out.ts_s)
            p.update(score_kind="reattune_quality", turn=out.turn,
                     source_event_id=out.source_event_id)
            p.update(_reattunement(out.reattunement))
            return p
        case Response():
            return _response(out)
        case Escalation():
            p = _envelope(out.id, out.user_id, out.session_id, out.ts_s)
            p.update(kind=out.escalation.value, route=out.route, sessions=out.sessions,
                     last_quality=out.last_quality, threshold=out.threshold,
                     cause_event_id=out.cause_event_id)
            return p
        case Violation():
            p = _envelope(out.id, out.user_id, out.session_id, out.ts_s)
            p.update(rule=out.rule.value, reason=out.reason, event_id=out.event_id)
            return p
        case ErasureReceipt():
            p = _envelope(out.id, out.user_id, out.session_id, out.ts_s)
            p.update(
                request_id=out.request_id, reason=out.reason, cause_event_id=out.cause_event_id,
                outcome=out.outcome.value,
                targets=[{"kind": t.kind.value, "baseline_id": t.baseline_id,
                          "versions": t.versions, "outcome": t.outcome.value}
                         for t in out.targets],
                replacement=({"kind": "attunement", "features": list(out.replacement_features)}
                             if out.replacement_features is not None else None),
                checks=list(out.checks))
            return p
        case _:
            assert_never(out)


def dead_letter_payload(d: DeadLetter) -> dict[str, Any]:
    source: dict[str, Any] = {"topic": d.topic, "partition": d.partition, "offset": d.offset}
    if d.last_offset is not None:
        source["last_offset"] = d.last_offset
    return {"schema": SCHEMA, "id": d.id, "reason": d.reason, "source": source,
            "event_id": d.event_id, "fields": list(d.fields)}


def encode(out: Output | DeadLetter) -> bytes:
    """The message value of one output or dead letter."""
    if isinstance(out, DeadLetter):
        return _encoder.encode(dead_letter_payload(out))
    return _encoder.encode(payload(out))
