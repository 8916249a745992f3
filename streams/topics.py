"""Topic names, partition counts, and creating them on a broker."""

from __future__ import annotations

from dataclasses import dataclass

from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaTimeoutError, TopicAlreadyExistsError

from drift.outputs import OutputKind

INPUT = "fhr.events"
SCORES = "drift.scores"
RESPONSES = "drift.responses"
ESCALATIONS = "continuity.escalations"
VIOLATIONS = "governance.violations"
RECEIPTS = "continuity.erasure_receipts"
DEADLETTER = "fhr.deadletter"

OUTPUT_TOPICS: dict[OutputKind, str] = {
    OutputKind.SCORE: SCORES,
    OutputKind.RESPONSE: RESPONSES,
    OutputKind.ESCALATION: ESCALATIONS,
    OutputKind.VIOLATION: VIOLATIONS,
    OutputKind.RECEIPT: RECEIPTS,
}
ALL_TOPICS = (INPUT, SCORES, RESPONSES, ESCALATIONS, VIOLATIONS, RECEIPTS, DEADLETTER)


@dataclass(frozen=True)
class TopicPlan:
    name: str
    partitions: int


def plan(partitions: int) -> list[TopicPlan]:
    """Every topic with the same partition count, so keys co-partition by user id.

    >>> [p.name for p in plan(4)][:2], plan(4)[0].partitions
    (['fhr.events', 'drift.scores'], 4)
    """
    return [TopicPlan(name, partitions) for name in ALL_TOPICS]


#: How long a command waits for a broker before it says it cannot reach it.
CONNECT_TIMEOUT_S = 8.0


class BrokerUnreachable(RuntimeError):
    """No broker answered at the bootstrap address within :data:`CONNECT_TIMEOUT_S`."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(f"no Kafka broker answered at {bootstrap} within "
                         f"{CONNECT_TIMEOUT_S:.0f} s")
        self.bootstrap = bootstrap


def create_topics(bootstrap: str, partitions: int, replication: int = 1) -> dict[str, str]:
    """Create the topics that do not exist yet; returns ``name -> created|exists``."""
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="continuity-drift-admin",
                                 bootstrap_timeout_ms=int(CONNECT_TIMEOUT_S * 1000))
    except KafkaTimeoutError as exc:
        raise BrokerUnreachable(bootstrap) from exc
    try:
        existing = set(admin.list_topics())
        result = {}
        for p in plan(partitions):
            if p.name in existing:
                result[p.name] = "exists"
                continue
            try:
                admin.create_topics([NewTopic(p.name, p.partitions, replication)])
                result[p.name] = "created"
            except TopicAlreadyExistsError:
                result[p.name] = "exists"
        return result
    finally:
        admin.close()
