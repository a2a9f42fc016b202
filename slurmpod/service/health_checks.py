"""StartClusterHealthCheck: on-demand deep health checks, recorded as a request on each target node (one version-
checked write of the cluster with its events); the reconciler's deep-health worker carries them out.

Rules (AWS's where AWS states them): one on-demand request per cluster at a time; Compute groups only (checks run
on workers, never controller or login nodes); InstanceStress and InstanceConnectivity (MultiNodeTrainingValidation
is not offered for Slurm); the nodes must be Running with no other operation in flight. Overlapping configurations
are merged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from slurmpod import ids
from slurmpod.domain import deep_health as dh
from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.operations import OperationKind
from slurmpod.domain.status import ClusterStatus, InstanceStatus, NodeType
from slurmpod.errors import ConflictException, ValidationException, validation_message
from slurmpod.store.retry import ClusterWrite

if TYPE_CHECKING:
    from slurmpod.service.clusters import Caller, ClusterService

ONE_AT_A_TIME = ("Only one on-demand deep health check request can be active per cluster at a time: cluster {name} "
                 "is still checking instance(s) {ids}.")


def _busy(node: NodeRecord) -> bool:
    return bool(node.data.get("op") or node.data.get("update_to") or node.data.get("replace_queued"))


def _targets(cur: ClusterRecord, nodes: Sequence[NodeRecord], targets: Sequence[dh.HealthCheckTarget]
             ) -> tuple[list[tuple[NodeRecord, dh.HealthCheckTarget]], list[str]]:
    findings: list[str] = []
    chosen: list[tuple[NodeRecord, dh.HealthCheckTarget]] = []
    for t in targets:
        group = cur.spec.group(t.group)
        if group is None:
            findings.append(f"Instance group {t.group} not found in cluster {cur.name}.")
            continue
        findings += dh.check_list_findings(f"DeepHealthChecks for instance group {t.group}", t.checks)
        if group.node_type in (NodeType.CONTROLLER, NodeType.LOGIN):
            findings.append(f"Deep health checks run on Compute instance groups only: instance group {t.group} has "
                            f"NodeType {group.node_type.value}.")
            continue
        mine = {n.instance_id: n for n in nodes if n.group == t.group and n.active}
        wanted = list(t.instance_ids) if t.instance_ids is not None else sorted(mine)
        for iid in dict.fromkeys(wanted):
            node = mine.get(iid)
            if node is None:
                findings.append(f"Instance {iid} not found in instance group {t.group} of cluster {cur.name}.")
            elif node.status != InstanceStatus.RUNNING:
                findings.append(f"Instance {iid} is {node.status.value}; deep health checks run on Running "
                                "instances.")
            elif _busy(node) or dh.request_of(node) is not None:
                findings.append(f"Another operation is already in progress for {iid}.")
            else:
                chosen.append((node, t))
        if not wanted:
            findings.append(f"Instance group {t.group} has no instances to check.")
    return chosen, findings


def start_health_check(svc: ClusterService, caller: Caller, name_or_arn: str,
                       targets: Sequence[dh.HealthCheckTarget]) -> ClusterRecord:
    merged = dh.merge_targets(targets)

    def change(cur: ClusterRecord) -> ClusterWrite:
        nodes = svc.nodes(cur)
        active = dh.active_on_demand(nodes)
        if active:
            raise ConflictException(ONE_AT_A_TIME.format(name=cur.name,
                                                         ids=", ".join(n.instance_id for n in active)))
        if cur.status != ClusterStatus.IN_SERVICE:
            raise ConflictException(f"Cluster {cur.name} is in {cur.status.value} status; deep health checks can "
                                    "be started only while it is InService.")
        chosen, findings = _targets(cur, nodes, merged)
        if findings:
            raise ValidationException(validation_message(findings))
        now = svc.clock.now()
        op = ids.new_operation_id()
        changed = [replace(n, data=dh.with_request(n.data, dh.DhcRequest(t.checks, True, now, op)))
                   for n, t in chosen]
        drafts = [ev.dhc_requested(cur.name, t.group, [c.value for c in t.checks],
                                   sum(1 for _, x in chosen if x.group == t.group)) for t in merged]
        upd = replace(cur, operation_id=op)
        return ClusterWrite(upd, [ev.finish(d, upd, ids.new_event_id(), now) for d in drafts], changed_nodes=changed,
                            operation_kind=OperationKind.HEALTH_CHECK)

    stored = svc.retry_cluster(caller, name_or_arn, change).record
    svc.wake()
    return stored
