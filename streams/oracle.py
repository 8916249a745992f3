"""The pure fold of the log: what the output topics must hold for ``fhr.events`` as it stands.

Records are read in partition order, decoded as the worker decodes them, folded per user
(:class:`drift.replay.MemoryReplay`), tick records applied to the users seen on their
partition, and every record that is neither an event nor a tick dead-lettered by its place.
Every output is keyed by its id with its topic and its exact bytes; an erasure receipt's
bytes are left out (the store's re-read decides its targets' outcomes), a repeated id keeps
its first. The kill and move tests and ``bench/soak.py`` hold what the workers published
against it; the worker never imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from drift.baseline import derive_id
from drift.model import DriftConfig, Tick
from drift.replay import MemoryReplay
from streams import topics
from streams.edge.codec import decode_record
from streams.edge.rejection import Rejection
from streams.edge.wire import encode
from streams.processing.records import dead_letter

#: One record of ``fhr.events`` as read back: partition, offset, key, value.
LogRecord = tuple[int, int, "bytes | None", "bytes | None"]


@dataclass(frozen=True, slots=True)
class Expected:
    """One output the log calls for."""

    topic: str
    user_id: str | None
    value: bytes | None
    """The exact bytes; None for an erasure receipt (compare it by id)."""


def fold_log(records: Iterable[LogRecord], config: DriftConfig | None = None,
             app_id: str = "continuity-drift") -> dict[str, Expected]:
    """Every output of the log ``records`` (any order; folded per partition by offset)."""
    replay = MemoryReplay(config or DriftConfig())
    out: dict[str, Expected] = {}
    by_partition: dict[int, list[LogRecord]] = {}
    for record in records:
        by_partition.setdefault(record[0], []).append(record)
    for partition in sorted(by_partition):
        users: set[str] = set()
        for _, offset, key, value in sorted(by_partition[partition], key=lambda r: r[1]):
            try:
                item = decode_record(key, value)
            except Exception:  # noqa: BLE001 - the engine dead-letters it the same way
                item = Rejection("processing_error", (), None)
            if isinstance(item, Tick):
                outputs = replay.tick(item, users) if item.app_id == app_id else ()
            elif isinstance(item, Rejection):
                outputs = ()
            else:
                users.add(item.user_id)
                try:
                    outputs = replay.feed(item)
                except Exception:  # noqa: BLE001 - as the engine: state unchanged
                    item = Rejection("processing_error", (), item.event_id)
            if isinstance(item, Rejection):
                letter = dead_letter(item, partition, offset)
                out.setdefault(letter.id, Expected(topics.DEADLETTER, None, encode(letter)))
                continue
            for o in outputs:
                out.setdefault(o.id, Expected(topics.OUTPUT_TOPICS[o.kind], o.user_id,
                                              encode(o)))
            for command in replay.erasures:
                out.setdefault(derive_id("receipt", command.request_id),
                               Expected(topics.RECEIPTS, command.user_id, None))
            replay.erasures.clear()
    return out
