"""A checkpoint's snapshots encoded from the kernel's columns, to the byte the snapshots of the
states the columns build.

A checkpoint stores its users' states without building each state object: it takes them
from the columns (:func:`drift.kernel.parts.take_slots`, the turn rows each once by a
compiled pass) and encodes them there (:func:`baselines.snapshot.encode_taken`). What it
stores must be :func:`baselines.snapshot.encode_state` of the state
:meth:`~drift.kernel.UserColumns.state_at` builds, byte for byte, at every point of any
log: after any batch, from slots stripped or not, with one- and two-byte row indices.
"""

from __future__ import annotations

import math

from baselines.snapshot import decode_state, encode_state, encode_taken
from drift.kernel import UserColumns
from drift.kernel.parts import take_slots
from drift.model import DriftConfig, FhrEvent, Mode, ModelTriple
from drift.state import SessionState, TurnLog, UserState, WindowSums
from tests.drift.kernel_paths import kernel, users_log
from tests.drift.test_fold_properties import Plan
from tests.drift.test_kernel_slots import drawn
from tests.streams.golden import golden_events


class _Checked:
    """After each batch: every user's snapshot taken from the columns checked against the
    state's; every other batch, every user stripped after (as a checkpoint strips its idle
    users), so that slots are taken stripped, dirty and clean."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.batches = 0
        self.from_columns = 0
        self.turn_logs = 0

    def __call__(self, cols: UserColumns) -> None:
        self.batches += 1
        users = sorted(cols.states)
        taken, whole = take_slots(cols, users)
        blobs = dict(zip(taken.users, encode_taken(taken), strict=True))
        assert set(blobs) | set(whole) == set(users) and not set(blobs) & set(whole)
        self.from_columns += len(blobs)
        self.turn_logs += sum(taken.in_columns)
        for user_id in users:  # compared after every encoding: building a state cleans its slot
            want = encode_state(cols.states[user_id])
            got = blobs[user_id] if user_id in blobs else encode_state(whole[user_id])
            assert got == want, (self.label, self.batches, user_id)
        if self.batches % 2:
            for user_id in users:
                cols.strip(user_id)


def _check(events: list[FhrEvent], config: DriftConfig, batch: int, label: str) -> _Checked:
    checked = _Checked(label)
    kernel(events, config, batch, after_batch=checked)
    return checked


def test_every_golden_state_taken_from_the_columns_encodes_as_the_state_built() -> None:
    events = golden_events()
    for batch in (7, 64):
        checked = _check(events, DriftConfig(), batch, f"batch={batch}")
        assert checked.from_columns > checked.batches, "most users are taken from the columns"
        assert checked.turn_logs, "open sessions' turn logs are taken from the columns"


@drawn
def test_any_log_taken_from_the_columns_encodes_as_the_state_built(
        sessions: list[list[Plan]], seed: int, batch: int, config: DriftConfig) -> None:
    _check(users_log(sessions, 4, 3, seed), config, batch, f"seed={seed} batch={batch}")


def test_a_log_past_256_distinct_rows_is_taken_with_two_byte_indices() -> None:
    rows = tuple((float(k), -0.0, 5e-324, 1e308, -k / 3.0, 0.1 * k) for k in range(300))
    windows = (WindowSums(), WindowSums(2, rows[7], rows[8]), WindowSums())
    session = SessionState("s1", Mode.FULL, 0.0, 1.0, ModelTriple("m", "t", "bf16"),
                           ("g", "p", "c"), False,
                           TurnLog(300, 1, windows, rows, rows[:5], rows[-3:]))
    state = UserState("u1", Mode.FULL, clock_s=1.0, session=session, durable=True)
    cols = UserColumns(DriftConfig(checkpoint_every=300))
    cols.states["u1"] = state
    cols.strip("u1")  # the shell lets the turn log go: the columns hold it
    taken, whole = take_slots(cols, ["u1"])
    assert not whole and taken.in_columns == [True] and taken.n_distinct == [300]
    (blob,) = encode_taken(taken)
    assert blob == encode_state(state)
    back = decode_state(blob)
    assert back == state
    assert back.session is not None
    assert [math.copysign(1.0, r[1]) for r in back.session.turns.current_rows] == [-1.0] * 300
