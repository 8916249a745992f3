"""Tests of the benchmarks: each runs a bench script as a user would, on a small stream."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str) -> str:
    """``python bench/<script> <args>`` from the tree's root; its standard output (the run
    must exit 0, or its standard error's end is the failure)."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
