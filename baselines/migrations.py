"""Schema migrations, applied in order; the index + 1 is the schema version."""

MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE IF NOT EXISTS baseline_versions (
            partition INTEGER NOT NULL,
            user_id VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            baseline_id VARCHAR NOT NULL,
            version INTEGER NOT NULL,
            created_at DOUBLE NOT NULL,
            source_session VARCHAR NOT NULL,
            model_version VARCHAR NOT NULL,
            tokenizer_id VARCHAR NOT NULL,
            precision_tag VARCHAR NOT NULL,
            adapter_id VARCHAR,
            drift_policy_id VARCHAR NOT NULL,
            mode VARCHAR NOT NULL,
            expires_at DOUBLE NOT NULL,
            vals BLOB NOT NULL,
            PRIMARY KEY (baseline_id, version)
        )""",
        """CREATE TABLE IF NOT EXISTS tombstones (
            user_ref VARCHAR NOT NULL,
            baseline_id VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            version INTEGER NOT NULL,
            erased_at DOUBLE NOT NULL,
            reason VARCHAR NOT NULL,
            request_id VARCHAR NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS user_state (
            partition INTEGER NOT NULL,
            user_id VARCHAR PRIMARY KEY,
            state BLOB NOT NULL,
            clock DOUBLE NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS partition_offsets (
            topic VARCHAR NOT NULL,
            partition INTEGER NOT NULL,
            next_offset BIGINT NOT NULL,
            PRIMARY KEY (topic, partition)
        )""",
        """CREATE TABLE IF NOT EXISTS session_summaries (
            user_id VARCHAR NOT NULL,
            session_id VARCHAR NOT NULL,
            partition INTEGER NOT NULL,
            mode VARCHAR NOT NULL,
            started_at DOUBLE NOT NULL,
            ended_at DOUBLE,
            turns INTEGER NOT NULL,
            max_tier VARCHAR NOT NULL,
            scores INTEGER NOT NULL,
            model_change BOOLEAN NOT NULL,
            reattune_quality DOUBLE,
            PRIMARY KEY (user_id, session_id)
        )""",
        """CREATE TABLE IF NOT EXISTS erasure_requests (
            request_id VARCHAR PRIMARY KEY,
            user_ref VARCHAR NOT NULL,
            reason VARCHAR NOT NULL,
            requested_at DOUBLE NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS erasure_targets (
            request_id VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            baseline_id VARCHAR,
            versions INTEGER NOT NULL,
            outcome VARCHAR NOT NULL
        )""",
    ],
    [
        # Erasure records follow their partition to a new owner (streams.kafka.changelog).
        "ALTER TABLE erasure_requests ADD COLUMN partition INTEGER DEFAULT -1",
    ],
    [
        # The offset a user's stored state reflects the log up to, and where a restore
        # replays memory-only users from (docs/design.md, "Who is rebuilt from the log").
        "ALTER TABLE user_state ADD COLUMN as_of BIGINT DEFAULT 0",
        "ALTER TABLE partition_offsets ADD COLUMN replay_from BIGINT",
        # Which event carried a request out (a pseudonymous reference): a repeat of the
        # request by another event publishes no second receipt under the same id.
        "ALTER TABLE erasure_requests ADD COLUMN cause_ref VARCHAR",
    ],
]
