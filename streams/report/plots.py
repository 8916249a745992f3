"""The governance report's plots: matplotlib figures rendered to inline SVG.

Every function takes numbers the report already aggregated and returns one
``<svg>`` element as text, ready to sit inside the HTML page: text is drawn as
paths (no font needed to read it), the ids inside are prefixed with the plot's
name so several SVGs share a page, and no figure touches pyplot's global state.
Each data mark (a bar, a set of points) that shows a non-zero number carries the
id ``<plot>-data-<series>-<i>``, so a test can count what was drawn against the
JSON twin.

>>> svg = bars_by_day("holds", ("2026-11-02", "2026-11-03"), {"opened": (1, 0), "released": (0, 2)},
...                   ylabel="holds")
>>> svg.startswith("<svg"), svg.count('id="holds-data-'), "<?xml" in svg
(True, 2, False)
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import date
from typing import Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

#: Okabe-Ito: tells colours apart for most colour-blind readers, and prints in grey.
COLORS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
TIER_COLORS = {"low": "#009E73", "medium": "#E69F00", "high": "#D55E00"}
OUTCOME_COLORS = {"verified": "#009E73", "partial": "#E69F00", "failed": "#D55E00",
                  "in_progress": "#56B4E9", "requested": "#0072B2"}
_EMPTY = "nothing in this range"
_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(xlink:href="#|href="#|url\(#)([^")]+)')


def _style(name: str) -> AbstractContextManager[None]:
    """The plots' look, and an id salt of their own so that two plots never share an id."""
    rc: Any = {"svg.hashsalt": name, "svg.fonttype": "path", "font.size": 8.5,
               "font.family": "DejaVu Sans", "axes.spines.top": False,
               "axes.spines.right": False, "axes.titlesize": 9, "axes.titleweight": "bold",
               "axes.titlelocation": "left", "legend.frameon": False, "legend.fontsize": 8,
               "axes.grid": True, "axes.grid.axis": "y", "grid.color": "#dddddd",
               "grid.linewidth": 0.6, "axes.axisbelow": True}
    return matplotlib.rc_context(rc)


def svg_of(fig: Figure, name: str) -> str:
    """``fig`` as an ``<svg>`` element whose ids cannot clash with another plot's."""
    buf = io.StringIO()
    with _style(name):
        fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight",
                    pad_inches=0.04)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = _ID.sub(lambda m: f'id="{name}-{m.group(1)}"', text)
    text = _REF.sub(lambda m: f"{m.group(1)}{name}-{m.group(2)}", text)
    return text.replace("<svg ", f'<svg role="img" aria-labelledby="{name}-title" ', 1)


def _figure(name: str, height_in: float = 2.5, width_in: float = 6.6,
            panels: int = 1, sharex: bool = False, rows: int = 1) -> tuple[Figure, list[Axes]]:
    with _style(name):
        fig = Figure(figsize=(width_in, height_in), layout="constrained")
        axes = fig.subplots(rows, panels, sharex=sharex, squeeze=False)
    return fig, list(axes.ravel())


