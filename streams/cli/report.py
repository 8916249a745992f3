"""``continuity-drift report``: the deployment's governance report from the output topics
(``streams.report``), or the counts of one worker's DuckDB file and ``/metrics``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from baselines.store import BaselineStore, StoreUnavailable


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


