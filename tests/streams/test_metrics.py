"""Metrics: defined on a passed-in registry, and no label ever carries an id."""

from __future__ import annotations

import urllib.request

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.parser import text_string_to_metric_families

from drift.simulation import Scenario, simulate
from streams.metrics import LABEL_VALUES, build_metrics, observe_many
from tests.conftest import examples

ALLOWED_LABELS = {label for labels in LABEL_VALUES.values() for label in labels} | {
    "partition", "le"}


def test_every_closed_label_value_exists_at_zero_on_a_fresh_registry() -> None:
    registry = CollectorRegistry()
    build_metrics(registry)
    assert registry.get_sample_value("continuity_violations_total",
                                     {"rule": "model_change_undisclosed"}) is None
    assert registry.get_sample_value("continuity_governance_violations_total",
                                     {"rule": "model_change_undisclosed"}) == 0.0
    assert registry.get_sample_value("continuity_rejections_total",
                                     {"reason": "raw_content_rejected"}) == 0.0


def test_live_metrics_carry_no_user_or_session_id(worker_metrics_url: str) -> None:
    with urllib.request.urlopen(worker_metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    ids = set()
    for events, _ in simulate(3, list(Scenario), 2, 0.0):
        for e in events:
            ids.update((e.user_id, e.session_id))
    assert ids
    for user_or_session in ids:
        assert user_or_session not in text
    families = list(text_string_to_metric_families(text))
    assert any(f.name == "continuity_events" for f in families)
    for family in families:
        if not family.name.startswith("continuity_"):
            continue
        for sample in family.samples:
            assert set(sample.labels) <= ALLOWED_LABELS, (sample.name, sample.labels)
            if "partition" in sample.labels:
                assert sample.labels["partition"].isdigit()


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.floats(min_value=-5.0, max_value=1e5, allow_nan=False), max_size=60))
def test_observing_a_batch_exports_what_observing_each_value_does(values: list[float]) -> None:
    one, many = CollectorRegistry(), CollectorRegistry()
    buckets = (0.1, 1.0, 5.0, 60.0, 3600.0)
    each = Histogram("lag", "doc", buckets=buckets, registry=one)
    batched = Histogram("lag", "doc", buckets=buckets, registry=many)
    for v in values:
        each.observe(v)
    observe_many(batched, values)
    expected = {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in one.collect() for s in f.samples if not s.name.endswith("_created")}
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in many.collect() for s in f.samples if not s.name.endswith("_created")}
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-9), key
