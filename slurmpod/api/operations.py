"""The newer cluster operations: BatchAddClusterNodes, ListClusterOperations, DescribeClusterOperation, and
the EKS-only ones (MoveClusterNodes, Attach/DetachClusterNodeVolume), which answer AWS's error for a Slurm
cluster after their input and clusters were checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurmpod.api.pagination import epoch, paginate
from slurmpod.domain import deep_health as dh
from slurmpod.domain.model import ClusterRecord, GroupScaling
from slurmpod.domain.operations import OperationRecord, operation_status
from slurmpod.domain.status import InstanceStatus
from slurmpod.errors import ResourceNotFound, ValidationException
from slurmpod.service.clusters import Caller, ClusterService
from slurmpod.service.scaling import NodeAddition, batch_add_nodes

Params = Mapping[str, Any]


# ---- BatchAddClusterNodes ------------------------------------------------------------------------------


def _addition(w: Mapping[str, Any]) -> NodeAddition:
    zones, types = w.get("AvailabilityZones"), w.get("InstanceTypes")
    return NodeAddition(w["InstanceGroupName"], int(w["IncrementTargetCountBy"]),
                        None if zones is None else tuple(zones), None if types is None else tuple(types))


def batch_add_cluster_nodes(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    result = batch_add_nodes(svc, caller, p["ClusterName"], [_addition(w) for w in p["NodesToAdd"]],
                             p.get("ClientToken") or None)
    status: dict[str, str] = {}
    if result.added:  # a retried token answers the nodes' latest status
        rec = svc.resolve(caller, p["ClusterName"])
        status = {n.instance_id: n.status.value for n in svc.nodes(rec)}
    return {
        "Successful": [{"NodeLogicalId": a.logical_id, "InstanceGroupName": a.group,
                        "Status": status.get(a.instance_id, InstanceStatus.NOT_FOUND.value)} for a in result.added],
        "Failed": [{"InstanceGroupName": f.group, "ErrorCode": f.code, "FailedCount": f.count, "Message": f.message}
                   for f in result.failed],
    }


# ---- ListClusterOperations / DescribeClusterOperation ----------------------------------------------------


def _running(svc: ClusterService, rec: ClusterRecord) -> frozenset[str]:
    """Operation ids the cluster's nodes still work on (deep health checks)."""
    out = set()
    for n in svc.nodes(rec):
        req = dh.request_of(n)
        if req is not None and req.operation_id:
            out.add(req.operation_id)
    return frozenset(out)


def _summary(op: OperationRecord, rec: ClusterRecord, running: frozenset[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"OperationId": op.operation_id, "ClusterArn": rec.arn}
    if op.type is not None:  # the model has no type for software updates, deletions, other updates
        out["Type"] = op.type.value
    out["Status"] = operation_status(op, rec, running).value
    out["CreationTime"] = op.creation_time
    return out


def _counts(s: GroupScaling) -> dict[str, int]:
    return {"CurrentCount": s.instance_count, "TargetCount": s.target_count, "MinCount": s.min_count}


def list_cluster_operations(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    rec = svc.resolve(caller, p["ClusterName"])
    items = svc.store.list_operations(rec.cluster_id)
    after, before = p.get("CreationTimeAfter"), p.get("CreationTimeBefore")
    if after is not None:
        items = [o for o in items if o.creation_time > epoch(after)]
    if before is not None:
        items = [o for o in items if o.creation_time < epoch(before)]
    if p.get("Type"):
        items = [o for o in items if o.type is not None and o.type.value == p["Type"]]
    running = _running(svc, rec)
    if p.get("Status"):
        items = [o for o in items if operation_status(o, rec, running).value == p["Status"]]
    filters = {"Cluster": rec.cluster_id,
               **{k: p.get(k) for k in ("Status", "Type", "CreationTimeAfter", "CreationTimeBefore", "SortBy",
                                         "SortOrder")}}
    page, token = paginate(items, lambda o: (o.creation_time, o.operation_id),
                           descending=p.get("SortOrder", "Descending") == "Descending",
                           max_results=p.get("MaxResults"), next_token=p.get("NextToken"), filters=filters)
    out: dict[str, Any] = {"ClusterOperationSummaries": [_summary(o, rec, running) for o in page]}
    if token:
        out["NextToken"] = token
    return out


def describe_cluster_operation(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    rec = svc.resolve(caller, p["ClusterName"])
    op = next((o for o in svc.store.list_operations(rec.cluster_id) if o.operation_id == p["OperationId"]), None)
    if op is None:
        raise ResourceNotFound(f"Operation {p['OperationId']} not found in cluster {rec.name}.")
    out = _summary(op, rec, _running(svc, rec))
    if op.scaling:
        status = out["Status"]
        out["ScalingDetails"] = [
            {"InstanceGroupName": c.group, "Status": status,
             **({"Original": _counts(c.original)} if c.original is not None else {}),
             "Desired": _counts(c.desired)}
            for c in op.scaling]
    return out


# ---- EKS-only operations ---------------------------------------------------------------------------------


def _eks_only(op: str, rec: ClusterRecord) -> ValidationException:
    return ValidationException(f"{op} is only supported for clusters that use Amazon EKS as the orchestrator; "
                               f"cluster {rec.name} uses Slurm.")


def move_cluster_nodes(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    given = [k for k in ("NodeIds", "NodeLogicalIds", "InstanceCount") if p.get(k) is not None]
    if len(given) != 1:
        raise ValidationException("Specify exactly one of NodeIds, NodeLogicalIds, or InstanceCount.")
    source = svc.resolve(caller, p["SourceClusterArn"])
    target = svc.resolve(caller, p["TargetClusterArn"])
    if source.cluster_id == target.cluster_id and p["SourceInstanceGroupName"] == p["TargetInstanceGroupName"]:
        raise ValidationException("The target instance group must be different from the source instance group.")
    raise _eks_only("MoveClusterNodes", source)


def _node_volume(op: str) -> Any:
    def handler(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
        rec = svc.resolve(caller, p["ClusterArn"])
        svc.find_node(rec, p["NodeId"], None)
        raise _eks_only(op, rec)
    return handler


HANDLERS = {
    "BatchAddClusterNodes": batch_add_cluster_nodes,
    "ListClusterOperations": list_cluster_operations,
    "DescribeClusterOperation": describe_cluster_operation,
    "MoveClusterNodes": move_cluster_nodes,
    "AttachClusterNodeVolume": _node_volume("AttachClusterNodeVolume"),
    "DetachClusterNodeVolume": _node_volume("DetachClusterNodeVolume"),
}
