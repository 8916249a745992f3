"""Metrics: defined on a passed-in registry, and no label ever carries an id."""

from __future__ import annotations

import urllib.request

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from drift.simulation import Scenario, simulate
from streams.metrics import LABEL_VALUES, build_metrics

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
