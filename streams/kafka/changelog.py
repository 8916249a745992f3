"""The changelog: each input partition's state on Kafka, so it follows its partition.

For every partition of ``fhr.events`` the worker keeps one log of the rows it
checkpoints (:class:`baselines.rows.Rows`): a *generation* is a one-partition
topic ``<app_id>.changelog.<partition>.<generation>`` that starts with a snapshot
of the partition's rows, sealed, followed by the delta of every checkpoint
since. A new owner restores by writing a marker of its own into the newest
sealed generation and reading up to that marker (never to the end offsets the
broker reports), then replaces the partition's rows in its DuckDB with the
snapshot and the deltas, in one transaction.

Forgetting and bounded restores both come from rolling to a new generation: a
snapshot of the live rows goes to a fresh topic, and the old topic is deleted
once the new one is sealed. The embedded broker does neither compaction nor
DeleteRecords, and deleting a topic is the one way to take a record out of Kafka
that both it and Apache Kafka support. A partition rolls

* after an erasure on it (then the delta of that checkpoint is not written: the
  snapshot taken after DuckDB's commit carries it, erasure included), so no
  feature value of an erased baseline can be read back from the changelog, and
* when its deltas have grown past ``ROLL_FACTOR`` times its snapshot, so a
  restore reads at most a few times the partition's live state.

Every record carries the *epoch* of the owner that wrote it (a fresh id at each
assignment). The snapshot's seal and each restore's marker start an epoch;
records of any other epoch after it (a worker that lost the partition but did
not know yet) are ignored, so a zombie cannot interleave its deltas with the
new owner's.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from dataclasses import dataclass
from enum import IntEnum

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

from baselines.rows import Rows
from baselines.store import BaselineStore
from streams.kafka.producers import Sends
from streams.metrics import Metrics

log = logging.getLogger("continuity_drift.changelog")

#: Records stay under Kafka's default message size limit (1 MB).
CHUNK_BYTES = 256 * 1024
#: Roll when the deltas of a generation pass this many times its snapshot ...
ROLL_FACTOR = 2.0
#: ... and this many bytes (small partitions do not roll every checkpoint).
ROLL_MIN_BYTES = 4 * 1024 * 1024
#: How long a restore waits without progress for the marker it wrote.
RESTORE_STALL_S = 60.0

_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}


class Kind(IntEnum):
    SNAPSHOT = 1
    SEAL = 2
    MARKER = 3
    DELTA = 4


class Entry(msgspec.Struct, frozen=True, array_like=True):
    """One changelog record: part ``part`` of ``parts`` of a snapshot or delta ``seq``."""

    kind: Kind
    epoch: str
    seq: int = 0
    part: int = 0
    parts: int = 1
    data: bytes = b""


_encode = msgspec.msgpack.Encoder().encode
decode_entry = msgspec.msgpack.Decoder(Entry).decode


class RestoreError(RuntimeError):
    """A partition's changelog could not be read back to the marker written for it."""


# Plain records, alike in form to drift.simulation's SimParams and TruthRow: the data differ.
@dataclass
class _Generation:
    """The generation a partition writes to now."""

    topic: str
    number: int
    epoch: str
    seq: int
    snapshot_bytes: int
    delta_bytes: int = 0


@dataclass(frozen=True)
class Restored:
    """What one restore read: for ``docs/performance.md`` and the log."""

    partition: int
    generation: int
    records: int
    bytes: int
    deltas: int
    seconds: float


