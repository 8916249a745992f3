"""``continuity-drift run`` (one worker, or ``--workers N`` under a supervisor) and
``continuity-drift topics``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from streams import topics
from streams.broker import EmbeddedBroker
from streams.cli.logs import setup_logging
from streams.settings import Settings, load_settings
from streams.supervise import supervise, worker_argv
from streams.worker import Worker


def cmd_run(args: argparse.Namespace) -> int:
    config = args.config or (Path(os.environ["CONTINUITY_CONFIG"])
                             if os.environ.get("CONTINUITY_CONFIG") else None)
    settings = load_settings(config, {
        "broker": args.broker, "data_dir": args.data_dir, "web_port": args.web_port,
        "web_host": args.web_host, "partitions": args.partitions, "log_level": args.log_level})
    setup_logging(settings.log_level)
    broker = None
    bootstrap = settings.broker
    if bootstrap is None:
        broker = EmbeddedBroker(log_path=settings.data_dir / "broker.log")
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        broker.start()
        bootstrap = broker.bootstrap
        print(f"embedded broker (in memory; its log is lost when it stops) at {bootstrap}",
              file=sys.stderr)
    try:
        created = topics.create_topics(bootstrap, settings.partitions)
        new = [t for t, state in created.items() if state == "created"]
        if new:
            print(f"created topics {', '.join(new)} with {settings.partitions} partitions",
                  file=sys.stderr)
        if args.workers > 1:
            return supervise([worker_argv(i, bootstrap, settings.data_dir, settings.web_host,
                                          settings.web_port, settings.partitions,
                                          settings.log_level, config)
                              for i in range(args.workers)])
        return _run_worker(settings, bootstrap)
    finally:
        if broker is not None:
            broker.stop()


def _run_worker(settings: Settings, bootstrap: str) -> int:
    print(f"worker on {bootstrap}; data in {settings.data_dir}; "
          f"metrics at http://{settings.web_host}:{settings.web_port}/metrics", file=sys.stderr)
    return asyncio.run(Worker(settings, bootstrap).run())


def cmd_topics(args: argparse.Namespace) -> int:
    if not args.broker:
        print("topics: --broker HOST:PORT is required (or set CONTINUITY_BROKER)",
              file=sys.stderr)
        return 2
    for name, state in topics.create_topics(args.broker, args.partitions,
                                            args.replication).items():
        print(f"{name}: {state}")
    return 0
