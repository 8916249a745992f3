"""The simulator's producer side: labelled synthetic FHR traffic onto ``fhr.events``."""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from collections.abc import Iterator

from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError

from drift.model import FhrEvent, Mode
from drift.simulation import Scenario, SimParams, TruthRow, simulate
from streams import topics
from streams.edge.codec import encode_event


def kafka_producer(bootstrap: str) -> KafkaProducer:
    """The simulator's producer: every record acknowledged by all in-sync replicas."""
    try:
        return KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all",
                             client_id="continuity-drift-simulator",
                             bootstrap_timeout_ms=int(topics.CONNECT_TIMEOUT_S * 1000))
    except KafkaTimeoutError as exc:
        raise topics.BrokerUnreachable(bootstrap) from exc


def merged_events(seed: int, scenarios: list[Scenario], users: int, start: float,
                  params: SimParams, truth: list[TruthRow]) -> Iterator[FhrEvent]:
    """Every simulated user's events merged by event time, as traffic would interleave.

    The ground truth of each session is appended to ``truth``.

    >>> truth: list[TruthRow] = []
    >>> events = list(merged_events(7, [Scenario.STABLE], 2, 1.7e9, SimParams(), truth))
    >>> sorted({e.user_id for e in events}) == sorted({row.user_id for row in truth})
    True
    >>> all(a.ts_s <= b.ts_s for a, b in zip(events, events[1:]))
    True
    """
    streams = []
    for events, rows in simulate(seed, scenarios, users, start, params):
        truth.extend(rows)
        streams.append(events)
    return heapq.merge(*streams, key=lambda e: e.ts_s)


def produce(bootstrap: str, events: Iterator[FhrEvent], rate: float,
            progress: bool = True) -> int:
    """Send ``events`` keyed by user id at ``rate`` per second (0: as fast as possible)."""
    producer = kafka_producer(bootstrap)
    sent = 0
    started = time.monotonic()
    last = started
    try:
        for event in events:
            producer.send(topics.INPUT, key=event.user_id.encode(), value=encode_event(event))
            sent += 1
            if rate > 0:
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0.005:
                    time.sleep(ahead)
            now = time.monotonic()
            if progress and now - last >= 1.0:
                last = now
                print(f"\rsent {sent} events ({sent / (now - started):.0f}/s)", end="",
                      file=sys.stderr, flush=True)
        producer.flush()
    finally:
        producer.close()
    if progress:
        print(f"\rsent {sent} events in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return sent


def cmd_simulate(args: argparse.Namespace) -> int:
    scenarios = [Scenario(s) for s in (args.scenario or [s.value for s in Scenario])]
    params = SimParams(turns=args.turns, shift_sd=args.shift_sd, mode=Mode(args.mode),
                       turn_gap_s=args.turn_gap)
    start = args.start if args.start is not None else time.time() - 10 * 86400
    truth: list[TruthRow] = []
    events = merged_events(args.seed, scenarios, args.users, start, params, truth)
    sent = produce(args.broker, events, args.rate)
    if args.truth:
        with open(args.truth, "w") as fh:
            fh.writelines(json.dumps(row.__dict__) + "\n" for row in truth)
        print(f"ground truth for {len(truth)} sessions in {args.truth}", file=sys.stderr)
    print(f"reproduce: continuity-drift simulate --broker {args.broker} "
          + " ".join(f"--scenario {s.value}" for s in scenarios)
          + f" --users {args.users} --seed {args.seed} --start {start}", file=sys.stderr)
    return 0 if sent else 1
