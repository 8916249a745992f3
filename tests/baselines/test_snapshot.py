"""The versioned state snapshot: today's round trip, and state written by the first release.

``fixtures/user_state_v1.msgpack`` holds the state blobs the first release stored
for every user of the golden event log after its first ``events_applied`` events.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from baselines.snapshot import VERSION, decode_state, encode_state
from drift.model import DriftConfig
from drift.replay import MemoryReplay
from drift.state import SessionState, UserState
from tests.streams.golden import golden_events

FIXTURE = Path(__file__).parent / "fixtures" / "user_state_v1.msgpack"
#: The configuration the fixture was written with (the first release kept 512 event ids).
FIRST_RELEASE = DriftConfig(recent_event_ids=512)


def _without_review_counts(state: UserState) -> UserState:
    """The first release kept a session's score count and top tier in worker memory only."""
    s = state.session
    if s is None:
        return state
    blank = SessionState(s.session_id, s.mode, s.started_s, s.last_s, s.model, s.safety,
                         s.ephemeral, s.turns)
    return replace(state, session=replace(s, scores=blank.scores, max_tier=blank.max_tier,
                                          reattune_quality=blank.reattune_quality))


def _fixture() -> tuple[int, dict[str, bytes]]:
    raw = msgspec.msgpack.decode(FIXTURE.read_bytes())
    return int(raw["events_applied"]), dict(raw["states"])


def test_state_written_by_the_first_release_loads_as_the_same_state() -> None:
    cut, blobs = _fixture()
    replay = MemoryReplay(FIRST_RELEASE)
    for event in golden_events()[:cut]:
        replay.feed(event)
    assert set(blobs) == set(replay.states)
    loaded = {u: decode_state(b) for u, b in blobs.items()}
    assert sum(s.session is not None for s in loaded.values()) >= 30
    assert any(s.ladder.hold for s in loaded.values())
    assert any(s.session and s.session.model_change.detected for s in loaded.values())
    for user_id, state in loaded.items():
        expected = _without_review_counts(replay.states[user_id])
        if state.memory_only:  # their ring now starts at the open session (drift.fold)
            state = replace(state, recent=expected.recent)
        assert state == expected, user_id


def test_the_fold_goes_on_from_first_release_state_as_if_never_stopped() -> None:
    cut, blobs = _fixture()
    events = golden_events()
    continuous = MemoryReplay(FIRST_RELEASE)
    for event in events[:cut]:
        continuous.feed(event)
    resumed = MemoryReplay(FIRST_RELEASE, {u: decode_state(b) for u, b in blobs.items()},
                           dict(continuous.baselines))
    for event in events[cut:]:
        assert resumed.feed(event) == continuous.feed(event)


def test_current_snapshots_carry_their_version_and_round_trip() -> None:
    cut, _ = _fixture()
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
