"""The engine's metrics, moved once per batch: what each record counts and each output
observes, gathered while the batch is processed and handed to prometheus-client at its end
(a counter's lock taken once per batch, not once per record)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import Counter, Histogram

from drift.model import (
    EVENT_TYPES,
    FhrEvent,
    MemoryWrite,
    MemoryWriteBlocked,
    Mode,
    NoticeShown,
)
from drift.outputs import (
    Action,
    DriftScore,
    ErasureReceipt,
    ErasureResult,
    Escalation,
    Output,
    ReattuneDetail,
    Reattunement,
    ReattuneOutcome,
    ReattuneQualityScore,
    Response,
    Violation,
)
from drift.state import UserState
from streams.metrics import Metrics, observe_many

#: The event types whose bodies move a metric of their own (:meth:`Meter.events`).
_BODY_COUNTED = frozenset(EVENT_TYPES[b] for b in (MemoryWrite, MemoryWriteBlocked, NoticeShown))


class Meter:
    """Counts and observations of one batch, for :class:`streams.processing.engine.Engine`."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._counts: dict[Counter, int] = {}
        self._observed: dict[Histogram, list[float]] = {}
        self.lags: list[float] = []
        """Event-time lags (seconds) of the batch's events."""

    def count(self, counter: Counter, value: str | None = None) -> None:
        """Count one event of ``counter`` (of its child for ``value`` if it has a label); the
        counters and histograms move once per batch (:meth:`flush`)."""
        child = counter if value is None else self.metrics.of(counter, value)
        self._counts[child] = self._counts.get(child, 0) + 1

    def observe_value(self, histogram: Histogram, value: float, label: str | None = None
                       ) -> None:
        """Observe ``value`` on ``histogram`` (its child for ``label``) at the batch's end."""
        child = histogram if label is None else self.metrics.of(histogram, label)
        values = self._observed.get(child)
        if values is None:
            values = self._observed[child] = []
        values.append(value)

    def flush(self) -> None:
        for counter, n in self._counts.items():
            counter.inc(n)
        self._counts.clear()
        for histogram, values in self._observed.items():
            observe_many(histogram, values)
        self._observed.clear()
        observe_many(self.metrics.event_time_lag, self.lags)
        self.lags.clear()

    def events(self, events: list[FhrEvent], now: float) -> None:
        """Count ``events`` by type (and what some bodies say), and observe their event-time
        lag at wall time ``now``."""
        m = self.metrics
        types = Tally([event.event_type for event in events])
        counts = self._counts
        for t, n in types.items():
            child = m.of(m.events, t)
            counts[child] = counts.get(child, 0) + n
        if types.keys() & _BODY_COUNTED:
            for event in events:
                if event.event_type in _BODY_COUNTED:
                    self._body(event)
        self.lags.extend([max(0.0, now - event.ts_s) for event in events])

    def _body(self, event: FhrEvent) -> None:
        m = self.metrics
        body = event.body
        if isinstance(body, MemoryWrite):
            self.count(m.memory_writes, body.memory_class)
        elif isinstance(body, MemoryWriteBlocked):
            self.count(m.memory_writes_blocked, body.reason)
        elif isinstance(body, NoticeShown):
            self.count(m.model_change_notices_shown)

    def erasure(self, result: ErasureResult) -> None:
        for target in result.targets:
            self.count(self.metrics.erasures, target.outcome.value)
        if not result.targets:
            self.count(self.metrics.erasures, result.outcome.value)

    def output(self, out: Output) -> None:
        m = self.metrics
        match out:
            case DriftScore():
                self.count(m.scores, out.tier.label)
                self.observe_value(m.drift_score, out.score)
                for component, value in out.components.items():
                    if value is not None:
                        self.observe_value(m.drift_component, value, component.value)
            case ReattuneQualityScore():
                self._reattunement(out.reattunement)
            case Response():
                self.count(m.responses, out.action.value)
                if out.action is Action.MODEL_CHANGE_NOTICE:
                    self.count(m.model_changes_detected)
                if isinstance(out.detail, ReattuneDetail):
                    outcome = (ReattuneOutcome.COMPLETED if out.action is Action.REATTUNE_COMPLETED
                               else ReattuneOutcome.FAILED)
                    self.count(m.reattune_outcomes, outcome.value)
                    self._reattunement(out.detail.reattunement)
            case Escalation():
                self.count(m.escalations, out.escalation.value)
            case Violation():
                self.count(m.violations, out.rule.value)
            case ErasureReceipt():
                pass

    def _reattunement(self, r: Reattunement) -> None:
        m = self.metrics
        self.observe_value(m.reattune_quality, r.score.quality)
        if r.score.turns_to_baseline is not None:
            self.observe_value(m.reattune_turns_to_baseline, r.score.turns_to_baseline)
        else:
            self.count(m.reattune_outcomes, ReattuneOutcome.NEVER_REACHED_BASELINE.value)

    def gauges(self, states: Iterable[UserState]) -> None:
        """Set the gauges of open sessions and holds from every user's state."""
        counts = dict.fromkeys(Mode, 0)
        holds = 0
        for state in states:
            if state.session is not None:
                counts[state.session.mode] += 1
            if state.ladder.hold:
                holds += 1
        for mode, n in counts.items():
            self.metrics.of(self.metrics.active_sessions, mode.value).set(n)
        self.metrics.active_holds.set(holds)
