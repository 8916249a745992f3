"""What the demo shows: the legend, the counts beside ``/metrics``, the notable events.

On a terminal :class:`LiveScreen` updates one screen in place (``rich.live.Live``); piped
or in a test, :class:`PlainScreen` prints a short summary every few seconds. Every line
either prints fits in 100 columns (:data:`WIDTH`); the closing tallies are printed in the
exposition format of ``/metrics``, so that a person or a script can hold one against the
other.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from drift.model import DriftConfig
from streams.demo.tally import (
    COUNTERS,
    ERASURES,
    SCORES,
    Counted,
    Notable,
    Scrape,
    Tally,
    differences,
    why_different,
)
from streams.edge.wire import iso

WIDTH = 99
"""The widest line the demo prints: it fits in 100 columns."""
PLAIN_EVERY_S = 5.0


@dataclass(frozen=True)
class View:
    """Everything a screen shows at one moment."""

    elapsed_s: float
    round: int
    sent: int
    rate: float
    event_ts: float
    tally: Tally
    metrics: Scrape | None
    settling: bool = False
    """The traffic has stopped and the demo waits for the worker."""


def _clock(s: float) -> str:
    """
    >>> _clock(75.9)
    '1:15'
    """
    return f"{int(s) // 60}:{int(s) % 60:02d}"


def _wrap(text: str, indent: str = "      ") -> list[str]:
    return textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_on_hyphens=False)


def _pairs(c: Counted, tally: Tally) -> str:
    return " ".join(f"{k}={n}" for k, n in c.ordered(tally.counts[c.metric]))


def _aside(c: Counted, tally: Tally) -> str:
    """What a counter's row says beside its counts."""
    if c.metric == SCORES:
        return f"(+{tally.reattune_scores} re-attunement quality scores)"
    if c.metric == ERASURES:
        receipts = " ".join(f"{k}={n}" for k, n in sorted(tally.receipts.items())) or "none"
        return f"(receipts, one per request: {receipts})"
    return ""


def traffic_line(v: View) -> str:
    worker = ("the worker not answering yet" if v.metrics is None
              else f"{v.metrics.processed} processed by the worker")
    return (f"round {v.round + 1}: {v.sent} records sent at {v.rate:.0f}/s, {worker}, "
            f"event time {iso(v.event_ts)[:10]}")


def agreement(v: View) -> str:
    """Whether the counts are what /metrics says; a worker counts an output a moment before
    the demo reads it from its topic."""
    m = v.metrics
    if m is None:
        return "/metrics: not answering yet"
    diff = differences(v.tally, m)
    if not diff:
        return "/metrics: the same counts"
    ahead = [c.what for c in diff
             if sum(m.counts[c.metric].values()) > sum(v.tally.counts[c.metric].values())]
    behind = [c.what for c in diff if c.what not in ahead]
    return "; ".join(
        ([f"/metrics ahead of the topics (outputs in flight): {', '.join(ahead)}"]
         if ahead else [])
        + ([f"/metrics behind the topics (a restarted worker?): {', '.join(behind)}"]
           if behind else []))


def plain_summary(v: View, new: Sequence[Notable]) -> list[str]:
    """One periodic summary: traffic, a line per counter, the notable events since the last."""
    lines = [f"[{_clock(v.elapsed_s):>5}] {traffic_line(v)}"]
    for c in COUNTERS:
        lines += _wrap(f"  {c.what}: {_pairs(c, v.tally) or 'none yet'} {_aside(c, v.tally)}")
    lines += _wrap(f"  {agreement(v)}")
    if new:
        lines.append("  latest notable events:")
        for n in new:
            lines += _wrap(f"  {_clock(n.at_s)} {n.kind} {n.user_id}: {n.detail}", " " * 8)
    return lines


