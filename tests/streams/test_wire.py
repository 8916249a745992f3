"""The output format's pieces that the golden log does not reach on every value.

``tests/streams/test_golden_outputs.py`` holds every topic's bytes for a fixed log; here,
the event time's text against the datetime it stands for, on any time.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams.wire import iso
from tests.conftest import examples

#: Every event time a message can carry: the datetime range, as seconds since the epoch.
TIMES = st.floats(min_value=-62135596800.0, max_value=253402300799.0, allow_nan=False)
#: Times half a microsecond off the grid, where the rounding (half to even) decides.
HALVES = st.builds(lambda s, us: s + (us + 0.5) / 1e6, st.integers(0, 4_000_000_000),
                   st.integers(0, 999_999))


def _datetime_text(ts_s: float) -> str:
    return datetime.fromtimestamp(ts_s, UTC).isoformat(timespec="microseconds")[:-6] + "Z"


@settings(max_examples=examples(2000))
@given(st.one_of(TIMES, HALVES))
@example(0.0)
@example(86399.9999995)  # rounds up into the next day
@example(86399.9999996)
@example(0.0000025)  # a half that rounds down, to even
@example(-0.0000005)
@example(1.7e9 + 0.25)
def test_an_event_time_reads_as_the_datetime_it_stands_for(ts_s: float) -> None:
    assert iso(ts_s) == _datetime_text(ts_s)
