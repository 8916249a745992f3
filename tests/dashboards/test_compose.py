"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

The wiring is read with PyYAML: every mounted file exists in the repo, services
reference each other by name, the worker runs with the documented flags and the
ports match what Prometheus, Grafana and the docs expect.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.dashboards.promql import GRAFANA_DIR, PROMETHEUS_DIR, REPO, WORKER_JOB

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
DOCKERFILE = (REPO / "Dockerfile").read_text(encoding="utf-8")
LONG_RUNNING = ("kafka", "worker", "prometheus", "alertmanager", "grafana")
INSTALL = "pip install -c constraints.txt ."  # the image's install, pinned as CI's is
PUBLISHED = {"worker": 6066, "prometheus": 9090, "alertmanager": 9093, "grafana": 3000}


def flag(command: list[str], name: str) -> str:
    index = command.index(name)
    return command[index + 1]


def bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    mounts = []
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts.append((source, target))
    return mounts


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on", {})
    if isinstance(deps, list):
        return {name: "service_started" for name in deps}
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def test_the_stack_has_every_service() -> None:
    assert set(SERVICES) == {"kafka", "topics", *LONG_RUNNING}


def test_every_bind_mount_exists_in_the_repo() -> None:
    missing = [
        f"{name}: {source}"
        for name, service in SERVICES.items()
        for source, _ in bind_mounts(service)
        if not (REPO / source).exists()
    ]
    assert not missing
    assert all(source.startswith("./") for s in SERVICES.values() for source, _ in bind_mounts(s))


def test_named_volumes_are_declared() -> None:
    declared = set(COMPOSE.get("volumes") or {})
    used = {
        volume.split(":")[0]
        for service in SERVICES.values()
        for volume in service.get("volumes", [])
        if not volume.startswith((".", "/"))
    }
    assert used == declared


def test_dependencies_name_existing_services() -> None:
    for name, service in SERVICES.items():
        for dependency, condition in depends_on(service).items():
            assert dependency in SERVICES, f"{name} depends on unknown {dependency}"
            if condition == "service_healthy":
                assert "healthcheck" in SERVICES[dependency], f"{dependency} has no healthcheck"


def test_long_running_services_have_healthchecks() -> None:
    for name in LONG_RUNNING:
        check = SERVICES[name]["healthcheck"]
        assert check["test"][0] in {"CMD", "CMD-SHELL"}, name


