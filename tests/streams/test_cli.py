"""The CLI: help with examples, clear errors, and the read commands on a real store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from baselines.store import BaselineStore, BatchWrite
from drift.model import DriftConfig
from drift.replay import MemoryReplay
from drift.simulation import Scenario, simulate_user
from streams.cli import main


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
    assert "cli-user\tattunement=v4 safety=v1 semantic=v4" in capsys.readouterr().out
    assert main(["baselines", "show", "--user", "cli-user", "--data-dir", str(tmp_path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {x["kind"] for x in shown} == {"attunement", "semantic", "safety"}
    assert main(["report", "--json", "--data-dir", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["store"]["users_with_baselines"] == 1
    assert "cli-user" not in json.dumps(report)
