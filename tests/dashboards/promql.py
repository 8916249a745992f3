"""Read the PromQL out of the dashboards and rule files, for the tests in this folder.

Grafana dashboards hold expressions with Grafana's own variables
(``$__rate_interval``, ``$__range``...), which Prometheus does not know:
:func:`substitute` replaces them with a fixed duration before an expression is
handed to ``promtool`` or to a real Prometheus.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "dashboards"
GRAFANA_DIR = DASHBOARDS / "grafana"
PROMETHEUS_DIR = DASHBOARDS / "prometheus"
RULES_DIR = PROMETHEUS_DIR / "rules"
RULE_TESTS_DIR = PROMETHEUS_DIR / "tests"
ALERTMANAGER_DIR = DASHBOARDS / "alertmanager"
DATASOURCE_UID = "prometheus"
WORKER_JOB = "continuity-drift"

#: Grafana's built-in interval variables; each stands for a duration.
GRAFANA_INTERVAL_VARIABLES = ("__rate_interval", "__interval", "__range")
#: Series a dashboard or rule may use that the worker does not export.
PROMETHEUS_OWN_METRICS = frozenset({"up"})

_VARIABLE = re.compile(
    r"\$\{(?P<braced>\w+)(?::\w+)?\}|\[\[(?P<old>\w+)\]\]|\$(?P<plain>\w+)"
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_SELECTOR_BODY = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENTIFIER = re.compile(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*(?![\w(])(?!\s*\()")
_KEYWORDS = frozenset({
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "offset", "atan2", "inf", "nan",
})


@dataclass(frozen=True)
class PanelQuery:
    """One target of one dashboard panel."""

    dashboard: str
    panel_id: int
    panel_title: str
    ref_id: str
    expr: str

    @property
    def label(self) -> str:
        return f"{self.dashboard} #{self.panel_id} {self.panel_title!r} ({self.ref_id})"


@dataclass(frozen=True)
class RuleExpr:
    """One rule of one rule file."""

    file: str
    group: str
    name: str
    expr: str
    labels: dict[str, str]
    annotations: dict[str, str]
    for_: str | None


def substitute(expr: str, duration: str = "1m") -> str:
    """Replace Grafana's interval variables with ``duration``.

    >>> substitute("rate(x[$__rate_interval]) and x offset ${__range}")
    'rate(x[1m]) and x offset 1m'
    >>> substitute("increase(x[[[__interval]]])", "5m")
    'increase(x[5m])'

    Any other variable is left in place, so that validation fails on it.

    >>> substitute("x{instance=~\\"$instance\\"}")
    'x{instance=~"$instance"}'
    """

    def replace(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("old") or match.group("plain")
        return duration if name in GRAFANA_INTERVAL_VARIABLES else match.group(0)

    return _VARIABLE.sub(replace, expr)


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects.

    Label names and values, durations, grouping clauses, functions, aggregations
    and keywords are not metric names.

    >>> sorted(metric_names(
    ...     'sum by (le) (rate(continuity_batch_size_bucket{le="1.0"}[5m]))'
    ...     ' / on (job) group_left up offset 1m or vector(0) > bool 1e-9'))
    ['continuity_batch_size_bucket', 'up']
    """
    text = _STRING.sub('""', substitute(expr))
    text = _SELECTOR_BODY.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    return {name for name in _IDENTIFIER.findall(text) if name.lower() not in _KEYWORDS}


def exported_metric_names() -> dict[str, str]:
    """Every series name the worker's registry can export, mapped to its metric family.

    Built from ``streams.metrics.build_metrics`` on a fresh registry. A labelled
    metric has no sample until its first child exists, so the names are derived
    from each family's type as prometheus_client exposes them (``_created``
    series are left out: nothing should rely on them).
    """
    from streams.metrics import build_metrics

    registry = CollectorRegistry()
    build_metrics(registry)
    names: dict[str, str] = {}
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    for family in registry.collect():
        for suffix in suffixes[family.type]:
            names[family.name + suffix] = family.name
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                names[sample.name] = family.name
    return names


def load_dashboards() -> dict[str, dict[str, Any]]:
    """Every dashboard JSON in dashboards/grafana/, by file name."""
    return {
        path.name: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(GRAFANA_DIR.glob("*.json"))
    }


def iter_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel of a dashboard, including those inside collapsed rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def panel_queries(name: str, dashboard: dict[str, Any]) -> list[PanelQuery]:
    """The PromQL target of every panel of one dashboard."""
    return [
        PanelQuery(name, panel["id"], panel.get("title", ""), target.get("refId", "?"),
                   target["expr"])
        for panel in iter_panels(dashboard)
        for target in panel.get("targets", [])
        if not target.get("hide", False)
    ]


def all_panel_queries() -> list[PanelQuery]:
    return [q for name, d in load_dashboards().items() for q in panel_queries(name, d)]


def rule_files() -> list[Path]:
    return sorted(RULES_DIR.glob("*.yml"))


def load_rules() -> list[RuleExpr]:
    """Every alerting and recording rule in dashboards/prometheus/rules/."""
    rules: list[RuleExpr] = []
    for path in rule_files():
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        for group in document["groups"]:
            for rule in group["rules"]:
                rules.append(RuleExpr(
                    file=path.name, group=group["name"],
                    name=rule.get("alert") or rule["record"], expr=rule["expr"],
                    labels=dict(rule.get("labels", {})),
                    annotations=dict(rule.get("annotations", {})),
                    for_=rule.get("for"),
                ))
    return rules


def recording_rules_document(exprs: dict[str, str]) -> dict[str, Any]:
    """A rule file with one recording rule per expression, for ``promtool check rules``.

    ``exprs`` maps a valid metric name to the expression it should record.
    """
    return {"groups": [{
        "name": "dashboard-expressions",
        "rules": [{"record": name, "expr": expr} for name, expr in exprs.items()],
    }]}


def record_name(query: PanelQuery) -> str:
    """A recording-rule name unique to one panel target.

    >>> record_name(PanelQuery("pipeline-health.json", 3, "x", "B", "up"))
    'dashboard:pipeline_health:panel_3_B'
    """
    stem = re.sub(r"[^A-Za-z0-9_]", "_", query.dashboard.removesuffix(".json"))
    return f"dashboard:{stem}:panel_{query.panel_id}_{query.ref_id}"
