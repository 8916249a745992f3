"""What the demo's worker published, read back from the output topics and counted the way
the worker's ``/metrics`` counts it, with the notable events and what drove them.

Each output topic's JSON (``streams.edge.wire``) is decoded into the governance report's frozen
message structs (``streams.report.messages``), so the two readers of the outputs read them alike. :data:`COUNTERS` names, for every count the screen
shows, the worker counter it must equal once the worker has published what it counted;
:func:`differences` says where the two disagree.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from streams import topics
from streams.demo.traffic import INJECTED
from streams.metrics import LABEL_VALUES
from streams.report.messages import (
    DeadLetterMsg,
    DriftScoreMsg,
    EscalationMsg,
    ReattunePartsMsg,
    ReattuneScoreMsg,
    ReceiptMsg,
    ResponseMsg,
    ViolationMsg,
)

NOTABLE_KINDS = 8
"""How many notable events the screen keeps, the latest of each kind, newest last: a HOLD
raised or released, a check prompted, a model re-attuned or not, an escalation, a violation,
an erasure."""


DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    topics.SCORES: msgspec.json.Decoder(DriftScoreMsg | ReattuneScoreMsg),
    topics.RESPONSES: msgspec.json.Decoder(ResponseMsg),
    topics.ESCALATIONS: msgspec.json.Decoder(EscalationMsg),
    topics.VIOLATIONS: msgspec.json.Decoder(ViolationMsg),
    topics.RECEIPTS: msgspec.json.Decoder(ReceiptMsg),
    topics.DEADLETTER: msgspec.json.Decoder(DeadLetterMsg),
}
"""The topics the demo reads, each with its decoder."""


@dataclass(frozen=True)
class Counted:
    """One worker counter, its label, the label's values in /metrics order, and what it counts."""

    metric: str
    label: str
    values: tuple[str, ...]
    what: str

    def ordered(self, counts: Counter[str]) -> list[tuple[str, int]]:
        """The non-zero ``counts`` in the order /metrics lists them.

        >>> COUNTERS[0].ordered(Counter(high=2, low=5, medium=0))
        [('low', 5), ('high', 2)]
        """
        rank = {v: i for i, v in enumerate(self.values)}
        return sorted(((k, n) for k, n in counts.items() if n),
                      key=lambda kv: rank.get(kv[0], len(rank)))


def _counted(metric: str, family: str, label: str, what: str) -> Counted:
    return Counted(metric, label, LABEL_VALUES[family][label], what)


COUNTERS = (
    _counted("continuity_scores_total", "scores", "tier", "drift scores by tier"),
    _counted("continuity_responses_total", "responses", "action", "responses by action"),
    _counted("continuity_governance_violations_total", "violations", "rule",
             "violations by rule"),
    _counted("continuity_escalations_total", "escalations", "kind", "escalations by kind"),
    _counted("continuity_erasures_total", "erasures", "outcome", "erasure targets by outcome"),
    _counted("continuity_rejections_total", "rejections", "reason", "dead letters by reason"),
)
SCORES, RESPONSES, VIOLATIONS, ESCALATIONS, ERASURES, REJECTIONS = (c.metric for c in COUNTERS)


@dataclass(frozen=True)
class Notable:
    at_s: float
    kind: str
    user_id: str
    detail: str


