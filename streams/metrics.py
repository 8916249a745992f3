"""Every Prometheus metric the worker exports, defined against a registry passed in.

No label takes a user id, a session id or any other unbounded value: labels are
closed sets (event types, reason codes, tiers, actions, rules, outcomes, modes)
or the partition number of a topic whose partition count is fixed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from drift.model import EVENT_TYPES, BaselineKind, Mode, Tier
from drift.outputs import (
    Action,
    Component,
    ErasureOutcome,
    EscalationKind,
    ReattuneOutcome,
    Rule,
)
from streams.edge.fhr_schema import BlockReason, MemoryClass
from streams.edge.rejection import REJECTION_REASONS, BatchFault
from streams.topics import OUTPUT_TOPICS

SCORE_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LAG_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 86400.0)
BATCH_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2000)
#: A checkpoint's steps, in order: its states taken from the kernel's columns on the event
#: loop, then, in the background, the acks of the outputs it covers, its rows (the states'
#: snapshots among them) built in its thread, the changelog, the DuckDB transaction, a
#: changelog roll (only when one is due) and the group offsets' commit.
CHECKPOINT_STEPS = ("states", "acks", "rows", "changelog", "duckdb", "roll", "group")
CHECKPOINT_BUCKETS = (1, 10, 100, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000)
TURN_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20)


def _values(members: Iterable[enum.Enum]) -> tuple[str, ...]:
    return tuple(str(m.value) for m in members)


#: Closed label sets, derived from the enums and literals their values come from,
#: created at zero at start-up so that rates and increases see the first event of each.
LABEL_VALUES: dict[str, dict[str, tuple[str, ...]]] = {
    "events": {"event_type": tuple(EVENT_TYPES.values())},
    "rejections": {"reason": REJECTION_REASONS},
    "unreadable_batches": {"reason": _values(BatchFault)},
    "scores": {"tier": tuple(t.label for t in Tier)},
    "drift_component": {"component": _values(Component)},
    "responses": {"action": _values(Action)},
    "reattune_outcomes": {"outcome": _values(ReattuneOutcome)},
    "escalations": {"kind": _values(EscalationKind)},
    "memory_writes": {"memory_class": get_args(MemoryClass)},
    "memory_writes_blocked": {"reason": get_args(BlockReason)},
    "violations": {"rule": _values(Rule)},
    "erasures": {"outcome": _values(ErasureOutcome)},
    "active_sessions": {"mode": _values(Mode)},
    "baseline_versions": {"kind": _values(BaselineKind)},
    "outputs": {"topic": tuple(OUTPUT_TOPICS.values())},
    "checkpoint_steps": {"step": CHECKPOINT_STEPS},
}


@dataclass(frozen=True)
class Metrics:
    """The worker's metrics; build with :func:`build_metrics`."""

    events: Counter
    rejections: Counter
    unreadable_batches: Counter
    ticks: Counter
    kernel_handoffs: Counter
    scores: Counter
    drift_score: Histogram
    drift_component: Histogram
    responses: Counter
    active_holds: Gauge
    model_changes_detected: Counter
    model_change_notices_shown: Counter
    reattune_quality: Histogram
    reattune_outcomes: Counter
    reattune_turns_to_baseline: Histogram
    escalations: Counter
    memory_writes: Counter
    memory_writes_blocked: Counter
    violations: Counter
    erasures: Counter
    active_sessions: Gauge
    baseline_versions: Counter
    outputs: Counter
    end_to_end_latency: Histogram
    event_time_lag: Histogram
    batch_size: Histogram
    consumer_lag: Gauge
    worker_ready: Gauge
    checkpoint_seconds: Histogram
    checkpoint_records: Histogram
    checkpoint_steps: Histogram
    restore_seconds: Histogram
    broker_reachable: Gauge
    changelog_bytes: Counter
    changelog_rolls: Counter
    _children: dict[tuple[int, str], Any] = field(default_factory=dict, compare=False,
                                                  repr=False)

    def of(self, metric: Counter | Gauge | Histogram, value: str) -> Any:
        """The child of a one-label ``metric`` for ``value``, looked up once and kept.

        >>> m = build_metrics(CollectorRegistry())
        >>> m.of(m.events, "turn") is m.events.labels(event_type="turn")
        True
        """
        key = (id(metric), value)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(value)
        return child


