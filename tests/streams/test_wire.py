"""The wire structs against a plain dict encoding: the same bytes for every output.

``dict_payload`` builds each message of SPEC section 7 as nested dicts, field by field,
in the order the golden test holds: the obviously correct twin of ``streams.edge.wire``'s
structs. Both are encoded by msgspec and compared as bytes, on every output of the golden
log and of simulated users of every scenario (with receipts of their erasures), on dead
letters, and on outputs drawn by hypothesis (None and empty fields, any float). The event
time's text is held against the ``datetime`` it stands for, on any time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, assert_never

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from drift.erasure import operator_erase, receipt
from drift.model import DriftConfig, FhrEvent, ModelTriple
from drift.outputs import (
    Attribution,
    BaselineRef,
    DriftScore,
    ErasureOutcome,
    ErasureReceipt,
    ErasureResult,
    ErasureTarget,
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
from drift.replay import MemoryReplay
from drift.simulation import Scenario, simulate
from streams.edge.wire import DeadLetter, dead_letter_message, encode, iso, payload
from tests.conftest import examples
from tests.streams.golden import golden_events


def _model(model: ModelTriple) -> dict[str, Any]:
    return {"model_version": model.model_version, "tokenizer_id": model.tokenizer_id,
            "precision_tag": model.precision_tag, "adapter_id": model.adapter_id}


def _ref(ref: BaselineRef | None) -> dict[str, Any] | None:
    return None if ref is None else {"baseline_id": ref.baseline_id, "version": ref.version}


def _envelope(output_id: str, user_id: str, session_id: str | None, ts_s: float
              ) -> dict[str, Any]:
    out: dict[str, Any] = {"schema": "drift/1", "id": output_id, "user_id": user_id}
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
    out["baseline"] = _ref(a.baseline)
    return out


def _score(s: DriftScore) -> dict[str, Any]:
    out = _envelope(s.id, s.user_id, s.session_id, s.ts_s)
    att, sem, saf = s.baselines
    out.update(
        score_kind="continuity_drift", turn=s.turn, checkpoint=s.checkpoint, mode=s.mode.value,
        baselines={"attunement": _ref(att), "semantic": _ref(sem), "safety": _ref(saf)},
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
            "baseline": _ref(r.baseline)}


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
                       previous_model=_model(d.previous_model), model=_model(d.model))
        case ReattuneDetail():
            if d.offers:
                out["offers"] = [o.value for o in d.offers]
            out["posture"] = d.posture.value
            out.update(_reattunement(d.reattunement))
        case _:
            assert_never(d)
    return out


def dict_payload(out: Output | DeadLetter) -> dict[str, Any]:
    """The JSON object of one output or dead letter, as nested dicts."""
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
        case DeadLetter():
            source: dict[str, Any] = {"topic": out.topic, "partition": out.partition,
                                      "offset": out.offset}
            if out.last_offset is not None:
                source["last_offset"] = out.last_offset
            return {"schema": "drift/1", "id": out.id, "reason": out.reason, "source": source,
                    "event_id": out.event_id, "fields": list(out.fields)}
        case _:
            assert_never(out)


def replayed_outputs(events: Iterable[FhrEvent]) -> Iterator[Output]:
    """Every output of ``events``, then a receipt for each erasure they asked for (its
    targets' outcomes cycling through every outcome) and for an operator's erase of the
    last user."""
    runner = MemoryReplay(DriftConfig())
    for event in events:
        yield from runner.feed(event)
    *_, operator = operator_erase(runner.states[event.user_id],
                                  runner.baselines[event.user_id], "op", runner.config)
    outcomes = list(ErasureOutcome)
    for i, command in enumerate([*runner.erasures, operator]):
        targets = tuple(ErasureTarget(k, f"b-{i}-{k.value}" if (i + j) % 3 else None, i + j,
                                      outcomes[(i + j) % len(outcomes)])
                        for j, k in enumerate(command.kinds))
        yield receipt(command, ErasureResult(command.request_id, targets, False))


DEAD_LETTERS = (
    DeadLetter("d0", "invalid_json", "fhr.events", 0, 7, None, ()),
    DeadLetter("d1", "schema_mismatch", "fhr.events", 3, 12, "e-12", ("turn", "dynamics")),
    DeadLetter("d2", "unreadable_batch", "fhr.events", 1, 40, None, (), last_offset=44),
    DeadLetter("d3", "unreadable_batch", "fhr.events", 1, 0, "e", ("x",), last_offset=0),
)


def assert_same(out: Output | DeadLetter) -> None:
    """The same bytes as the dict form, and ``payload`` the same objects (the review API
    encodes it with the stdlib, which writes NaN and infinities where msgspec writes null):
    equal reprs, so the same keys in the same order, lists, floats to the last bit."""
    want = dict_payload(out)
    try:
        expected = msgspec.json.encode(want)
    except OverflowError:  # an integer past 64 bits, drawn by hypothesis
        with pytest.raises(OverflowError):
            encode(out)
        return
    assert encode(out) == expected, out
    got = (msgspec.to_builtins(dead_letter_message(out)) if isinstance(out, DeadLetter)
           else payload(out))
    assert repr(got) == repr(want), out


def test_every_output_of_the_golden_log_encodes_as_the_dict_form() -> None:
    """The golden log reaches every kind of output and of response."""
    outs = list(replayed_outputs(golden_events()))
    kinds = {type(o) for o in outs}
    assert kinds == {DriftScore, ReattuneQualityScore, Response, Escalation, Violation,
                     ErasureReceipt}, kinds
    details = {type(o.detail) for o in outs if isinstance(o, Response)}
    assert details == {LadderDetail, ReleaseDetail, ModelChangeDetail, ReattuneDetail}, details
    for out in (*outs, *DEAD_LETTERS):
        assert_same(out)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_simulated_output_encodes_as_the_dict_form(seed: int) -> None:
    users = simulate(seed, list(Scenario), 3, 1.7e9)
    for out in replayed_outputs(e for events, _ in users for e in events):
        assert_same(out)


_time = st.floats(min_value=0.0, max_value=4e9)
_session = st.none() | st.text(max_size=4)
_outputs = st.one_of(
    *(st.builds(t, session_id=_session, ts_s=_time)
      for t in (DriftScore, ReattuneQualityScore, Response, Escalation, Violation,
                ErasureReceipt)),
    st.builds(DeadLetter),
)


@settings(max_examples=examples(1000), deadline=None)
@given(_outputs)
def test_drawn_outputs_encode_as_the_dict_form(out: Output | DeadLetter) -> None:
    assert_same(out)


#: Every event time a message can carry: the datetime range, as seconds since the epoch.
TIMES = st.floats(min_value=-62135596800.0, max_value=253402300799.0, allow_nan=False)
#: Times half a microsecond off the grid, where the rounding (half to even) decides.
HALVES = st.builds(lambda s, us: s + (us + 0.5) / 1e6, st.integers(0, 4_000_000_000),
                   st.integers(0, 999_999))


def _datetime_text(ts_s: float) -> str:
    return datetime.fromtimestamp(ts_s, UTC).isoformat(timespec="microseconds")[:-6] + "Z"


@settings(max_examples=examples(2000))
@given(st.one_of(TIMES, HALVES))
@example(0.0)
@example(86399.9999995)  # rounds up into the next day
@example(86399.9999996)
@example(0.0000025)  # a half that rounds down, to even
@example(-0.0000005)
@example(1.7e9 + 0.25)
def test_an_event_time_reads_as_the_datetime_it_stands_for(ts_s: float) -> None:
    assert iso(ts_s) == _datetime_text(ts_s)
