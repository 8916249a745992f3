"""The demo's traffic: the simulator's story of every scenario, told again and again.

Round 0 is what :func:`drift.simulation.simulate` makes for every scenario, with one
relational erasure per governance user after their session. Each later round is the same
users again, with new event, session and erasure-request ids, event time moved on by one
round, and the turns of their baseline sessions reshuffled, so that scores differ from round
to round while every user keeps their own process. A later round also

- opens with a ``baseline_reconfirmed`` per user who keeps baselines, which lifts a HOLD the
  last round left (``hold_released``): the ladder is tighten-only, so without it a user under
  HOLD would stay there for the rest of the demo;
- runs the model-change users whose change took on the other model every other round (a
  user on the new model changes back), and shows a model-change notice in their baseline
  sessions, so that only the ``model_change_undisclosed`` scenario leaves a change undisclosed.

Every round ends with three records a producer gets wrong, to show dead letters.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from drift.evolve import evolve
from drift.model import (
    BaselineKind,
    BaselineReconfirmed,
    Body,
    FhrEvent,
    MemoryErase,
    NoticeShown,
    SessionStart,
    Turn,
)
from drift.simulation import MODEL_A, MODEL_B, Scenario, SimParams, TruthRow
from streams import topics
from streams.edge.codec import encode_event
from streams.simulate import kafka_producer, merged_events

MODEL_SCENARIOS = frozenset({Scenario.MODEL_CHANGE_HEALTHY, Scenario.MODEL_CHANGE_COLLAPSED,
                             Scenario.MODEL_CHANGE_UNDISCLOSED})
SWAPPED = frozenset({Scenario.MODEL_CHANGE_HEALTHY, Scenario.MODEL_CHANGE_UNDISCLOSED})
"""Model-change scenarios whose change usually takes, so their baselines move to the new model."""
NOTHING_KEPT = frozenset({Scenario.STATELESS, Scenario.EPHEMERAL})
INJECTED = (Scenario.GOVERNANCE.value, Scenario.MODEL_CHANGE_UNDISCLOSED.value)
"""Prefixes of the users whose violations the demo sends on purpose."""

Record = tuple[bytes, bytes, float]
"""An input record: key, value, and the event time it carries (for the screen)."""


@dataclass(frozen=True)
class Story:
    """Round 0 of the demo's traffic and what later rounds need to retell it."""

    seed: int
    events: tuple[FhrEvent, ...]
    scenario_of: dict[str, Scenario]
    turn_slots: tuple[tuple[str, int, int] | None, ...]
    """Per event: (user, turn number, index) of a baseline-session turn; else None."""
    turns: dict[tuple[str, int], tuple[Turn, ...]]
    """The baseline-session turns of each user and turn number, to reshuffle."""
    notice_sessions: frozenset[str]
    span_s: float

    @staticmethod
    def build(seed: int, users: int, start_s: float) -> Story:
        """``users`` users of every scenario from ``seed``, starting at event time ``start_s``.

        >>> story = Story.build(7, 1, 1.7e9)
        >>> len(story.scenario_of), story.start_s, story.span_s > 3 * 86400
        (12, 1700000000.0, True)
        """
        truth: list[TruthRow] = []
        merged = list(merged_events(seed, list(Scenario), users, start_s, SimParams(), truth))
        events = sorted(merged + _governance_erasures(merged), key=lambda e: e.ts_s)
        baseline = {row.session_id for row in truth if row.phase == "baseline"}
        slots: list[tuple[str, int, int] | None] = []
        turns: dict[tuple[str, int], list[Turn]] = {}
        for e in events:
            if isinstance(e.body, Turn) and e.session_id in baseline:
                group = turns.setdefault((e.user_id, e.body.turn), [])
                slots.append((e.user_id, e.body.turn, len(group)))
                group.append(e.body)
            else:
                slots.append(None)
        scenario_of = {row.user_id: Scenario(row.scenario) for row in truth}
        notice = frozenset(row.session_id for row in truth if row.phase == "baseline"
                           and scenario_of[row.user_id] in MODEL_SCENARIOS)
        return Story(seed, tuple(events), scenario_of, tuple(slots),
                     {k: tuple(v) for k, v in turns.items()}, notice,
                     events[-1].ts_s - events[0].ts_s + 86400.0)

    @property
    def start_s(self) -> float:
        return self.events[0].ts_s

    def round_records(self, k: int) -> Iterator[Record]:
        """Round ``k``'s input records, in event-time order.

        >>> story = Story.build(7, 1, 1.7e9)
        >>> first, second = list(story.round_records(0)), list(story.round_records(1))
        >>> len(second) - len(first)  # 10 re-confirmations, 9 notices
        19
        >>> b'"event_id":"stable-0000-e1-r1"' in b"".join(v for _, v, _ in second)
        True
        >>> first[-1][2] < second[0][2]
        True
        """
        shift = k * self.span_s
        last = self.start_s + shift
        turns: dict[tuple[str, int], list[Turn]] = {}
        if k:
            rng = np.random.default_rng([self.seed, k])
            turns = {g: [bodies[i] for i in rng.permutation(len(bodies))]
                     for g, bodies in self.turns.items()}
            for user, scenario in sorted(self.scenario_of.items()):
                if scenario not in NOTHING_KEPT:
                    yield _record(FhrEvent(
                        f"{user}-r{k}-reconfirm", "baseline_reconfirmed", last - 60.0, user,
                        f"{user}-r{k}-review", False, BaselineReconfirmed(tuple(BaselineKind))))
        swap = k % 2 == 1
        for e, slot in zip(self.events, self.turn_slots, strict=True):
            body: Body = e.body
            if slot is not None and k:
                body = turns[slot[0], slot[1]][slot[2]]
            elif isinstance(body, MemoryErase) and k:
                body = replace(body, request_id=f"{body.request_id}-r{k}")
            elif swap and self.scenario_of[e.user_id] in SWAPPED:
                body = _swap_model(body)
            event = FhrEvent(_again(e.event_id, k), e.event_type, e.ts_s + shift, e.user_id,
                             _again(e.session_id, k), e.ephemeral, body)
            last = event.ts_s
            yield _record(event)
            if k and isinstance(body, SessionStart) and e.session_id in self.notice_sessions:
                yield _record(evolve(event, event_id=f"{event.event_id}-notice",
                                      event_type="model_change_notice_shown",
                                      body=NoticeShown(body.model)))
        for key, value in malformed(k):
            yield key, value, last


