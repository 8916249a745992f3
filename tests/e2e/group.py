"""Who owns which input partition, read from each worker's ``/readyz``: for the tests where
workers of one group are killed, added and stopped."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import WorkerProcess


def owned(worker: WorkerProcess) -> list[int]:
    """The partitions ``worker`` says it holds."""
    _, body = worker.get("/readyz")
    return list(body.get("partitions", [])) if isinstance(body, dict) else []


def settled(workers: list[WorkerProcess], partitions: int = 4) -> Callable[[], bool]:
    """Every partition owned by exactly one of ``workers``, each of them ready."""
    def check() -> bool:
        try:
            held = [p for w in workers for p in owned(w)]
            ready = all(w.get("/readyz")[0] == 200 for w in workers)
        except OSError:
            return False
        return ready and sorted(held) == list(range(partitions))
    return check
