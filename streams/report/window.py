"""The event-time range of a governance report: ``--since`` / ``--until`` as a half-open
:class:`Window`, and the days it touches. Nothing here reads a clock: "now" comes in."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from streams.edge.wire import iso

DEFAULT_DAYS = 7


class WindowError(ValueError):
    """A ``--since`` / ``--until`` that is not an ISO 8601 date or time, or an empty range."""


def parse_instant(text: str, *, end_of_day: bool) -> float:
    """Epoch seconds of an ISO 8601 date or date-time (UTC when it names no offset).

    A date alone is the start of that day, or with ``end_of_day`` the start of the
    next one, so ``--until 2026-11-08`` includes the 8th.

    >>> parse_instant("2026-11-08", end_of_day=False), parse_instant("2026-11-08", end_of_day=True)
    (1794096000.0, 1794182400.0)
    >>> parse_instant("2026-11-08T12:00:00+01:00", end_of_day=True)
    1794135600.0
    """
    text = text.strip()
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            return (start + timedelta(days=1 if end_of_day else 0)).timestamp()
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise WindowError(f"{text!r} is not an ISO 8601 date (2026-11-08) or date-time "
                          "(2026-11-08T09:30:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass(frozen=True, slots=True)
class Window:
    """A half-open range of event time ``[since, until)``."""

    since_s: float
    until_s: float
    since: str = field(init=False)
    until: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.until_s > self.since_s:
            raise WindowError(f"the range is empty: --until {iso(self.until_s)} is not after "
                              f"--since {iso(self.since_s)}")
        object.__setattr__(self, "since", iso(self.since_s))
        object.__setattr__(self, "until", iso(self.until_s))

    @staticmethod
    def of(since: str | None, until: str | None, latest_ts: str | None, now_s: float,
           days: int = DEFAULT_DAYS) -> Window:
        """The range of ``--since`` / ``--until``. Without ``--until``: to the end of the day
        of the latest output (``latest_ts``), or ``now_s`` when there is none; without
        ``--since``: ``days`` days before that.

        >>> w = Window.of(None, None, "2026-11-08T10:00:00.000000Z", now_s=0.0)
        >>> w.since, w.until, len(w.days())
        ('2026-11-02T00:00:00.000000Z', '2026-11-09T00:00:00.000000Z', 7)
        """
        if until is not None:
            until_s = parse_instant(until, end_of_day=True)
        elif latest_ts is not None:
            until_s = parse_instant(latest_ts[:10], end_of_day=True)
        else:
            until_s = now_s
        since_s = (parse_instant(since, end_of_day=False) if since is not None
                   else until_s - days * 86400.0)
        return Window(since_s, until_s)

    def contains(self, ts: str) -> bool:
        """Whether ``ts`` (``streams.edge.wire.iso`` text, which sorts as time does) is in range."""
        return self.since <= ts < self.until

    def days(self) -> tuple[str, ...]:
        """Every UTC day the range touches, ``YYYY-MM-DD``."""
        first = datetime.fromtimestamp(self.since_s, UTC).date()
        last = datetime.fromtimestamp(self.until_s - 1e-6, UTC).date()
        return tuple((first + timedelta(days=i)).isoformat()
                     for i in range((last - first).days + 1))