def _again(text: str, k: int) -> str:
    return f"{text}-r{k}" if k else text


def _record(e: FhrEvent) -> Record:
    return e.user_id.encode(), encode_event(e), e.ts_s


def _swap_model(body: Body) -> Body:
    if isinstance(body, SessionStart | NoticeShown) and body.model in (MODEL_A, MODEL_B):
        return replace(body, model=MODEL_B if body.model == MODEL_A else MODEL_A)
    return body


def _governance_erasures(events: list[FhrEvent]) -> list[FhrEvent]:
    """One relational erasure per governance user, after their traffic."""
    last: dict[str, FhrEvent] = {}
    for e in events:
        if e.user_id.startswith(Scenario.GOVERNANCE.value):
            last[e.user_id] = e
    return [FhrEvent(f"{e.event_id}-erase", "memory_erase", e.ts_s + 60.0, e.user_id,
                     e.session_id, False,
                     MemoryErase("relational", "all", "user_request", f"demo-erase-{e.user_id}"))
            for e in last.values()]


def malformed(k: int) -> list[tuple[bytes, bytes]]:
    """Records a producer gets wrong: not JSON, a turn numbered 0, a key that is not the user.

    >>> from streams.edge.codec import decode_event
    >>> [decode_event(key, value).reason for key, value in malformed(3)]
    ['invalid_json', 'out_of_range', 'key_mismatch']
    """
    n = _again("", k)
    where = '"ts":"2026-11-30T10:00:00+00:00","user_id":"demo-user","session_id":"demo-s"'
    return [
        (b"demo-user", b"{not json"),
        (b"demo-user", (f'{{"schema":"fhr/1","event_id":"demo-bad-1{n}","event_type":"turn",'
                        f'{where},"turn":0}}').encode()),
        (b"someone-else", (f'{{"schema":"fhr/1","event_id":"demo-bad-2{n}",'
                           f'"event_type":"session_end",{where},"turns":1,"reason":"closed"}}'
                           ).encode()),
    ]


class Traffic(threading.Thread):
    """Sends the story's rounds, one after another, at ``rate`` records per second, until
    :attr:`stopping` is set; then flushes, so that :attr:`delivered` is what the broker took."""

    def __init__(self, bootstrap: str, story: Story, rate: float) -> None:
        super().__init__(name="demo-traffic", daemon=True)
        self.bootstrap, self.story, self.rate = bootstrap, story, rate
        self.stopping = threading.Event()
        self.round = 0
        self.event_ts = story.start_s
        self.error: Exception | None = None
        self._sent = 0
        self._failed = 0
        self._lock = threading.Lock()

    @property
    def delivered(self) -> int:
        """Records sent and not refused (all of them, once :meth:`run` has flushed)."""
        with self._lock:
            return self._sent - self._failed

    def _refused(self, _: Exception) -> None:
        with self._lock:
            self._failed += 1

    def run(self) -> None:
        try:
            producer = kafka_producer(self.bootstrap)
        except Exception as exc:  # noqa: BLE001 - the demo shows it and stops
            self.error = exc
            return
        started = time.monotonic()
        try:
            k = 0
            while not self.stopping.is_set():
                self.round = k
                for key, value, ts in self.story.round_records(k):
                    if self.stopping.is_set():
                        break
                    producer.send(topics.INPUT, key=key, value=value).add_errback(self._refused)
                    with self._lock:
                        self._sent += 1
                        ahead = self._sent / self.rate - (time.monotonic() - started)
                    self.event_ts = ts
                    if ahead > 0.005:
                        self.stopping.wait(ahead)
                k += 1
            producer.flush()
        except Exception as exc:  # noqa: BLE001 - the demo shows it and stops
            self.error = exc
        finally:
            producer.close()
