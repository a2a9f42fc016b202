"""Health probes (the health monitor's only dependency on Slurm): Slurm's own replace/reboot requests, slurmd
liveness per node, and restoring the cluster's accounting host. Every command is bounded by a timeout."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.status import InstanceStatus
from slurmpod.providers.base import ProviderError
from slurmpod.reconciler.health import SlurmRequest
from slurmpod.reconciler.slurm_runtime.membership import slurm_name
from slurmpod.slurm import admin, control
from slurmpod.slurm.state import SlurmNode

if TYPE_CHECKING:
    from slurmpod.reconciler.slurm_runtime.runtime import SlurmRuntime

ACTIONS = ("Replace", "Reboot")
#: the health agent's record of what it saw (slurmpod/node/health_agent.py STATE_FILE)
AGENT_STATE = "/run/slurmpod/health.json"


def requested_action(reason: str | None) -> str | None:
    """``Replace``/``Reboot`` for HyperPod's exact reasons ``Action:Replace``/``Action:Reboot`` (case-sensitive; no
    spaces, no punctuation around them), None for any other reason."""
    for action in ACTIONS:
        if reason == f"Action:{action}":
            return action
    return None


def node_states(rt: SlurmRuntime, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> dict[str, SlurmNode]:
    """Slurm's nodes by name as the primary controller sees them; empty when it cannot say."""
    primary = rt.primary(cluster, nodes)
    if primary is None:
        return {}
    try:
        return {n.name: n for n in admin.SlurmControl(primary).nodes()}
    except (control.SlurmError, ProviderError):
        return {}


def slurm_requests(rt: SlurmRuntime, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> Mapping[str, SlurmRequest]:
    """Nodes with reason ``Action:Replace``/``Action:Reboot``: set to FAIL once their jobs have ended (drain, then
    act), or DOWN (act now: Slurm killed their jobs). Each request says whether the node's health agent made it."""
    states = node_states(rt, cluster, nodes)
    if not states:
        return {}
    out: dict[str, SlurmRequest] = {}
    for n in nodes:
        sn = states.get(n.hostname or "")
        if sn is None or not (sn.is_failed() and not sn.has_jobs() or sn.is_down()):
            continue
        action = requested_action((sn.reason or "").strip() if sn.reason else None)
        if action is not None:
            out[n.instance_id] = _agent_request(rt, cluster, n, action, sn.reason or "")
    return out


def _agent_request(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, action: str, reason: str
                   ) -> SlurmRequest:
    """The request, with the fault when the node's health agent set this very reason (its state file says so)."""
    try:
        r = rt.runner(cluster, node).run(["cat", AGENT_STATE], timeout=10)
        mark = json.loads(r.stdout).get("fault") if r.returncode == 0 else None
    except (ProviderError, ValueError, AttributeError):
        mark = None
    if isinstance(mark, dict) and mark.get("reason") == reason and not mark.get("left_alone"):
        return SlurmRequest(action, str(mark.get("fault") or "HealthCheckFailed"), str(mark.get("detail") or ""))
    return SlurmRequest(action)


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