#: Below this many values, :func:`observe_many` observes them one by one (a batch's
#: histograms mostly get a few values each: 13 us through numpy for one value, 2 us by
#: ``observe``).
_FEW = 8


def observe_many(histogram: Histogram, values: Sequence[float]) -> None:
    """``histogram.observe(v)`` for every ``v``; from :data:`_FEW` values on, each bucket
    and the sum moved once.

    A histogram observed per record costs two locked increments per value;
    the engine gathers a batch's values and hands them over here. The buckets
    are the histogram's own (``observe`` puts a value in the first bucket whose
    bound is not below it: ``searchsorted`` on the left), and the batch's values are summed
    in their order (``cumsum``) and added to the sum once, so the exported samples are those
    of one ``observe`` per value; ``tests/streams/test_metrics.py`` holds that.

    >>> h = Histogram("h", "doc", buckets=(1.0, 2.0), registry=CollectorRegistry())
    >>> observe_many(h, [0.5, 1.0, 1.5, 9.0] * 2)
    >>> h._sum.get(), [b.get() for b in h._buckets]
    (24.0, [4.0, 2.0, 2.0])
    """
    if len(values) < _FEW:  # numpy's fixed cost is that of about ten observe() calls
        for value in values:
            histogram.observe(value)
        return
    v = np.asarray(values, dtype=np.float64)
    histogram._sum.inc(float(np.cumsum(v)[-1]))
    counts = np.bincount(np.searchsorted(histogram._upper_bounds, v, side="left"))
    buckets = histogram._buckets
    for i in np.flatnonzero(counts).tolist():
        buckets[i].inc(int(counts[i]))


