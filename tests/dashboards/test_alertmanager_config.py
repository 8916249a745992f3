"""Alertmanager: the config is valid, every route is tested with amtool, inhibition works.

The routing cases live in dashboards/alertmanager/route_tests.yml. Inhibition is
checked against a real Alertmanager on a loopback port, with the webhook
receivers removed so that nothing is ever sent.
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import wait_until
from tests.dashboards.promql import ALERTMANAGER_DIR, RuleExpr, load_rules

CONFIG = ALERTMANAGER_DIR / "alertmanager.yml"
ROUTE_TESTS = ALERTMANAGER_DIR / "route_tests.yml"
TEAM_RECEIVERS = {
    "governance": {"governance-review", "governance-urgent"},
    "platform": {"platform-oncall", "platform-pager"},
}
_MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"(.*)"\s*$')


def amtool() -> str:
    path = shutil.which("amtool")
    if path is None:
        pytest.fail("amtool is not on PATH (Debian package `prometheus-alertmanager`)")
    return path


def load_config() -> dict[str, Any]:
    return dict(yaml.safe_load(CONFIG.read_text(encoding="utf-8")))


def route_cases() -> list[dict[str, Any]]:
    return list(yaml.safe_load(ROUTE_TESTS.read_text(encoding="utf-8"))["cases"])


def routes_test(labels: dict[str, str], receivers: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [amtool(), "config", "routes", "test", f"--config.file={CONFIG}",
         f"--verify.receivers={','.join(receivers)}",
         *(f"{k}={v}" for k, v in sorted(labels.items()))],
        check=False, capture_output=True, text=True, timeout=60,
    )


def matches(route: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether an alert's labels satisfy a route's matchers (the `matchers` syntax only)."""
    assert "match" not in route and "match_re" not in route, "use `matchers`"
    for matcher in route.get("matchers", []):
        found = _MATCHER.match(matcher)
        assert found, f"unsupported matcher {matcher!r}"
        name, op, value = found.groups()
        actual = labels.get(name, "")
        ok = {
            "=": actual == value,
            "!=": actual != value,
            "=~": re.fullmatch(value, actual) is not None,
            "!~": re.fullmatch(value, actual) is None,
        }[op]
        if not ok:
            return False
    return True


def landing_route(route: dict[str, Any], labels: dict[str, str], path: str = "root") -> str:
    """The path of the route an alert ends on (no route in this config uses `continue`)."""
    for index, child in enumerate(route.get("routes", [])):
        assert not child.get("continue", False)
        if matches(child, labels):
            return landing_route(child, labels, f"{path}/{index}")
    return path


def all_routes(route: dict[str, Any], path: str = "root") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, route
    for index, child in enumerate(route.get("routes", [])):
        yield from all_routes(child, f"{path}/{index}")


