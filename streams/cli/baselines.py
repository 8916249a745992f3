"""``continuity-drift baselines``: a user's baselines through a worker's review API, or from a
stopped worker's DuckDB file, as the same JSON."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any

from baselines.store import BaselineStore, StoreUnavailable
from streams.present import baselines_view, history_view, users_view


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
