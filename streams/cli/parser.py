"""The command line: every command's flags, help and examples (``continuity-drift --help``)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from drift.simulation import Scenario

N = TypeVar("N", int, float)

EXAMPLES = """\
examples:
  continuity-drift demo                                # broker + worker + traffic + live summary
  continuity-drift run --data-dir ./data               # worker on an embedded broker
  continuity-drift run --broker kafka:9092 --data-dir /data --web-port 6066
  continuity-drift run --broker kafka:9092 --data-dir /data --workers 2   # ports 6066, 6067
  continuity-drift topics --broker localhost:9092 --partitions 8
  continuity-drift simulate --broker localhost:9092 --scenario stable \\
      --scenario attunement_shift --users 50 --seed 7 --rate 2000 --truth truth.jsonl
  continuity-drift baselines history --user u-123 --api http://127.0.0.1:6066 --token $TOKEN
  continuity-drift report --broker localhost:9092 --html week.html --json week.json
  continuity-drift report --data-dir ./data
"""


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command, with its help and examples."""
    # Each command's flags are spelled out in full: some look alike (--users, --seed,
    # --broker) but their defaults and help differ by command.
    parser = argparse.ArgumentParser(
        prog="continuity-drift",
        description="Continuity drift governance: scores FHR telemetry for continuity drift, "
                    "re-attunement and memory governance, from Kafka to Kafka and Prometheus.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run", help="run a worker until SIGTERM/SIGINT",
        description="Run one worker of the consumer group. Every flag can also be set by an "
                    "environment variable CONTINUITY_<FLAG> (e.g. CONTINUITY_BROKER).",
        epilog="example:\n  continuity-drift run --broker localhost:9092 --data-dir ./data",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _worker_flags(run)
    run.add_argument("--workers", type=_positive_int, default=1,
                     help="worker processes of one group on this machine, each with its own "
                          "data directory <data-dir>/worker-<i> and HTTP port --web-port + i; "
                          "a worker that fails is restarted (default 1)")

    demo = sub.add_parser(
        "demo", help="embedded broker + worker + simulated traffic + live summary",
        description="The one-command start: an embedded Kafka-protocol broker, a worker, the\n"
                    "simulator with every scenario, told again in rounds until the demo stops,\n"
                    "and what the service publishes: a screen that updates in place on a\n"
                    "terminal, short periodic summaries when piped. Stops on Ctrl-C or after\n"
                    "--duration seconds, lets the worker process what was sent, and prints the\n"
                    "final counts beside the worker's /metrics.",
        epilog="example:\n  continuity-drift demo --users 20 --duration 60",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_argument("--users", type=_positive_int, default=12,
                      help="users per scenario (default 12)")
    demo.add_argument("--rate", type=_positive_float, default=500.0,
                      help="input records per second, sent until the demo stops "
                           "(default 500)")
    demo.add_argument("--seed", type=int, default=7,
                      help="simulator seed: the same seed gives the same traffic (default 7)")
    demo.add_argument("--duration", type=float, default=0.0,
                      help="stop the traffic after this many seconds (default: run until "
                           "Ctrl-C)")
    demo.add_argument("--data-dir", type=Path, default=None,
                      help="where the worker keeps DuckDB and its log (default: a fresh "
                           "temporary directory)")
    demo.add_argument("--web-port", type=int, default=6066,
                      help="the worker's HTTP port for /metrics and the review API (default 6066)")

    sim = sub.add_parser(
        "simulate", help="produce labelled synthetic FHR traffic with ground truth",
        description="Produce synthetic FHR events for the chosen scenarios to fhr.events, "
                    "keyed by user id, and write the ground truth (one JSON line per session) "
                    "beside them.",
        epilog="scenarios: " + ", ".join(s.value for s in Scenario) + "\nexample:\n"
               "  continuity-drift simulate --broker localhost:9092 --scenario stable "
               "--users 100 --seed 1 --rate 5000 --truth truth.jsonl",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sim.add_argument("--broker", required=True, help="Kafka bootstrap HOST:PORT")
    sim.add_argument("--scenario", action="append", choices=[s.value for s in Scenario],
                     help="repeat for several; default: every scenario")
    sim.add_argument("--users", type=_positive_int, default=10,
                     help="users per scenario (default 10)")
    sim.add_argument("--seed", type=int, default=1,
                     help="simulator seed: the same seed gives the same events (default 1)")
    sim.add_argument("--rate", type=float, default=0.0,
                     help="events per second (default 0: as fast as possible)")
    sim.add_argument("--mode", choices=["continuity_light", "continuity_full"],
                     default="continuity_full",
                     help="continuity mode of the simulated users (default continuity_full)")
    sim.add_argument("--shift-sd", type=float, default=1.5,
                     help="size of the attunement shift in the shifted scenarios, in the user's "
                          "own turn standard deviations (default 1.5)")
    sim.add_argument("--turns", type=_positive_int, default=12,
                     help="turns per simulated session (default 12)")
    sim.add_argument("--turn-gap", type=float, default=20.0,
                     help="event-time seconds between a session's events (default 20)")
    sim.add_argument("--start", type=float, default=None,
                     help="event time of the first event, epoch seconds (default: 10 days ago)")
    sim.add_argument("--truth", type=Path, default=None, help="write ground truth JSONL here")

    base = sub.add_parser(
        "baselines", help="list / show / history of a user's baselines",
        description="Read a user's baselines through a worker's review API (--api, --token) or, "
                    "when no worker runs, straight from the DuckDB file (--data-dir).",
        epilog="example:\n  continuity-drift baselines show --user u-1 --data-dir ./data",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    base.add_argument("action", choices=["list", "show", "history"],
                      help="list users with baselines, show a user's current baselines, or the "
                           "history of their versions and tombstones")
    base.add_argument("--user", help="user id (required for show and history; with list, "
                                     "only that user)")
    base.add_argument("--data-dir", type=Path, default=Path("./data"),
                      help="the worker's data directory, read when no worker runs (default ./data)")
    base.add_argument("--limit", type=_positive_int, default=100,
                      help="list at most this many users, in user id order (default 100; the "
                           "output says how many there are in all)")
    base.add_argument("--api", help="review API base URL, e.g. http://127.0.0.1:6066")
    base.add_argument("--token", default=os.environ.get("CONTINUITY_REVIEW_TOKEN"),
                      help="review API bearer token (default: $CONTINUITY_REVIEW_TOKEN)")

    report = sub.add_parser(
        "report", help="the governance report: an HTML page with plots and its JSON twin",
        description="The governance report of a whole deployment over a range of event time:\n"
                    "--html FILE writes a self-contained page (plots, the users most in need of\n"
                    "review, what it leaves out) and --json FILE its machine-readable twin, both\n"
                    "read from the output topics on --broker, which carry what every worker\n"
                    "published. --user U gives one user's drill-down instead (shown under a\n"
                    "pseudonymous reference), with baseline versions through --api.\n\n"
                    "Without --html, --broker, --since, --until or --user: the counts of one\n"
                    "worker's DuckDB file (--data-dir) and, with --metrics, a running worker's\n"
                    "counters, as text or (--json) JSON.",
        epilog="examples:\n"
               "  continuity-drift report --broker localhost:9092 --html week.html "
               "--json week.json\n"
               "  continuity-drift report --broker localhost:9092 --since 2026-11-02 "
               "--until 2026-11-08 --html week.html\n"
               "  continuity-drift report --broker localhost:9092 --html u.html --user u-123 "
               "--api http://127.0.0.1:6066 --token $TOKEN\n"
               "  continuity-drift report --data-dir ./data "
               "--metrics http://127.0.0.1:6066/metrics",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("--html", type=Path, metavar="FILE",
                        help="write the report as one self-contained HTML page (inline SVG "
                             "plots, no network needed to open it, printable)")
    report.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                        help="write the JSON twin of the page to FILE; with no FILE print "
                             "JSON to stdout (also for the --data-dir summary)")
    report.add_argument("--broker", help="Kafka bootstrap HOST:PORT whose output topics the "
                                         "report reads (default: $CONTINUITY_BROKER)")
    report.add_argument("--since", metavar="WHEN",
                        help="start of the range, ISO 8601 event time: a date (its start, UTC) "
                             "or a date-time (default: 7 days before --until)")
    report.add_argument("--until", metavar="WHEN",
                        help="end of the range (excluded), ISO 8601: a date includes that day "
                             "(default: the end of the day of the latest output)")
    report.add_argument("--user", metavar="U",
                        help="a user id: one user's drill-down instead of the overview (the "
                             "page shows only their pseudonymous reference)")
    report.add_argument("--api", metavar="URL",
                        help="review API base URL of any worker, for --user's baseline "
                             "versions, e.g. http://127.0.0.1:6066")
    report.add_argument("--token", default=os.environ.get("CONTINUITY_REVIEW_TOKEN"),
                        help="review API bearer token (default: $CONTINUITY_REVIEW_TOKEN)")
    report.add_argument("--top", type=_positive_int, default=20,
                        help="list at most this many users most in need of review (default 20)")
    report.add_argument("--data-dir", type=Path, default=Path("./data"),
                        help="the worker's data directory, for the one-file summary "
                             "(default ./data)")
    report.add_argument("--metrics", help="a worker's /metrics URL to add its counters to the "
                                          "one-file summary")

    tps = sub.add_parser(
        "topics", help="create the service's topics with their partition counts",
        description="Create fhr.events and every output topic that does not exist yet, all\n"
                    "with the same partition count so that they co-partition by user id.",
        epilog="example:\n  continuity-drift topics --broker localhost:9092 --partitions 8",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    tps.add_argument("--broker", default=os.environ.get("CONTINUITY_BROKER"),
                     help="Kafka bootstrap HOST:PORT (default: $CONTINUITY_BROKER)")
    tps.add_argument("--partitions", type=_positive_int, default=4,
                     help="partitions of every topic (default 4)")
    tps.add_argument("--replication", type=_positive_int, default=1,
                     help="replication factor (default 1)")
    return parser


def _number(text: str, convert: Callable[[str], N], noun: str) -> N:
    """``text`` as ``convert`` reads it, or an argparse error that names ``noun``."""
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None


def _positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = _number(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def _positive_float(text: str) -> float:
    """An argparse type: a number above 0."""
    value = _number(text, float, "a number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not above 0")
    return value


def _worker_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--broker", help="Kafka bootstrap HOST:PORT; absent: start the embedded "
                                    "broker on a free loopback port")
    p.add_argument("--data-dir", type=Path, help="DuckDB and worker files (default ./data)")
    p.add_argument("--web-port", type=int, help="HTTP port for /metrics, /healthz, /readyz and "
                                                 "the review API (default 6066)")
    p.add_argument("--web-host", help="HTTP bind address (default 127.0.0.1)")
    p.add_argument("--config", type=Path, default=None,
                   help="TOML file with [worker] and [drift] sections")
    p.add_argument("--partitions", type=int, help="partitions for topics this worker creates")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                   help="JSON log lines on stderr from this level (default warning)")
