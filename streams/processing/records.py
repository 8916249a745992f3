"""What goes into the engine and what comes out of a batch: input records, messages to
publish, the processed batch, and an input record's dead letter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from drift.evolve import fast_init
from drift.outputs import dead_letter_id
from streams import topics
from streams.edge.rejection import Rejection
from streams.edge.wire import DeadLetter


class InputRecord(Protocol):
    """One input record as the engine reads it: what aiokafka's ``ConsumerRecord`` carries,
    so the shell hands its records over as they come."""

    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def timestamp(self) -> int:
        """Kafka's record timestamp, milliseconds since the epoch."""


@fast_init
@dataclass(frozen=True, slots=True)
class Record:
    """An :class:`InputRecord` made in process (tests, benchmarks)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


@fast_init
@dataclass(frozen=True, slots=True)
class OutMessage:
    """A message to publish; ``partition`` is the input partition it came from (-1: none)."""

    topic: str
    key: bytes
    value: bytes
    partition: int


@dataclass
class PendingBatch:
    """A batch that has been processed but not yet committed."""

    messages: list[OutMessage] = field(default_factory=list)
    source_timestamps: list[int] = field(default_factory=list)
    """Kafka timestamps (ms) of the input records whose outputs the batch carries."""
    erased: set[int] = field(default_factory=set)
    """Partitions where an erasure was carried out (-1: a user no partition holds)."""
    stopped_at: int | None = None
    """Index of the first record left unprocessed because it may erase (see ``process``)."""
    rewind: dict[int, int] = field(default_factory=dict)
    """Partitions whose replay the consumer skipped part of (records it fetched from an
    older position came first): the shell seeks each to the offset given."""


def dead_letter(rejection: Rejection, partition: int, offset: int) -> DeadLetter:
    """The dead letter of one input record: why, and where it came from (never its values).
    The engine and :func:`streams.oracle.fold_log` both build it here."""
    return DeadLetter(dead_letter_id(topics.INPUT, partition, offset), rejection.reason,
                      topics.INPUT, partition, offset, rejection.event_id, rejection.fields)
