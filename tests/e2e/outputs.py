"""The outputs a worker must match the pure replay on: the replay's ids by kind, and the
ids published on each kind's topic."""

from __future__ import annotations

from drift.model import DriftConfig, FhrEvent
from drift.replay import replay
from streams import topics
from tests.conftest import Broker, output_ids

#: The outputs a worker must match the pure replay on, by kind, and their topics.
REPLAYED = {"score": topics.SCORES, "response": topics.RESPONSES,
            "violation": topics.VIOLATIONS}


def replay_ids(events: list[FhrEvent]) -> dict[str, set[str]]:
    """The ids of the pure replay's outputs of ``events``, by kind."""
    outs = replay(events, DriftConfig())
    return {kind: {o.id for o in outs if o.kind.value == kind} for kind in REPLAYED}


def published_ids(broker: Broker) -> dict[str, set[str]]:
    """The ids published on each kind's topic so far."""
    return {kind: output_ids(broker.read(topic)) for kind, topic in REPLAYED.items()}
