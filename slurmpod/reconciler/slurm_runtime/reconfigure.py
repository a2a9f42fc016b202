"""Topology changes: slurm.conf re-rendered under the cluster's SlurmConfigStrategy, controllers restarted.

Managed: drift between the live conf and what slurmpod last wrote fails the change (``TopologyDriftError``)
before anything is touched. Overwrite: manual partition edits are replaced. Merge (and Continuous): manual
partitions are kept. Lines with keys slurmpod does not own are kept always.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.status import NodeType, SlurmConfigStrategy
from slurmpod.domain.validation import effective_strategy
from slurmpod.reconciler.runtime import TopologyDriftError
from slurmpod.reconciler.slurm_runtime import gpus
from slurmpod.slurm import control
from slurmpod.slurm.conf import (
    detect_drift,
    merge_user_lines,
    parse_partitions,
    partition_map,
    render_cgroup_conf,
    render_slurm_conf,
)

if TYPE_CHECKING:
    from slurmpod.reconciler.slurm_runtime.runtime import SlurmRuntime


def apply_topology(rt: SlurmRuntime, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> str:
    from slurmpod.reconciler.slurm_runtime.runtime import compute_groups, spec_compute_groups

    primary = rt.primary(cluster, nodes)
    live = ""
    if primary is not None:
        res = primary.run(["cat", control.SLURM_CONF], timeout=30)
        live = res.stdout if res.returncode == 0 else ""
    strategy = effective_strategy(cluster.spec)
    if strategy == SlurmConfigStrategy.MANAGED and live and cluster.last_good_spec is not None:
        # drift = the live conf matches none of what slurmpod wrote or is writing (a crash between saving and
        # restarting may leave either the old or the new conf live: neither is drift)
        saved = rt.files.saved_conf(cluster.cluster_id)
        candidates = [partition_map(spec_compute_groups(cluster.last_good_spec)),
                      partition_map(compute_groups(cluster))]
        if saved:
            candidates.insert(0, {p: m for p, m in parse_partitions(saved).items() if p != "dev"})
        findings = [detect_drift(live, expected) for expected in candidates]
        drift = [] if any(not f for f in findings) else findings[0]
        if drift:
            raise TopologyDriftError(drift)
    api_partitions = {g.partition for g in cluster.spec.instance_groups if g.partition}
    keep_manual = strategy in (None, SlurmConfigStrategy.MERGE)
    user_lines = merge_user_lines(live, api_partitions, keep_manual_partitions=keep_manual) if live else ()
    conf = render_slurm_conf(replace(rt.topology(cluster, nodes), user_lines=user_lines))
    ctls = rt.controllers(cluster, nodes)
    rt.files.save_conf(cluster.cluster_id, conf)
    gpus.ensure_node_gres_files(rt, cluster, nodes)  # before slurmctld serves a gres.conf that includes them
    for n in reversed(ctls):  # backups first, then the primary
        control.restart_slurmctld(rt.runner(cluster, n), conf, render_cgroup_conf())
    login = {g.name for g in cluster.spec.groups_of(NodeType.LOGIN)}
    for n in nodes:
        if n.group in login and n.active and "daemons" in n.phases:
            control.configure_login(rt.runner(cluster, n), conf)
    return rt.desired_topology(cluster)
