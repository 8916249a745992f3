"""The governance report's drill-down page: one user, under their pseudonymous reference.

:func:`user_page` lays out what :func:`streams.report.user.user_report` gathered: scores
over sessions (a plot and a table), baseline versions from the review API (or a note that
they need it), HOLDs, model changes, escalations, violations and erasure receipts. A user
the outputs do not show in a baselining mode gets a page that says so and nothing else.
"""

from __future__ import annotations

from html import escape
from typing import Any

from streams.report import plots
from streams.report.page import (
    ALWAYS_LEFT_OUT,
    DASH,
    card,
    chips,
    document,
    label,
    num,
    plot_figure,
    range_line,
    source_line,
    table_rows,
)
from streams.report.user import UserReport


def user_page(page: UserReport, twin: dict[str, Any]) -> str:
    """The drill-down page of one user; ``twin`` is its JSON twin."""
    t = twin
    title = f"Continuity review: user {page.user_ref}"
    head = (f"<header><h1>Continuity review of user <span class=\"ref\">{escape(page.user_ref)}"
            f"</span></h1><p>{range_line(t)}.</p><p>{source_line(t)}</p></header>")
    if not page.shown:
        body = (head + '<section id="not-shown"><p class="note">The outputs do not show this '
                "user in a baselining mode: they were never scored in continuity_light or "
                "continuity_full, or their latest outputs show a mode that keeps nothing about "
                "them (stateless or session_only). The report shows nothing about them beyond "
                "the deployment-wide aggregates of the overview.</p></section>"
                + _left_out_user())
        return document(title, body)
    cards = "".join([
        card("mode (latest score)", escape((page.mode or DASH).replace("continuity_", ""))),
        card("scored sessions", str(len(page.sessions))),
        card("HOLD at the end", "open" if page.hold_open else "none",
             f"since {escape(page.hold_since)}" if page.hold_since else ""),
        card("model changes", str(len(page.model_changes))),
        card("violations", str(len(page.violations))),
        card("erasure receipts", str(len(page.receipts))),
    ])
    points = [(p.session, p.score, p.tier) for p in page.points]
    quality = [(s.session, s.reattune_quality) for s in page.sessions
               if s.reattune_quality is not None]
    figure = plot_figure(
        "user_scores", "Drift scores and re-attunement over sessions",
        plots.scores_over_sessions("user_scores", points,
                                   [(a, float(b)) for a, b in quality if b is not None],
                                   page.thresholds, 0.6, len(page.sessions)),
        "Top: every <code>continuity_drift_score</code> of each session (one point per "
        "checkpoint, coloured by its tier; dashed lines: the medium and high thresholds). "
        "Bottom: the session's re-attunement quality (dashed: the 0.6 threshold).",
        "")
    session_cols = [("session", "session"), ("day", "day"), ("scores", "scores"),
                    ("max_score", "highest score"), ("tier", "tier"),
                    ("effective_tier", "effective tier"), ("driver", "driven by"),
                    ("baseline_version", "baseline version"),
                    ("reattune_quality", "re-attunement quality"),
                    ("model_change", "model change")]
    sessions = table_rows(t["sessions"], session_cols, "sessions", t,
                     ("session", "scores", "max_score", "baseline_version", "reattune_quality"))
    if page.baselines_source == "api":
        versions = ("<h3>Versions</h3>" + table_rows(
            t["versions"], [("kind", "kind"), ("version", "version"),
                            ("created_at", "created (event time)"), ("model_version", "model"),
                            ("mode", "mode"), ("drift_policy_id", "drift policy"),
                            ("expires_at", "expires")], "versions", t, ("version",))
            + "<h3>Tombstones (erased versions)</h3>" + table_rows(
                t["tombstones"], [("kind", "kind"), ("version", "version"),
                                  ("erased_at", "erased"), ("reason", "reason")],
                "tombstones", t, ("version",))
            + '<p class="muted">From the review API of a worker (any worker answers for any '
              "user). An empty list means the service holds no versions or tombstones for "
              "this user, or the token does not see them.</p>")
    else:
        versions = ('<p class="note" id="versions-need-api">Baseline versions need the review '
                    "API: run the report with <code>--api URL --token T</code> (any worker's "
                    "address; any worker answers for any user). The output topics carry only "
                    "the version each score was held against (in the sessions table).</p>")
    body = (
        head + f'<section class="cards" id="summary">{cards}</section>'
        f'<section id="scores"><h2>Scores over sessions</h2>{figure}'
        f"<h3>Sessions</h3>{sessions}</section>"
        f'<section id="baselines"><h2>Baseline versions</h2>{versions}</section>'
        '<section id="holds"><h2>HOLDs</h2>'
        + table_rows(t["holds"], [("at", "when"), ("change", "change"), ("kinds", "kinds"),
                             ("score", "score")], "holds", t, ("score",))
        + '</section><section id="model-changes"><h2>Model changes and re-attunement</h2>'
        + table_rows(t["model_changes"], [("at", "when"), ("previous_model", "from"),
                                     ("model", "to"), ("outcome", "outcome"),
                                     ("reattune_quality", "quality"),
                                     ("turns_to_baseline", "turns to baseline")],
                "model_changes", t, ("reattune_quality", "turns_to_baseline"))
        + '</section><section id="escalations"><h2>Escalations</h2>'
        + table_rows(t["escalations"], [("at", "when"), ("kind", "kind"), ("sessions", "sessions"),
                                   ("last_quality", "last quality")], "escalations", t,
                ("sessions", "last_quality"))
        + '</section><section id="violations"><h2>Governance violations</h2>'
        + table_rows(t["violations"], [("at", "when"), ("rule", "rule"), ("reason", "reason")],
                "violations", t)
        + '</section><section id="receipts"><h2>Erasure receipts</h2>'
        + _receipts(t)
        + "</section>" + _left_out_user())
    return document(title, body)


def _receipts(t: dict[str, Any]) -> str:
    items = t["receipts"]
    if not items:
        return '<p class="muted">None in this range.</p>'
    rows = []
    for i, r in enumerate(items):
        targets = "; ".join(
            f"{label(x['kind'])}: {num(t, f'receipts.{i}.targets.{j}.versions')} versions "
            f"{chips([x['outcome']])}" for j, x in enumerate(r["targets"])) or DASH
        rows.append(f"<tr><td class=\"when\">{escape(r['at'])}</td><td>{label(r['reason'])}</td>"
                    f"<td>{chips([r['outcome']])}</td><td>{targets}</td></tr>")
    return ('<div class="scroll"><table id="receipts-table"><tr><th>when</th><th>reason</th>'
            f'<th>outcome</th><th>targets</th></tr>{"".join(rows)}</table></div>')


def _left_out_user() -> str:
    return ('<section class="left-out" id="left-out"><h2>What this page leaves out, and why'
            f"</h2><ul>{ALWAYS_LEFT_OUT}"
            "<li><b>Anything beyond aggregates for a user in a mode that keeps nothing about "
            "them</b> (stateless, session_only), judged by their latest outputs: such a user's "
            "page says so and nothing more.</li>"
            "<li><b>Ephemeral sessions</b> cannot be told apart in the outputs: a scored user's "
            "ephemeral session is shown like any other.</li></ul></section>")
