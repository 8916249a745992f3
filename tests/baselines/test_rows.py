"""Rows out of one DuckDB file and into another: the changelog's snapshot and deltas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from baselines.rows import ROWS_VERSION, Rows, RowsVersionError
from baselines.store import BaselineStore, BatchWrite
from drift.model import BaselineKind, DriftConfig, Mode, Tier
from drift.outputs import ErasureCommand, SessionSummary
from drift.replay import MemoryReplay
from drift.simulation import Scenario, SimParams, simulate_user

TABLES = ("baseline_versions", "user_state", "session_summaries", "partition_offsets",
          "tombstones", "erasure_targets", "erasure_requests")


def _runner(users: dict[str, int]) -> MemoryReplay:
    runner = MemoryReplay(DriftConfig())
    for user_id, seed in users.items():
        events, _ = simulate_user(np.random.default_rng(seed), Scenario.ATTUNEMENT_SHIFT, user_id,
                                  1.7e9, SimParams())
        for e in events:
            runner.feed(e)
    return runner


def _write(runner: MemoryReplay, placement: dict[str, int]) -> BatchWrite:
    write = BatchWrite("fhr.events", offsets={p: 100 + p for p in set(placement.values())})
    for user_id, p in placement.items():
        write.stage_state(user_id, p, runner.states[user_id])
        b = runner.baselines[user_id]
        write.baselines.extend((p, x) for x in (b.attunement, b.semantic, b.safety)
                               if x is not None)
        write.sessions.append((p, SessionSummary(user_id, f"{user_id}-s1", Mode.FULL, 1.7e9,
                                                 1.7e9 + 60, 12, Tier.LOW, 2, False, None)))
    return write


def _dump(store: BaselineStore, partition: int) -> dict[str, list[tuple]]:
    rows = store.export_partition(partition)
    return {t: sorted(rows.tables[t].to_pylist(), key=repr) if t in rows.tables else []
            for t in TABLES}


@pytest.fixture
def stores(tmp_path: Path):
    a, b = BaselineStore(tmp_path / "a.duckdb"), BaselineStore(tmp_path / "b.duckdb")
    yield a, b
    a.close()
    b.close()


def test_a_partition_restored_elsewhere_holds_exactly_its_rows(stores) -> None:
    old, new = stores
    placement = {"u1": 1, "u2": 1, "u3": 2}
    runner = _runner({"u1": 1, "u2": 2, "u3": 3})
    old.commit_batch(_write(runner, placement))
    old.erase(ErasureCommand("u2", "u2-s9", (BaselineKind.ATTUNEMENT,), "user_request",
                             "req-9", "u2-e9", 1.8e9), 1)
    snapshot = Rows.decode(old.export_partition(1).encode())
    assert snapshot.users() == {"u1", "u2"}
    new.commit_batch(_write(runner, {"u3": 2}))
    new.restore_partition(1, [snapshot])
    assert _dump(new, 1) == _dump(old, 1)
    assert _dump(new, 2) == _dump(old, 2), "the other partition is untouched"
    assert new.load_states([1]) == old.load_states([1])
    assert new.load_baselines([1]) == old.load_baselines([1])
    assert new.previous_erasure("req-9") == old.previous_erasure("req-9")
    assert new.offsets("fhr.events") == old.offsets("fhr.events")
    new.restore_partition(1, [snapshot])
    assert _dump(new, 1) == _dump(old, 1), "restoring twice changes nothing"


def test_deltas_applied_in_order_equal_the_checkpoints_they_came_from(stores) -> None:
    direct, rebuilt = stores
    runner = _runner({"u1": 4, "u2": 5})
    first = _write(runner, {"u1": 0, "u2": 3})
    second = BatchWrite("fhr.events", offsets={0: 500})
    second.stage_state("u1", 0, None)
    deltas: dict[int, list[Rows]] = {}
    for write in (first, second):
        direct.commit_batch(write)
        for p, rows in direct.rows_of(write).by_partition(write.dropped_states).items():
            deltas.setdefault(p, []).append(Rows.decode(rows.encode()))
    assert sorted(deltas) == [0, 3]
    for p, parts in deltas.items():
        rebuilt.restore_partition(p, parts)
    for p in (0, 3):
        assert _dump(rebuilt, p) == _dump(direct, p)
    assert rebuilt.load_states([0]) == {}
    assert rebuilt.offsets("fhr.events") == {0: 500, 3: 103}


def test_dropping_a_partition_leaves_the_others(stores) -> None:
    store, _ = stores
    runner = _runner({"u1": 6, "u2": 7})
    store.commit_batch(_write(runner, {"u1": 0, "u2": 1}))
    assert store.held_partitions() == {0, 1}
    assert store.drop_partitions({0}) is True
    assert store.drop_partitions({0}) is False
    assert store.held_partitions() == {1}
    assert set(store.load_states([0, 1])) == {"u2"}


def test_rows_travel_compressed_and_an_older_workers_uncompressed_rows_still_read(stores
                                                                                 ) -> None:
    """The changelog's rows are compressed before the producer sees them (the producer's
    own codec then finds little left to do, on the event loop); rows an older worker wrote
    without compression decode all the same."""
    import msgspec

    from tests.changelog_rows import uncompressed_ipc

    store, _ = stores
    runner = _runner({f"u{k}": k for k in range(8)})
    rows = store.rows_of(_write(runner, {f"u{k}": k % 2 for k in range(8)}))
    older = msgspec.msgpack.encode(
        [ROWS_VERSION, {t: uncompressed_ipc(v) for t, v in rows.tables.items()},
         list(rows.dropped)])
    encoded = rows.encode()
    assert len(encoded) < 0.75 * len(older)
    for data in (encoded, older):
        back = Rows.decode(data)
        assert set(back.tables) == set(rows.tables)
        assert all(back.tables[t].equals(rows.tables[t]) for t in rows.tables)


def test_rows_of_a_newer_release_are_refused_with_what_to_do() -> None:
    import msgspec

    newer = msgspec.msgpack.encode([ROWS_VERSION + 1, {}, []])
    with pytest.raises(RowsVersionError, match="upgrade the worker"):
        Rows.decode(newer)


def test_history_is_kept_to_the_retention_and_the_current_version_always(tmp_path) -> None:
    from baselines.store import Retention
    from drift.baseline import AttunementBaseline

    store = BaselineStore(tmp_path / "r.duckdb", retention=Retention(versions=2, sessions=3))
    runner = MemoryReplay(DriftConfig())
    events, _ = simulate_user(np.random.default_rng(8), Scenario.STABLE, "long", 1.7e9,
                              SimParams())
    seen: list[AttunementBaseline] = []
    for i, e in enumerate(events):
        runner.feed(e)
        current = runner.baselines.get("long")
        if current is not None and current.attunement is not None and (
                not seen or seen[-1].meta.version != current.attunement.meta.version):
            seen.append(current.attunement)
            write = BatchWrite("fhr.events", offsets={0: i + 1}, baselines=[(0, seen[-1])])
            write.sessions.append((0, SessionSummary("long", f"s{i}", Mode.FULL, 1.7e9 + i,
                                                     None, 1, Tier.LOW, 0, False, None)))
            store.commit_batch(write)
    assert len(seen) >= 4, "the check needs more versions than are kept"
    versions, _ = store.history("long")
    assert [v.meta.version for v in versions] == [seen[-2].meta.version, seen[-1].meta.version]
    assert store.user_baselines("long").attunement == seen[-1]
    rows = store.export_partition(0)
    assert rows.tables["session_summaries"].num_rows == 3
    store.close()
