"""``slurmpod connect``: a root shell (or one command) inside a node, HyperPod's SSM target syntax."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from slurmpod.cli.options import die, one_cluster
from slurmpod.domain.model import NodeRecord
from slurmpod.domain.status import InstanceStatus
from slurmpod.settings import Settings
from slurmpod.store.protocol import ClusterRepo, NodeRepo, SettingsRepo

TARGET_RE = re.compile(r"^sagemaker-cluster:([a-z0-9]{12})_(.+)-(i-[0-9a-f]{8,17})$")


class ConnectError(Exception):
    """A one-line, actionable message for the user."""


def parse_target(target: str) -> tuple[str, str, str]:
    m = TARGET_RE.match(target)
    if not m:
        raise ConnectError(
            f"bad target {target!r}; use sagemaker-cluster:<cluster-id>_<instance-group>-<instance-id>"
        )
    return m.group(1), m.group(2), m.group(3)


class NodeLookup(ClusterRepo, NodeRepo, SettingsRepo, Protocol):
    """The part of the store ``resolve`` reads."""


def resolve(store: NodeLookup, target: str | None, cluster: str | None, group: str | None,
            region: str | None = None) -> NodeRecord:
    if target:
        cluster_id, grp, iid = parse_target(target)
        node = store.get_node(iid)
        if node is None or node.cluster_id != cluster_id or node.group != grp:
            raise ConnectError(f"no instance {iid} in group {grp} of cluster {cluster_id}")
        return node
    if not cluster:
        raise ConnectError("give a TARGET or --cluster NAME [--group G]")
    try:
        recs = [one_cluster(store, cluster, region)]
    except LookupError as exc:
        raise ConnectError(str(exc)) from exc
    nodes = [n for n in store.list_nodes(recs[0].cluster_id)
             if n.status == InstanceStatus.RUNNING and (group is None or n.group == group)]
    if group is None:
        ctl = [g.name for g in recs[0].spec.instance_groups if g.node_type and g.node_type.value == "Controller"]
        nodes.sort(key=lambda n: (n.group not in ctl, n.seq))
    if not nodes:
        raise ConnectError(f"no running instance in cluster {cluster}" + (f" group {group}" if group else ""))
    return nodes[0]


def connect(state_dir: Path, db_url: str, target: str | None, cluster: str | None, group: str | None,
            command: Sequence[str], region: str | None = None) -> int:
    from slurmpod.providers.ssh.routing import build_node_provider
    from slurmpod.store.sql import SqlStore

    store = SqlStore(db_url)
    try:
        node = resolve(store, target, cluster, group, region)
    finally:
        store.close()
    runner = build_node_provider(state_dir).runner(node.cluster_id, node.instance_id)
    argv = runner.interactive_argv(list(command) if command else ["bash", "-l"])
    if command:
        return subprocess.run(argv, check=False).returncode  # noqa: S603
    sys.stdout.flush()
    os.execvp(argv[0], argv)  # noqa: S606
    return 0  # pragma: no cover


def cmd_connect(args: argparse.Namespace) -> int:
    settings = Settings(state_dir=Path(args.state_dir), db_url=args.db)
    command = list(args.command_argv or [])
    try:
        return connect(settings.state_dir, settings.database_url, args.target, args.cluster, args.group, command,
                       args.region)
    except ConnectError as exc:
        return die(str(exc))