def test_kafka_runs_single_node_kraft() -> None:
    kafka = SERVICES["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@kafka:9093"
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1
    assert env["CLUSTER_ID"]
    assert "zookeeper" not in yaml.safe_dump(kafka).lower()


def test_topics_one_shot_creates_the_topics_before_the_worker() -> None:
    topics = SERVICES["topics"]
    assert topics["command"] == ["continuity-drift", "topics", "--broker", "kafka:9092"]
    assert topics["build"] == "."
    assert topics.get("restart", "no") == "no"
    assert depends_on(topics) == {"kafka": "service_healthy"}
    assert depends_on(SERVICES["worker"]) == {
        "kafka": "service_healthy",
        "topics": "service_completed_successfully",
    }


def test_worker_command_and_environment() -> None:
    worker = SERVICES["worker"]
    assert worker["build"] == "."
    command = worker["command"]
    assert command[:2] == ["continuity-drift", "run"]
    assert flag(command, "--broker") == "kafka:9092"
    assert flag(command, "--data-dir") == "/data"
    assert flag(command, "--web-port") == "6066"
    assert ("worker-data", "/data") in [tuple(v.split(":")[:2]) for v in worker["volumes"]]
    environment = worker.get("environment", {})
    assert set(environment) <= {
        "CONTINUITY_BROKER", "CONTINUITY_DATA_DIR", "CONTINUITY_WEB_PORT",
        "CONTINUITY_WEB_HOST", "CONTINUITY_REVIEW_TOKEN",
    }
    # Prometheus scrapes the worker from another container.
    assert environment["CONTINUITY_WEB_HOST"] == "0.0.0.0"
    assert "/readyz" in " ".join(worker["healthcheck"]["test"])
    assert "6066" in " ".join(worker["healthcheck"]["test"])


@pytest.mark.parametrize("name,port", sorted(PUBLISHED.items()))
def test_ports(name: str, port: int) -> None:
    assert f"{port}:{port}" in SERVICES[name]["ports"]


def test_prometheus_scrapes_the_worker_and_alerts_alertmanager() -> None:
    prometheus = SERVICES["prometheus"]
    mounts = dict(bind_mounts(prometheus))
    assert mounts["./dashboards/prometheus/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    assert mounts["./dashboards/prometheus/rules"] == "/etc/prometheus/rules"
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text(encoding="utf-8"))
    assert config["rule_files"] == ["rules/*.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    (target,) = jobs[WORKER_JOB]["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host in SERVICES and port == flag(SERVICES["worker"]["command"], "--web-port")
    (am_target,) = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    host, port = am_target.split(":")
    assert host == "alertmanager" and port == "9093"


def test_alertmanager_loads_the_repo_config() -> None:
    alertmanager = SERVICES["alertmanager"]
    mounts = dict(bind_mounts(alertmanager))
    target = mounts["./dashboards/alertmanager/alertmanager.yml"]
    assert f"--config.file={target}" in alertmanager["command"]


def test_grafana_gets_provisioning_and_dashboards() -> None:
    grafana = SERVICES["grafana"]
    mounts = dict(bind_mounts(grafana))
    provisioning = GRAFANA_DIR / "provisioning"
    assert mounts["./dashboards/grafana/provisioning/datasources"] == \
        "/etc/grafana/provisioning/datasources"
    assert mounts["./dashboards/grafana/provisioning/dashboards"] == \
        "/etc/grafana/provisioning/dashboards"
    datasources = yaml.safe_load(
        (provisioning / "datasources" / "datasources.yml").read_text(encoding="utf-8"))
    for datasource in datasources["datasources"]:
        url = urlsplit(datasource["url"])
        assert url.hostname in SERVICES, datasource["name"]
        assert f"{url.port}:{url.port}" in SERVICES[url.hostname]["ports"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    dashboards_target = mounts["./dashboards/grafana"]
    assert home.startswith(dashboards_target + "/")
    assert (GRAFANA_DIR / Path(home).name).exists()


def dockerfile_instructions() -> list[tuple[str, str]]:
    lines = re.sub(r"\\\n", " ", DOCKERFILE).splitlines()
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
        for line in (raw.strip() for raw in lines)
        if line and not line.startswith("#")
    ]


def test_dockerfile() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    runs = " ".join(arg for op, arg in instructions if op == "RUN")
    assert INSTALL in runs  # the versions the tests pass with
    users = [arg for op, arg in instructions if op == "USER"]
    assert users and users[-1] not in {"root", "0"}
    assert ("EXPOSE", "6066") in instructions
    environment = " ".join(arg for op, arg in instructions if op == "ENV")
    assert "CONTINUITY_WEB_HOST=0.0.0.0" in environment
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    copied = [
        source.rstrip("/")
        for op, arg in instructions if op == "COPY"
        for source in arg.split()[:-1]
    ]
    # What the install needs: the build config, the readme it names, the pinned versions and
    # every package.
    found = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    needed = {"pyproject.toml", pyproject["project"]["readme"], "constraints.txt",
              *(name for name in found if "." not in name)}
    assert needed <= set(copied)
    for source in set(copied) - {pyproject["project"]["readme"]}:
        assert (REPO / source).exists(), source
    cmd = next(arg for op, arg in reversed(instructions) if op == "CMD")
    assert cmd.startswith('["continuity-drift", "run"')


def test_the_image_compiles_the_kernel_once_into_a_cache_its_worker_owns() -> None:
    instructions = dockerfile_instructions()
    environment = dict(kv.split("=", 1) for op, arg in instructions if op == "ENV"
                       for kv in arg.split())
    cache = environment["NUMBA_CACHE_DIR"]
    runs = [arg for op, arg in instructions if op == "RUN"]
    build = next(i for i, arg in enumerate(runs) if INSTALL in arg)
    assert 'import drift.kernel"' in runs[build].split(INSTALL, 1)[1]
    user = next(arg for op, arg in reversed(instructions) if op == "USER")
    assert any(f"chown -R {user}:{user} {cache}" in arg for arg in runs[build:])


def test_numba_keeps_the_compiled_kernel_in_the_cache_folder_it_is_given(tmp_path: Path
                                                                         ) -> None:
    """What the image relies on: with ``NUMBA_CACHE_DIR`` set, importing the kernel
    compiles it into that folder, and a second process finds it there."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    probe = [sys.executable, "-c", "import drift.kernel"]
    subprocess.run(probe, cwd=REPO, env=env, check=True, timeout=120)
    indexes = sorted((tmp_path / "cache").rglob("*.nbi"))
    assert indexes, "nothing was cached"
    stamps = {p: p.stat().st_mtime_ns for p in indexes}
    subprocess.run(probe, cwd=REPO, env=env, check=True, timeout=120)
    assert {p: p.stat().st_mtime_ns for p in indexes} == stamps, "the cache was rewritten"
