"""No record can stop a partition: whatever bytes it holds, it becomes an event or one dead letter.

SPEC section 2. The decoder and the engine are thrown arbitrary bytes and arbitrary
JSON (deep, wide, huge, odd encodings); a record that decodes but whose processing
raises is dead-lettered as ``processing_error`` and the records after it go on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

import drift.kernel.batch as kernel_batch
from baselines.store import BaselineStore
from drift.model import DriftConfig, FhrEvent
from streams import topics
from streams.edge.codec import decode_event, encode_event
from streams.edge.rejection import REJECTION_REASONS, Rejection
from streams.metrics import build_metrics
from streams.processing.engine import Engine
from streams.processing.records import Record
from tests.builders import UserScript
from tests.conftest import examples

DEEP = b"[" * 5000 + b"]" * 5000
ENVELOPE = {"schema": "fhr/1", "event_id": "e1", "event_type": "turn",
            "ts": "2026-11-30T10:00:00+00:00", "user_id": "u1", "session_id": "s1"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=30)


def _assert_one_outcome(key: bytes | None, value: bytes | None) -> FhrEvent | Rejection:
    out = decode_event(key, value)
    assert isinstance(out, FhrEvent | Rejection)
    if isinstance(out, Rejection):
        assert out.reason in REJECTION_REASONS
    return out


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=2000), st.one_of(st.none(), st.binary(max_size=16)))
def test_arbitrary_bytes_decode_to_an_event_or_a_rejection(value: bytes, key: bytes | None
                                                           ) -> None:
    _assert_one_outcome(key, value)


@settings(max_examples=examples(300), deadline=None)
@given(json_values, st.sampled_from(["utf-8", "utf-16", "utf-32", "latin-1"]))
def test_arbitrary_json_in_any_encoding_decodes_to_an_event_or_a_rejection(
        doc: Any, encoding: str) -> None:
    text = json.dumps(doc, ensure_ascii=False)
    try:
        raw = text.encode(encoding)
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogatepass")
    _assert_one_outcome(b"u1", raw)


@settings(max_examples=examples(200), deadline=None)
@given(st.dictionaries(st.sampled_from(sorted({*ENVELOPE, "turn", "dynamics", "states", "x"})),
                       json_values, max_size=8))
def test_envelopes_with_arbitrary_fields_decode_to_an_event_or_a_rejection(
        fields: dict[str, Any]) -> None:
    _assert_one_outcome(b"u1", json.dumps({**ENVELOPE, **fields}).encode())


@pytest.mark.parametrize("value, reason", [
    (DEEP, "too_deep"),
    (b"[" * 100_000 + b"]" * 100_000, "too_deep"),
    (b'{"a":' * 3000 + b"1" + b"}" * 3000, "too_deep"),
    (json.dumps({**ENVELOPE, "x": json.loads("[" * 500 + "]" * 500)}).encode(), None),
    (json.dumps({**ENVELOPE, "dynamics": list(range(200_000))}).encode(), None),
    (json.dumps({**ENVELOPE, "session_id": "x" * 5_000_000}).encode(), "raw_content_rejected"),
    ("{\"schema\": \"fhr/1\"}".encode("utf-16"), "invalid_json"),
    (b"\x00" * 64, "invalid_json"),
    (b"", "invalid_json"),
    (None, "invalid_json"),
])
def test_hostile_records_are_rejected_with_a_reason(value: bytes | None, reason: str | None
                                                     ) -> None:
    out = _assert_one_outcome(b"u1", value)
    assert isinstance(out, Rejection)
    if reason is not None:
        assert out.reason == reason


def _engine(tmp_path: Path) -> tuple[Engine, BaselineStore, CollectorRegistry]:
    registry = CollectorRegistry()
    store = BaselineStore(tmp_path / "continuity.duckdb")
    engine = Engine(store, DriftConfig(), build_metrics(registry))
    engine.assign([0])
    return engine, store, registry


def _good_events(user_id: str = "poison-good") -> list[FhrEvent]:
    script = UserScript(user_id, seed=4)
    for i in range(4):
        script.session(f"{user_id}-s{i}")
    return script.events


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.binary(max_size=200), json_values.map(
    lambda d: json.dumps(d).encode()), st.just(DEEP)), min_size=1, max_size=30),
    st.randoms(use_true_random=False))
def test_the_engine_turns_every_record_into_an_event_or_one_dead_letter(
        tmp_path_factory: pytest.TempPathFactory, garbage: list[bytes], rnd: Any) -> None:
    engine, store, _ = _engine(tmp_path_factory.mktemp("poison"))
    try:
        good = [(e.user_id.encode(), encode_event(e)) for e in _good_events()]
        mixed: list[tuple[bytes | None, bytes | None]] = [*good, *((b"poison-x", g)
                                                                   for g in garbage)]
        rnd.shuffle(mixed)
        records = [Record(0, i, k, v, 0) for i, (k, v) in enumerate(mixed)]
        batch = engine.process(records)
        dead = [m for m in batch.messages if m.topic == topics.DEADLETTER]
        accepted = sum(1 for k, v in mixed if isinstance(decode_event(k, v), FhrEvent))
        assert len(dead) + accepted == len(records)
        assert engine.next_offsets[0] == len(records)
    finally:
        store.close()


def test_a_record_whose_processing_raises_is_dead_lettered_and_the_rest_go_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, store, registry = _engine(tmp_path)
    try:
        victim = _good_events("poison-victim")
        others = _good_events("poison-other")
        # the reference fold raises on a session start, whether the kernel hands it over
        # whole (step) or opens its session on the state object (dispatch)
        broken = [e for e in victim if e.event_type == "session_start"][1]
        def raising(real: Any) -> Any:
            def on_broken(state: Any, baselines: Any, event: FhrEvent, *rest: Any) -> Any:
                if event.event_id == broken.event_id:
                    raise ValueError("a value from the record that must not reach the log")
                return real(state, baselines, event, *rest)
            return on_broken

        for part in ("step", "dispatch"):
            monkeypatch.setattr(kernel_batch, part, raising(getattr(kernel_batch, part)))
        events = victim + others
        records = [Record(0, i, e.user_id.encode(), encode_event(e), 0)
                   for i, e in enumerate(events)]
        batch = engine.process(records)
        letters = [json.loads(m.value) for m in batch.messages if m.topic == topics.DEADLETTER]
        assert letters == [{
            "schema": "drift/1", "id": letters[0]["id"], "reason": "processing_error",
            "source": {"topic": topics.INPUT, "partition": 0,
                       "offset": victim.index(broken)},
            "event_id": broken.event_id, "fields": []}]
        scores = [json.loads(m.value) for m in batch.messages if m.topic == topics.SCORES]
        assert {s["user_id"] for s in scores} == {"poison-victim", "poison-other"}
        assert engine.next_offsets[0] == len(events)
        assert registry.get_sample_value("continuity_rejections_total",
                                         {"reason": "processing_error"}) == 1.0
        assert registry.get_sample_value("continuity_events_total",
                                         {"event_type": broken.event_type}) == sum(
            1 for e in events if e.event_type == broken.event_type) - 1
    finally:
        store.close()


def test_a_fault_of_the_store_is_not_taken_for_a_bad_record(tmp_path: Path) -> None:
    engine, store, _ = _engine(tmp_path)
    script = UserScript("poison-erase", seed=6)
    script.session("pe-0")
    script.erase("pe-0")
    records = [Record(0, i, e.user_id.encode(), encode_event(e), 0)
               for i, e in enumerate(script.events)]
    store.close()
    with pytest.raises(duckdb.Error):
        engine.process(records)