def build_metrics(registry: CollectorRegistry) -> Metrics:
    """Create every metric on ``registry``.

    >>> from prometheus_client import CollectorRegistry
    >>> reg = CollectorRegistry()
    >>> m = build_metrics(reg)
    >>> m.events.labels(event_type="turn").inc()
    >>> reg.get_sample_value("continuity_events_total", {"event_type": "turn"})
    1.0
    >>> reg.get_sample_value("continuity_rejections_total", {"reason": "key_mismatch"})
    0.0
    """
    r = registry
    # One constructor call per metric, alike in form: each has its own name, help, labels and
    # buckets, and mypy checks each against its field of Metrics.
    metrics = Metrics(
        events=Counter(
            "continuity_events", "FHR events accepted, by event type",
            ["event_type"], registry=r),
        rejections=Counter(
            "continuity_rejections", "Records rejected to the dead-letter topic, by reason code",
            ["reason"], registry=r),
        ticks=Counter(
            "continuity_ticks",
            "Tick records applied: event time of a quiet partition moved on, in the log",
            registry=r),
        kernel_handoffs=Counter(
            "continuity_kernel_handoffs",
            "Events the compiled kernel handed to the reference fold whole (session ends, "
            "starts that end an open session or keep nothing, memory writes, mode changes, "
            "erasures, events by whose time an idle close or an expiry is due)", registry=r),
        unreadable_batches=Counter(
            "continuity_unreadable_batches",
            "Input record batches that could not be read (CRC, codec, corrupt bytes), each "
            "dead-lettered with its offset range and skipped, by reason code",
            ["reason"], registry=r),
        scores=Counter(
            "continuity_scores", "Drift scores computed, by tier", ["tier"], registry=r),
        drift_score=Histogram(
            "continuity_drift_score", "Composite continuity_drift_score per checkpoint",
            buckets=SCORE_BUCKETS, registry=r),
        drift_component=Histogram(
            "continuity_drift_component", "Drift components per checkpoint, by component",
            ["component"], buckets=SCORE_BUCKETS, registry=r),
        responses=Counter(
            "continuity_responses", "Tighten-only responses published, by action",
            ["action"], registry=r),
        active_holds=Gauge(
            "continuity_active_holds", "Users currently under HOLD on this worker", registry=r),
        model_changes_detected=Counter(
            "continuity_model_changes_detected", "Model changes detected at session start",
            registry=r),
        model_change_notices_shown=Counter(
            "continuity_model_change_notices_shown", "Model-change notices shown to users",
            registry=r),
        reattune_quality=Histogram(
            "continuity_reattune_quality_score", "reattune_quality_score per scored session",
            buckets=SCORE_BUCKETS, registry=r),
        reattune_outcomes=Counter(
            "continuity_reattune_outcomes", "Re-attunement checkpoint outcomes after a model change",
            ["outcome"], registry=r),
        reattune_turns_to_baseline=Histogram(
            "continuity_reattune_turns_to_baseline",
            "reattune_turns_to_baseline per scored session (sessions that never reached it are "
            "counted in continuity_reattune_never_reached via outcome)",
            buckets=TURN_BUCKETS, registry=r),
        escalations=Counter(
            "continuity_escalations", "Escalations published, by kind", ["kind"], registry=r),
        memory_writes=Counter(
            "continuity_memory_writes", "Memory writes observed, by memory class",
            ["memory_class"], registry=r),
        memory_writes_blocked=Counter(
            "continuity_memory_writes_blocked", "Memory writes blocked by the companion, by reason",
            ["reason"], registry=r),
        violations=Counter(
            "continuity_governance_violations", "Memory-governance violations, by rule",
            ["rule"], registry=r),
        erasures=Counter(
            "continuity_erasures", "Erasure targets, by outcome", ["outcome"], registry=r),
        active_sessions=Gauge(
            "continuity_active_sessions", "Open sessions on this worker, by continuity mode",
            ["mode"], registry=r),
        baseline_versions=Counter(
            "continuity_baseline_versions", "Baseline versions written, by kind", ["kind"],
            registry=r),
        outputs=Counter(
            "continuity_outputs", "Messages published, by output topic", ["topic"], registry=r),
        end_to_end_latency=Histogram(
            "continuity_end_to_end_latency_seconds",
            "From the input record's Kafka timestamp to the publish of its outputs",
            buckets=LATENCY_BUCKETS, registry=r),
        event_time_lag=Histogram(
            "continuity_event_time_lag_seconds",
            "Wall-clock time at processing minus the event's own ts",
            buckets=LAG_BUCKETS, registry=r),
        batch_size=Histogram(
            "continuity_batch_size", "Records per processed batch", buckets=BATCH_BUCKETS,
            registry=r),
        consumer_lag=Gauge(
            "continuity_consumer_lag", "Records behind the end of fhr.events, by partition",
            ["partition"], registry=r),
        worker_ready=Gauge(
            "continuity_worker_ready", "1 once the worker has its partitions and state", registry=r),
        checkpoint_seconds=Histogram(
            "continuity_checkpoint_seconds",
            "Time to write one checkpoint (one DuckDB transaction) and commit the group offsets",
            buckets=LATENCY_BUCKETS, registry=r),
        checkpoint_records=Histogram(
            "continuity_checkpoint_records", "Input records covered by one checkpoint",
            buckets=CHECKPOINT_BUCKETS, registry=r),
        checkpoint_steps=Histogram(
            "continuity_checkpoint_step_seconds",
            "Time of each step of one checkpoint (states on the event loop; acks, rows, "
            "changelog, duckdb, roll when due, group in the background)",
            ["step"], buckets=LATENCY_BUCKETS, registry=r),
        broker_reachable=Gauge(
            "continuity_broker_reachable",
            "1 while the broker answers and takes what the worker sends; 0 while it waits",
            registry=r),
        restore_seconds=Histogram(
            "continuity_restore_seconds",
            "Time to restore one partition's state from its changelog into DuckDB",
            buckets=LATENCY_BUCKETS, registry=r),
        changelog_bytes=Counter(
            "continuity_changelog_bytes", "Bytes of state written to the changelog", registry=r),
        changelog_rolls=Counter(
            "continuity_changelog_rolls",
            "Changelog generations started (a snapshot of a partition to a fresh topic)",
            registry=r),
    )
    for name, labels in LABEL_VALUES.items():
        metric = getattr(metrics, name)
        for label, values in labels.items():
            for value in values:
                metric.labels(**{label: value})
    return metrics
