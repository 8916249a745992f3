"""What a soak run must find on the output topics: every output the pure replay publishes for
the offered records (id, topic, cause, user and a digest of its exact bytes), and those a
timer may add after a user's last event."""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.harness import log
from bench.kafka_io import partition_of
from streams import topics


def digest(value: bytes) -> bytes:
    return hashlib.blake2b(value, digest_size=12).digest()


def scenario_of(user_id: str | None) -> str:
    """The simulator names users ``<scenario>-<nnnn>``."""
    if not user_id:
        return "?"
    return user_id.rsplit("-", 1)[0]


@dataclass
class Expected:
    outputs: dict[str, tuple[str, str | None, str, bytes]]  # id -> (topic, cause, user, digest)
    by_topic: Counter[str]
    events: int
    rejected: int
    replay: Any  # the MemoryReplay at the end of the stream
    partition_last_ts: dict[int, float]
    user_partition: dict[str, int]
    seconds: float


def _cause(out: Any) -> str | None:
    for name in ("source_event_id", "cause_event_id", "event_id"):
        value = getattr(out, name, None)
        if value:
            return str(value)
    return None


def compute_expected(records: Sequence[tuple[bytes, bytes, str]], partitions: int
                     ) -> Expected:
    """Every output of the pure replay of ``records``, decoded as the worker decodes them."""
    from drift.model import DriftConfig, FhrEvent
    from drift.replay import MemoryReplay
    from streams.edge.codec import decode_event
    from streams.edge.wire import encode

    started = time.monotonic()
    replay = MemoryReplay(DriftConfig())
    outputs: dict[str, tuple[str, str | None, str, bytes]] = {}
    by_topic: Counter[str] = Counter()
    rejected = 0
    last_ts: dict[int, float] = {}
    user_partition: dict[str, int] = {}
    total = len(records)
    step = max(50_000, total // 10)
    for i, (key, value, _) in enumerate(records):
        event = decode_event(key, value)
        if not isinstance(event, FhrEvent):
            rejected += 1
            continue
        p = user_partition.get(event.user_id)
        if p is None:
            p = user_partition[event.user_id] = partition_of(key, partitions)
        if event.ts_s > last_ts.get(p, 0.0):
            last_ts[p] = event.ts_s
        for out in replay.feed(event):
            topic = topics.OUTPUT_TOPICS[out.kind]
            if out.id in outputs:  # an id the replay repeats: keep the first, say so
                by_topic["(repeated id in the replay)"] += 1
                continue
            outputs[out.id] = (topic, _cause(out), out.user_id, digest(encode(out)))
            by_topic[topic] += 1
        if (i + 1) % step == 0:
            log(f"  replay: {i + 1:,} / {total:,} events, {len(outputs):,} outputs "
                f"({time.monotonic() - started:.0f}s)")
    return Expected(outputs, by_topic, total - rejected, rejected, replay, last_ts,
                    user_partition, time.monotonic() - started)


def timer_outputs(expected: Expected, wall_s: float) -> dict[str, tuple[str, str | None, str]]:
    """What a worker's timer may add after the stream: idle closes and expiries due by each
    partition's last event time plus ``wall_s`` (an upper bound of the wall time since)."""
    from drift.baseline import UserBaselines
    from drift.fold import sweep

    replay = expected.replay
    out: dict[str, tuple[str, str | None, str]] = {}
    for user_id, state in replay.states.items():
        p = expected.user_partition.get(user_id, 0)
        now_s = expected.partition_last_ts.get(p, 0.0) + wall_s
        result = sweep(state, replay.baselines.get(user_id, UserBaselines()), now_s,
                       replay.config)
        for o in result.effects.outputs:
            out[o.id] = (topics.OUTPUT_TOPICS[o.kind], _cause(o), o.user_id)
    return out
