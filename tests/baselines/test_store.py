"""The DuckDB store, tested with DuckDB: real files, real transactions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from baselines.migrations import MIGRATIONS
from baselines.snapshot import decode_state, encode_state
from baselines.store import BaselineStore, BatchWrite
from drift.baseline import UserBaselines
from drift.model import BaselineKind, DriftConfig, Mode
from drift.outputs import ErasureCommand
from drift.replay import MemoryReplay
from drift.simulation import Scenario, SimParams, simulate_user


def _user(user_id: str, seed: int = 1, mode: Mode = Mode.FULL) -> MemoryReplay:
    events, _ = simulate_user(np.random.default_rng(seed), Scenario.STABLE, user_id, 1.7e9,
                              SimParams(mode=mode))
    runner = MemoryReplay(DriftConfig())
    for e in events:
        runner.feed(e)
    return runner


def _all_versions(runner: MemoryReplay, user_id: str) -> list:
    b = runner.baselines[user_id]
    return [x for x in (b.attunement, b.semantic, b.safety) if x is not None]


@pytest.fixture
def store(tmp_path: Path):
    s = BaselineStore(tmp_path / "c.duckdb")
    yield s
    s.close()


def test_a_batch_round_trips_states_baselines_and_offsets(store: BaselineStore) -> None:
    runner = _user("u1")
    write = BatchWrite("fhr.events", offsets={2: 41},
                       states={"u1": (2, runner.states["u1"])},
                       baselines=[(2, b) for b in _all_versions(runner, "u1")])
    store.commit_batch(write)
    assert store.offsets("fhr.events") == {2: 41}
    assert store.load_states([2])["u1"] == runner.states["u1"]
    assert store.load_states([1]) == {}
    assert store.load_baselines([2])["u1"] == runner.baselines["u1"]
    assert decode_state(encode_state(runner.states["u1"])) == runner.states["u1"]


def test_an_attunement_version_is_stored_as_its_doubles_and_older_json_rows_still_load(
        store: BaselineStore) -> None:
    """An attunement version's values are written as msgpack of its table's doubles; a
    version an older release wrote as JSON loads to the same baseline."""
    import msgspec

    from baselines.columns import _AttunementValues

    runner = _user("u3", seed=3)
    latest = runner.baselines["u3"].attunement
    assert latest is not None and sum(latest.shape) > 3, "a baseline of several sessions"
    store.commit_batch(BatchWrite("fhr.events", baselines=[(1, latest)]))
    (stored,) = store._con.execute(
        "SELECT vals FROM baseline_versions WHERE baseline_id = ? AND version = ?",
        [latest.meta.baseline_id, latest.meta.version]).fetchone()
    assert not stored.startswith(b"{") and latest.table.tobytes() in stored
    assert store.user_baselines("u3").attunement == latest

    older = msgspec.json.Encoder(enc_hook=lambda a: a.tolist()).encode(
        _AttunementValues(latest.features, latest.sessions, latest.late_profile))
    store._con.execute(
        "UPDATE baseline_versions SET vals = ? WHERE baseline_id = ? AND version = ?",
        [older, latest.meta.baseline_id, latest.meta.version])
    loaded = store.user_baselines("u3").attunement
    assert loaded == latest and loaded.table.tobytes() == latest.table.tobytes()


def test_versions_are_immutable_and_the_latest_wins(store: BaselineStore) -> None:
    runner = _user("u2", seed=2)
    latest = runner.baselines["u2"].attunement
    assert latest is not None and latest.meta.version == 4
    store.commit_batch(BatchWrite("fhr.events", baselines=[(0, latest)]))
    store.commit_batch(BatchWrite("fhr.events", baselines=[(0, latest)]))
    versions, tombstones = store.history("u2")
    assert [v.meta.version for v in versions] == [4] and tombstones == []
    assert store.user_baselines("u2").attunement == latest


def test_a_failed_batch_leaves_nothing_behind(store: BaselineStore) -> None:
    runner = _user("u3", seed=3)
    good = BatchWrite("fhr.events", offsets={0: 10}, states={"u3": (0, runner.states["u3"])})
    store.commit_batch(good)
    bad = BatchWrite("fhr.events", offsets={0: 20}, states={"u3": (0, runner.states["u3"])},
                     baselines=[(0, "not a baseline")])  # type: ignore[list-item]
    with pytest.raises(AttributeError):
        store.commit_batch(bad)
    assert store.offsets("fhr.events") == {0: 10}


def test_erasure_tombstones_verifies_is_idempotent_and_compaction_drops_the_bytes(
        tmp_path: Path) -> None:
    path = tmp_path / "e.duckdb"
    store = BaselineStore(path)
    runner = _user("victim-7", seed=4)
    versions = _all_versions(runner, "victim-7")
    store.commit_batch(BatchWrite("fhr.events", states={"victim-7": (1, runner.states["victim-7"])},
                                  baselines=[(1, b) for b in versions]))
    store.close()
    assert b"victim-7-c0" in path.read_bytes()
    store = BaselineStore(path)
    command = ErasureCommand("victim-7", "s", tuple(BaselineKind), "user_request", "req-1",
                             "e-1", 1.8e9)
    first = store.erase(command, 1)
    assert first.outcome == "verified" and not first.replayed
    assert [t.kind for t in first.targets] == ["attunement", "safety", "semantic"]
    assert all(t.outcome == "verified" and t.versions == 1 for t in first.targets)
    again = store.erase(command, 1)
    assert again.replayed and again.targets == first.targets
    assert store.user_baselines("victim-7") == UserBaselines()
    assert store.count_user_rows("victim-7") == {"baseline_versions": 0, "user_state": 0,
                                                 "session_summaries": 0}
    versions_left, tombstones = store.history("victim-7")
    assert versions_left == [] and len(tombstones) == 3
    assert {t["request_id"] for t in tombstones} == {"req-1"}
    store.compact()
    # one DuckDB thread, before and after the file is rewritten (baselines.store._DUCKDB)
    assert store._con.execute("SELECT current_setting('threads')").fetchone() == (1,)
    store.close()
    for f in tmp_path.iterdir():
        assert b"victim-7-c0" not in f.read_bytes()
        assert b"victim-7" not in f.read_bytes()


def test_erasing_a_user_with_no_data_has_the_same_shape(store: BaselineStore) -> None:
    command = ErasureCommand("nobody", "", tuple(BaselineKind), "operator", "req-x", "e", 0.0)
    result = store.erase(command, 0)
    assert result.outcome == "verified"
    assert [(t.kind, t.versions, t.outcome) for t in result.targets] == [
        ("attunement", 0, "verified"), ("safety", 0, "verified"), ("semantic", 0, "verified")]


def test_migrations_are_idempotent_and_survive_compaction(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "m.duckdb")
    assert store.migrate() == len(MIGRATIONS)
    store.compact()
    assert store.migrate() == len(MIGRATIONS)
    store.close()
    assert BaselineStore(tmp_path / "m.duckdb", read_only=True).report()["tombstones"] == 0