class _Recent:
    """The last ``size`` keys put, with their values: bounded memory for a demo that runs
    for hours."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[str, Any] = OrderedDict()

    def put(self, key: str, value: Any = None) -> None:
        self.items[key] = value
        if len(self.items) > self.size:
            self.items.popitem(last=False)

    def pop(self, key: str) -> Any:
        return self.items.pop(key, None)

    def __contains__(self, key: str) -> bool:
        return key in self.items


@dataclass
class Tally:
    """Counts of the output topics, as the worker's counters count, and the notable events.

    ``counts`` is keyed by metric name (:data:`COUNTERS`). Erasures count per target, as
    ``continuity_erasures_total`` and the report's ``erasure_targets_by_outcome`` do (a
    receipt without targets counts once, with its own outcome); ``receipts`` counts the
    receipts themselves, one per erasure request. A message whose ``id`` was seen before
    is a duplicate of at-least-once delivery and counts nowhere.

    >>> t = Tally()
    >>> receipt = (b'{"id":"r1","user_id":"u","event_ts":"2026-12-04T10:00:00Z",'
    ...            b'"reason":"user_request","outcome":"verified","targets":['
    ...            b'{"kind":"attunement","outcome":"verified"},'
    ...            b'{"kind":"semantic","outcome":"verified"}]}')
    >>> t.add(topics.RECEIPTS, receipt, 3.0)
    >>> t.add(topics.RECEIPTS, receipt, 4.0)
    >>> t.counts[ERASURES], t.receipts, t.duplicates, t.notable[-1].kind
    (Counter({'verified': 2}), Counter({'verified': 1}), 1, 'erasure verified')
    """

    counts: dict[str, Counter[str]] = field(
        default_factory=lambda: {c.metric: Counter() for c in COUNTERS})
    receipts: Counter[str] = field(default_factory=Counter)
    reattune_scores: int = 0
    duplicates: int = 0
    undecodable: int = 0
    notable: deque[Notable] = field(default_factory=lambda: deque(maxlen=NOTABLE_KINDS))
    noted: int = 0
    """Notable events so far: a screen that prints only new ones compares it with its last."""
    _ids: _Recent = field(default_factory=lambda: _Recent(50_000))
    _scores: _Recent = field(default_factory=lambda: _Recent(20_000))
    _waiting: _Recent = field(default_factory=lambda: _Recent(5_000))

    def add(self, topic: str, value: bytes | None, at_s: float) -> None:
        """Count one message of ``topic``, read ``at_s`` seconds into the demo."""
        try:
            msg = DECODERS[topic].decode(value or b"")
        except msgspec.DecodeError:
            self.undecodable += 1
            return
        if msg.id in self._ids:
            self.duplicates += 1
            return
        self._ids.put(msg.id)
        counts = self.counts
        match msg:
            case DriftScoreMsg():
                counts[SCORES][msg.tier] += 1
                if msg.tier != "low":
                    self._scores.put(msg.id, msg)
                    waiting = self._waiting.pop(msg.id)
                    if waiting is not None:
                        self._ladder(waiting, msg, at_s)
            case ReattuneScoreMsg():
                self.reattune_scores += 1
            case ResponseMsg():
                counts[RESPONSES][msg.action] += 1
                self._response(msg, at_s)
            case EscalationMsg():
                counts[ESCALATIONS][msg.kind] += 1
                self._note(at_s, "escalated", msg.user_id,
                           f"{msg.kind}: {msg.sessions} sessions re-attuned below "
                           f"{msg.threshold or 0.0:.2f} (last {msg.last_quality or 0.0:.2f}), "
                           f"to {msg.route}")
            case ViolationMsg():
                counts[VIOLATIONS][msg.rule] += 1
                why = "sent on purpose" if msg.user_id.startswith(INJECTED) else "unexpected"
                self._note(at_s, "violation", msg.user_id, f"{msg.rule} ({msg.reason}; {why})")
            case ReceiptMsg():
                self.receipts[msg.outcome] += 1
                for t in msg.targets:
                    counts[ERASURES][t.outcome] += 1
                if not msg.targets:
                    counts[ERASURES][msg.outcome] += 1
                kinds = ", ".join(f"{t.kind} x{t.versions}" for t in msg.targets) or "no data"
                self._note(at_s, f"erasure {msg.outcome}", msg.user_id,
                           f"{len(msg.targets)} targets ({kinds}), {msg.reason}")
            case DeadLetterMsg():
                counts[REJECTIONS][msg.reason] += 1

    def _response(self, r: ResponseMsg, at_s: float) -> None:
        if r.action in ("continuity_rebaseline_required", "continuity_check_prompted"):
            if r.score_id is None:
                return
            score = self._scores.pop(r.score_id)
            if score is None:  # the score is on another topic and may come later
                self._waiting.put(r.score_id, r)
            else:
                self._ladder(r, score, at_s)
        elif r.action == "hold_released":
            self._note(at_s, "HOLD released", r.user_id,
                       f"baseline_reconfirmed covered {', '.join(r.kinds)}")
        elif r.action in ("reattune_completed", "reattune_failed"):
            passed = r.action == "reattune_completed"
            p = r.components or ReattunePartsMsg()
            parts = ", ".join(f"{name} {v:.2f}" for name, v in (
                ("convergence", p.convergence), ("trust", p.trust_continuity),
                ("semantic", p.semantic_consistency)) if v is not None)
            back = (f"at baseline by turn {r.reattune_turns_to_baseline}"
                    if r.reattune_turns_to_baseline is not None else "never back at baseline")
            self._note(at_s, "model re-attuned" if passed else "re-attune failed", r.user_id,
                       f"quality {r.reattune_quality_score or 0.0:.2f} "
                       f"{'>=' if passed else '<'} {r.threshold or 0.0:.2f} ({parts}); {back}")

    def _ladder(self, r: ResponseMsg, s: DriftScoreMsg, at_s: float) -> None:
        kind = "HOLD raised" if r.action == "continuity_rebaseline_required" else "check prompted"
        self._note(at_s, kind, r.user_id,
                   f"score {s.continuity_drift_score:.2f} ({s.tier}), driven by {driver(s)}")

    def _note(self, at_s: float, kind: str, user_id: str, detail: str) -> None:
        for old in [n for n in self.notable if n.kind == kind]:
            self.notable.remove(old)
        self.notable.append(Notable(at_s, kind, user_id, detail))
        self.noted += 1


def driver(s: DriftScoreMsg) -> str:
    """What drove a score: the attributed component and why, then the other components.

    >>> from streams.report.messages import AttributionMsg as A, ComponentsMsg as C, FeatureMoved
    >>> def score(value: float, parts: C, attribution: A) -> DriftScoreMsg:
    ...     return DriftScoreMsg(id="s", user_id="u", event_ts="", turn=5, checkpoint="t5",
    ...                          mode="continuity_full", components=parts, tier="high",
    ...                          continuity_drift_score=value, effective_tier="high",
    ...                          attribution=attribution)
    >>> moved = (FeatureMoved(feature="trust", z=3.21, direction="down"),
    ...          FeatureMoved(feature="valence", z=2.0, direction="up"))
    >>> driver(score(0.9, C(attunement_drift=0.9, safety_drift=0.0),
    ...              A(component="attunement", features=moved)))
    'attunement_drift 0.90: trust down z 3.2, valence up z 2.0'
    >>> driver(score(0.62, C(attunement_drift=0.12, semantic_drift=0.5, safety_drift=0.0),
    ...              A(component="semantic")))
    'semantic_drift 0.50: share of commitments contradicted; attunement_drift 0.12'
    """
    a = s.attribution
    components = {"attunement": s.components.attunement_drift,
                  "semantic": s.components.semantic_drift, "safety": s.components.safety_drift}
    value = components.pop(a.component, None) or 0.0
    if a.component == "attunement":
        why = ", ".join(f"{f.feature} {f.direction} z {abs(f.z):.1f}" for f in a.features[:2])
    elif a.component == "semantic":
        why = "share of commitments contradicted"
    else:
        why = "share of safety-baseline fields changed"
    others = [f"{k}_drift {v:.2f}" for k, v in components.items() if v]
    return "; ".join([f"{a.component}_drift {value:.2f}: {why}", *others])


@dataclass(frozen=True)
class Scrape:
    """The worker's samples of :data:`COUNTERS` (label value -> count, zeros left out) and
    the input records it has processed (accepted events plus rejections)."""

    counts: dict[str, dict[str, int]]
    processed: int


def parse_metrics(text: str) -> Scrape:
    """The demo's counters from a ``/metrics`` page.

    >>> page = ('continuity_scores_total{tier="low"} 3.0\\n'
    ...         'continuity_scores_total{tier="high"} 0.0\\n'
    ...         'continuity_events_total{event_type="turn"} 7.0\\n'
    ...         'continuity_rejections_total{reason="invalid_json"} 1.0\\n')
    >>> s = parse_metrics(page)
    >>> s.counts["continuity_scores_total"], s.processed
    ({'low': 3}, 8)
    """
    labels = {c.metric: c.label for c in COUNTERS}
    counts: dict[str, dict[str, int]] = {c.metric: {} for c in COUNTERS}
    processed = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("continuity_events_total", REJECTIONS):
                processed += int(sample.value)
            label = labels.get(sample.name)
            if label is not None and sample.value:
                counts[sample.name][sample.labels[label]] = int(sample.value)
    return Scrape(counts, processed)


def scrape(url: str) -> Scrape | None:
    """The worker's counters, or None while it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return parse_metrics(resp.read().decode())
    except (OSError, ValueError, http.client.HTTPException):  # not answering (yet)
        return None


def differences(tally: Tally, metrics: Scrape) -> list[Counted]:
    """The counters where the output topics and ``/metrics`` disagree."""
    return [c for c in COUNTERS if dict(c.ordered(tally.counts[c.metric])) != metrics.counts[c.metric]]


def why_different(tally: Tally, metrics: Scrape, c: Counted) -> str:
    seen = sum(tally.counts[c.metric].values())
    counted = sum(metrics.counts[c.metric].values())
    if counted > seen:
        return (f"{seen} on the topic, {counted} in /metrics: the worker counted outputs "
                "the demo has not read yet")
    return (f"{seen} on the topic, {counted} in /metrics: the topic has more (a worker "
            "restarted, or more than one publishes)")
