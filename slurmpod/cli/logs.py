"""``slurmpod logs CLUSTER [--node ID] [--stream NAME]``: node logs the control plane kept.

Streams are named like HyperPod's CloudWatch log streams (``LifecycleConfig/<group>/<instance-id>``) and stay
readable after the node, or the whole cluster, is gone. Without ``--node``/``--stream`` it lists the streams.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurmpod.cli.options import die, find_clusters
from slurmpod.lifecycle.logstreams import LogStreams
from slurmpod.settings import Settings, default_state_dir


def add_logs_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "logs", help="node logs kept by the control plane (lifecycle script output)",
        description="List a cluster's log streams, or print one (--node ID or --stream NAME).",
        epilog="examples:\n  slurmpod logs my-cluster\n  slurmpod logs my-cluster --node i-0123456789abcdef0\n"
               "  slurmpod logs my-cluster --stream LifecycleConfig/compute-group/i-0123456789abcdef0",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cluster", help="cluster name, ARN or id (a deleted cluster's logs are kept too)")
    p.add_argument("--node", help="print the streams of this instance id")
    p.add_argument("--stream", help="print this stream")
    p.add_argument("--state-dir", default=str(default_state_dir()))
    p.add_argument("--db", default=None)
    p.set_defaults(func=cmd_logs)
    return p


def _cluster_ids(settings: Settings, logs: LogStreams, wanted: str, region: str | None = None) -> list[str]:
    from slurmpod.store.sql import SqlStore

    ids = []
    if Path(settings.state_dir).is_dir():
        store = SqlStore(settings.database_url)
        try:
            ids = [c.cluster_id for c in find_clusters(store, wanted, region)]
        finally:
            store.close()
    return ids or logs.find(wanted)


def cmd_logs(args: argparse.Namespace) -> int:
    settings = Settings(state_dir=Path(args.state_dir), db_url=args.db)
    logs = LogStreams(settings.state_dir)
    ids = _cluster_ids(settings, logs, args.cluster, args.region)
    if not ids:
        return die(f"no cluster {args.cluster} (and no logs kept for it) in {settings.state_dir}")
    if len(ids) > 1:
        return die(f"{args.cluster} names several clusters ({', '.join(ids)}): give the cluster id")
    cid = ids[0]
    streams = logs.streams(cid)
    if args.stream or args.node:
        chosen = [s for s in streams if (args.stream and s.name == args.stream)
                  or (args.node and s.name.endswith("/" + args.node))]
        if not chosen:
            return die(f"no log stream {args.stream or 'of node ' + args.node} for cluster {args.cluster}")
        for s in chosen:
            if len(chosen) > 1:
                print(f"==> {s.name} <==")
            sys.stdout.write(logs.read(cid, s.name))
        return 0
    if not streams:
        print(f"no log streams for cluster {args.cluster} yet")
        return 0
    for s in streams:
        when = datetime.fromtimestamp(s.modified, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        print(f"{s.name}  {s.size} bytes  {when}")
    return 0
