"""The versioned state snapshot: today's round trip, and state written by earlier releases.

``fixtures/user_state_v1.msgpack`` holds the state blobs the first release stored for every
user of the golden event log after its first ``events_applied`` events;
``fixtures/user_state_v2.msgpack`` the same of the release that wrote version 2 (its
``written_by`` commit), with the default configuration.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from baselines.snapshot import VERSION, decode_state, encode_state
from drift.model import DriftConfig, Mode, ModelTriple
from drift.replay import MemoryReplay
from drift.state import SessionState, TurnLog, UserState, WindowSums
from tests.streams.golden import golden_events

FIXTURES = Path(__file__).parent / "fixtures"
#: The configuration the first release's fixture was written with (it kept 512 event ids).
FIRST_RELEASE = DriftConfig(recent_event_ids=512)
#: Each fixture's version and the configuration it was written with.
RELEASES = [pytest.param(1, FIRST_RELEASE, id="v1"), pytest.param(2, DriftConfig(), id="v2")]


def _without_review_counts(state: UserState) -> UserState:
    """The first release kept a session's score count and top tier in worker memory only."""
    s = state.session
    if s is None:
        return state
    blank = SessionState(s.session_id, s.mode, s.started_s, s.last_s, s.model, s.safety,
                         s.ephemeral, s.turns)
    return replace(state, session=replace(s, scores=blank.scores, max_tier=blank.max_tier,
                                          reattune_quality=blank.reattune_quality))


def _early_rows_let_go(state: UserState, config: DriftConfig) -> UserState:
    """The first release kept a session's early rows to its end; the fold now lets go of
    them past the re-attunement turn (they are read there only), at the session's next turn."""
    s = state.session
    if s is None or s.turns.n_turns <= config.reattune_checkpoint_turn:
        return state
    return replace(state, session=replace(s, turns=replace(s.turns, early_rows=())))


def _fixture(version: int) -> tuple[int, dict[str, bytes]]:
    raw = msgspec.msgpack.decode((FIXTURES / f"user_state_v{version}.msgpack").read_bytes())
    return int(raw["events_applied"]), dict(raw["states"])


@pytest.mark.parametrize(("version", "config"), RELEASES)
def test_state_written_by_an_earlier_release_loads_as_the_same_state(
        version: int, config: DriftConfig) -> None:
    cut, blobs = _fixture(version)
    replay = MemoryReplay(config)
    for event in golden_events()[:cut]:
        replay.feed(event)
    assert set(blobs) == set(replay.states)
    loaded = {u: decode_state(b) for u, b in blobs.items()}
    assert sum(s.session is not None for s in loaded.values()) >= 30
    assert any(s.ladder.hold for s in loaded.values())
    assert any(s.session and s.session.model_change.detected for s in loaded.values())
    assert any(s.session and s.session.turns.n_turns > config.reattune_checkpoint_turn
               and s.session.turns.early_rows for s in loaded.values())
    for user_id, state in loaded.items():
        expected = replay.states[user_id]
        if version == 1:
            expected = _without_review_counts(expected)
            if state.memory_only:  # their ring now starts at the open session (drift.fold)
                state = replace(state, recent=expected.recent)
        assert _early_rows_let_go(state, config) == expected, user_id


@pytest.mark.parametrize(("version", "config"), RELEASES)
def test_the_fold_goes_on_from_an_earlier_release_state_as_if_never_stopped(
        version: int, config: DriftConfig) -> None:
    cut, blobs = _fixture(version)
    events = golden_events()
    continuous = MemoryReplay(config)
    for event in events[:cut]:
        continuous.feed(event)
    resumed = MemoryReplay(config, {u: decode_state(b) for u, b in blobs.items()},
                           dict(continuous.baselines))
    for event in events[cut:]:
        assert resumed.feed(event) == continuous.feed(event)
    assert resumed.states == continuous.states


def test_current_snapshots_carry_their_version_and_round_trip() -> None:
    cut, _ = _fixture(2)
    replay = MemoryReplay(DriftConfig())
    for event in golden_events()[:cut]:
        replay.feed(event)
    for state in replay.states.values():
        blob = encode_state(state)
        assert msgspec.msgpack.decode(blob)[0] == VERSION
        assert decode_state(blob) == state


def test_a_snapshot_from_a_newer_release_is_refused_with_what_to_do() -> None:
    blob = bytearray(encode_state(UserState("u1")))
    newer = msgspec.msgpack.decode(bytes(blob))
    newer[0] = VERSION + 1
    with pytest.raises(ValueError, match="upgrade the worker"):
        decode_state(msgspec.msgpack.encode(newer))


def test_every_state_the_golden_log_passes_through_round_trips() -> None:
    replay = MemoryReplay(DriftConfig())
    for event in golden_events():
        replay.feed(event)
        state = replay.states[event.user_id]
        assert decode_state(encode_state(state)) == state


def _with_turns(turns: TurnLog) -> UserState:
    session = SessionState("s1", Mode.FULL, 0.0, 1.0, ModelTriple("m", "t", "bf16"),
                           ("g", "p", "c"), False, turns)
    return UserState("u1", Mode.FULL, clock_s=1.0, session=session)


def test_a_log_past_256_distinct_rows_round_trips_with_two_byte_indices() -> None:
    rows = tuple((float(k), -0.0, 5e-324, 1e308, -k / 3.0, 0.1 * k) for k in range(300))
    windows = (WindowSums(), WindowSums(2, rows[7], rows[8]), WindowSums())
    state = _with_turns(TurnLog(300, 0, windows, rows, rows[:5], rows[-3:]))
    blob = encode_state(state)
    back = decode_state(blob)
    assert back == state
    # bit for bit, the sign of a zero included
    assert [math.copysign(1.0, r[1]) for r in back.session.turns.current_rows] == [-1.0] * 300
    assert len(blob) < 300 * 6 * 8 + 600 * 2 + 400  # each row once, two bytes an index


def test_an_open_session_is_packed_each_row_once() -> None:
    config = DriftConfig()
    log = TurnLog.start(config)
    for k in range(1, 10):
        log = log.add(tuple(float(k + j) for j in range(6)), config)
        if k == 5:
            log = log.looked()
    state = _with_turns(log)
    assert (len(log.current_rows), len(log.early_rows), len(log.late_rows)) == (4, 0, 3)
    blob = encode_state(state)
    assert decode_state(blob) == state
    # four distinct rows of six doubles, and the windows reached (two of three)
    assert len(blob) < 4 * 48 + 2 * 96 + 200
