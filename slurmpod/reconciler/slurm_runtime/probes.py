"""Health probes (the health monitor's only dependency on Slurm): Slurm's own replace/reboot requests, slurmd
liveness per node, and restoring the cluster's accounting host. Every command is bounded by a timeout."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.status import InstanceStatus
from slurmpod.providers.base import ProviderError
from slurmpod.reconciler.slurm_runtime.membership import slurm_name
from slurmpod.slurm import control

if TYPE_CHECKING:
    from slurmpod.reconciler.slurm_runtime.runtime import SlurmRuntime

ACTIONS = ("Replace", "Reboot")


def slurm_requests(rt: SlurmRuntime, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> Mapping[str, str]:
    """``scontrol update node=X state=fail reason="Action:Replace"`` on an idle node: instance id -> action."""
    primary = rt.primary(cluster, nodes)
    if primary is None:
        return {}
    try:
        states = {n.name: n for n in control.SlurmControl(primary).nodes()}
    except (control.SlurmError, ProviderError):
        return {}
    out: dict[str, str] = {}
    for n in nodes:
        sn = states.get(n.hostname or "")
        if sn is None or not sn.is_failed() or sn.has_jobs():
            continue
        reason = (sn.reason or "").strip()
        for action in ACTIONS:
            if reason.lower().startswith(f"action:{action.lower()}"):
                out[n.instance_id] = action
    return out


def unreachable(rt: SlurmRuntime, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> set[str]:
    out: set[str] = set()
    for n in nodes:
        if n.status != InstanceStatus.RUNNING or slurm_name(cluster, n) is None:
            continue
        try:
            pid = control.read_pid(rt.runner(cluster, n), control.SLURMD_PID_FILE, "slurmd")
        except ProviderError:
            continue  # a dead instance is handled by alive()
        if pid is None:
            out.add(n.instance_id)
    return out


def heal_services(rt: SlurmRuntime, cluster: ClusterRecord) -> list[tuple[bool, str]]:
    """The accounting host (instance or slurmdbd) found dead is brought back on its volume and address;
    slurmctld reconnects by itself and sends what it queued meanwhile."""
    if rt.accounting is None or not rt.wants_accounting(cluster):
        return []
    if rt.accounting.alive(cluster.cluster_id):
        return []
    t0 = time.monotonic()
    try:
        cfg = rt.ensure_accounting(cluster)
    except (control.SlurmError, ProviderError) as exc:
        return [(False, f"The accounting host of Cluster {cluster.name} is down and could not be restarted: {exc}")]
    where = f" at {cfg.host_ip}" if cfg is not None else ""
    return [(True, f"The accounting host of Cluster {cluster.name} was down; slurmdbd runs again{where} "
                   f"({time.monotonic() - t0:.1f}s).")]
