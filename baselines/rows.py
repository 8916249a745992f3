"""Rows of the store as Arrow tables: one checkpoint's writes, or a partition's snapshot.

The worker writes the same :class:`Rows` to DuckDB and, encoded, to the changelog
(``streams.kafka.changelog``); a new owner of a partition decodes them and applies them
to its own DuckDB. The encoding is a msgpack map of Arrow IPC streams, one per
table, tagged with the schema version that wrote it. The streams' buffers are compressed
(zstd) as they are written: in the checkpoint's thread, so that the producer, which
compresses again on the event loop, finds a third of the bytes and little left to gain
(docs/performance.md, "The changelog's bytes by codec"). A reader needs nothing for it:
Arrow's IPC reader decompresses what the stream says is compressed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

#: Bumped when the tables' columns change, or what a column holds; a reader refuses rows newer
#: than it knows. 3: an attunement version's ``vals`` are msgspec's msgpack of its doubles,
#: not JSON (``baselines.columns``); rows of 2 are read as they are.
ROWS_VERSION = 3

#: How each table's IPC stream is written: buffers compressed, on the calling thread (one
#: delta's tables are a few MB: Arrow's thread pool would only take a core from the loop).
_IPC = pa.ipc.IpcWriteOptions(compression="zstd", use_threads=False)


class RowsVersionError(ValueError):
    """Rows written by a newer worker: upgrade this worker before it restores them."""


class _Encoded(msgspec.Struct, frozen=True, array_like=True):
    version: int
    tables: dict[str, bytes]
    dropped: tuple[str, ...]


@dataclass(frozen=True)
class Rows:
    """Tables of rows to insert, and the users whose stored state goes."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.dropped and not any(t.num_rows for t in self.tables.values())

    def users(self) -> set[str]:
        """Every user id the rows mention (tests read the changelog with this)."""
        out = set(self.dropped)
        for table in self.tables.values():
            if "user_id" in table.column_names:
                out.update(table.column("user_id").to_pylist())
        return out

    def by_partition(self, dropped_at: dict[str, int]) -> dict[int, Rows]:
        """The rows split by their ``partition`` column; ``dropped_at`` places dropped users."""
        parts: dict[int, dict[str, pa.Table]] = {}
        for name, table in self.tables.items():
            column = table.column("partition")
            for p in pc.unique(column).to_pylist():
                parts.setdefault(int(p), {})[name] = table.filter(pc.equal(column, p))
        dropped: dict[int, list[str]] = {}
        for user in self.dropped:
            dropped.setdefault(dropped_at[user], []).append(user)
        return {p: Rows(parts.get(p, {}), tuple(dropped.get(p, ())))
                for p in sorted(set(parts) | set(dropped))}

    def encode(self) -> bytes:
        tables = {}
        for name, table in self.tables.items():
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema, options=_IPC) as writer:
                writer.write_table(table)
            tables[name] = sink.getvalue().to_pybytes()
        return msgspec.msgpack.encode(_Encoded(ROWS_VERSION, tables, self.dropped))

    @staticmethod
    def decode(data: bytes) -> Rows:
        encoded = msgspec.msgpack.decode(data, type=_Encoded)
        if encoded.version > ROWS_VERSION:
            raise RowsVersionError(
                f"changelog rows of version {encoded.version}; this worker reads up to "
                f"{ROWS_VERSION}: upgrade the worker")
        tables = {name: pa.ipc.open_stream(blob).read_all()
                  for name, blob in encoded.tables.items()}
        return Rows(tables, encoded.dropped)