def legend(config: DriftConfig | None = None) -> list[str]:
    """What each tier, response, violation and escalation means, what the demo sends on
    purpose, and how the counts compare with /metrics and the report."""
    c = config or DriftConfig()
    entries = {
        "tiers": (f"continuity_drift_score low < {c.threshold_medium} <= medium < "
                  f"{c.threshold_high} <= high; a safety-baseline mismatch is high alone"),
        "continuity_check_prompted": ("a medium score: the companion asks the user to check "
                                      "continuity (once a session)"),
        "continuity_rebaseline_required": ("HOLD: a high score; it stays, across sessions, "
                                           "until baseline_reconfirmed covers it"),
        "hold_released": "baseline_reconfirmed covered every kind under the HOLD",
        "model_change_notice": ("the session's model differs from the baselines' model: "
                                "tell the user"),
        "posture_downgrade": "with it: act conservatively until re-attuned",
        "reattune_completed": (f"at turn {c.reattune_checkpoint_turn} after a model change, "
                               f"quality >= {c.reattune_threshold}: posture restored"),
        "reattune_failed": "below it: reset_session_only or continue_conservative is offered",
        "relational_write_mode_forbidden": ("a relational write the continuity mode does not "
                                            "allow"),
        "relational_write_in_blocked_state": ("a relational write during crisis, care override "
                                              "or cooloff, AE med/high, legal hold or high "
                                              "resonance without reflection"),
        "relational_write_unconfirmed": ("a relational write the user did not confirm "
                                         "(continuity_full)"),
        "model_change_undisclosed": ("a model change without model_change_notice_shown by the "
                                     "re-attunement checkpoint"),
        "sustained_low_reattune": (f"escalation: {c.sustained_low_sessions} sessions in a row "
                                   "re-attuned below the threshold"),
        "sent on purpose": ("every dead letter (a record that is not JSON, a turn numbered 0, a "
                            "key that is not the event's user), and the violations of the "
                            "governance users (writes unconfirmed and in a crisis) and of the "
                            "model_change_undisclosed users"),
        "counted as": ("scores one per checkpoint by their own tier, as continuity_scores_total "
                       "(the report's sessions_by_max_effective_tier counts sessions); erasures "
                       "per target, as continuity_erasures_total and the report's "
                       "erasure_targets_by_outcome; receipts one per request, as the report's "
                       "erasure_requests"),
    }
    lines = ["what the outputs mean:"]
    for name, meaning in entries.items():
        lines += _wrap(f"  {name}: {meaning}")
    return lines


def _notable_row(n: Notable, width: int) -> Table:
    row = Table(box=None, pad_edge=False, show_edge=False, width=width, show_header=False)
    row.add_column(width=5, no_wrap=True)
    row.add_column(width=16, no_wrap=True, style="bold")
    row.add_column(ratio=1, overflow="fold")
    row.add_row(_clock(n.at_s), n.kind, f"{n.user_id}: {n.detail}")
    return row


def live_screen(v: View, console: Console, footer: str) -> Group:
    """The in-place screen: traffic, counts beside /metrics, and as many of the latest
    notable events as the console's height leaves room for. At most 100 columns wide."""
    width = min(console.width, WIDTH + 1)
    head = Text.assemble(("continuity-drift demo ", "bold"),
                         f"{_clock(v.elapsed_s)}  "
                         + ("traffic stopped: waiting for the worker (Ctrl-C: stop now)\n"
                            if v.settling else "Ctrl-C stops\n"), traffic_line(v))
    counts = Table(box=None, pad_edge=False, show_edge=False, width=width, header_style="bold")
    counts.add_column("from the output topics", width=26, no_wrap=True)
    counts.add_column("counts", ratio=1, overflow="fold")
    counts.add_column("/metrics", width=8, no_wrap=True)
    diff = [] if v.metrics is None else differences(v.tally, v.metrics)
    for c in COUNTERS:
        if v.metrics is None:
            mark = Text("?", style="dim")
        elif c in diff:
            mark = Text(str(sum(v.metrics.counts[c.metric].values())), style="yellow")
        else:
            mark = Text("same", style="green")
        counts.add_row(c.what, f"{_pairs(c, v.tally) or '-'} {_aside(c, v.tally)}", mark)
    title = Text("latest notable events, newest first", style="bold")
    rows = [_notable_row(n, width) for n in reversed(v.tally.notable)]
    options = console.options.update(width=width)

    def height(renderables: Sequence[RenderableType]) -> int:
        return sum(len(console.render_lines(r, options, pad=False)) for r in renderables)

    blank = Text("")
    layouts: list[tuple[list[RenderableType], list[RenderableType]]] = [
        ([head, blank, counts, blank, title], [blank, Text(footer, style="dim")]),
        ([head, counts, title], []),  # a short terminal: room for the story first
    ]
    for top, tail in layouts:
        room = console.height - 1 - height([*top, *tail])  # Live crops below the height
        shown: list[RenderableType] = []
        for row in rows:
            room -= height([row])
            if room < 0:
                break
            shown.append(row)
        if shown or not rows:
            break
    if not shown:
        shown.append(Text("(a taller terminal shows them here)" if rows else "none yet",
                          style="dim"))
    return Group(*top, *shown, *tail)


