"""Deep health checks (HyperPod's DHC), pure: the check types, the Slurm objects a node sits in while it is
checked, the per-node request a node carries, and the rules both API fields follow.

A node to be checked carries a request in ``NodeRecord.data["dhc"]`` (``DhcRequest``): the checks, whether it is
on-demand (StartClusterHealthCheck) or on-start (OnStartDeepHealthChecks of a new node), the operation and when
it was asked for. While it is checked its status is ``DeepHealthCheckInProgress`` and, in Slurm, it is in the
reservation ``hyperpod-deep-health-check`` and the partition ``hyperpod-system-maintenance`` with the feature
``SageMakerDeepHealthCheck:InProgress`` (reference/hyperpod-node-environment.md §4).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurmpod.domain.model import NodeRecord
from slurmpod.domain.spec import DeepHealthCheck, InstanceGroupSpec
from slurmpod.domain.status import InstanceStatus, NodeType

RESERVATION = "hyperpod-deep-health-check"
PARTITION = "hyperpod-system-maintenance"
FEATURE = "SageMakerDeepHealthCheck:InProgress"
#: the Slurm job name of the checks (``squeue -a`` shows it)
JOB_NAME = "sagemaker-deep-health-check"
#: on-node log, as on HyperPod
NODE_LOG = "/var/log/aws/clusters/sagemaker-deep-health-check.log"
#: an on-demand check waits this long for a node's running jobs, then skips the node (HyperPod: 10 minutes)
DEFAULT_BUSY_TIMEOUT = 600.0
#: how long the stress part (stress-ng on CPU and memory) runs per node
DEFAULT_STRESS_SECONDS = 5.0
DATA_KEY = "dhc"

__all__ = ["DeepHealthCheck"]


@dataclass(frozen=True)
class DhcRequest:
    """A node's pending or running deep health check."""

    checks: tuple[DeepHealthCheck, ...]
    on_demand: bool
    requested: float
    operation_id: str | None = None
    started: bool = False  # on-demand: the node's jobs are done and the checks began

    def to_dict(self) -> dict[str, Any]:
        return {"checks": [c.value for c in self.checks], "on_demand": self.on_demand, "requested": self.requested,
                "operation_id": self.operation_id, "started": self.started}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> DhcRequest:
        return DhcRequest(tuple(DeepHealthCheck(c) for c in d.get("checks") or ()), bool(d.get("on_demand")),
                          float(d.get("requested") or 0.0), d.get("operation_id"), bool(d.get("started")))


def request_of(node: NodeRecord) -> DhcRequest | None:
    raw = node.data.get(DATA_KEY)
    return DhcRequest.from_dict(raw) if isinstance(raw, Mapping) else None


def with_request(data: Mapping[str, Any], request: DhcRequest | None) -> dict[str, Any]:
    """``data`` carrying ``request`` (None: without any)."""
    out = {k: v for k, v in data.items() if k != DATA_KEY}
    if request is not None:
        out[DATA_KEY] = request.to_dict()
    return out


def on_start_request(group: InstanceGroupSpec, now: float) -> DhcRequest | None:
    """The checks a new node of ``group`` runs before it takes jobs (None: the group has none, or is no worker)."""
    if not group.deep_health_checks or group.node_type not in (NodeType.COMPUTE, None):
        return None
    return DhcRequest(group.deep_health_checks, on_demand=False, requested=now)


def active_on_demand(nodes: Iterable[NodeRecord]) -> list[NodeRecord]:
    """Nodes whose on-demand check is still pending or running (one request per cluster at a time)."""
    out = []
    for n in nodes:
        req = request_of(n)
        if n.active and req is not None and req.on_demand:
            out.append(n)
    return out


def due(nodes: Sequence[NodeRecord]) -> dict[str, list[NodeRecord]]:
    """group -> its nodes with a check to start or finish (Running with an on-demand request, or in progress)."""
    out: dict[str, list[NodeRecord]] = {}
    for n in nodes:
        if not n.active or request_of(n) is None:
            continue
        if n.status in (InstanceStatus.RUNNING, InstanceStatus.DEEP_HEALTH_CHECK_IN_PROGRESS):
            out.setdefault(n.group, []).append(n)
    return out


def worker_key(group: str) -> str:
    return f"dhc:{group}"


# ---- validation ------------------------------------------------------------------------------------------

SLURM_UNSUPPORTED = (DeepHealthCheck.MULTI_NODE_TRAINING_VALIDATION,)


def check_list_findings(where: str, checks: Sequence[DeepHealthCheck]) -> list[str]:
    """Rules for one list of checks (OnStartDeepHealthChecks of a group, DeepHealthChecks of a request)."""
    findings = []
    dup = sorted(c.value for c, n in Counter(checks).items() if n > 1)
    if dup:
        findings.append(f"{where} contains duplicate deep health checks: {', '.join(dup)}.")
    for c in checks:
        if c in SLURM_UNSUPPORTED:
            findings.append(f"{c.value} is not supported for clusters orchestrated by Slurm ({where}); "
                            "supported deep health checks are InstanceStress and InstanceConnectivity.")
    return findings


def group_findings(group: InstanceGroupSpec, *, accelerated: bool, strict: bool) -> list[str]:
    """OnStartDeepHealthChecks of a group in CreateCluster/UpdateCluster."""
    if not group.deep_health_checks:
        return []
    where = f"OnStartDeepHealthChecks for instance group {group.name}"
    findings = check_list_findings(where, group.deep_health_checks)
    if group.node_type in (NodeType.CONTROLLER, NodeType.LOGIN):
        findings.append(f"{where}: deep health checks run on Compute instance groups only; instance group "
                        f"{group.name} has NodeType {group.node_type.value}.")
    if strict and not accelerated:
        findings.append(f"{where}: deep health checks are supported only on GPU and Trainium instance types, "
                        f"not {group.instance_type}.")
    return findings


@dataclass(frozen=True)
class HealthCheckTarget:
    """One ``InstanceGroupHealthCheckConfiguration`` of StartClusterHealthCheck (``instance_ids`` None: the group)."""

    group: str
    checks: tuple[DeepHealthCheck, ...]
    instance_ids: tuple[str, ...] | None = None


def merge_targets(targets: Sequence[HealthCheckTarget]) -> list[HealthCheckTarget]:
    """Overlapping configurations merged into one per group ("merged into a single operation", as AWS says):
    the union of checks, and of instance ids (a configuration for the whole group covers every instance)."""
    merged: dict[str, HealthCheckTarget] = {}
    for t in targets:
        prev = merged.get(t.group)
        if prev is None:
            merged[t.group] = t
            continue
        checks = tuple(dict.fromkeys((*prev.checks, *t.checks)))
        ids = None if prev.instance_ids is None or t.instance_ids is None else tuple(
            dict.fromkeys((*prev.instance_ids, *t.instance_ids)))
        merged[t.group] = HealthCheckTarget(t.group, checks, ids)
    return list(merged.values())
