"""A crash at any batch loses and changes no output: the engine on a real DuckDB file.

The worker's shell in miniature: batches of the golden log (duplicates, bad records,
memory-only users of every kind, downgrades, erasures, tick records), a checkpoint every
few batches and at once after an erasure, and crashes that drop everything since the last
checkpoint. A restarted engine reads each partition again from
:meth:`~streams.processing.engine.Engine.fetch_from`. Every message published, deduplicated by id,
must be exactly what one run without crashes publishes: ids and bytes.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from baselines.store import BaselineStore
from drift.model import DriftConfig, Tick
from streams.edge.codec import decode_record, encode_event
from streams.edge.tick import TICK_KEY, encode_tick
from streams.metrics import build_metrics
from streams.processing.engine import Engine
from streams.processing.records import Record
from tests.builders import memory_only_users
from tests.conftest import PROFILE
from tests.streams.golden import PARTITIONS, START_S, FixedClock, golden_records, partition_of

#: A tick every so many records of a partition, this long after its newest event.
TICK_EVERY, TICK_AFTER_S = 400, 2 * 3600.0


def _interleaved() -> list[tuple[bytes | None, bytes | None]]:
    """The golden records with the memory-only users' events spread among them in order,
    so that their sessions span many batches and checkpoints."""
    golden = golden_records()
    extra = [(e.user_id.encode(), encode_event(e)) for e in memory_only_users()]
    rng = random.Random(7)
    places = sorted(rng.sample(range(len(golden) + len(extra)), len(extra)))
    out, g, x = [], iter(golden), iter(extra)
    wanted = set(places)
    for i in range(len(golden) + len(extra)):
        out.append(next(x) if i in wanted else next(g))
    return out


def _log() -> list[Record]:
    """The records with their offsets, and a tick record now and then in each partition
    (at its newest event time plus two hours: idle sessions close in the log)."""
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    newest = dict.fromkeys(range(PARTITIONS), START_S)
    out: list[Record] = []

    def add(p: int, key: bytes | None, value: bytes | None) -> None:
        out.append(Record(p, offsets[p], key, value, int(START_S * 1000)))
        offsets[p] += 1

    for key, value in _interleaved():
        p = partition_of(key)
        add(p, key, value)
        event = decode_record(key, value) if value is not None else None
        ts = getattr(event, "ts_s", None)
        if isinstance(ts, float):
            newest[p] = max(newest[p], ts)
        if offsets[p] % TICK_EVERY == 0:
            add(p, TICK_KEY, encode_tick(Tick("continuity-drift", newest[p] + TICK_AFTER_S)))
    return out


class Run:
    """One engine over one DuckDB file, restarted after each crash."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.published: dict[str, bytes] = {}
        self.store: BaselineStore | None = None
        self.engine = self._start()

    def _start(self) -> Engine:
        if self.store is not None:
            self.store.close()
        self.store = BaselineStore(self.path)
        engine = Engine(self.store, DriftConfig(), build_metrics(CollectorRegistry()),
                        clock=FixedClock(START_S))
        engine.assign(range(PARTITIONS))
        return engine

    def checkpoint(self) -> None:
        assert self.store is not None
        self.store.commit_batch(self.engine.take_checkpoint())

    def feed(self, log: list[Record], rng: random.Random, crashes: int, moves: bool = False
             ) -> None:
        """The log in batches, checkpointed every few, crashing ``crashes`` times at
        random batches. After a crash every partition is read again from where the
        restarted engine says, except that, as a consumer may, the first batch sometimes
        comes from the stored next offset (the group's) before the seek takes; the
        engine then asks to rewind.

        With ``moves``, a crash is a rebalance instead: the same engine checkpoints, lets
        every partition go and takes them back, and the first batch always comes from the
        group's offset; half the time the partitions move again right after that batch,
        before the replay has read a record (an owner that gets them back at once)."""
        position = dict.fromkeys(range(PARTITIONS), 0)
        batches = 0
        crash_at = sorted(rng.sample(range(1, 3 * len(log) // 40), crashes)) if crashes else []
        every = rng.randint(1, 5)
        while True:
            size = rng.randint(7, 60)
            chunk = [r for r in log if r.offset >= position[r.partition]][:size]
            if not chunk:
                break
            batch = self.engine.process(chunk)
            for r in chunk:
                position[r.partition] = max(position[r.partition], r.offset + 1)
            position.update(batch.rewind)
            for m in batch.messages:
                first = self.published.setdefault(json.loads(m.value)["id"], m.value)
                assert first == m.value, "two payloads under one id"
            batches += 1
            if batch.erased or batches % every == 0:
                self.checkpoint()
            if moves and batch.rewind and rng.random() < 0.5:
                crash_at.insert(0, batches)
            if crash_at and batches == crash_at[0]:
                crash_at.pop(0)
                if moves:
                    self.checkpoint()
                    self.engine.revoke(range(PARTITIONS))
                    self.engine.assign(range(PARTITIONS))
                else:
                    self.engine = self._start()
                stale = moves or rng.random() < 0.5
                position = {p: self.engine.next_offsets[p] if stale
                            else self.engine.fetch_from(p) for p in range(PARTITIONS)}
        self.checkpoint()
        assert self.store is not None
        self.store.close()


def test_the_log_has_outputs_that_only_memory_can_give(tmp_path: Path) -> None:
    """Violations of memory-only sessions and scores of an ephemeral one are published:
    a restart that did not rebuild them would lose some."""
    log = _log()
    assert sum(r.key == TICK_KEY for r in log) >= 8
    run = Run(tmp_path / "clean.duckdb")
    run.feed(log, random.Random(0), crashes=0)
    kinds = Counter((json.loads(v)["user_id"].rsplit("-", 1)[0], json.loads(v).get(
        "rule") or json.loads(v).get("score_kind")) for v in run.published.values()
        if json.loads(v).get("user_id", "").startswith("mem-"))
    assert kinds[("mem-stateless", "relational_write_mode_forbidden")] >= 30, kinds
    assert kinds[("mem-durable", "continuity_drift")] >= 6, kinds
    assert kinds[("mem-retro", "relational_write_mode_forbidden")] >= 10, kinds


# Three seeds by default, twelve with HYPOTHESIS_PROFILE=full (docs/testing.md).
@pytest.mark.parametrize("seed", range(12 if PROFILE == "full" else 3))
@pytest.mark.parametrize("moves", [False, True], ids=["crashes", "moves"])
def test_crashes_at_random_batches_publish_exactly_what_one_run_without_does(
        tmp_path: Path, seed: int, moves: bool) -> None:
    """Crashes (a new engine on the file), or partitions moved away and back to the same
    engine, with the first batch after each from the group's offset."""
    log = _log()
    clean = Run(tmp_path / "clean.duckdb")
    clean.feed(log, random.Random(seed), crashes=0)
    crashed = Run(tmp_path / "crashed.duckdb")
    crashed.feed(log, random.Random(seed), crashes=10, moves=moves)
    missing = sorted(set(clean.published) - set(crashed.published))
    extra = sorted(set(crashed.published) - set(clean.published))
    differ = sorted(i for i in set(clean.published) & set(crashed.published)
                    if clean.published[i] != crashed.published[i])
    assert not (missing or extra or differ), (
        f"seed {seed}: {len(missing)} missing, {len(extra)} extra, {len(differ)} different of "
        f"{len(clean.published)}; e.g. missing {[clean.published[i] for i in missing[:2]]}, "
        f"extra {[crashed.published[i] for i in extra[:2]]}")


def test_a_restart_after_any_record_of_a_durable_user_changes_nothing(tmp_path: Path) -> None:
    """A durable user whose ephemeral session's start closes a durable session left open
    (that close folds a new baseline version), then more sessions: a checkpoint and a
    restart after every record publish exactly what one run without restarts does."""
    events = [e for e in memory_only_users() if e.user_id == "mem-durable-1"]
    assert any(e.event_type == "session_start" and e.ephemeral for e in events)
    log = [Record(0, i, e.user_id.encode(), encode_event(e), int(START_S * 1000))
           for i, e in enumerate(events)]
    runs = {}
    for name, restart in (("clean", False), ("restarted", True)):
        run = Run(tmp_path / f"{name}.duckdb")
        for record in log:
            for m in run.engine.process([record]).messages:
                run.published.setdefault(json.loads(m.value)["id"], m.value)
            if restart:
                run.checkpoint()
                run.engine = run._start()
                assert run.engine.fetch_from(0) <= record.offset + 1
                for again in log[run.engine.fetch_from(0):record.offset + 1]:
                    assert not run.engine.process([again]).messages
        runs[name] = run.published
    assert any(json.loads(v)["session_id"] == "d-back" for v in runs["clean"].values())
    assert runs["restarted"] == runs["clean"]


def test_a_record_past_the_replay_is_processed_never_replayed(tmp_path: Path) -> None:
    """A restore whose replay starts below the next offset, and the consumer's first batch
    from the next offset twice (the second time the engine takes the jump for a gap in the
    log): the record at the next offset is past what the checkpoint covered, so it is
    processed and its outputs published, not applied silently as part of the replay."""
    log = _log()
    clean, run = Run(tmp_path / "clean.duckdb"), Run(tmp_path / "restored.duckdb")
    clean.engine.process(log[:1])
    for record, nxt in pairwise(log):
        run.engine.process([record])
        expected = {json.loads(m.value)["id"] for m in clean.engine.process([nxt]).messages}
        if not expected or nxt.key is None or nxt.key.startswith(b"mem-"):
            continue  # a restore before a durable user's record with outputs
        run.checkpoint()
        run.engine = run._start()
        p = nxt.partition
        if run.engine.fetch_from(p) < nxt.offset:
            break
    else:
        raise AssertionError("no restore with a replay before a durable user's output")
    rest = [r for r in log if r.partition == p and r.offset >= nxt.offset]
    stale = run.engine.process(rest)
    assert stale.rewind == {p: run.engine.fetch_from(p)} and not stale.messages
    again = run.engine.process(rest)
    assert expected <= {json.loads(m.value)["id"] for m in again.messages}
    assert run.engine.next_offsets[p] == rest[-1].offset + 1