def final_lines(v: View) -> list[str]:
    """The closing tallies, in the exposition format of /metrics, and how they compare.

    >>> t = Tally()
    >>> t.counts[SCORES].update(low=3, high=1)
    >>> m = Scrape({c.metric: {} for c in COUNTERS} | {SCORES: {"low": 3, "high": 1}}, 500)
    >>> print("\\n".join(final_lines(View(72.0, 1, 500, 400.0, 1.7e9, t, m))))
    stopped after 1:12: 500 records sent in 2 rounds; the worker processed 500
    final counts read from the output topics, as the worker's /metrics shows them:
      continuity_scores_total{tier="low"} 3
      continuity_scores_total{tier="high"} 1
      (every other sample of these counters is 0)
      erasure receipts, one per request (a receipt has a target per baseline kind): none
      re-attunement quality scores (sessions without a model change): 0
    /metrics agrees with every count above
    """
    lines = [f"stopped after {_clock(v.elapsed_s)}: {v.sent} records sent in {v.round + 1} "
             "rounds" + ("" if v.metrics is None
                         else f"; the worker processed {v.metrics.processed}"),
             "final counts read from the output topics, as the worker's /metrics shows them:"]
    for c in COUNTERS:
        lines += [f'  {c.metric}{{{c.label}="{k}"}} {n}'
                  for k, n in c.ordered(v.tally.counts[c.metric])]
    lines.append("  (every other sample of these counters is 0)")
    receipts = " ".join(f"{k}={n}" for k, n in sorted(v.tally.receipts.items())) or "none"
    lines += _wrap(f"  erasure receipts, one per request (a receipt has a target per baseline "
                   f"kind): {receipts}")
    lines.append(f"  re-attunement quality scores (sessions without a model change): "
                 f"{v.tally.reattune_scores}")
    if v.tally.duplicates:
        lines.append(f"  duplicates dropped by id: {v.tally.duplicates}")
    if v.metrics is None:
        lines.append("/metrics did not answer: nothing to compare with")
        return lines
    diff = differences(v.tally, v.metrics)
    if not diff:
        lines.append("/metrics agrees with every count above")
    for c in diff:
        lines += _wrap(f"/metrics differs for {c.metric}: "
                       f"{why_different(v.tally, v.metrics, c)}")
    return lines


class Screen(Protocol):
    def say(self, line: str) -> None: ...
    def show(self, v: View) -> None: ...
    def close(self) -> None: ...


class PlainScreen:
    """Short periodic summaries, for a pipe, a file or a test."""

    def __init__(self) -> None:
        self._next = PLAIN_EVERY_S
        self._noted = 0

    def say(self, line: str) -> None:
        print(line, flush=True)

    def show(self, v: View) -> None:
        if v.elapsed_s < self._next:
            return
        self._next = v.elapsed_s + PLAIN_EVERY_S
        fresh = min(v.tally.noted - self._noted, len(v.tally.notable))
        self._noted = v.tally.noted
        new = list(v.tally.notable)[len(v.tally.notable) - fresh:]
        print("\n".join(plain_summary(v, new)), flush=True)

    def close(self) -> None:
        pass


class LiveScreen:
    """One screen, updated in place, at most 100 columns wide."""

    def __init__(self, console: Console, footer: str) -> None:
        self.console = console
        self.footer = footer
        self.live: Live | None = None

    def say(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def show(self, v: View) -> None:
        screen = live_screen(v, self.console, self.footer)
        if self.live is None:
            self.live = Live(screen, console=self.console, auto_refresh=False,
                             redirect_stdout=False, redirect_stderr=False)
            self.live.start()
        self.live.update(screen, refresh=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
