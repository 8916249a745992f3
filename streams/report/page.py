"""The parts every page of the governance report is made of (no script, no network, prints).

Every number on a page is taken from the page's JSON twin by its path and carries that path
in ``data-key`` (``<span data-key="totals.scores">1,204</span>``), so a reader, or a test,
can hold the page against the twin (:func:`num`). Pages are one self-contained document
(:func:`document`): inline CSS with a print stylesheet, inline SVG plots.

>>> twin = {"totals": {"scores": 1204, "mean": 0.25}, "rows": [{"q": None}]}
>>> num(twin, "totals.scores"), num(twin, "totals.mean"), num(twin, "rows.0.q")
('<span data-key="totals.scores">1,204</span>', '<span data-key="totals.mean">0.25</span>', \
'<span data-key="rows.0.q">–</span>')
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import Any

DASH = "–"


def lookup(twin: Any, path: str) -> Any:
    """The value at a dotted ``path`` of the twin (list items by index)."""
    value = twin
    for part in path.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def shown(value: Any) -> str:
    """A number as the page writes it: thousands separated, two decimals, a dash for none."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.2f}"
    return escape(str(value))


def num(twin: Any, path: str) -> str:
    """The twin's number at ``path``, shown, in an element that names the path."""
    return f'<span data-key="{escape(path)}">{shown(lookup(twin, path))}</span>'


def label(name: str) -> str:
    return escape(name.replace("_", " "))


CSS = """
:root { --ink: #1d2330; --muted: #5b6472; --rule: #d9dde3; --card: #ffffff; --bg: #f4f5f7;
  --low: #009E73; --medium: #E69F00; --high: #D55E00; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 14px/1.45 "DejaVu Sans", system-ui, -apple-system, "Segoe UI", sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 20px 24px 40px; }
header h1 { font-size: 22px; margin: 0 0 4px; }
header p { margin: 2px 0; color: var(--muted); }
h2 { font-size: 17px; margin: 28px 0 10px; padding-bottom: 4px;
  border-bottom: 2px solid var(--rule); }
h3 { font-size: 14px; margin: 0 0 6px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 10px;
  margin-top: 14px; }
.card { background: var(--card); border: 1px solid var(--rule); border-radius: 6px;
  padding: 10px 12px; }
.card .big { font-size: 24px; font-weight: bold; display: block; }
.card .sub { color: var(--muted); font-size: 12px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 14px; }
figure { margin: 0; background: var(--card); border: 1px solid var(--rule); border-radius: 6px;
  padding: 12px 14px; }
figure svg { width: 100%; height: auto; display: block; margin: 4px 0; }
figcaption { color: var(--muted); font-size: 12.5px; margin: 4px 0 8px; }
table { border-collapse: collapse; width: 100%; font-size: 12.5px; }
th, td { text-align: left; padding: 4px 6px; border-bottom: 1px solid var(--rule);
  vertical-align: top; }
th { background: #eef0f3; font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.numbers { margin-top: 6px; }
.numbers th { white-space: nowrap; }
td.driver { min-width: 220px; }
.when { white-space: nowrap; }
.scroll { overflow-x: auto; }
.ref { font-family: "DejaVu Sans Mono", ui-monospace, monospace; font-size: 12px; }
.chip { display: inline-block; padding: 0 6px; border-radius: 9px; font-size: 11.5px;
  margin: 1px 2px 1px 0; background: #e8eaee; white-space: nowrap; }
.chip.high, .chip.open_hold, .chip.failed { background: #f7d9c7; }
.chip.medium, .chip.sustained_low_reattune, .chip.reattune_failed, .chip.partial {
  background: #f8e7bf; }
.chip.low, .chip.verified, .chip.completed { background: #c9eadf; }
.note { background: #fff8e1; border: 1px solid #efd98a; border-radius: 6px; padding: 8px 12px; }
section.left-out li { margin-bottom: 6px; }
.muted { color: var(--muted); }
@page { size: A4 portrait; margin: 12mm; }
@media print {
  body { background: #fff; font-size: 9.5pt; -webkit-print-color-adjust: exact;
    print-color-adjust: exact; }
  main { max-width: none; padding: 0; }
  .grid { display: block; }
  figure { break-inside: avoid; page-break-inside: avoid; margin-bottom: 10px; border-color: #bbb; }
  .card { break-inside: avoid; border-color: #bbb; }
  h2 { break-after: avoid; page-break-after: avoid; }
  tr { break-inside: avoid; }
  .scroll { overflow: visible; }
  table { font-size: 8pt; }
}
"""


