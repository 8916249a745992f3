"""What a ``bench/restore.py`` run puts in and reads back: the records of each size
(:func:`build_records`) and, per partition, the rows a worker's store holds
(:func:`export_rows`)."""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.kafka_io import partition_of
from drift.evolve import evolve


@dataclass
class Built:
    records: list[tuple[bytes, bytes, str]]  # (key, value, event_id) in event-time order
    users: int
    sessions: int  # sessions of most users (sustained_low users have more)
    per_partition_events: dict[int, int]
    per_partition_users: dict[int, int]
    seconds: float


def build_records(users_per_partition: int, partitions: int, test_sessions: int, seed: int
                  ) -> Built:
    """Every scenario's simulated users, complete (no session cut), merged by event time.

    Each user is shifted by a random offset up to one session length, as in
    ``bench/throughput.py``, so that many users are mid-session at any point.
    """
    from drift.simulation import Scenario, SimParams, simulate
    from streams.edge.codec import encode_event

    started = time.monotonic()
    per_scenario = max(1, round(users_per_partition * partitions / len(Scenario)))
    params = SimParams(test_sessions=test_sessions)
    span = (params.turns + 2) * params.turn_gap_s
    days = params.baseline_sessions + test_sessions * params.low_sessions + 2
    begin = time.time() - days * 86400.0
    rng = np.random.default_rng(seed ^ 0x5EED)
    rows: list[tuple[float, bytes, bytes, str]] = []
    users_in: Counter[int] = Counter()
    sessions: Counter[int] = Counter()
    n_users = 0
    for events, truth in simulate(seed, list(Scenario), per_scenario, begin, params):
        n_users += 1
        shift = float(rng.uniform(0.0, span))
        key = events[0].user_id.encode()
        users_in[partition_of(key, partitions)] += 1
        sessions[len(truth)] += 1
        for e in events:
            e2 = evolve(e, ts_s=e.ts_s + shift)
            rows.append((e2.ts_s, key, encode_event(e2), e2.event_id))
    rows.sort(key=lambda r: r[0])
    records = [(k, v, i) for _, k, v, i in rows]
    per_part = Counter(partition_of(k, partitions) for k, _, _ in records)
    return Built(records, n_users, sessions.most_common(1)[0][0],
                 {p: per_part.get(p, 0) for p in range(partitions)},
                 {p: users_in.get(p, 0) for p in range(partitions)},
                 time.monotonic() - started)


def export_rows(db: Path, partitions: int) -> dict[int, dict[str, Any]]:
    """Per partition: row counts per table, encoded bytes, and a digest of the rows."""
    from baselines.store import BaselineStore

    out: dict[int, dict[str, Any]] = {}
    if not db.exists():
        return out
    store = BaselineStore.open_read_only(db)
    try:
        for p in range(partitions):
            rows = store.export_partition(p)
            tables: dict[str, int] = {}
            digest = hashlib.blake2b(digest_size=16)
            for name in sorted(rows.tables):
                table = rows.tables[name]
                tables[name] = table.num_rows
                lines = sorted(repr(tuple(r.values())) for r in table.to_pylist())
                digest.update(name.encode())
                for line in lines:
                    digest.update(line.encode())
            out[p] = {"rows": sum(tables.values()), "tables": tables,
                      "bytes": len(rows.encode()), "digest": digest.hexdigest()}
    finally:
        store.close()
    return out
