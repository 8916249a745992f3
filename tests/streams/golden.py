"""A fixed event log and the engine harness that turns it into output messages.

The log covers every simulated scenario plus the governance paths the simulator
does not reach (duplicates, TTL expiry on both the event path and the timer, mode
downgrades, reconfirmation, an API erasure, idle sessions, malformed records).
The messages are what the worker would publish, byte for byte.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry

from baselines.store import BaselineStore
from drift.model import (
    BaselineKind,
    DriftConfig,
    FhrEvent,
    MemoryErase,
    MemoryWrite,
    Mode,
    ModeChanged,
    Tick,
)
from drift.simulation import Scenario, simulate
from streams.edge.codec import encode_event
from streams.edge.tick import TICK_KEY, encode_tick
from streams.metrics import build_metrics
from streams.processing.engine import Engine
from streams.processing.records import PendingBatch, Record
from tests.builders import UserScript

GOLDEN = Path(__file__).with_name("golden_outputs.jsonl")
START_S = 1.7e9
PARTITIONS = 4
BATCH = 37


def _governance_users() -> list[FhrEvent]:
    out: list[FhrEvent] = []
    # A user who returns after the full-mode TTL: expired on the event path.
    ttl = UserScript("golden-ttl", ts=START_S, seed=11)
    for i in range(3):
        ttl.session(f"ttl-{i}")
    ttl.ts += 100 * 86400.0
    ttl.session("ttl-back")
    out += ttl.events
    # Downgrades: full -> light at the next session, then light -> stateless at once.
    down = UserScript("golden-down", ts=START_S, seed=12)
    for i in range(3):
        down.session(f"down-{i}")
    down.emit("down-2", ModeChanged(Mode.FULL, Mode.LIGHT, "consent-2", False))
    down.session("down-light", mode=Mode.LIGHT)
    down.session("down-light-2", mode=Mode.LIGHT, end=False)
    down.emit("down-light-2", ModeChanged(Mode.LIGHT, Mode.STATELESS, "consent-3", True))
    down.emit("down-light-2", MemoryWrite(3, "relational", "topic", "t", "consent-3", True))
    out += down.events
    # A hold raised by a safety change, reconfirmed, and a relational erasure.
    held = UserScript("golden-held", ts=START_S, seed=13)
    for i in range(2):
        held.session(f"held-{i}")
    held.session("held-gate", gate="gate-2")
    held.session("held-next", gate="gate-2", end=False)
    held.reconfirm("held-next", BaselineKind.SAFETY, BaselineKind.ATTUNEMENT)
    held.emit("held-next", held.turn(13))
    held.ts += 86400.0
    held.session("held-after", gate="gate-2")
    held.erase("held-after", scope="topic", request_id="golden-req-topic")
    held.erase("held-after", scope="all", request_id="golden-req-all")
    held.erase("held-after", scope="all", request_id="golden-req-all")
    out += held.events
    # Sessions left open: closed as idle by a later event and by the timer.
    idle = UserScript("golden-idle", ts=START_S, seed=14)
    for i in range(3):
        idle.session(f"idle-{i}")
    idle.session("idle-open", end=False)
    idle.ts += 3600.0
    idle.session("idle-after", end=False)
    out += idle.events
    # A light-mode user, and an ephemeral session of a durable user.
    light = UserScript("golden-light", ts=START_S, seed=15)
    for i in range(4):
        light.session(f"light-{i}", mode=Mode.LIGHT)
    light.session("light-eph", ephemeral=True)
    light.emit("light-eph", MemoryErase("explicit", "all", "user_request", "golden-explicit"))
    out += light.events
    return out


@functools.cache
def _golden_events() -> tuple[FhrEvent, ...]:
    events: list[FhrEvent] = []
    for evs, _ in simulate(20261201, list(Scenario), 3, START_S):
        events.extend(evs)
    events.extend(_governance_users())
    events.sort(key=lambda e: e.ts_s)
    return tuple(events)


def golden_events() -> list[FhrEvent]:
    """Every event of the golden log, merged by event time (stable order)."""
    return list(_golden_events())


def golden_records() -> list[tuple[bytes | None, bytes | None]]:
    """The log as Kafka records, with every 7th event sent twice and bad records mixed in."""
    out: list[tuple[bytes | None, bytes | None]] = []
    for i, e in enumerate(golden_events()):
        record = (e.user_id.encode(), encode_event(e))
        out.append(record)
        if i % 7 == 3:
            out.append(record)
        if i == 500:
            out.append((b"golden-bad", b"{not json"))
            out.append((None, None))
            out.append((b"golden-bad", b'{"schema": "fhr/2", "event_id": "x"}'))
    return out


def partition_of(key: bytes | None) -> int:
    return zlib.crc32(key or b"") % PARTITIONS


class FixedClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def tick_records(engine: Engine) -> list[Record]:
    """A tick record at the end of every owned partition at its quiet time, as the worker
    writes them."""
    return [Record(p, engine.next_offsets[p], TICK_KEY,
                   encode_tick(Tick(engine.app_id, engine.quiet_time(p))), int(START_S * 1000))
            for p in sorted(engine.partitions)]


def run_engine(data_dir: Path) -> Iterator[tuple[str, bytes, bytes]]:
    """Feed the golden records through an engine on a real DuckDB file; yield its messages."""
    store = BaselineStore(data_dir / "continuity.duckdb")
    clock = FixedClock(START_S)
    engine = Engine(store, DriftConfig(), build_metrics(CollectorRegistry()), clock=clock)
    engine.assign(range(PARTITIONS))
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    records: list[Record] = []
    for key, value in golden_records():
        p = partition_of(key)
        records.append(Record(p, offsets[p], key, value, int(START_S * 1000)))
        offsets[p] += 1

    def settle(batch: PendingBatch) -> Iterator[tuple[str, bytes, bytes]]:
        for m in batch.messages:
            yield m.topic, m.key, m.value
        store.commit_batch(engine.take_checkpoint())
        if batch.erased:
            store.compact()

    try:
        for i in range(0, len(records), BATCH):
            yield from settle(engine.process(records[i:i + BATCH]))
            if i // BATCH == 40:
                batch, _ = engine.erase_user("stable-0001", "golden-api-erase")
                yield from settle(batch)
        # Quiet for 400 days: a tick in each partition closes idle sessions and expires
        # unused baselines.
        clock.now = START_S + 400 * 86400.0
        yield from settle(engine.process(tick_records(engine)))
    finally:
        store.close()
