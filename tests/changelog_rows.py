"""The changelog's rows as a byte search reads them: decoded and written out uncompressed."""

from __future__ import annotations

import pyarrow as pa

from baselines.rows import Rows
from streams.kafka.changelog import Kind, decode_entry


def uncompressed_ipc(table: pa.Table) -> bytes:
    """An Arrow table as an IPC stream without compression: what an older worker wrote to
    the changelog, and what a byte search can read."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def plain_rows(records: list[tuple[bytes | None, bytes]]) -> bytes:
    """The rows of one changelog topic's records (each snapshot's and delta's parts joined
    and decoded) as uncompressed Arrow IPC streams, joined, with the dropped users' ids."""
    out: list[bytes] = []
    parts: dict[tuple[int, str, int], list[bytes]] = {}
    for _, value in records:
        entry = decode_entry(value)
        if entry.kind not in (Kind.SNAPSHOT, Kind.DELTA):
            continue
        key = (entry.kind, entry.epoch, entry.seq)
        parts.setdefault(key, []).append(entry.data)
        if entry.part == entry.parts - 1:
            rows = Rows.decode(b"".join(parts.pop(key)))
            out.extend(uncompressed_ipc(table) for table in rows.tables.values())
            out.append("\n".join(rows.dropped).encode())
    return b"".join(out)
