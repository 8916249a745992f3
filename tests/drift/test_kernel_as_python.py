"""The kernels as plain Python (``NUMBA_DISABLE_JIT=1``): the kernel's tests run again with
numba's functions left uncompiled, so that the way to cover and debug the kernels line by
line keeps working, and the compiled code and its Python say the same (docs/testing.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The kernel's own tests and doctests (a few drawn examples each: the compiled run draws more).
KERNEL_TESTS = ("tests/drift/test_kernel.py", "tests/drift/test_kernel_stops.py",
                "tests/drift/test_kernel_slots.py",
                "tests/drift/test_kernel_attunement.py", "tests/drift/test_kernel_reattune.py",
                "drift/kernel")


def test_the_kernel_tests_pass_with_the_kernels_as_python() -> None:
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1", "KERNEL_EXAMPLES": "10"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", *KERNEL_TESTS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=280, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1], done.stdout[-2000:]
