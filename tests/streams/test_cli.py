"""The CLI: help with examples, clear errors, and the read commands on a real store."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from baselines.store import BaselineStore, BatchWrite
from drift.model import DriftConfig
from drift.replay import MemoryReplay
from drift.simulation import Scenario, simulate_user
from streams.broker import free_loopback_port
from streams.cli import main
from streams.cli.parser import build_parser
from tests.conftest import REPO


def test_help_lists_every_command_with_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("run", "demo", "simulate", "baselines", "report", "topics"):
        assert command in out
    assert "examples:" in out and "continuity-drift demo" in out


@pytest.mark.parametrize("command", ["run", "demo", "simulate", "baselines", "report",
                                     "topics"])
def test_each_command_has_help_with_an_example(command: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "example" in capsys.readouterr().out


def test_errors_say_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics"]) == 2
    assert "--broker" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[drift]\nthreshold_mediun = 0.4\n")
    assert main(["run", "--config", str(bad), "--data-dir", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "threshold_mediun" in err and "known" in err
    assert main(["baselines", "show", "--data-dir", str(tmp_path)]) == 2
    assert "--user is required" in capsys.readouterr().err
    assert main(["baselines", "show", "--user", "u", "--data-dir", str(tmp_path)]) == 2
    assert "no database" in capsys.readouterr().err


def test_baselines_and_report_read_a_store(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    events, _ = simulate_user(np.random.default_rng(1), Scenario.STABLE, "cli-user", 1.7e9)
    runner = MemoryReplay(DriftConfig())
    for e in events:
        runner.feed(e)
    b = runner.baselines["cli-user"]
    store = BaselineStore(tmp_path / "continuity.duckdb")
    store.commit_batch(BatchWrite("fhr.events", baselines=[
        (0, x) for x in (b.attunement, b.semantic, b.safety) if x is not None]))
    store.close()
    assert main(["baselines", "list", "--data-dir", str(tmp_path)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["users"][0]["versions"] == {"attunement": 4, "safety": 1, "semantic": 4}
    assert (listed["shown"], listed["total"], listed["truncated"]) == (1, 1, False)
    assert main(["baselines", "show", "--user", "cli-user", "--data-dir", str(tmp_path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["user_id"] == "cli-user"
    assert {x["kind"] for x in shown["baselines"]} == {"attunement", "semantic", "safety"}
    assert all(x["created_at"].endswith("Z") for x in shown["baselines"]), "ISO 8601 times"
    assert main(["report", "--json", "--data-dir", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["store"]["users_with_baselines"] == 1
    assert "cli-user" not in json.dumps(report)


@pytest.mark.parametrize("argv, complaint", [
    (["demo", "--users", "0"], "--users: 0 is less than 1"),
    (["demo", "--rate", "-5"], "--rate: -5 is not above 0"),
    (["simulate", "--broker", "x:1", "--users", "-1"], "--users: -1 is less than 1"),
])
def test_out_of_range_arguments_are_refused_before_anything_starts(
        argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert complaint in capsys.readouterr().err


def test_an_unreachable_broker_is_named_within_seconds_with_what_to_set() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUITY_")}
    commands = [["topics", "--broker", "127.0.0.1:1"],
                ["simulate", "--broker", "127.0.0.1:1", "--users", "1", "--scenario", "stable"]]
    # Both at once: each waits out the connect timeout.
    procs = [subprocess.Popen([sys.executable, "-m", "streams.cli", *argv], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for argv in commands]
    for argv, proc in zip(commands, procs):
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 3, (argv, err)
        assert "no Kafka broker answered at 127.0.0.1:1" in err, argv
        assert "--broker" in err and "CONTINUITY_BROKER" in err, argv
        assert "Traceback" not in err, argv


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUITY_")}
    return subprocess.run([sys.executable, "-m", "streams.cli", *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_data_dir_held_by_a_worker_is_an_error_a_script_can_see(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "continuity.duckdb")
    try:
        done = _cli("report", "--data-dir", str(tmp_path))
        assert done.returncode == 1
        assert "a worker holds it" in done.stderr and "--metrics" in done.stderr
        held = _cli("baselines", "list", "--data-dir", str(tmp_path))
        assert held.returncode == 2 and "--api" in held.stderr
    finally:
        store.close()


def test_an_unreachable_review_api_is_named_with_a_non_zero_exit() -> None:
    port = free_loopback_port()
    done = _cli("baselines", "show", "--user", "u1", "--api", f"http://127.0.0.1:{port}",
                "--token", "t")
    assert done.returncode == 3
    assert f"cannot reach the review API at http://127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_every_option_of_every_command_says_what_it_does() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{name} {' '.join(action.option_strings) or action.dest}"
               for name, command in sub.choices.items()
               for action in command._actions
               if not action.help and not isinstance(action, argparse._HelpAction)]
    assert missing == []
    assert all(command.description for command in sub.choices.values())
