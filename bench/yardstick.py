"""The consumers the worker is measured against (``bench/throughput.py``, phase 1): (a) a
plain aiokafka consumer that decodes every value with ``msgspec.json.decode`` into Python
objects and does nothing else, the SPEC's yardstick (any validation beyond the decode is
the worker's cost), and (b) a bare faust agent with the same decode, the rate a first
version on faust reaches. Each runs in its own subprocess and measures its own rate, from
the first batch to the last record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.harness import ROOT, clean_env
from bench.procs import stop_process

AIOKAFKA_SCRIPT = """
import asyncio, json, sys, time
from aiokafka import AIOKafkaConsumer
from msgspec.json import decode

bootstrap, group, n, out, timeout_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])

async def main():
    consumer = AIOKafkaConsumer("fhr.events", bootstrap_servers=bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=True,
                                session_timeout_ms=6000, heartbeat_interval_ms=1000)
    began = time.perf_counter()
    await consumer.start()
    seen = 0
    first = None
    deadline = time.monotonic() + timeout_s
    try:
        while seen < n and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for tp, msgs in batches.items():
                for msg in msgs:
                    decode(msg.value)
                seen += len(msgs)
            if seen and first is None:
                first = (time.perf_counter(), seen, time.process_time())
        done, cpu_done = time.perf_counter(), time.process_time()
    finally:
        await consumer.stop()
    t0, c0, cpu0 = first or (done, 0, cpu_done)
    json.dump({"records": seen, "first_batch": c0, "seconds": done - t0,
               "cpu_s": cpu_done - cpu0,
               "startup_s": t0 - began, "complete": seen >= n,
               "rate": (seen - c0) / max(done - t0, 1e-9)}, open(out, "w"))

asyncio.run(main())
"""


FAUST_SCRIPT = """
import json, os, sys, time
import faust
from msgspec.json import decode

bootstrap, app_id, n, out, datadir, batch_max, within = (
    sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6]),
    float(sys.argv[7]))
began = time.perf_counter()
app = faust.App(app_id, broker=f"kafka://{bootstrap}", store="memory://", datadir=datadir,
                web_enabled=False, topic_allow_declare=False, topic_disable_leader=True,
                consumer_auto_offset_reset="earliest", broker_session_timeout=6.0,
                broker_heartbeat_interval=1.0, broker_rebalance_timeout=10.0,
                broker_commit_every=batch_max, broker_commit_interval=1.0,
                stream_wait_empty=False, producer_acks=-1)
source = app.topic("fhr.events", key_serializer="raw", value_serializer="raw")
state = {"seen": 0, "first": None}

@app.agent(source, name="bare-decode")
async def bare(stream):
    async for events in stream.take_events(batch_max, within=within):
        for e in events:
            decode(e.message.value)
        state["seen"] += len(events)
        if state["first"] is None:
            state["first"] = (time.perf_counter(), state["seen"], time.process_time())
        if state["seen"] >= n:
            done, cpu_done = time.perf_counter(), time.process_time()
            t0, c0, cpu0 = state["first"]
            with open(out, "w") as fh:
                json.dump({"records": state["seen"], "first_batch": c0, "seconds": done - t0,
                           "cpu_s": cpu_done - cpu0,
                           "startup_s": t0 - began, "complete": True,
                           "rate": (state["seen"] - c0) / max(done - t0, 1e-9)}, fh)
            os._exit(0)

faust.Worker(app, quiet=True, loglevel="WARN", redirect_stdouts=False).execute_from_commandline()
"""


def baseline_aiokafka(bootstrap: str, n: int, tmp: Path, timeout_s: float) -> dict[str, Any]:
    out = tmp / "aiokafka.json"
    group = f"bench-aiokafka-{os.getpid()}-{int(time.time())}"
    argv = [bootstrap, group, str(n)]
    path = tmp / "aiokafka_consumer.py"
    path.write_text(textwrap.dedent(AIOKAFKA_SCRIPT))
    logf = open(tmp / "aiokafka_consumer.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, str(path), *argv, str(out), str(timeout_s)],
                            cwd=ROOT, env=clean_env(), stdout=logf, stderr=logf)
    try:
        proc.wait(timeout=timeout_s + 30)
        if not out.exists():
            raise RuntimeError(f"aiokafka baseline exited with {proc.returncode}; "
                               f"see {tmp / 'aiokafka_consumer.log'}")
        result = dict(json.loads(out.read_text()))
    finally:
        stop_process(proc, timeout_s=10)
        logf.close()
    result["script"] = str(path)
    return result


def baseline_faust(bootstrap: str, n: int, tmp: Path, timeout_s: float, batch_max: int,
                   within_s: float) -> dict[str, Any]:
    out = tmp / "faust.json"
    app_id = f"bench-faust-{os.getpid()}-{int(time.time())}"
    datadir = tmp / "faust-bare"
    path = tmp / "faust_bare.py"
    path.write_text(textwrap.dedent(FAUST_SCRIPT))
    logf = open(tmp / "faust_bare.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, str(path), bootstrap, app_id, str(n), str(out),
                             str(datadir), str(batch_max), str(within_s)],
                            cwd=ROOT, env=clean_env(), stdout=logf, stderr=logf)
    try:
        deadline = time.monotonic() + timeout_s
        result: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            if out.exists():
                try:
                    result = dict(json.loads(out.read_text()))
                    break
                except json.JSONDecodeError:
                    pass
            if proc.poll() is not None and not out.exists():
                raise RuntimeError(f"bare faust agent exited with {proc.returncode}; "
                                   f"see {tmp / 'faust_bare.log'}")
            time.sleep(0.1)
        if result is None:
            raise TimeoutError(f"bare faust agent did not read {n} records in {timeout_s:.0f}s")
    finally:
        stop_process(proc, timeout_s=10)
        logf.close()
    result["script"] = str(path)
    return result
