"""The baseline presenter: its output shape per kind, and that it loads no Kafka or web library."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from drift.baseline import (
    AttunementBaseline,
    BaselineMeta,
    SafetyBaseline,
    SemanticBaseline,
    fold_attunement,
    next_meta,
)
from drift.features import WindowStats
from drift.model import BaselineKind, DriftConfig, Mode, ModelTriple
from streams.edge.wire import iso
from streams.present import describe_baseline

ROOT = Path(__file__).resolve().parents[2]
MODEL = ModelTriple("companion-2026.10", "tok-5", "bf16", "adapter-3")
CFG = DriftConfig()
COMMON = {"kind", "baseline_id", "version", "created_at", "source_session", "model",
          "drift_policy_id", "mode", "expires_at"}


def _meta(kind: BaselineKind) -> BaselineMeta:
    return next_meta(None, "u1", kind, 1.7e9, "s1", MODEL, Mode.FULL, CFG)


def _baselines() -> list[AttunementBaseline | SemanticBaseline | SafetyBaseline]:
    stats = WindowStats(5, (0.5, 0.25), (0.1, 0.2))
    attunement = fold_attunement(None, _meta(BaselineKind.ATTUNEMENT), ("friction", "trust"),
                                 (stats, None), (0.2, 0.3), CFG)
    semantic = SemanticBaseline(_meta(BaselineKind.SEMANTIC),
                                (("c-1", "commitment"), ("c-2", "constraint")))
    safety = SafetyBaseline(_meta(BaselineKind.SAFETY), "gate-1", "policy-1", "consent-1")
    return [attunement, semantic, safety]


def test_every_kind_shows_its_metadata_and_model() -> None:
    for b in _baselines():
        shown = describe_baseline(b)
        assert COMMON <= shown.keys()
        assert shown["kind"] == b.meta.kind.value
        assert (shown["baseline_id"], shown["version"]) == (b.meta.baseline_id, 1)
        assert shown["created_at"] == iso(1.7e9) and shown["source_session"] == "s1"
        assert shown["model"] == {"model_version": "companion-2026.10", "tokenizer_id": "tok-5",
                                  "precision_tag": "bf16", "adapter_id": "adapter-3"}
        assert shown["mode"] == "continuity_full"
        assert shown["expires_at"] == iso(b.meta.expires_at_s)
        assert shown["drift_policy_id"] == CFG.drift_policy_id
        json.dumps(shown)


def test_values_per_kind() -> None:
    attunement, semantic, safety = _baselines()
    assert describe_baseline(attunement).keys() - COMMON == {"features", "sessions"}
    assert describe_baseline(attunement)["features"] == ["friction", "trust"]
    assert describe_baseline(attunement)["sessions"] == 1
    assert describe_baseline(semantic).keys() - COMMON == {"items"}
    assert describe_baseline(semantic)["items"] == [
        {"commitment_id": "c-1", "kind": "commitment"},
        {"commitment_id": "c-2", "kind": "constraint"}]
    assert describe_baseline(safety).keys() - COMMON == {"fields"}
    assert describe_baseline(safety)["fields"] == {
        "gate_config_id": "gate-1", "drift_policy_id": "policy-1", "consent_state_id": "consent-1"}


@pytest.mark.parametrize("index", [0, 1, 2])
def test_without_values_only_the_metadata(index: int) -> None:
    assert describe_baseline(_baselines()[index], values=False).keys() == COMMON


def test_describing_a_baseline_loads_no_kafka_or_web_library() -> None:
    code = (
        "import json, sys\n"
        "from drift.baseline import SafetyBaseline, next_meta\n"
        "from drift.model import BaselineKind, DriftConfig, Mode, ModelTriple\n"
        "from streams.present import describe_baseline\n"
        "meta = next_meta(None, 'u1', BaselineKind.SAFETY, 1.7e9, 's1',\n"
        "                 ModelTriple('m', 't', 'p'), Mode.FULL, DriftConfig())\n"
        "json.dumps(describe_baseline(SafetyBaseline(meta, 'g', 'p', 'c')))\n"
        "print(json.dumps(sorted(m for m in ('faust', 'kafka', 'aiokafka', 'aiohttp')\n"
        "                        if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
