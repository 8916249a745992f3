"""Headless Chromium for tests that look at a page as a person would: its DOM, its pixels."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from streams.report.page import lookup, shown

#: Laptop-screen width the pages are looked at with.
WIDTH = 1280

#: Laid into a copy of the page (never the page itself): writes where each plot sits.
_MEASURE = """<script>
document.querySelectorAll('figure[data-plot]').forEach(function (f) {
  var r = f.getBoundingClientRect();
  f.setAttribute('data-rect', [r.left + window.scrollX, r.top + window.scrollY, r.width,
                               r.height].map(Math.round).join(','));
});
document.body.setAttribute('data-page-height',
  Math.ceil(document.documentElement.getBoundingClientRect().height));
</script>"""


def chromium() -> str:
    """The Chromium binary; skips the test where none is installed, except in CI."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            raise AssertionError("chromium is not installed (apt-get install -y chromium)")
        pytest.skip("needs headless Chromium: apt-get install -y chromium")
    return found


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--no-first-run", "--disable-dev-shm-usage", "--force-device-scale-factor=1",
         f"--user-data-dir={profile}", *args],
        capture_output=True, timeout=120, check=True)


@dataclass(frozen=True)
class Rendered:
    """A page as Chromium laid it out (the DOM after parsing) and drew it (a full-page PNG)."""

    dom: str
    png: Path
    height: int
    plots: dict[str, tuple[int, int, int, int]]


def render(html: Path, png: Path, work: Path) -> Rendered:
    """Lay ``html`` out at :data:`WIDTH`, then screenshot the whole page to ``png``."""
    measured = work / f"{html.stem}.measure.html"
    text = html.read_text(encoding="utf-8")
    measured.write_text(text.replace("</body>", _MEASURE + "</body>", 1), encoding="utf-8")
    dom = _run([f"--window-size={WIDTH},900", "--dump-dom", measured.as_uri()],
               work / "profile-dom").stdout.decode("utf-8")
    found = _Measures()
    found.feed(dom)
    height = min(max(found.height, 600), 16000)
    _run([f"--window-size={WIDTH},{height}", f"--screenshot={png}", html.as_uri()],
         work / "profile-shot")
    return Rendered(dom, png, height, found.plots)


def print_to_pdf(html: Path, pdf: Path, work: Path) -> bytes:
    """The page as Chromium prints it (its print CSS), as PDF bytes."""
    _run(["--no-pdf-header-footer", f"--print-to-pdf={pdf}", html.as_uri()], work / "profile-pdf")
    return pdf.read_bytes()


class _Measures(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.height = 0
        self.plots: dict[str, tuple[int, int, int, int]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body" and a.get("data-page-height"):
            self.height = int(a["data-page-height"] or 0)
        if tag == "figure" and a.get("data-plot") and a.get("data-rect"):
            x, y, w, h = (int(v) for v in (a["data-rect"] or "").split(","))
            self.plots[a["data-plot"] or ""] = (x, y, w, h)


class PageNumbers(HTMLParser):
    """The text of every ``<span data-key>`` of a DOM, and the data marks drawn in each plot
    (ids with ``-data-``, see ``streams.report.plots``)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: list[tuple[str, str]] = []
        self.marks: dict[str, list[str]] = {}
        self._open: list[tuple[str, str]] = []
        self._plot: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "figure" and a.get("data-plot"):
            self._plot = a["data-plot"]
        ident = a.get("id") or ""
        if self._plot is not None and "-data-" in ident:
            self.marks.setdefault(self._plot, []).append(ident)
        if tag == "span" and a.get("data-key"):
            self._open.append((a["data-key"] or "", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._plot = None
        if tag == "span" and self._open:
            self.values.append(self._open.pop())

    def handle_data(self, data: str) -> None:
        if self._open:
            key, text = self._open[-1]
            self._open[-1] = (key, text + data)


def assert_numbers_are_the_twins(dom: str, twin: dict[str, Any]) -> int:
    """Every number the page shows is the twin's at the path it names; returns how many."""
    keyed = PageNumbers()
    keyed.feed(dom)
    assert keyed.values, "no number on the page names its place in the twin"
    for key, text in keyed.values:
        assert text == shown(lookup(twin, key)), f"{key}: page shows {text!r}"
    return len(keyed.values)
