"""Prometheus configuration and alert rules, checked and unit-tested with promtool."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dashboards.promql import (
    PROMETHEUS_DIR,
    REPO,
    RULE_TESTS_DIR,
    WORKER_JOB,
    RuleExpr,
    load_rules,
    rule_files,
)

ALERTS = [r for r in load_rules() if r.annotations or r.labels]
ALERT_NAMES = sorted({r.name for r in ALERTS})
REQUIRED_ALERTS = {
    "ContinuityReattuneLowQuality",   # sustained low re-attunement across the population
    "ContinuityEscalationPublished",  # escalations
    "ContinuityGovernanceViolation",  # any governance violation
    "ContinuityDeadLetterRate",       # dead letters
    "ContinuityUnreadableBatch",      # a record batch no reader can read, skipped
    "ContinuityConsumerLagHigh",      # consumer lag
    "ContinuityWorkerDown",           # worker down: up == 0
    "ContinuityWorkerAbsent",         # worker down: no target at all
}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not on PATH (Debian package `prometheus`)")
    return path


def run_promtool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], check=False, capture_output=True, text=True, timeout=120, cwd=cwd,
    )


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading.

    >>> github_anchor("ContinuityWorkerDown (platform, critical)")
    'continuityworkerdown-platform-critical'
    """
    anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return anchor.replace(" ", "-")


def doc_anchors(path: Path) -> set[str]:
    return {
        github_anchor(line.lstrip("#"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }


def rule_tests() -> list[tuple[Path, dict[str, Any]]]:
    return [
        (path, yaml.safe_load(path.read_text(encoding="utf-8")))
        for path in sorted(RULE_TESTS_DIR.glob("*.yml"))
    ]


def test_rule_files_pass_promtool_check() -> None:
    files = [str(p) for p in rule_files()]
    assert files
    result = run_promtool("check", "rules", *files)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_unit_tests_pass() -> None:
    files = [str(p) for p, _ in rule_tests()]
    assert files
    result = run_promtool("test", "rules", *files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(files)


def test_prometheus_config_passes_promtool_check() -> None:
    # Run from elsewhere: rule_files must resolve relative to the config file.
    result = run_promtool("check", "config", str(PROMETHEUS_DIR / "prometheus.yml"), cwd=Path("/"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rule_files())} rule files found" in result.stdout


def test_prometheus_config_wiring() -> None:
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text(encoding="utf-8"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    worker = jobs[WORKER_JOB]
    assert worker.get("metrics_path", "/metrics") == "/metrics"
    assert worker["static_configs"] == [{"targets": ["worker:6066"]}]
    (alerting,) = config["alerting"]["alertmanagers"]
    assert alerting["static_configs"] == [{"targets": ["alertmanager:9093"]}]
    resolved = sorted(
        p for pattern in config["rule_files"] for p in PROMETHEUS_DIR.glob(pattern)
    )
    assert resolved == rule_files()


def test_the_required_alerts_exist() -> None:
    assert REQUIRED_ALERTS <= set(ALERT_NAMES)


@pytest.mark.parametrize("rule", ALERTS, ids=lambda r: f"{r.name}-{r.labels.get('severity')}")
def test_alert_is_labelled_and_annotated(rule: RuleExpr) -> None:
    assert rule.labels.get("team") in {"governance", "platform"}
    assert rule.labels.get("severity") in {"warning", "critical"}
    for key in ("summary", "description", "runbook"):
        assert rule.annotations.get(key), f"{rule.name}: no {key}"
    runbook = rule.annotations["runbook"]
    doc, _, anchor = runbook.partition("#")
    assert doc == "docs/alerts.md"
    assert anchor == rule.name.lower()
    assert anchor in doc_anchors(REPO / doc), f"{runbook} has no heading"


def test_alert_names_and_severities_do_not_collide() -> None:
    seen: dict[tuple[str, str], str] = {}
    for rule in ALERTS:
        key = (rule.name, rule.labels["severity"])
        assert key not in seen, f"{key} defined twice"
        seen[key] = rule.file
    teams = defaultdict(set)
    for rule in ALERTS:
        teams[rule.name].add(rule.labels["team"])
    assert all(len(t) == 1 for t in teams.values()), dict(teams)


def test_platform_alerts_keep_the_worker_identity() -> None:
    """Inhibition by a down worker matches on job and instance: keep them on every
    per-worker alert (the absent-worker alert has only job)."""
    for rule in ALERTS:
        if rule.labels["team"] != "platform" or rule.name == "ContinuityWorkerAbsent":
            continue
        expr = " ".join(rule.expr.split())
        assert "by (job, instance" in expr or expr.startswith(("up{", "continuity_worker_ready")), \
            rule.name


def test_every_alert_and_severity_is_tested_firing_and_silent() -> None:
    fired: set[tuple[str, str]] = set()
    silent: set[str] = set()
    tested_files: set[str] = set()
    for path, document in rule_tests():
        tested_files |= {(path.parent / f).resolve().name for f in document["rule_files"]}
        for group in document["tests"]:
            for case in group.get("alert_rule_test", []):
                if case["exp_alerts"]:
                    fired |= {(case["alertname"], a["exp_labels"]["severity"])
                              for a in case["exp_alerts"]}
                else:
                    silent.add(case["alertname"])
    assert tested_files == {p.name for p in rule_files()}
    defined = {(r.name, r.labels["severity"]) for r in ALERTS}
    assert defined - fired == set(), "alerts never shown to fire"
    assert set(ALERT_NAMES) - silent == set(), "alerts never shown to stay silent"


def test_every_alert_has_a_runbook_section() -> None:
    anchors = doc_anchors(REPO / "docs" / "alerts.md")
    assert {name.lower() for name in ALERT_NAMES} <= anchors
