"""The governance report's overview page: what happened in the range, who needs review.

:func:`overview_page` lays out what :func:`streams.report.overview.overview` aggregated: summary
cards, one figure per plot (inline SVG from :mod:`streams.report.plots`, in a
``<figure data-plot="NAME">``, with its numbers in a table beneath), the users most in need
of review, what the page leaves out, and where its numbers came from.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import Any

from drift.outputs import ErasureOutcome
from streams.report import plots
from streams.report.evidence import TIERS
from streams.report.overview import COMPONENTS, Overview
from streams.report.page import (
    ALWAYS_LEFT_OUT,
    DASH,
    card,
    chips,
    document,
    driver_text,
    label,
    num,
    plot_figure,
    range_line,
    short_ref,
    source_line,
)


def _per_day_table(twin: dict[str, Any], key: str, series: Iterable[str]) -> str:
    days = twin["days"]
    head = "".join(f'<th class="n">{d[5:]}</th>' for d in days)
    rows = "".join(
        f"<tr><td>{label(s)}</td>"
        + "".join(f'<td class="n">{num(twin, f"{key}.{s}.{i}")}</td>' for i in range(len(days)))
        + "</tr>" for s in series)
    return (f'<div class="scroll"><table class="numbers"><tr><th></th>{head}</tr>{rows}'
            "</table></div>")


def _review(twin: dict[str, Any]) -> str:
    rows = twin["review"]
    if not rows:
        return ('<p class="muted">No user listed: no open HOLD at the end of the range, and no '
                "sustained-low escalation or failed re-attunement in it.</p>")
    head = ("<tr><th>user ref</th><th>why</th><th>HOLD open since</th>"
            '<th class="n">highest drift score</th><th>tier, day</th><th>what drove it</th>'
            '<th class="n">baseline version</th><th class="n">last re-attunement quality</th>'
            '<th class="n">scored sessions</th></tr>')
    body = []
    for i, r in enumerate(rows):
        why = []
        if "open_hold" in r["reasons"]:
            why.append('<span class="chip open_hold">open HOLD</span>')
        if r["escalations"]:
            why.append('<span class="chip sustained_low_reattune">sustained low re-attunement '
                       f'× {num(twin, f"review.{i}.escalations")}</span>')
        if r["reattune_failed"]:
            why.append('<span class="chip reattune_failed">re-attunement failed '
                       f'× {num(twin, f"review.{i}.reattune_failed")}</span>')
        hold = (f"<span class=\"when\">{escape(r['open_hold_since'])}</span> "
                f"{chips(r['hold_kinds'])}"
                if r["open_hold_since"] else DASH)
        tier = (f"{chips([r['tier']])} <span class=\"when\">{escape(r['score_day'] or '')}</span>"
                if r["tier"] else DASH)
        body.append(
            f'<tr data-user-ref="{escape(r["user_ref"])}"><td>{short_ref(r["user_ref"])}</td>'
            f"<td>{''.join(why)}</td><td>{hold}</td>"
            f'<td class="n">{num(twin, f"review.{i}.score")}</td><td>{tier}</td>'
            f'<td class="driver">{driver_text(twin, f"review.{i}.driver")}</td>'
            f'<td class="n">{num(twin, f"review.{i}.baseline_version")}</td>'
            f'<td class="n">{num(twin, f"review.{i}.last_reattune_quality")}</td>'
            f'<td class="n">{num(twin, f"review.{i}.scored_sessions")}</td></tr>')
    more = ""
    if twin["review_total"] > len(rows):
        more = (f'<p class="muted">{num(twin, "review_total")} users qualify; the first '
                f"{len(rows)} are listed (<code>--top N</code> lists more).</p>")
    return (f'<div class="scroll"><table id="review-table">{head}{"".join(body)}</table></div>'
            f"{more}")


def overview_page(view: Overview, twin: dict[str, Any]) -> str:
    """The overview page of ``view``; ``twin`` is its JSON twin (the numbers come from it)."""
    t = twin
    days = view.days
    medium, high = _thresholds(twin)
    figures = [
        plot_figure("tiers", "Scored sessions by tier, per day", plots.bars_by_day(
            "tiers", days, view.tiers_per_day, ylabel="sessions", colors=plots.TIER_COLORS,
            label_bars=("medium", "high")),
            "Each scored session counts once, on the day of its first score, at the highest "
            "<code>tier</code> any of its scores reached (a score's own finding, not a HOLD "
            "carried over). Medium prompts a continuity check; high opens a HOLD.",
            _per_day_table(t, "tiers_per_day", TIERS)),
        plot_figure(
            "components", "Distribution of the drift score and its components",
            plots.distributions("components", {
                c: (view.components[c].edges, view.components[c].counts) for c in COMPONENTS},
                {"continuity_drift_score": (medium, high)}),
            "Every <code>continuity_drift</code> score in the range, in 20 bins over [0, 1]; "
            "the count axis is logarithmic because most scores sit at 0 when nothing "
            "changed. Dashed lines: the medium and high thresholds of the composite. A "
            "component with no baseline of its kind is not counted.",
            _distribution_table(t)),
        plot_figure("holds", "HOLDs opened and released, per day", plots.bars_by_day(
            "holds", days, view.holds_per_day, ylabel="holds",
            colors={"opened": plots.TIER_COLORS["high"], "released": plots.TIER_COLORS["low"]}),
            f"Opened: <code>continuity_rebaseline_required</code>; released: "
            f"<code>hold_released</code> after a <code>baseline_reconfirmed</code> covered it. "
            f"Open at the end of the range: {num(t, 'holds_open_at_end')} "
            "(from the whole history before its end).",
            _per_day_table(t, "holds_per_day", ("opened", "released"))),
        plot_figure("model_changes", "Model changes and re-attunement, per day", plots.bars_by_day(
            "model_changes", days, view.model_changes_per_day, ylabel="sessions",
            colors={"detected": plots.COLORS[0], "completed": plots.TIER_COLORS["low"],
                    "failed": plots.TIER_COLORS["high"]}),
            "Detected: <code>model_change_notice</code> at a session start whose model triple "
            "differs from the baseline's. Completed / failed: the re-attunement checkpoint's "
            "quality at or above / below its threshold.",
            _per_day_table(t, "model_changes_per_day", ("detected", "completed", "failed"))),
        plot_figure("turns", "Turns to baseline", plots.bars_by_category(
            "turns", list(view.turns_to_baseline["after_model_change"]),
            {k: list(v.values()) for k, v in view.turns_to_baseline.items()},
            xlabel="first turn whose 3-turn window is back within tolerance", ylabel="sessions"),
            "<code>reattune_turns_to_baseline</code> of each re-attuned session: after a model "
            "change (the re-attunement responses) and in sessions without one (the "
            "continuity-quality scores). <i>never</i>: not back by the checkpoint.",
            _turns_table(t)),
        plot_figure("violations", "Governance violations by rule, per day", plots.bars_by_day(
            "violations", days, view.violations_per_day, ylabel="violations", stacked=True),
            "Every <code>governance.violations</code> message, stacked by rule; users of every "
            "mode count here.",
            _per_day_table(t, "violations_per_day", view.violations_per_day)),
        plot_figure("erasures", "Erasures by reason and outcome", plots.horizontal_stacked(
            "erasures", view.erasures_by_reason, [o.value for o in ErasureOutcome],
            xlabel="erasure receipts", colors=plots.OUTCOME_COLORS),
            "One receipt per erasure request: <i>verified</i> only after the service re-read "
            "every target and found nothing.", _erasure_table(t)),
        plot_figure("dead_letters", "Dead letters by reason", plots.horizontal_stacked(
            "dead_letters", {r: {"records": n} for r, n in view.dead_letters_by_reason.items()},
            ["records"], xlabel="records", colors={"records": plots.COLORS[4]}),
            "Input records that did not become events, by reason code, placed by the time the "
            "worker published the dead letter.", _simple_table(t, "dead_letters_by_reason")),
    ]
    tot = "totals"
    cards = "".join([
        card("scored sessions", num(t, f"{tot}.scored_sessions"),
             f"high {num(t, f'{tot}.sessions_high')} · medium {num(t, f'{tot}.sessions_medium')}"),
        card("HOLDs", num(t, f"{tot}.holds_opened") + " opened",
             f"released {num(t, f'{tot}.holds_released')} · open at the end "
             f"{num(t, 'holds_open_at_end')}"),
        card("model changes", num(t, f"{tot}.model_changes"),
             f"re-attunement completed {num(t, f'{tot}.reattune_completed')} · failed "
             f"{num(t, f'{tot}.reattune_failed')}"),
        card("sustained-low escalations", num(t, f"{tot}.escalations"), "route continuity_review"),
        card("governance violations", num(t, f"{tot}.violations"), "all rules"),
        card("erasures", num(t, f"{tot}.erasures"),
             f"verified {num(t, f'{tot}.erasures_verified')}"),
        card("dead letters", num(t, f"{tot}.dead_letters"), "rejected input records"),
    ])
    body = (
        f"<header><h1>Continuity governance report</h1><p>{range_line(t)}.</p>"
        f"<p>{source_line(t)}</p></header>"
        f'<section class="cards" id="summary">{cards}</section>'
        f'<section id="plots"><h2>What happened in the range</h2><div class="grid">'
        f'{"".join(figures)}</div></section>'
        '<section id="review"><h2>Users most in need of review</h2>'
        '<p class="muted">Users with a HOLD still open at the end of the range, a sustained-low '
        "re-attunement escalation or a failed re-attunement in it, under their pseudonymous "
        "reference (hover for all of it). The score is each user's highest in the range, with "
        "what its attribution says drove it (z: how many standard errors a feature moved "
        "from the baseline). <code>continuity-drift report --html FILE --user U</code> gives "
        f"one user's drill-down.</p>{_review(t)}</section>"
        f"{_left_out_overview(t)}{_source_table(t)}")
    return document(f"Continuity governance report {t['since'][:10]} to {t['until'][:10]}", body)


def _thresholds(twin: dict[str, Any]) -> tuple[float, float]:
    th = twin.get("thresholds") or {}
    return float(th.get("medium", 0.5)), float(th.get("high", 0.8))


def _distribution_table(t: dict[str, Any]) -> str:
    head = "<tr><th></th><th class=\"n\">scores</th><th class=\"n\">mean</th>" \
           "<th class=\"n\">median</th><th class=\"n\">95th percentile</th></tr>"
    rows = "".join(
        f"<tr><td>{label(c)}</td>"
        + "".join(f'<td class="n">{num(t, f"components.{c}.{k}")}</td>'
                  for k in ("n", "mean", "p50", "p95")) + "</tr>" for c in COMPONENTS)
    return f'<table class="numbers">{head}{rows}</table>'


def _turns_table(t: dict[str, Any]) -> str:
    cats = list(t["turns_to_baseline"]["after_model_change"])
    head = "".join(f'<th class="n">{escape(c)}</th>' for c in cats)
    rows = "".join(
        f"<tr><td>{label(s)}</td>"
        + "".join(f'<td class="n">{num(t, f"turns_to_baseline.{s}.{c}")}</td>' for c in cats)
        + "</tr>" for s in t["turns_to_baseline"])
    return (f'<div class="scroll"><table class="numbers"><tr><th></th>{head}</tr>{rows}'
            "</table></div>")


def _erasure_table(t: dict[str, Any]) -> str:
    outcomes = [o.value for o in ErasureOutcome]
    head = "".join(f'<th class="n">{label(o)}</th>' for o in outcomes)
    rows = ["<tr><td><b>all reasons</b></td>"
            + "".join(f'<td class="n">{num(t, f"erasures_by_outcome.{o}")}</td>'
                      for o in outcomes) + "</tr>"]
    for reason, counts in t["erasures_by_reason"].items():
        rows.append(f"<tr><td>{label(reason)}</td>" + "".join(
            f'<td class="n">{num(t, f"erasures_by_reason.{reason}.{o}")}</td>' if o in counts
            else f'<td class="n">{DASH}</td>' for o in outcomes) + "</tr>")
    return f'<table class="numbers"><tr><th></th>{head}</tr>{"".join(rows)}</table>'


def _simple_table(t: dict[str, Any], key: str) -> str:
    items = t[key]
    if not items:
        return '<p class="muted">None in this range.</p>'
    rows = "".join(f'<tr><td>{label(k)}</td><td class="n">{num(t, f"{key}.{k}")}</td></tr>'
                   for k in items)
    return f'<table class="numbers">{rows}</table>'


def _source_table(t: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td><code>{escape(topic['topic'])}</code></td>"
        + "".join(f'<td class="n">{num(t, f"source.topics.{i}.{k}")}</td>'
                  for k in ("partitions", "records", "duplicates", "undecodable")) + "</tr>"
        for i, topic in enumerate(t["source"]["topics"]))
    return ('<section id="source"><h2>Source</h2><p class="muted">Each partition was read '
            "from its first offset up to the high watermark of the first fetch response "
            "for it, so the report ends even while workers keep publishing; later records are "
            "in the next report.</p><table class=\"numbers\"><tr><th>topic</th>"
            '<th class="n">partitions</th><th class="n">records read</th>'
            '<th class="n">repeated ids dropped</th><th class="n">undecodable</th></tr>'
            f"{rows}</table></section>")


def _left_out_overview(t: dict[str, Any]) -> str:
    lo = "left_out"
    return (
        '<section class="left-out" id="left-out"><h2>What this report leaves out, and why</h2>'
        f"<ul>{ALWAYS_LEFT_OUT}"
        "<li><b>Users in a mode that keeps nothing about them</b> (stateless, session_only): "
        "counted in the totals and plots, never listed. The outputs name the mode only on "
        "drift scores, so a user is listed only while their latest evidence of a mode is a "
        "score in continuity_light or continuity_full, not a later mode-forbidden violation "
        "in stateless / session_only nor a later downgrade receipt that erased everything. In "
        f"this range: {num(t, f'{lo}.users_with_outputs')} users with outputs, "
        f"{num(t, f'{lo}.users_shown_individually')} who may be listed, "
        f"{num(t, f'{lo}.users_aggregate_only')} in the aggregates only.</li>"
        "<li><b>Ephemeral sessions.</b> No output says that a session was off the record. A "
        "user whose sessions are all ephemeral never gets a baseline, hence no score, and "
        "stays in the aggregates; an ephemeral session of a user who already has baselines "
        "is scored like any other and cannot be told apart here.</li>"
        f"<li><b>Outside the range.</b> {num(t, f'{lo}.outputs_outside_range')} outputs with "
        "an event time outside the range are not counted (HOLDs open at the end take the "
        "whole history before it into account). Dead letters have no event time of their "
        "own and are placed by the time they were published.</li>"
        f"<li><b>Repeats.</b> Delivery is at least once: {num(t, f'{lo}.duplicates_dropped')} "
        f"repeated ids were dropped; {num(t, f'{lo}.undecodable')} records did not "
        "decode and are not counted.</li></ul></section>")
