"""The Grafana dashboards and their provisioning: structure, datasources, PromQL, metric names."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dashboards.promql import (
    DATASOURCE_UID,
    GRAFANA_DIR,
    PROMETHEUS_OWN_METRICS,
    REPO,
    all_panel_queries,
    exported_metric_names,
    iter_panels,
    load_dashboards,
    load_rules,
    metric_names,
    panel_queries,
    record_name,
    recording_rules_document,
    substitute,
)

DASHBOARDS = load_dashboards()
EXPECTED_DASHBOARDS = {
    "governance-overview.json",
    "reattunement.json",
    "memory-governance.json",
    "pipeline-health.json",
}
#: Panels that draw values (every panel except rows).
VALUE_PANELS = ("stat", "gauge", "bargauge", "timeseries", "heatmap")
AMBER = "#EAB839"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not on PATH (Debian package `prometheus`)")
    return path


def value_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in iter_panels(dashboard) if p.get("type") != "row"]


def test_the_four_dashboards_exist() -> None:
    assert set(DASHBOARDS) == EXPECTED_DASHBOARDS


@pytest.mark.parametrize("name", sorted(EXPECTED_DASHBOARDS))
def test_dashboard_is_provisionable_json(name: str) -> None:
    text = (GRAFANA_DIR / name).read_text(encoding="utf-8")
    dashboard = json.loads(text)
    assert dashboard["uid"] and len(dashboard["uid"]) <= 40
    assert dashboard["title"]
    assert 39 <= dashboard["schemaVersion"] <= 41
    assert dashboard.get("id") is None, "a provisioned dashboard must not pin a database id"
    assert "continuity-drift" in dashboard["tags"]
    assert dashboard["templating"]["list"] == [], "panels must not depend on user variables"


def test_dashboard_uids_and_titles_are_unique() -> None:
    uids = [d["uid"] for d in DASHBOARDS.values()]
    titles = [d["title"] for d in DASHBOARDS.values()]
    assert len(set(uids)) == len(uids)
    assert len(set(titles)) == len(titles)


@pytest.mark.parametrize("name", sorted(EXPECTED_DASHBOARDS))
def test_panel_ids_are_unique(name: str) -> None:
    ids = [p["id"] for p in iter_panels(DASHBOARDS[name])]
    assert all(isinstance(i, int) for i in ids)
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"duplicate panel ids {duplicates}"


@pytest.mark.parametrize("name", sorted(EXPECTED_DASHBOARDS))
def test_every_panel_and_target_uses_the_prometheus_uid(name: str) -> None:
    wrong = []
    for panel in iter_panels(DASHBOARDS[name]):
        if panel.get("datasource") != {"type": "prometheus", "uid": DATASOURCE_UID}:
            wrong.append(f"panel {panel['id']}: {panel.get('datasource')}")
        for target in panel.get("targets", []):
            if target.get("datasource") != {"type": "prometheus", "uid": DATASOURCE_UID}:
                wrong.append(f"panel {panel['id']} target {target.get('refId')}: "
                             f"{target.get('datasource')}")
    assert not wrong


@pytest.mark.parametrize("name", sorted(EXPECTED_DASHBOARDS))
def test_panels_are_readable(name: str) -> None:
    """Every panel has a title, a description, a unit and at least one query."""
    problems = []
    for panel in value_panels(DASHBOARDS[name]):
        where = f"panel {panel['id']} {panel.get('title')!r}"
        if panel["type"] not in VALUE_PANELS:
            problems.append(f"{where}: unexpected type {panel['type']}")
        if not panel.get("title"):
            problems.append(f"{where}: no title")
        if len(panel.get("description", "")) < 20:
            problems.append(f"{where}: no description")
        if not panel["fieldConfig"]["defaults"].get("unit"):
            problems.append(f"{where}: no unit")
        if not panel.get("targets"):
            problems.append(f"{where}: no query")
    assert not problems


@pytest.mark.parametrize("name", sorted(EXPECTED_DASHBOARDS))
def test_panels_fit_the_grid_without_overlap(name: str) -> None:
    cells: dict[tuple[int, int], int] = {}
    for panel in iter_panels(DASHBOARDS[name]):
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["id"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"panels {cells[(x, y)]} and {panel['id']} overlap"
                cells[(x, y)] = panel["id"]


def test_drift_score_panels_are_coloured_as_the_tiers() -> None:
    """Panels that show a drift score: green below 0.5, amber from 0.5, red from 0.8."""
    tier_steps = [
        {"color": "green", "value": None},
        {"color": AMBER, "value": 0.5},
        {"color": "red", "value": 0.8},
    ]
    score_panels = [
        (name, panel)
        for name, dashboard in DASHBOARDS.items()
        for panel in value_panels(dashboard)
        if panel["type"] != "heatmap"
        and any(
            {"continuity_drift_score_bucket", "continuity_drift_score_sum",
             "continuity_drift_component_bucket"} & metric_names(t["expr"])
            for t in panel["targets"]
        )
    ]
    assert len(score_panels) >= 3
    for name, panel in score_panels:
        thresholds = panel["fieldConfig"]["defaults"]["thresholds"]
        assert thresholds["mode"] == "absolute", (name, panel["title"])
        assert thresholds["steps"] == tier_steps, (name, panel["title"])


def test_tier_series_are_coloured_as_the_tiers() -> None:
    panel = next(
        p for p in value_panels(DASHBOARDS["governance-overview.json"])
        if p["title"] == "Drift scores by tier"
    )
    colours = {
        o["matcher"]["options"]: o["properties"][0]["value"]["fixedColor"]
        for o in panel["fieldConfig"]["overrides"]
    }
    assert colours == {"low": "green", "medium": AMBER, "high": "red"}


def test_expressions_use_only_grafana_interval_variables() -> None:
    leftovers = [q.label for q in all_panel_queries() if "$" in substitute(q.expr)]
    assert not leftovers


def test_every_dashboard_expression_parses(tmp_path: Path) -> None:
    """promtool checks each expression as a recording rule."""
    queries = all_panel_queries()
    exprs = {record_name(q): substitute(q.expr) for q in queries}
    assert len(exprs) == len(queries), "record names must be unique"
    rules = tmp_path / "dashboard-expressions.yml"
    rules.write_text(yaml.safe_dump(recording_rules_document(exprs), sort_keys=False))
    result = subprocess.run(
        [promtool(), "check", "rules", str(rules)],
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_dashboards_and_rules_use_only_exported_metrics() -> None:
    exported = set(exported_metric_names()) | PROMETHEUS_OWN_METRICS
    unknown = {
        f"{q.label}: {name}"
        for q in all_panel_queries() for name in metric_names(q.expr) if name not in exported
    }
    unknown |= {
        f"{r.file} {r.name}: {name}"
        for r in load_rules() for name in metric_names(r.expr) if name not in exported
    }
    assert not unknown, sorted(unknown)


def test_every_exported_metric_is_on_a_dashboard() -> None:
    exported = exported_metric_names()
    shown = {
        exported[name]
        for q in all_panel_queries() for name in metric_names(q.expr) if name in exported
    }
    assert set(exported.values()) - shown == set()


def test_worker_up_and_ready_are_on_pipeline_health() -> None:
    names = set().union(*(
        metric_names(q.expr)
        for q in panel_queries("pipeline-health.json", DASHBOARDS["pipeline-health.json"])
    ))
    exprs = " ".join(q.expr for q in panel_queries(
        "pipeline-health.json", DASHBOARDS["pipeline-health.json"]))
    assert {"up", "continuity_worker_ready", "continuity_rejections_total",
            "continuity_consumer_lag", "continuity_batch_size_bucket"} <= names
    assert 'up{job="continuity-drift"}' in exprs
    for q in ("0.5", "0.95", "0.99"):
        assert (f"histogram_quantile({q}, sum by (le) "
                "(rate(continuity_end_to_end_latency_seconds_bucket") in exprs


def test_datasource_provisioning_defines_the_prometheus_uid() -> None:
    path = GRAFANA_DIR / "provisioning" / "datasources" / "datasources.yml"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert document["apiVersion"] == 1
    by_uid = {d["uid"]: d for d in document["datasources"]}
    prometheus = by_uid[DATASOURCE_UID]
    assert prometheus["type"] == "prometheus"
    assert prometheus["url"] == "http://prometheus:9090"
    assert prometheus["isDefault"] is True
    assert by_uid["alertmanager"]["url"] == "http://alertmanager:9093"


def test_dashboard_provider_points_at_the_mounted_dashboards() -> None:
    path = GRAFANA_DIR / "provisioning" / "dashboards" / "continuity-drift.yml"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    (provider,) = document["providers"]
    assert provider["type"] == "file"
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    mounts = {
        volume.split(":")[0]: volume.split(":")[1]
        for volume in compose["services"]["grafana"]["volumes"]
    }
    assert mounts["./dashboards/grafana"] == provider["options"]["path"]


def test_every_panel_is_documented() -> None:
    doc = (REPO / "docs" / "dashboards.md").read_text(encoding="utf-8")
    missing = [
        f"{name}: {panel['title']}"
        for name, dashboard in DASHBOARDS.items()
        for panel in value_panels(dashboard)
        if panel["title"] not in doc
    ]
    missing += [d["title"] for d in DASHBOARDS.values() if d["title"] not in doc]
    missing += [f"query of {q.label}" for q in all_panel_queries() if q.expr.rstrip() not in doc]
    assert not missing
