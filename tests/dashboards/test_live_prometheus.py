"""Every dashboard panel against a real Prometheus scraping a real worker.

``worker_metrics_url`` (tests/conftest.py) is the ``/metrics`` URL of a worker
that has processed simulated traffic of every scenario. A ``prometheus`` binary
scrapes it every second, with the project's rule files loaded; once it holds a
few scrapes, each panel expression (Grafana interval variables replaced by
``1m``) must return a successful, non-empty result. Over so short a run a
rate may be 0 and a quantile NaN: the series must be there all the same.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.conftest import wait_until
from tests.dashboards.promql import (
    WORKER_JOB,
    all_panel_queries,
    exported_metric_names,
    load_rules,
    metric_names,
    rule_files,
    substitute,
)

STARTUP_S = 30.0
SCRAPES_S = 60.0
MIN_SCRAPES = 4

T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{url}{query}", timeout=10) as response:
        return json.loads(response.read())


def query(prometheus: str, expr: str) -> dict[str, Any]:
    """Run an instant query; an HTTP error still carries Prometheus's JSON answer."""
    try:
        return dict(get_json(f"{prometheus}/api/v1/query", query=expr))
    except urllib.error.HTTPError as error:
        with error:
            return dict(json.loads(error.read()))


def poll(description: str, check: Callable[[], T | None], timeout_s: float,
         log: Path | None = None) -> T:
    """Call ``check`` until it returns something truthy, or fail at the deadline."""
    detail = (lambda: log.read_text(errors="replace")) if log is not None else None
    result: T = wait_until(check, timeout_s, description, detail=detail)
    return result


@pytest.fixture(scope="module")
def prometheus_url(worker_metrics_url: str, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[str]:
    """A real Prometheus on a free loopback port, scraping the worker every second; the
    tests only query it, so they share one."""
    tmp_path = tmp_path_factory.mktemp("prometheus")
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not on PATH (Debian package `prometheus`)")
    target = urllib.parse.urlsplit(worker_metrics_url)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rule_files()],
        "scrape_configs": [{
            "job_name": WORKER_JOB,
            "scheme": target.scheme or "http",
            "metrics_path": target.path or "/metrics",
            "static_configs": [{"targets": [target.netloc]}],
        }],
    }
    config_path = tmp_path / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    log_path = tmp_path / "prometheus.log"
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [binary, f"--config.file={config_path}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            def ready() -> bool:
                if process.poll() is not None:
                    pytest.fail(f"prometheus exited\n{log_path.read_text(errors='replace')}")
                try:
                    with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                        return bool(response.status == 200)
                except (OSError, http.client.HTTPException):  # not up yet
                    return False

            poll("prometheus to be ready", ready, STARTUP_S, log_path)
            poll("the worker target to be up", lambda: worker_target_up(url), SCRAPES_S,
                 log_path)
            poll(f"{MIN_SCRAPES} scrapes of the worker",
                 lambda: scrape_count(url) >= MIN_SCRAPES, SCRAPES_S, log_path)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def worker_target_up(prometheus: str) -> bool:
    targets = get_json(f"{prometheus}/api/v1/targets", state="active")["data"]["activeTargets"]
    return any(t["labels"]["job"] == WORKER_JOB and t["health"] == "up" for t in targets)


def scrape_count(prometheus: str) -> float:
    answer = query(prometheus, f'count_over_time(up{{job="{WORKER_JOB}"}}[1m])')
    result = answer.get("data", {}).get("result", [])
    return float(result[0]["value"][1]) if result else 0.0


def test_every_panel_expression_returns_data(prometheus_url: str) -> None:
    failures = []
    queries = all_panel_queries()
    assert queries
    for panel_query in queries:
        answer = query(prometheus_url, substitute(panel_query.expr, "1m"))
        if answer.get("status") != "success":
            failures.append(f"{panel_query.label}: {answer.get('error')}")
            continue
        data = answer["data"]
        empty = data["resultType"] in {"vector", "matrix"} and not data["result"]
        if empty:
            failures.append(f"{panel_query.label}: no data")
    assert not failures, "\n".join(failures)


def test_every_metric_the_dashboards_use_is_scraped(prometheus_url: str) -> None:
    used = {name for q in all_panel_queries() for name in metric_names(q.expr)}
    exported = exported_metric_names()
    answer = query(prometheus_url, f'count by (__name__) ({{job="{WORKER_JOB}"}})')
    assert answer["status"] == "success", answer
    scraped = {series["metric"]["__name__"] for series in answer["data"]["result"]}
    missing = sorted(name for name in used if name in exported and name not in scraped)
    assert not missing, f"on a dashboard, but no series was scraped from the worker: {missing}"


def test_every_rule_evaluates_without_error(prometheus_url: str) -> None:
    expected = {r.name for r in load_rules()}

    def evaluated() -> list[dict[str, Any]] | None:
        groups = get_json(f"{prometheus_url}/api/v1/rules")["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        done = all(rule["health"] != "unknown" for rule in rules)
        return rules if rules and done else None

    rules = poll("every rule to be evaluated", evaluated, SCRAPES_S)
    assert {rule["name"] for rule in rules} == expected
    broken = [f"{rule['name']}: {rule.get('lastError')}" for rule in rules
              if rule["health"] != "ok"]
    assert not broken
