"""What a restore accepts from a changelog generation, record by record (no broker needed;
the handover on a real broker is in ``tests/e2e/test_scale.py``)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import msgspec
import pyarrow as pa
import pytest
from aiokafka.errors import KafkaConnectionError
from prometheus_client import CollectorRegistry

from baselines.rows import Rows
from streams.kafka.changelog import (
    CHUNK_BYTES,
    Changelog,
    Entry,
    Kind,
    _Generation,
    _Reader,
    _records,
    decode_entry,
)
from streams.kafka.producers import Message
from streams.metrics import build_metrics


def _rows(*users: str) -> Rows:
    return Rows({"user_state": pa.table({
        "partition": pa.array([0] * len(users), pa.int32()),
        "user_id": pa.array(list(users), pa.string()),
        # incompressible, as a delta's bytes are once compressed: several records' worth
        "state": pa.array([random.Random(u).randbytes(200_000) for u in users], pa.binary()),
        "clock": pa.array([1.0] * len(users), pa.float64())})}, ())


def _parts(kind: Kind, epoch: str, seq: int, rows: Rows) -> list[Entry]:
    return [decode_entry(r) for r in _records(kind, epoch, seq, rows.encode())]


def _read(entries: list[Entry], marker: str = "mine") -> _Reader:
    reader = _Reader()
    for e in [*entries, Entry(Kind.MARKER, marker)]:
        reader.take(decode_entry(msgspec.msgpack.encode(e)))
        if reader.done(marker):
            break
    return reader


def test_snapshot_and_deltas_of_the_current_owner_are_read_in_order() -> None:
    snapshot = _parts(Kind.SNAPSHOT, "e1", 0, _rows("a", "b"))
    assert len(snapshot) > 1, "the snapshot must span several records"
    reader = _read([*snapshot, Entry(Kind.SEAL, "e1"), *_parts(Kind.DELTA, "e1", 1, _rows("a")),
                    *_parts(Kind.DELTA, "e1", 2, _rows("c"))])
    assert reader.snapshot is not None and reader.snapshot.users() == {"a", "b"}
    assert [d.users() for d in reader.deltas] == [{"a"}, {"c"}]
    assert reader.seq == 2


def test_a_worker_that_lost_the_partition_cannot_interleave_its_deltas() -> None:
    reader = _read([*_parts(Kind.SNAPSHOT, "e1", 0, _rows("a")), Entry(Kind.SEAL, "e1"),
                    *_parts(Kind.DELTA, "e1", 1, _rows("a")),
                    Entry(Kind.MARKER, "e2"),                       # a new owner restored
                    *_parts(Kind.DELTA, "e1", 2, _rows("zombie")),  # the old one, too late
                    *_parts(Kind.DELTA, "e2", 1, _rows("b"))])
    assert [d.users() for d in reader.deltas] == [{"a"}, {"b"}]


def test_a_delta_cut_short_by_a_crash_is_not_applied() -> None:
    torn = _parts(Kind.DELTA, "e1", 2, _rows("x", "y"))
    assert len(torn) > 1
    reader = _read([*_parts(Kind.SNAPSHOT, "e1", 0, _rows("a")), Entry(Kind.SEAL, "e1"),
                    *torn[:-1], Entry(Kind.MARKER, "e2"), *_parts(Kind.DELTA, "e2", 1, _rows("b"))])
    assert [d.users() for d in reader.deltas] == [{"b"}]


def test_a_generation_whose_snapshot_never_finished_has_no_snapshot() -> None:
    snapshot = _parts(Kind.SNAPSHOT, "e1", 0, _rows("a", "b"))
    assert _read(snapshot[:-1]).snapshot is None
    assert _read([*snapshot[:-1], Entry(Kind.SEAL, "e1")]).snapshot is None
    assert _read(snapshot).snapshot is None, "no seal, no snapshot"


def test_records_stay_under_the_chunk_size_and_hold_the_data_in_order() -> None:
    data = _rows("a", "b", "c").encode()
    parts = [decode_entry(r) for r in _records(Kind.DELTA, "e1", 4, data)]
    assert len(parts) > 1 and all(len(p.data) <= CHUNK_BYTES for p in parts)
    assert [(p.kind, p.epoch, p.seq, p.part, p.parts) for p in parts] == [
        (Kind.DELTA, "e1", 4, i, len(parts)) for i in range(len(parts))]
    assert b"".join(p.data for p in parts) == data
    assert [decode_entry(r) for r in _records(Kind.SNAPSHOT, "e1", 0, b"")] == [
        Entry(Kind.SNAPSHOT, "e1", 0, 0, 1, b"")]
    exact = b"x" * (2 * CHUNK_BYTES)  # a multiple of the chunk: no empty part after it
    assert [len(decode_entry(r).data) for r in _records(Kind.DELTA, "e1", 1, exact)] == [
        CHUNK_BYTES, CHUNK_BYTES]


def test_a_checkpoint_whose_delta_fails_on_one_partition_waits_for_the_others() -> None:
    """The partitions' deltas go side by side; when one fails, the failure is raised (and
    the checkpoint retried) only once every other partition's send has ended, so a retry
    never writes a delta while the failed attempt still writes one to the same topic."""
    ended: list[str] = []

    class Sends:
        async def send_all(self, messages: Sequence[Message]) -> asyncio.Future[list[Any]]:
            topic = messages[0][0]
            done: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
            if topic.endswith(".0.1"):  # refused at once
                done.set_result([KafkaConnectionError()] * len(messages))
            else:  # handed over slowly (a producer whose buffer is full): a few turns
                for _ in range(3):  # of the loop, after the other partition's refusal
                    await asyncio.sleep(0)
                ended.append(topic)
                done.set_result([None] * len(messages))
            return done

        async def close(self) -> None:
            pass

    changelog = Changelog("unused:9092", "app", Sends(), "fhr.events",
                          build_metrics(CollectorRegistry()))
    changelog.generations = {p: _Generation(changelog.topic(p, 1), 1, "e", 0, 0)
                             for p in (0, 1)}

    async def append() -> None:
        with pytest.raises(KafkaConnectionError):
            await changelog.append({0: b"a" * 10, 1: b"b" * 10})
        assert ended == [changelog.topic(1, 1)], "raised before the other partition ended"

    asyncio.run(append())
