"""``slurmpod faults``: rehearse HyperPod's resiliency locally — inject a fault into a node, list, clear.

    slurmpod faults inject CLUSTER --node NODE KIND [--gpu N] [--duration S]
    slurmpod faults list CLUSTER
    slurmpod faults clear CLUSTER [--node NODE] [KIND ...]

NODE is an instance id or a hostname / Slurm node name (``ip-10-1-0-5``). The node's health agent sees the fault
as it would see the real one and marks the node ``Action:Replace``/``Action:Reboot`` in Slurm; slurmpod then
replaces or reboots it (NodeRecovery Automatic) and ``srun --auto-resume=1`` steps resume. Each injection is a
cluster event. Works on the state directory and database of the server (like ``capacity``), on this machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from slurmpod.cli.options import die, one_cluster
from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.status import InstanceStatus
from slurmpod.settings import Settings

EPILOG = """examples:
  slurmpod faults inject my-cluster --node ip-10-231-0-12 gpu-xid      # a GPU falls off the bus
  slurmpod faults inject my-cluster --node i-0123456789abcdef0 slurmd-hang --duration 120
  slurmpod faults list my-cluster
  slurmpod faults clear my-cluster --node ip-10-231-0-12
kinds: gpu-xid, gpu-lost (-> Action:Replace), slurmd-hang (-> Action:Reboot), node-crash (power loss),
       network-partition (the node reaches nobody; clear or --duration heals it)"""


def add_faults_parser(sub: Any) -> argparse.ArgumentParser:
    """``--state-dir``/``--db``/``--region`` come from ``cli.common`` (accepted anywhere on the line)."""
    p: argparse.ArgumentParser = sub.add_parser(
        "faults", help="inject rehearsal faults into nodes (GPU Xid, hung slurmd, crash, partition)",
        description=(__doc__ or "").split("\n\n")[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    fs = p.add_subparsers(dest="faults_command", required=True)
    i = fs.add_parser("inject", help="inject a fault into one node", epilog=EPILOG,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    i.add_argument("cluster", help="cluster name, ARN or id")
    i.add_argument("--node", required=True, help="instance id or hostname (Slurm node name)")
    i.add_argument("kind", help="gpu-xid | gpu-lost | slurmd-hang | node-crash | network-partition")
    i.add_argument("--gpu", type=int, default=0, help="GPU index (gpu-xid, gpu-lost; default 0)")
    i.add_argument("--duration", type=float, default=None, help="clear it by itself after S seconds")
    lst = fs.add_parser("list", help="faults active in a cluster's nodes", epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    lst.add_argument("cluster")
    lst.add_argument("--json", action="store_true")
    c = fs.add_parser("clear", help="clear faults (all of a node's, or the kinds named)", epilog=EPILOG,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("cluster")
    c.add_argument("--node", default=None, help="one node (default: every node of the cluster)")
    c.add_argument("kinds", nargs="*", metavar="KIND")
    p.set_defaults(func=run_faults)
    return p


def _node(nodes: list[NodeRecord], ref: str, cluster: ClusterRecord) -> NodeRecord:
    for n in nodes:
        if ref in (n.instance_id, n.hostname):
            return n
    raise LookupError(f"no node {ref} in cluster {cluster.name} (give an instance id or a hostname)")


def run_faults(args: argparse.Namespace) -> int:
    from slurmpod import ids
    from slurmpod.clock import SystemClock
    from slurmpod.providers import faults
    from slurmpod.providers.base import ProviderError
    from slurmpod.providers.ssh.routing import build_node_provider
    from slurmpod.store.sql import SqlStore

    settings = Settings(state_dir=Path(args.state_dir), db_url=args.db)
    store = SqlStore(settings.database_url)
    try:
        cluster = one_cluster(store, args.cluster, getattr(args, "region", None))
        nodes = list(store.list_nodes(cluster.cluster_id))
        provider = build_node_provider(Path(args.state_dir))
        if args.faults_command == "inject":
            node = _node(nodes, args.node, cluster)
            result = faults.inject(provider, cluster.cluster_id, node.instance_id, args.kind, gpu=args.gpu,
                                   duration=args.duration)
            draft = ev.fault_injected(node.group, node.instance_id, node.hostname or "", args.kind,
                                      duration=args.duration)
            store.add_events([ev.finish(draft, cluster, ids.new_event_id(), SystemClock().now())])
            print(f"{args.kind} injected into {node.instance_id} ({node.hostname}) of {cluster.name}"
                  + (f"; it clears in {args.duration:.0f} s" if args.duration else "")
                  + (f"; {result['killed']} task process(es) died" if result.get("killed") else ""))
            return 0
        targets = [_node(nodes, args.node, cluster)] if getattr(args, "node", None) else \
            [n for n in nodes if n.status == InstanceStatus.RUNNING]
        if args.faults_command == "clear":
            for n in targets:
                cleared = faults.clear(provider, cluster.cluster_id, n.instance_id, args.kinds)
                print(f"{n.instance_id} ({n.hostname}): " + (", ".join(cleared) + " cleared" if cleared
                                                             else "no fault"))
            return 0
        table: dict[str, dict[str, Any]] = {}
        for n in targets:
            try:
                table[n.instance_id] = {"hostname": n.hostname, "group": n.group,
                                        "faults": faults.active(provider, cluster.cluster_id, n.instance_id)}
            except faults.FaultError as exc:
                table[n.instance_id] = {"hostname": n.hostname, "group": n.group, "error": str(exc)}
        if args.json:
            json.dump(table, sys.stdout, indent=1, sort_keys=True)
            print()
        else:
            for iid, row in table.items():
                what = row.get("error") or ", ".join(row["faults"]) or "-"
                print(f"{iid}  {row['hostname'] or '-':<18} {row['group']:<20} {what}")
        return 0
    except (LookupError, faults.FaultError, ProviderError) as exc:
        return die(f"faults: {exc}")
    finally:
        store.close()