def _records(kind: Kind, epoch: str, seq: int, data: bytes) -> list[bytes]:
    """``data`` as the changelog's records of one snapshot or delta: part ``i`` holds its
    ``i``-th chunk of at most :data:`CHUNK_BYTES` (one empty part for no data). Each chunk is
    sliced and encoded in one go, so that the data is not held once more as chunks while
    the records are sent (a 12 MB delta's peak allocation: 30 MB held as chunks, 18 without)."""
    parts = max(1, -(-len(data) // CHUNK_BYTES))
    return [_encode(Entry(kind, epoch, seq, i, parts, data[i * CHUNK_BYTES:(i + 1) * CHUNK_BYTES]))
            for i in range(parts)]


class Changelog:
    """The changelog generations of the partitions one worker owns."""

    def __init__(self, bootstrap: str, app_id: str, sends: Sends,
                 input_topic: str, metrics: Metrics) -> None:
        self.metrics = metrics
        self.bootstrap = bootstrap
        self.app_id = app_id
        self.sends = sends
        self.input_topic = input_topic
        self._pattern = re.compile(rf"^{re.escape(app_id)}\.changelog\.(\d+)\.(\d+)$")
        self._admin: KafkaAdminClient | None = None
        self.replication = 1
        self.generations: dict[int, _Generation] = {}

    def topic(self, partition: int, number: int) -> str:
        return f"{self.app_id}.changelog.{partition}.{number}"

    async def start(self) -> None:
        self._admin = await asyncio.to_thread(
            KafkaAdminClient, bootstrap_servers=self.bootstrap,
            client_id=f"{self.app_id}-changelog-admin")
        described = await asyncio.to_thread(self._admin_client().describe_topics,
                                            [self.input_topic])
        replicas = described[0]["partitions"][0].get("replica_nodes") or [0]
        self.replication = len(replicas)

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def _admin_client(self) -> KafkaAdminClient:
        assert self._admin is not None, "Changelog.start() first"
        return self._admin

    async def _existing(self, partition: int) -> list[int]:
        names = await asyncio.to_thread(self._admin_client().list_topics)
        found = []
        for name in names:
            m = self._pattern.match(name)
            if m and int(m.group(1)) == partition:
                found.append(int(m.group(2)))
        return sorted(found)

    async def _delete(self, names: list[str]) -> None:
        if not names:
            return
        try:
            await asyncio.to_thread(self._admin_client().delete_topics, names)
        except UnknownTopicOrPartitionError:
            pass

    async def _send(self, topic: str, records: list[bytes]) -> None:
        done = await self.sends.send_all([(topic, None, r, 0) for r in records])
        for result in await done:
            if isinstance(result, BaseException):
                raise result

    # ------------------------------------------------------------------ writing

    async def append(self, deltas: dict[int, bytes]) -> int:
        """Write each partition's delta of one checkpoint (its rows, encoded:
        :meth:`Rows.encode`); returns the bytes written."""
        written = 0
        # Every partition's send ends (or fails) before a failure is raised: a retry
        # (BrokerWatch.until_done) must not write a delta while this attempt still does.
        for sent in await asyncio.gather(*(self._append(self.generations[p], data)
                                           for p, data in deltas.items()
                                           if p in self.generations),
                                         return_exceptions=True):
            if isinstance(sent, BaseException):
                raise sent
            written += sent
        return written

    async def _append(self, gen: _Generation, data: bytes) -> int:
        """One partition's delta, in chunks. :meth:`append` writes the partitions' deltas (a
        topic each) side by side: when they went one after another, each chunk waited for its
        round trip through a loop busy with records, and a checkpoint of 13-15 MB at full
        speed took 3.8-4.2 s to append (1.4-2.2 s side by side; ``docs/performance.md``,
        "Checkpoints")."""
        gen.seq += 1
        await self._send(gen.topic, _records(Kind.DELTA, gen.epoch, gen.seq, data))
        gen.delta_bytes += len(data)
        return len(data)

    def due(self) -> list[int]:
        """Partitions whose deltas outgrew their snapshot: roll them."""
        return [p for p, g in self.generations.items()
                if g.delta_bytes > max(ROLL_FACTOR * g.snapshot_bytes, ROLL_MIN_BYTES)]

    async def roll(self, partition: int, store: BaselineStore) -> int:
        """A new generation from the partition's rows in ``store``; the older ones go.

        Returns the bytes written."""
        data = await asyncio.to_thread(lambda: store.export_partition(partition).encode())
        older = await self._existing(partition)
        number = max([*older, self.generations[partition].number
                      if partition in self.generations else 0]) + 1
        topic = self.topic(partition, number)
        await asyncio.to_thread(self._admin_client().create_topics, [
            NewTopic(topic, 1, self.replication, topic_configs=_TOPIC_CONFIG)])
        epoch = uuid.uuid4().hex
        await self._send(topic, _records(Kind.SNAPSHOT, epoch, 0, data))
        await self._send(topic, [_encode(Entry(Kind.SEAL, epoch))])
        self.generations[partition] = _Generation(topic, number, epoch, 0, len(data))
        await self._delete([self.topic(partition, g) for g in older if g < number])
        self.metrics.changelog_rolls.inc()
        log.info("changelog rolled", extra={"partitions": [partition], "generation": number,
                                            "bytes": len(data)})
        return len(data)

    def forget(self, partitions: set[int]) -> None:
        for p in partitions:
            self.generations.pop(p, None)

    # ------------------------------------------------------------------ restoring

    async def restore(self, partition: int, store: BaselineStore) -> Restored:
        """Make ``store`` hold exactly the partition's rows from its changelog.

        With no generation yet, the partition's rows in ``store`` (none on a fresh
        worker; all of them on a worker upgraded from a release without the
        changelog) become the first one.
        """
        started = time.monotonic()
        while True:
            existing = await self._existing(partition)
            if not existing:
                try:
                    await self.roll(partition, store)
                except TopicAlreadyExistsError:
                    continue  # another worker seeded it at the same moment: read theirs
                return Restored(partition, self.generations[partition].number, 0, 0, 0,
                                time.monotonic() - started)
            number = existing[-1]
            read = await self._read(partition, number)
            if read is None:
                log.warning("changelog generation was never sealed; deleting it",
                            extra={"partitions": [partition], "generation": number})
                await self._delete([self.topic(partition, number)])
                continue
            snapshot, deltas, epoch, seq, records, size, snapshot_bytes = read
            await asyncio.to_thread(store.restore_partition, partition, [snapshot, *deltas])
            self.generations[partition] = _Generation(
                self.topic(partition, number), number, epoch, seq, snapshot_bytes,
                size - snapshot_bytes)
            await self._delete([self.topic(partition, g) for g in existing if g < number])
            return Restored(partition, number, records, size, len(deltas),
                            time.monotonic() - started)

    async def _read(self, partition: int, number: int
                    ) -> tuple[Rows, list[Rows], str, int, int, int, int] | None:
        """Read a generation up to a marker written now; None if it has no seal."""
        topic = self.topic(partition, number)
        epoch = uuid.uuid4().hex
        await self._send(topic, [_encode(Entry(Kind.MARKER, epoch))])
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                    enable_auto_commit=False, client_id=f"{self.app_id}-restore",
                                    max_partition_fetch_bytes=4 * CHUNK_BYTES)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            reader = _Reader()
            last_progress = time.monotonic()
            while not reader.done(epoch):
                got = await consumer.getmany(tp, timeout_ms=500)
                messages = got.get(tp, [])
                if messages:
                    last_progress = time.monotonic()
                elif time.monotonic() - last_progress > RESTORE_STALL_S:
                    raise RestoreError(f"{topic}: no marker after {RESTORE_STALL_S:.0f} s")
                for m in messages:
                    reader.take(decode_entry(m.value))
                    if reader.done(epoch):
                        break
        finally:
            await consumer.stop()
        if reader.snapshot is None:
            return None
        return (reader.snapshot, reader.deltas, epoch, reader.seq, reader.records,
                reader.bytes, reader.snapshot_bytes)


class _Reader:
    """The state machine of a restore: snapshot, seal, then deltas of the current epoch."""

    def __init__(self) -> None:
        self.snapshot: Rows | None = None
        self.deltas: list[Rows] = []
        self.current: str | None = None
        self.seq = 0
        self.records = 0
        self.bytes = 0
        self.snapshot_bytes = 0
        self._parts: list[bytes] = []
        self._expected = 0
        self._partial: tuple[Kind, str, int] | None = None
        self._marker: str | None = None

    def done(self, marker: str) -> bool:
        return self._marker == marker

    def take(self, entry: Entry) -> None:
        self.records += 1
        self.bytes += len(entry.data)
        if entry.kind is Kind.MARKER:
            self._partial, self._parts = None, []
            self._marker = entry.epoch
            if self.snapshot is not None:
                self.current = entry.epoch
            return
        if entry.kind is Kind.SEAL:
            if (self._partial is not None and self._partial[:2] == (Kind.SNAPSHOT, entry.epoch)
                    and len(self._parts) == self._expected):
                self.snapshot = Rows.decode(b"".join(self._parts))
                self.snapshot_bytes = sum(len(p) for p in self._parts)
                self.current = entry.epoch
            self._partial, self._parts = None, []
            return
        if entry.kind is Kind.SNAPSHOT and self.snapshot is not None:
            return  # a snapshot is only the start of a generation
        if entry.kind is Kind.DELTA and (self.snapshot is None or entry.epoch != self.current):
            return  # not the current owner's: a worker that had lost the partition
        key = (entry.kind, entry.epoch, entry.seq)
        if entry.part == 0:
            self._partial, self._parts, self._expected = key, [], entry.parts
        elif self._partial != key or len(self._parts) != entry.part:
            self._partial, self._parts = None, []
            return
        self._parts.append(entry.data)
        if entry.kind is Kind.DELTA and entry.part == entry.parts - 1:
            self.deltas.append(Rows.decode(b"".join(self._parts)))
            self.seq = entry.seq
            self._partial, self._parts = None, []
