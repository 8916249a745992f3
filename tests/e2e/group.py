"""Who owns which input partition, read from each worker's ``/readyz``: for the tests where
workers of one group are killed, added and stopped."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import WorkerProcess


def _readyz(worker: WorkerProcess) -> tuple[int, list[int]]:
    """The status of ``worker``'s ``/readyz`` and the partitions it says it holds."""
    status, body = worker.get("/readyz")
    return status, list(body.get("partitions", [])) if isinstance(body, dict) else []


def owned(worker: WorkerProcess) -> list[int]:
    """The partitions ``worker`` says it holds."""
    return _readyz(worker)[1]


def settled(workers: list[WorkerProcess], partitions: int = 4) -> Callable[[], bool]:
    """Every partition owned by exactly one of ``workers``, each of them ready."""
    def check() -> bool:
        try:
            answers = [_readyz(w) for w in workers]
        except OSError:
            return False
        held = sorted(p for _, ps in answers for p in ps)
        return all(status == 200 for status, _ in answers) and held == list(range(partitions))
    return check