def test_config_passes_amtool_check() -> None:
    result = subprocess.run(
        [amtool(), "check-config", str(CONFIG)],
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_governance_and_platform_use_different_receivers() -> None:
    config = load_config()
    receivers = {r["name"] for r in config["receivers"]}
    assert TEAM_RECEIVERS["governance"] | TEAM_RECEIVERS["platform"] <= receivers
    assert not TEAM_RECEIVERS["governance"] & TEAM_RECEIVERS["platform"]
    for receiver in config["receivers"]:
        for hook in receiver["webhook_configs"]:
            assert hook["url"].startswith("http://"), "placeholder internal URLs only"


@pytest.mark.parametrize("case", route_cases(), ids=lambda c: c["name"])
def test_route_case(case: dict[str, Any]) -> None:
    result = routes_test(case["labels"], case["receivers"])
    assert result.returncode == 0, (
        f"{case['labels']} expected {case['receivers']}, amtool says: "
        f"{result.stdout.strip()} {result.stderr.strip()}"
    )


def test_every_route_has_a_case() -> None:
    config = load_config()
    landed = {landing_route(config["route"], case["labels"]) for case in route_cases()}
    routes = dict(all_routes(config["route"]))
    assert set(routes) - landed == set(), "routes no case reaches"
    for case in route_cases():
        route = routes[landing_route(config["route"], case["labels"])]
        assert case["receivers"] == [route["receiver"]], case["name"]


@pytest.mark.parametrize(
    "rule", [r for r in load_rules() if r.labels],
    ids=lambda r: f"{r.name}-{r.labels['severity']}",
)
def test_every_alert_reaches_its_team(rule: RuleExpr) -> None:
    labels = {"alertname": rule.name, **rule.labels}
    if rule.labels["team"] == "platform":
        labels |= {"job": "continuity-drift", "instance": "worker:6066"}
    expected = "platform-pager" if rule.labels["severity"] == "critical" else "platform-oncall"
    if rule.labels["team"] == "governance":
        expected = ("governance-urgent" if rule.labels["severity"] == "critical"
                    else "governance-review")
    result = routes_test(labels, [expected])
    assert result.returncode == 0, result.stdout + result.stderr


def test_inhibition_rules_reference_known_alerts() -> None:
    names = {r.name for r in load_rules()}
    for rule in load_config()["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            found = _MATCHER.match(matcher)
            assert found, matcher
            if found.group(1) == "alertname":
                assert found.group(3) in names, matcher


# --- inhibition against a real Alertmanager ---------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_json(url: str, payload: Any = None, timeout_s: float = 5.0) -> Any:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"},
        method="GET" if payload is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        body = response.read()
    return json.loads(body) if body else None


def alertmanager_binary() -> str:
    for name in ("alertmanager", "prometheus-alertmanager"):
        path = shutil.which(name)
        if path is not None:
            return path
    pytest.fail("no alertmanager binary on PATH (Debian package `prometheus-alertmanager`)")


@pytest.fixture
def alertmanager_url(tmp_path: Path) -> Iterator[str]:
    config = load_config()
    for receiver in config["receivers"]:
        receiver.pop("webhook_configs", None)
    config_path = tmp_path / "alertmanager.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    log_path = tmp_path / "alertmanager.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [alertmanager_binary(), f"--config.file={config_path}",
             f"--storage.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"

            def ready() -> bool:
                assert process.poll() is None, log_path.read_text(errors="replace")
                try:
                    with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                        return bool(response.status == 200)
                except (OSError, http.client.HTTPException):  # not up yet
                    return False

            wait_until(ready, 30, "alertmanager to be ready", interval_s=0.1,
                       detail=lambda: log_path.read_text(errors="replace"))
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def alert(**labels: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "labels": labels,
        "annotations": {"summary": "inhibition test"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
    }


def key(labels: dict[str, str]) -> tuple[str, str, str]:
    return (labels["alertname"], labels.get("instance", ""), labels.get("severity", ""))


def wait_for_states(url: str, expected: dict[tuple[str, str, str], str]) -> dict[Any, str]:
    """Poll the alerts API until each alert in ``expected`` has its state."""
    seen: dict[Any, str] = {}

    def settled() -> bool:
        seen.clear()
        seen.update({key(a["labels"]): a["status"]["state"]
                     for a in http_json(f"{url}/api/v2/alerts")})
        return all(seen.get(k) == v for k, v in expected.items())

    wait_until(settled, 30, f"alert states {expected}", interval_s=0.1,
               detail=lambda: f"last seen: {seen}")
    return dict(seen)


def test_inhibition(alertmanager_url: str) -> None:
    platform = {"team": "platform", "job": "continuity-drift"}
    governance = {"team": "governance"}
    http_json(f"{alertmanager_url}/api/v2/alerts", [
        alert(alertname="ContinuityWorkerDown", instance="w1:6066", severity="critical",
              **platform),
        alert(alertname="ContinuityConsumerLagHigh", instance="w1:6066", severity="warning",
              **platform),
        alert(alertname="ContinuityConsumerStalled", instance="w1:6066", severity="critical",
              **platform),
        alert(alertname="ContinuityDeadLetterRate", instance="w2:6066", severity="warning",
              **platform),
        alert(alertname="ContinuityConsumerLagHigh", instance="w2:6066", severity="warning",
              **platform),
        alert(alertname="ContinuityConsumerLagHigh", instance="w2:6066", severity="critical",
              **platform),
        alert(alertname="ContinuityReattuneLowQuality", severity="warning", **governance),
        alert(alertname="ContinuityReattuneLowQuality", severity="critical", **governance),
        alert(alertname="ContinuityEscalationPublished", severity="warning",
              kind="sustained_low_reattune", **governance),
    ])
    wait_for_states(alertmanager_url, {
        # A down worker is not inhibited by itself ...
        ("ContinuityWorkerDown", "w1:6066", "critical"): "active",
        # ... and silences the other alerts of the same worker,
        ("ContinuityConsumerLagHigh", "w1:6066", "warning"): "suppressed",
        ("ContinuityConsumerStalled", "w1:6066", "critical"): "suppressed",
        # but not those of another worker.
        ("ContinuityDeadLetterRate", "w2:6066", "warning"): "active",
        # Critical inhibits warning of the same alert and worker.
        ("ContinuityConsumerLagHigh", "w2:6066", "critical"): "active",
        ("ContinuityConsumerLagHigh", "w2:6066", "warning"): "suppressed",
        ("ContinuityReattuneLowQuality", "", "critical"): "active",
        ("ContinuityReattuneLowQuality", "", "warning"): "suppressed",
        # Pipeline alerts never hide governance ones.
        ("ContinuityEscalationPublished", "", "warning"): "active",
    })

    # With no worker at all, every per-worker pipeline alert is redundant;
    # governance alerts still go out.
    http_json(f"{alertmanager_url}/api/v2/alerts", [
        alert(alertname="ContinuityWorkerAbsent", severity="critical", **platform),
    ])
    wait_for_states(alertmanager_url, {
        ("ContinuityWorkerAbsent", "", "critical"): "active",
        ("ContinuityDeadLetterRate", "w2:6066", "warning"): "suppressed",
        ("ContinuityConsumerLagHigh", "w2:6066", "critical"): "suppressed",
        ("ContinuityWorkerDown", "w1:6066", "critical"): "suppressed",
        ("ContinuityReattuneLowQuality", "", "critical"): "active",
        ("ContinuityEscalationPublished", "", "warning"): "active",
    })
