"""Where the governance report's numbers come from: the output topics and the review API.

:func:`read_outputs` reads every partition of every output topic from its first
offset to the *high watermark of the first fetch response* for that partition:
a point this reader saw the broker report in the same response that carried
records, rather than ``ListOffsets(latest)`` (which the embedded broker can
answer one batch short). Records published after that point are left for the
next report, so a report of a busy deployment ends. No consumer group is used
and nothing is written: a report needs read access to the topics, no worker's
disk, and no lock.

:func:`baseline_history` asks the review API of any worker for one user's
baseline versions and tombstones (any worker answers for any user).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError

from streams import topics
from streams.edge.wire import iso
from streams.report.messages import (
    DEADLETTER,
    REPORT_TOPICS,
    BaselineHistory,
    DeadLetterMsg,
    Outputs,
    decode_values,
    gather,
)

#: A partition that yields nothing for this long before its end is an error, not a wait.
STALL_S = 30.0
_FETCH_MAX_BYTES = 64 * 1024 * 1024
_PARTITION_FETCH_BYTES = 16 * 1024 * 1024


class ReportSourceError(RuntimeError):
    """The topics or the review API could not be read; the message says what to check."""

    def __init__(self, message: str, code: int = 3) -> None:
        super().__init__(message)
        self.code = code


def read_outputs(bootstrap: str, stall_s: float = STALL_S) -> Outputs:
    """Every output on the broker at ``bootstrap`` (see the module docstring for where it stops)."""
    return asyncio.run(_read(bootstrap, stall_s))


async def _read(bootstrap: str, stall_s: float) -> Outputs:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        client_id="continuity-drift-report", fetch_max_bytes=_FETCH_MAX_BYTES,
        max_partition_fetch_bytes=_PARTITION_FETCH_BYTES, fetch_max_wait_ms=100,
        request_timeout_ms=int(topics.CONNECT_TIMEOUT_S * 1000) + 2000,
        connections_max_idle_ms=60_000)
    try:
        await asyncio.wait_for(consumer.start(), topics.CONNECT_TIMEOUT_S)
    except (KafkaConnectionError, TimeoutError, OSError) as exc:
        await consumer.stop()
        raise topics.BrokerUnreachable(bootstrap) from exc
    try:
        return await _read_to_high_watermarks(consumer, stall_s)
    except KafkaError as exc:
        raise ReportSourceError(f"reading the output topics on {bootstrap} failed: {exc}") \
            from exc
    finally:
        await consumer.stop()


async def _read_to_high_watermarks(consumer: AIOKafkaConsumer, stall_s: float) -> Outputs:
    available = await consumer.topics()
    tps: list[TopicPartition] = []
    partitions: dict[str, int] = {}
    for topic in REPORT_TOPICS:
        parts = sorted(consumer.partitions_for_topic(topic) or ()) if topic in available else []
        partitions[topic] = len(parts)
        tps.extend(TopicPartition(topic, p) for p in parts)
    raw: dict[str, list[Any]] = {t: [] for t in REPORT_TOPICS}
    undecodable: dict[str, int] = dict.fromkeys(REPORT_TOPICS, 0)
    records: dict[str, int] = dict.fromkeys(REPORT_TOPICS, 0)
    if not tps:
        return gather(raw, undecodable, records, partitions)
    consumer.assign(tps)
    position = {tp: int(off) for tp, off in (await consumer.beginning_offsets(tps)).items()}
    for tp, off in position.items():
        consumer.seek(tp, off)
    end: dict[TopicPartition, int] = {}
    pending = set(tps)
    last_progress = time.monotonic()
    while pending:
        fetched = await consumer.getmany(*pending, timeout_ms=200)
        for tp, batch in fetched.items():
            if not batch:
                continue
            last_progress = time.monotonic()
            if tp not in end and consumer.highwater(tp) is not None:
                end[tp] = int(consumer.highwater(tp))
            stop = end.get(tp)
            taken = (batch if stop is None or batch[-1].offset < stop
                     else [r for r in batch if r.offset < stop])
            position[tp] = max(position[tp], batch[-1].offset + 1)
            if not taken:
                continue
            records[tp.topic] += len(taken)
            if tp.topic == DEADLETTER:
                decoded, bad = _dead_letters(taken)
            else:
                decoded, bad = decode_values(tp.topic, [r.value for r in taken])
            undecodable[tp.topic] += bad
            raw[tp.topic].extend(decoded)
        for tp in list(pending):
            if tp not in end:
                high = consumer.highwater(tp)
                if high is not None:
                    end[tp] = int(high)
            if tp in end and position[tp] >= end[tp]:
                pending.discard(tp)
                consumer.pause(tp)
        if pending and time.monotonic() - last_progress > stall_s:
            names = ", ".join(sorted(f"{tp.topic}[{tp.partition}]" for tp in pending))
            raise ReportSourceError(f"no progress for {stall_s:.0f} s reading {names}")
    return gather(raw, undecodable, records, partitions)


def _dead_letters(taken: list[Any]) -> tuple[list[DeadLetterMsg], int]:
    """Dead letters, each with ``event_ts`` set from its record's Kafka timestamp (the
    time the worker published it). One at a time: there are few, and each needs its own."""
    out: list[DeadLetterMsg] = []
    bad = 0
    for record in taken:
        decoded, failed = decode_values(DEADLETTER, [record.value])
        bad += failed
        ts = record.timestamp
        for m in decoded:
            out.append(DeadLetterMsg(id=m.id, reason=m.reason, fields=m.fields,
                                     event_ts=iso(ts / 1000.0) if ts is not None and ts >= 0
                                     else ""))
    return out, bad


def baseline_history(api: str, token: str | None, user_id: str,
                     timeout_s: float = 10.0) -> BaselineHistory:
    """``GET /v1/users/{user_id}/baselines/history`` on any worker; empty when it knows none."""
    url = (api.rstrip("/") + "/v1/users/" + urllib.parse.quote(user_id, safe="")
           + "/baselines/history")
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:  # no versions and no tombstones, or a token that sees nothing
            return BaselineHistory((), ())
        if exc.code == 403:
            raise ReportSourceError(f"{api}: the review API is disabled on that worker; start "
                                    "it with CONTINUITY_REVIEW_TOKEN set", 4) from None
        raise ReportSourceError(f"{api}: the review API answered {exc.code}", 4) from None
    except (urllib.error.URLError, OSError) as exc:
        raise ReportSourceError(f"cannot reach the review API at {api} ({exc}); check --api",
                                3) from None
    return BaselineHistory(tuple(body.get("versions", ())), tuple(body.get("tombstones", ())))