def document(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head>"
            f"<body><main>{body}</main></body></html>\n")


def range_line(twin: dict[str, Any]) -> str:
    since, until = twin["since"], twin["until"]
    return (f"Event time from <b>{since[:10]} {since[11:16]}</b> to "
            f"<b>{until[:10]} {until[11:16]}</b> UTC (the end excluded)")


def source_line(twin: dict[str, Any]) -> str:
    src = twin["source"]
    return (f"Read from the output topics on {escape(src['broker'])}: what every worker of the "
            f"deployment published, {num(twin, 'source.records')} records. "
            f"Generated {escape(src['generated_at'][:16].replace('T', ' '))} UTC.")


def card(title: str, big: str, sub: str = "") -> str:
    return (f'<div class="card"><span class="sub">{title}</span><span class="big">{big}</span>'
            f'<span class="sub">{sub}</span></div>')


def plot_figure(name: str, title: str, svg: str, how: str, table: str) -> str:
    return (f'<figure class="plot" data-plot="{name}"><h3 id="{name}-title">{title}</h3>'
            f"{svg}<figcaption>{how}</figcaption>{table}</figure>")


def chips(items: Iterable[str]) -> str:
    return "".join(f'<span class="chip {escape(i)}">{label(i)}</span>' for i in items)


STATISTICS = {"share_contradicted": "share of commitments contradicted",
              "share_fields_changed": "share of safety fields changed"}


def driver_text(twin: dict[str, Any], key: str) -> str:
    """What drove a score: the component, then the features that moved most (attunement) or
    the share that changed (semantic, safety)."""
    d = lookup(twin, key)
    if not d:
        return DASH
    arrows = {"up": "↑", "down": "↓"}
    parts = [f"<b>{label(d['component'])}</b>"]
    if d["features"]:
        parts.append(", ".join(
            f"{label(f['feature'])} {arrows.get(f['direction'], '')} "
            f"z\u00a0{num(twin, f'{key}.features.{j}.z')}" for j, f in enumerate(d["features"])))
    elif d["statistic"] in STATISTICS and d["value"] is not None:
        parts.append(f"{STATISTICS[d['statistic']]} {num(twin, f'{key}.value')}")
    return ": ".join(parts)


def short_ref(ref: str) -> str:
    """A user reference, shortened on screen (the whole one is in ``title`` and the twin)."""
    return f'<span class="ref" title="{escape(ref)}">{escape(ref[:12])}…</span>'


ALWAYS_LEFT_OUT = (
    "<li><b>User ids.</b> People are named by <code>user_ref</code>, the pseudonymous "
    "reference the service's own audit records keep (a hash of the user id; "
    "<code>--user U</code> finds one person's page from an id the reviewer already has). "
    "</li>"
    "<li><b>Session, event, request and commitment ids.</b> None is shown: they are "
    "chosen upstream and can contain a user id. Sessions are numbered by their order "
    "within the range instead.</li>"
    "<li><b>Raw text and feature values.</b> The outputs carry no text (dead letters "
    "carry reason codes and field names, never values), and the report shows reason "
    "codes, counts, scores and the attribution's z statistics. Baseline versions are "
    "listed without their values or source session.</li>")


WHEN_COLUMNS = frozenset({"day", "at", "created_at", "expires_at", "erased_at"})


def table_rows(items: list[dict[str, Any]], cols: list[tuple[str, str]], key: str,
          twin: dict[str, Any], numeric: Iterable[str] = ()) -> str:
    numeric = set(numeric)
    if not items:
        return '<p class="muted">None in this range.</p>'
    head = "".join(f'<th class="{"n" if c in numeric else ""}">{escape(title)}</th>'
                   for c, title in cols)
    body = []
    for i, item in enumerate(items):
        cells = []
        for c, _ in cols:
            v = item[c]
            if c in numeric:
                cells.append(f'<td class="n">{num(twin, f"{key}.{i}.{c}")}</td>')
            elif c == "driver":
                cells.append(f'<td class="driver">{driver_text(twin, f"{key}.{i}.{c}")}</td>')
            elif isinstance(v, list):
                cells.append(f"<td>{chips(str(x) for x in v)}</td>")
            elif c in ("tier", "effective_tier", "outcome", "change"):
                cells.append(f"<td>{chips([str(v)])}</td>")
            elif c in WHEN_COLUMNS:
                cells.append(f'<td class="when">{shown(v)}</td>')
            else:
                cells.append(f"<td>{shown(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table id="{key}-table"><tr>{head}</tr>{"".join(body)}'
            "</table></div>")
