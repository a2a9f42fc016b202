"""``slurmpod audit [--follow]``: the audit trail of a state directory (every account and region, for the
operator; API callers use CloudTrail's LookupEvents, which shows each its own account only).

Lines look like ``TIME ACCOUNT REGION SOURCE EVENT [ERROR] key=AKID ip=IP``, oldest first; ``--json`` prints each
record's CloudTrail JSON instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from slurmpod.cli.options import die
from slurmpod.settings import Settings

POLL_SECONDS = 1.0


def add_audit_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "audit", help="the audit trail: every API call and console action (CloudTrail LookupEvents serves it too)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new records until Ctrl-C")
    p.add_argument("--account", help="only this account's records")
    p.add_argument("--event-name", help="only this operation (e.g. UpdateClusterSoftware)")
    p.add_argument("--access-key-id", help="only calls signed with this key")
    p.add_argument("--errors", action="store_true", help="only refused or failed calls")
    p.add_argument("--limit", type=int, default=50, help="the newest N records first shown (default 50)")
    p.add_argument("--json", action="store_true", help="print each record's CloudTrail JSON")
    p.set_defaults(func=cmd_audit)
    return p


def _line(rec: Any, as_json: bool) -> str:
    if as_json:
        return str(rec.detail)
    detail = json.loads(rec.detail)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(rec.event_time))
    error = f" {rec.error_code}" if rec.error_code else ""
    console = " (console)" if detail.get("sessionCredentialFromConsole") == "true" else ""
    return (f"{when} {rec.account_id or '-':12} {rec.region or '-':14} {rec.event_source:26} {rec.event_name}{error}"
            f"{console} key={rec.access_key_id or '-'} ip={detail.get('sourceIPAddress') or '-'}")


def cmd_audit(args: argparse.Namespace) -> int:
    from slurmpod.store.audit import AuditFilter
    from slurmpod.store.sql import SqlStore

    settings = Settings(state_dir=Path(args.state_dir), db_url=args.db)
    if args.db is None and not (Path(args.state_dir) / "slurmpod.db").is_file():
        return die(f"no database in {args.state_dir} (give --state-dir or --db)")
    if args.limit < 1:
        return die("--limit must be at least 1")
    store = SqlStore(settings.database_url)
    f = AuditFilter(account_id=args.account, region=args.region, event_name=args.event_name,
                    access_key_id=args.access_key_id)
    try:
        newest = store.audit.page(f, limit=args.limit)
        rows = [r for r in reversed(newest) if not args.errors or r.error_code]
        for r in rows:
            print(_line(r, args.json))
        last = max((r.seq for r in newest), default=0)
        while args.follow:
            sys.stdout.flush()
            time.sleep(POLL_SECONDS)
            for r in store.audit.page(f, limit=500, oldest_first=True, after_seq=last):
                last = max(last, r.seq)
                if not args.errors or r.error_code:
                    print(_line(r, args.json))
    except KeyboardInterrupt:
        return 0
    finally:
        store.close()
    return 0
