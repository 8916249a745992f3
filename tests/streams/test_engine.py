"""The engine in process: real DuckDB file, a fresh registry, the golden event log."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from baselines.store import BaselineStore
from drift.model import DriftConfig, Tick
from streams import topics
from streams.edge.codec import encode_event
from streams.edge.tick import TICK_KEY, encode_tick
from streams.metrics import build_metrics
from streams.processing.engine import Engine
from streams.processing.records import PendingBatch, Record
from tests.builders import UserScript
from tests.streams.golden import (
    PARTITIONS,
    START_S,
    FixedClock,
    golden_events,
    golden_records,
    partition_of,
    tick_records,
)


class Harness:
    def __init__(self, path: Path) -> None:
        self.registry = CollectorRegistry()
        self.store = BaselineStore(path)
        self.clock = FixedClock(START_S)
        self.engine = Engine(self.store, DriftConfig(), build_metrics(self.registry),
                             clock=self.clock)
        self.engine.assign(range(PARTITIONS))
        self.messages: list[tuple[str, dict]] = []

    def settle(self, batch: PendingBatch) -> None:
        self.messages.extend((m.topic, json.loads(m.value)) for m in batch.messages)
        self.store.commit_batch(self.engine.take_checkpoint())
        if batch.erased:
            self.store.compact()

    def feed(self, records: list[tuple[bytes | None, bytes | None]], size: int = 50,
             stop_before_erasure: bool = False) -> int:
        """Process ``records`` in batches of ``size``; with ``stop_before_erasure``, as the
        worker does while a checkpoint is in flight (stop before a record that may erase,
        settle, go on with the rest). Returns how many times a batch stopped."""
        offsets = dict(self.engine.next_offsets)
        rs = []
        for key, value in records:
            p = partition_of(key)
            rs.append(Record(p, offsets[p], key, value, int(START_S * 1000)))
            offsets[p] += 1
        stops = 0
        for i in range(0, len(rs), size):
            chunk = rs[i:i + size]
            batch = self.engine.process(chunk, stop_before_erasure=stop_before_erasure)
            self.settle(batch)
            if batch.stopped_at is not None:
                stops += 1
                self.settle(self.engine.process(chunk[batch.stopped_at:]))
        return stops

    def sample(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


@pytest.fixture
def harness(tmp_path: Path):
    h = Harness(tmp_path / "continuity.duckdb")
    yield h
    h.store.close()


def test_metrics_count_exactly_what_was_published(harness: Harness) -> None:
    harness.feed(golden_records())
    by = Counter()
    for topic, p in harness.messages:
        label = (p.get("score_kind") if topic == topics.SCORES else p.get("action") or
                 p.get("rule") or p.get("kind") or p.get("reason"))
        by[(topic, label)] += 1
    drift_scores = [p for t, p in harness.messages if p.get("score_kind") == "continuity_drift"]
    for tier in ("low", "medium", "high"):
        assert harness.sample("continuity_scores_total", tier=tier) == sum(
            p["tier"] == tier for p in drift_scores)
    assert harness.sample("continuity_drift_score_count") == len(drift_scores)
    assert harness.sample("continuity_drift_score_sum") == pytest.approx(
        sum(p["continuity_drift_score"] for p in drift_scores))
    for (topic, label), n in by.items():
        if topic == topics.RESPONSES:
            assert harness.sample("continuity_responses_total", action=label) == n
        elif topic == topics.VIOLATIONS:
            assert harness.sample("continuity_governance_violations_total", rule=label) == n
        elif topic == topics.ESCALATIONS:
            assert harness.sample("continuity_escalations_total", kind=label) == n
        elif topic == topics.DEADLETTER:
            assert harness.sample("continuity_rejections_total", reason=label) == n
    for topic in topics.OUTPUT_TOPICS.values():
        assert harness.sample("continuity_outputs_total", topic=topic) == sum(
            t == topic for t, _ in harness.messages)
    accepted = sum(harness.sample("continuity_events_total", event_type=t) for t in
                   {e.event_type for e in golden_events()})
    assert accepted == len(golden_records()) - 3


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for metric in registry.collect() for s in metric.samples
            if not s.name.startswith("continuity_batch_size") and not s.name.endswith("_created")}


def test_metrics_move_once_per_batch_to_what_each_record_alone_gives(tmp_path: Path) -> None:
    """Counters and histograms are moved at a batch's end: the golden log in batches of 50
    exports the samples of the same log one record per batch (the batch-size histogram
    aside, which tells the batches apart by design; sums up to the order of addition)."""
    exported = []
    for size in (1, 50):
        h = Harness(tmp_path / f"{size}.duckdb")
        records = [Record(partition_of(key), i, key, value, int(START_S * 1000))
                   for i, (key, value) in enumerate(golden_records())]
        for i in range(0, len(records), size):
            h.engine.process(records[i:i + size])
        exported.append(_samples(h.registry))
        h.store.close()
    one, fifty = exported
    assert fifty == pytest.approx(one, rel=1e-12)
    assert one[("continuity_drift_score_count", ())] > 0


def test_only_durable_users_are_stored_with_their_sessions(harness: Harness) -> None:
    harness.feed(golden_records())
    states = harness.store.load_states(range(PARTITIONS))
    users = {e.user_id for e in golden_events()}
    assert not any(u.startswith(("stateless-", "ephemeral-")) for u in states)
    assert {u for u in users if u.startswith("stable-")} <= set(states)
    for user_id, state in states.items():
        assert state == harness.engine.memory.states[user_id]
    summary = harness.store.session("stable-0000", "stable-0000-s3")
    assert summary is not None and summary.turns == 12 and summary.scores >= 1
    assert summary.ended_s is not None and summary.ended_s >= summary.started_s
    assert harness.store.session("ephemeral-0000", "ephemeral-0000-s0") is None


def test_an_open_session_is_shown_from_memory_and_stored_when_it_ends(harness: Harness) -> None:
    records = golden_records()
    harness.feed(records)
    shown = harness.engine.open_session("golden-idle", "idle-after")
    assert shown is not None and shown.ended_s is None and shown.turns == 12
    assert harness.store.session("golden-idle", "idle-after") is None
    harness.clock.now = START_S + 400 * 86400.0
    harness.settle(harness.engine.process(tick_records(harness.engine)))
    stored = harness.store.session("golden-idle", "idle-after")
    assert stored is not None and stored.ended_s == shown.started_s + 12 * 10.0 + 1800.0
    assert harness.engine.open_session("golden-idle", "idle-after") is None


def test_an_operator_erase_of_an_unknown_user_has_the_same_shape_and_keeps_nothing(
        harness: Harness) -> None:
    harness.feed(golden_records())
    known_batch, known = harness.engine.erase_user("stable-0002", "req-known")
    harness.settle(known_batch)
    unknown_batch, unknown = harness.engine.erase_user("nobody-at-all", "req-unknown")
    harness.settle(unknown_batch)
    assert known.outcome.value == unknown.outcome.value == "verified"
    assert {t.kind.value for t in known.targets} == {"attunement", "semantic", "safety"}
    assert all(t.versions == 0 for t in unknown.targets)
    assert "nobody-at-all" not in harness.engine.memory.states
    assert "nobody-at-all" not in harness.engine.memory.baselines
    assert harness.store.count_user_rows("stable-0002")["baseline_versions"] == 0
    again_batch, again = harness.engine.erase_user("stable-0002", "req-known")
    assert again == known
    assert [m.value for m in again_batch.messages] == [known_batch.messages[0].value]


def test_a_replayed_batch_is_skipped_by_its_stored_offsets(harness: Harness, tmp_path: Path
                                                           ) -> None:
    records = golden_records()[:1500]
    harness.feed(records)
    published = len(harness.messages)
    harness.store.close()
    again = Harness(tmp_path / "continuity.duckdb")
    try:
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        rs = []
        for key, value in records:
            p = partition_of(key)
            rs.append(Record(p, offsets[p], key, value, int(START_S * 1000)))
            offsets[p] += 1
        again.settle(again.engine.process(rs))
        assert again.messages == [] and published > 0
        assert again.engine.memory.states == {u: s for u, s in harness.engine.memory.states.items()
                                       if s.persistable}
    finally:
        again.store.close()
    harness.store = BaselineStore(tmp_path / "continuity.duckdb")


def test_a_tick_tells_in_advance_whether_it_will_erase(harness: Harness) -> None:
    """The worker lets the checkpoint in flight land before a tick that erases: the engine
    stops before such a tick whenever the tick does erase, and only then."""
    harness.feed(golden_records())
    rounds = []
    for now in (START_S, START_S + 400 * 86400.0, START_S + 401 * 86400.0):
        harness.clock.now = now
        ticks = tick_records(harness.engine)
        before = harness.engine.process(ticks, stop_before_erasure=True)
        assert not before.erased  # nothing before the stop erases
        harness.settle(before)
        at = before.stopped_at
        batch = harness.engine.process(ticks[at:] if at is not None else [])
        rounds.append((at is not None, bool(batch.erased)))
        harness.settle(batch)
    assert all(predicted == erased for predicted, erased in rounds), rounds
    assert rounds[1] == (True, True) and rounds[2] == (False, False)


def test_a_tick_is_a_record_the_quiet_partition_times_and_others_ignore(
        harness: Harness) -> None:
    harness.feed(golden_records())
    assert harness.engine.ticks_due(quiet_after_s=1.0, lateness_s=1e9) == {}  # no wall time has passed
    harness.clock.now = START_S + 400 * 86400.0
    due = harness.engine.ticks_due(quiet_after_s=1.0, lateness_s=1e9)
    assert due and all(ts == harness.engine.quiet_time(p) and quiet
                       for p, (ts, quiet) in due.items())
    foreign = [Record(r.partition, r.offset, r.key,
                      encode_tick(Tick("another-deployment", 4e9)), r.timestamp)
               for r in tick_records(harness.engine)]
    states = dict(harness.engine.memory.states)
    batch = harness.engine.process(foreign)
    assert batch.messages == [] and harness.engine.memory.states == states


def test_stopping_before_each_erasure_changes_nothing_but_where_batches_end(
        tmp_path: Path) -> None:
    plain = Harness(tmp_path / "plain.duckdb")
    plain.feed(golden_records())
    stopping = Harness(tmp_path / "stopping.duckdb")
    stops = stopping.feed(golden_records(), stop_before_erasure=True)
    assert stops > 0 and any(t == topics.RECEIPTS for t, _ in plain.messages)
    assert stopping.messages == plain.messages


def test_a_busy_partition_ticks_a_left_session_closed_at_its_event_time_less_lateness(
        harness: Harness) -> None:
    """A user leaves a session open while another keeps the partition busy: the tick is
    due once the partition's event time is past the idle close by the lateness, and its
    read-back closes the session as idle."""
    names = [f"busy-{i}" for i in range(40)]
    left, busy = [n for n in names if partition_of(n.encode()) == 0][:2]
    gone = UserScript(left, ts=START_S, seed=1)
    gone.session("left", turns=7, end=False)
    lateness = 3600.0
    harness.feed([(e.user_id.encode(), encode_event(e)) for e in gone.events])
    assert harness.engine.ticks_due(quiet_after_s=1e9, lateness_s=lateness) == {}
    other = UserScript(busy, ts=gone.ts + 1800.0 + lateness + 60.0, seed=2)
    other.session("busy", turns=3)
    harness.feed([(e.user_id.encode(), encode_event(e)) for e in other.events])
    due = harness.engine.ticks_due(quiet_after_s=1e9, lateness_s=lateness)
    assert 0 in due and due[0][1] is False
    ts = due[0][0]
    assert ts == harness.engine.watermarks[0] - lateness
    tick = Record(0, harness.engine.next_offsets[0], TICK_KEY,
                  encode_tick(Tick(harness.engine.app_id, ts)), int(START_S * 1000))
    last = gone.events[-1].ts_s
    harness.engine.process([tick])
    assert harness.engine.memory.states[left].session is None
    ended = [s.ended_s for _, s in harness.engine.memory.pending.sessions if s.user_id == left]
    assert ended == [last + DriftConfig().idle_timeout_s]
    assert harness.engine.ticks_due(quiet_after_s=1e9, lateness_s=lateness) == {}


def test_a_checkpoint_strips_the_users_idle_since_the_one_before_and_keeps_the_active(
        harness: Harness) -> None:
    """A user the last checkpoint staged and this one does not lets go of the dedupe ring
    (the columns hold it); a user this one staged keeps it until a checkpoint finds them
    idle; either way the state read back is the stored one."""
    records = golden_records()
    head, tail = records[:-60], records[-60:]
    harness.feed(head)
    memory = harness.engine.memory
    early = set(memory.last_taken)
    harness.feed(tail, size=len(tail))
    late = set(memory.last_taken)
    idle, active = early - late, late - early
    assert idle and active, "the golden log's tail moves some users and not others"
    shell_of = memory.columns.shell_of

    def ring(user_id: str) -> bytes:
        shell = shell_of(user_id)
        assert shell is not None
        return shell.recent.ring

    assert all(ring(u) == b"" for u in idle)
    assert all(ring(u) != b"" for u in active)
    harness.settle(PendingBatch())  # a checkpoint with nobody active since: all idle now
    assert memory.last_taken == set() and all(ring(u) == b"" for u in active)
    stored = harness.store.load_states(range(PARTITIONS))
    for user_id in idle | active:
        assert memory.states[user_id] == stored[user_id]