def _day_labels(days: Sequence[str]) -> list[str]:
    step = max(1, len(days) // 14)
    out = []
    for i, d in enumerate(days):
        day = date.fromisoformat(d)
        out.append(f"{day:%a}\n{day.day} {day:%b}" if i % step == 0 else "")
    return out


def _empty(ax: Axes) -> None:
    ax.text(0.5, 0.5, _EMPTY, transform=ax.transAxes, ha="center", va="center",
            color="#777777")


def _bars(ax: Axes, x: np.ndarray, values: np.ndarray, width: float, series: str, color: str,
          *, bottom: np.ndarray | None = None, horizontal: bool = False) -> None:
    """Bars for the non-zero ``values`` only, each with the id of its series and index."""
    idx = np.flatnonzero(values)
    if not len(idx):
        return
    base = bottom[idx] if bottom is not None else None
    if horizontal:
        bars = ax.barh(x[idx], values[idx], width, left=base, color=color)
    else:
        bars = ax.bar(x[idx], values[idx], width, bottom=base, color=color)
    for i, bar in zip(idx, bars, strict=True):
        bar.set_gid(f"data-{series}-{i}")


def _legend(ax: Axes, entries: dict[str, str]) -> None:
    ax.legend(handles=[Patch(color=c, label=k.replace("_", " ")) for k, c in entries.items()],
              loc="upper left", bbox_to_anchor=(1.0, 1.0))


def bars_by_day(name: str, days: Sequence[str], series: Mapping[str, Sequence[int]], *,
                ylabel: str, colors: Mapping[str, str] | None = None, stacked: bool = False,
                label_bars: Sequence[str] = ()) -> str:
    """Counts per day, one bar per series side by side (or ``stacked``)."""
    return _bar_chart(name, _day_labels(days), series, xlabel=None, ylabel=ylabel,
                      colors=colors, stacked=stacked, label_bars=label_bars)


def _bar_chart(name: str, labels: list[str], series: Mapping[str, Sequence[int]], *,
               xlabel: str | None, ylabel: str, colors: Mapping[str, str] | None,
               stacked: bool = False, label_bars: Sequence[str] = ()) -> str:
    """Counts per label, one bar per series side by side (or ``stacked``); ``label_bars``
    names the series whose bars carry their count."""
    fig, (ax,) = _figure(name)
    with _style(name):
        x = np.arange(len(labels), dtype=float)
        keys = list(series)
        width = 0.8 if stacked else 0.8 / max(1, len(keys))
        bottom = np.zeros(len(labels))
        entries = {}
        for j, key in enumerate(keys):
            values = np.asarray(series[key], dtype=float)
            color = entries[key] = (colors or {}).get(key, COLORS[j % len(COLORS)])
            offset = 0.0 if stacked else (j - (len(keys) - 1) / 2) * width
            _bars(ax, x + offset, values, width, key, color,
                  bottom=bottom if stacked else None)
            if key in label_bars:
                for xi, top, v in zip(x + offset, values + bottom, values, strict=True):
                    if v:
                        ax.annotate(f"{int(v)}", (xi, top), ha="center", va="bottom",
                                    fontsize=7, xytext=(0, 1), textcoords="offset points")
            if stacked:
                bottom += values
        ax.set_xticks(x, labels)
        ax.set_xlim(-0.6, len(labels) - 0.4)
        if xlabel is not None:
            ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if not any(any(v) for v in series.values()):
            _empty(ax)
        _legend(ax, entries)
    return svg_of(fig, name)


def distributions(name: str, panels: Mapping[str, tuple[Sequence[float], Sequence[int]]],
                  marks: Mapping[str, Sequence[float]]) -> str:
    """Histograms over [0, 1], one small panel each (log count axis: most scores sit at 0)."""
    fig, axes = _figure(name, height_in=2.3, panels=len(panels))
    with _style(name):
        for j, (ax, (title, (edges, counts))) in enumerate(zip(axes, panels.items(),
                                                              strict=True)):
            e = np.asarray(edges, dtype=float)
            c = np.asarray(counts, dtype=float)
            _bars(ax, (e[:-1] + e[1:]) / 2, c, float(e[1] - e[0]) * 0.92, title,
                  COLORS[j % len(COLORS)])
            ax.set_title(title.replace("_", " "), fontsize=8.5)
            ax.set_xlim(0, 1)
            ax.set_xticks([0, 0.5, 1])
            if c.any():
                ax.set_yscale("log")
                ax.set_ylim(0.7, max(2.0, float(c.max()) * 1.6))
            else:
                _empty(ax)
            for value in marks.get(title, ()):
                ax.axvline(value, color="#555555", linestyle="--", linewidth=0.8)
        axes[0].set_ylabel("scores (log)")
    return svg_of(fig, name)


def bars_by_category(name: str, categories: Sequence[str], series: Mapping[str, Sequence[int]],
                     *, xlabel: str, ylabel: str, colors: Mapping[str, str] | None = None) -> str:
    """Counts per category (turns to baseline), one bar per series side by side."""
    return _bar_chart(name, list(categories), series, xlabel=xlabel, ylabel=ylabel,
                      colors=colors)


def horizontal_stacked(name: str, rows: Mapping[str, Mapping[str, int]], segments: Sequence[str], *,
                       xlabel: str, colors: Mapping[str, str] | None = None) -> str:
    """One horizontal bar per row (a reason), split into ``segments`` (outcomes)."""
    labels = list(rows) or [""]
    fig, (ax,) = _figure(name, height_in=max(1.5, 0.42 * len(labels) + 0.9))
    with _style(name):
        y = np.arange(len(labels), dtype=float)
        left = np.zeros(len(labels))
        entries = {}
        for j, seg in enumerate(segments):
            values = np.asarray([rows.get(r, {}).get(seg, 0) for r in labels], dtype=float)
            if not values.any():
                continue
            color = entries[seg] = (colors or {}).get(seg, COLORS[j % len(COLORS)])
            _bars(ax, y, values, 0.6, seg, color, bottom=left, horizontal=True)
            left += values
        for yi, total in zip(y, left, strict=True):
            if total:
                ax.annotate(f"{int(total)}", (total, yi), va="center", fontsize=7,
                            xytext=(3, 0), textcoords="offset points")
        ax.set_yticks(y, [label.replace("_", " ") for label in labels])
        ax.invert_yaxis()
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        ax.grid(axis="y", visible=False)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if not left.any():
            _empty(ax)
        else:
            ax.set_xlim(0, float(left.max()) * 1.15)
            if len(segments) > 1:
                _legend(ax, entries)
    return svg_of(fig, name)


def scores_over_sessions(name: str, points: Sequence[tuple[int, float, str]],
                         quality: Sequence[tuple[int, float]], thresholds: tuple[float, float],
                         reattune_threshold: float, sessions: int) -> str:
    """One user's drift scores per session (a point per checkpoint, coloured by tier) and,
    below, their re-attunement quality per session."""
    fig, (top, bottom) = _figure(name, height_in=4.2, width_in=11.0, rows=2, sharex=True)
    with _style(name):
        for tier, color in TIER_COLORS.items():
            xs = [p[0] for p in points if p[2] == tier]
            ys = [p[1] for p in points if p[2] == tier]
            if xs:
                jitter = np.linspace(-0.15, 0.15, 5)
                dots = top.scatter(np.asarray(xs) + jitter[np.arange(len(xs)) % 5], ys, s=22,
                                   color=color, label=tier, zorder=3, edgecolor="white",
                                   linewidth=0.5)
                dots.set_gid(f"data-{tier}")
        for value, label in zip(thresholds, ("medium", "high"), strict=True):
            top.axhline(value, color=TIER_COLORS[label], linestyle="--", linewidth=0.8)
        top.set_ylim(-0.04, 1.04)
        top.set_ylabel("drift score")
        if points:
            top.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
        else:
            _empty(top)
        if quality:
            line = bottom.plot([q[0] for q in quality], [q[1] for q in quality], marker="D",
                               markersize=4, color=COLORS[0], linewidth=1)[0]
            line.set_gid("data-reattune_quality")
        else:
            _empty(bottom)
        bottom.axhline(reattune_threshold, color="#555555", linestyle="--", linewidth=0.8)
        bottom.set_ylim(-0.04, 1.04)
        bottom.set_ylabel("re-attunement")
        bottom.set_xlabel("session (in order, within the range)")
        ticks = list(range(1, sessions + 1))
        step = max(1, len(ticks) // 20)
        bottom.set_xticks(ticks[::step])
        bottom.set_xlim(0.4, max(1, sessions) + 0.6)
    return svg_of(fig, name)
