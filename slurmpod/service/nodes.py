"""Node use cases behind BatchRebootClusterNodes, BatchReplaceClusterNodes and BatchDeleteClusterNodes.

Each records the request on the nodes (an ``op`` mark, a queued replacement, or ShuttingDown) with its events,
in one version-checked write of the cluster; the reconciler carries it out. Per-node refusals use the modeled
error codes (``NodeDeleteFailure``). ``ClusterService`` exposes these as its ``batch_*`` methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from slurmpod import ids
from slurmpod.domain import events as ev
from slurmpod.domain.continuous import group_busy
from slurmpod.domain.model import ClusterRecord, EventRecord, NodeRecord
from slurmpod.domain.status import ClusterStatus, InstanceStatus, NodeType
from slurmpod.domain.transitions import node_to
from slurmpod.errors import ConflictException
from slurmpod.store.retry import ClusterWrite

if TYPE_CHECKING:
    from slurmpod.service.clusters import Caller, ClusterService


@dataclass(frozen=True)
class NodeDeleteFailure:
    node_id: str
    code: str
    message: str


@dataclass
class NodeBatch:
    """One attempt's decision: the accepted node ids, the refusals, and what to write."""

    ok: list[str] = field(default_factory=list)
    failures: list[NodeDeleteFailure] = field(default_factory=list)
    changed: list[NodeRecord] = field(default_factory=list)
    drafts: list[ev.EventDraft] = field(default_factory=list)


def _plan_node_op(cur: ClusterRecord, nodes: dict[str, NodeRecord], node_ids: Sequence[str], op: str) -> NodeBatch:
    batch = NodeBatch()
    ok, failures, changed, drafts = batch.ok, batch.failures, batch.changed, batch.drafts
    for nid in dict.fromkeys(node_ids):
        node = nodes.get(nid)
        if node is None:
            failures.append(NodeDeleteFailure(nid, "InstanceIdNotFound", f"Instance {nid} not found."))
            continue
        if node.data.get("op") or node.data.get("update_to") or node.data.get("replace_queued") or \
                node.status == InstanceStatus.SYSTEM_UPDATING:
            failures.append(NodeDeleteFailure(nid, "InstanceIdInUse",
                                              f"Another operation is already in progress for {nid}."))
            continue
        if node.status not in (InstanceStatus.RUNNING, InstanceStatus.FAILURE):
            failures.append(NodeDeleteFailure(
                nid, "InvalidInstanceStatus",
                f"Instance {nid} is {node.status.value}; wait for it to finish any ongoing changes."))
            continue
        group = cur.spec.group(node.group)
        if op == "replace" and group is not None and group.node_type == NodeType.CONTROLLER:
            others = [n for n in nodes.values() if n.group == node.group and n.instance_id != nid
                      and n.status == InstanceStatus.RUNNING]
            if not others:
                failures.append(NodeDeleteFailure(
                    nid, "InstanceIdInUse", f"Instance {nid} is the only Slurm controller; it cannot be "
                    "replaced while no other controller serves."))
                continue
        in_flight = op == "replace" and group is not None and group.node_type == NodeType.CONTROLLER and any(
            n.group == node.group and n.instance_id != nid and (
                n.instance_id in ok or n.status != InstanceStatus.RUNNING or n.data.get("replace_queued"))
            for n in nodes.values())
        if in_flight:
            # controllers are replaced one at a time: the reconciler starts this one once the group is back
            # to all-Running, so a controller always serves
            changed.append(replace(node, data={**node.data, "replace_queued": True}))
            drafts.append(ev.instance_event(
                f"Replacement of Instance {nid} in Cluster {cur.name} and IG {node.group} is queued: "
                "controllers are replaced one at a time", node.group, nid))
        elif op == "replace":
            # its successor takes over its address, hostname and Slurm NodeName (reconciler.plan.takeovers)
            changed.append(node_to(node, InstanceStatus.SHUTTING_DOWN, message="Replaced by request",
                                   data={**node.data, "replaced": True}))
            drafts.append(ev.replacement_started(cur.name, node.group, nid))
        else:
            changed.append(replace(node, data={**node.data, "op": "reboot"}))
            drafts.append(ev.instance_event(
                f"Reboot of EC2 Instance {nid} is currently in progress on Cluster {cur.name} and IG "
                f"{node.group}", node.group, nid))
        ok.append(nid)
    return batch


def batch_node_op(
    svc: ClusterService, caller: Caller, name_or_arn: str, node_ids: Sequence[str], op: str
) -> tuple[list[str], list[NodeDeleteFailure]]:
    """BatchRebootClusterNodes (op ``reboot``: same instance) and BatchReplaceClusterNodes (``replace``: a new
    instance in the same group). Per-node failures use the modeled codes."""
    batch = NodeBatch()

    def change(cur: ClusterRecord) -> ClusterWrite | None:
        nonlocal batch
        if cur.status != ClusterStatus.IN_SERVICE:
            raise ConflictException(f"Cluster {cur.name} is in {cur.status.value} status; wait until InService.")
        batch = _plan_node_op(cur, {n.instance_id: n for n in svc.nodes(cur)}, node_ids, op)
        if not batch.changed:
            return None
        now = svc.clock.now()
        return ClusterWrite(cur, [ev.finish(d, cur, ids.new_event_id(), now) for d in batch.drafts],
                            changed_nodes=batch.changed)

    if svc.retry_cluster(caller, name_or_arn, change).stored is not None:
        svc.wake()
    return batch.ok, batch.failures


def _plan_delete(cur: ClusterRecord, nodes: dict[str, NodeRecord], node_ids: Sequence[str]) -> NodeBatch:
    batch = NodeBatch()
    for nid in dict.fromkeys(node_ids):
        node = nodes.get(nid)
        if node is None:
            batch.failures.append(NodeDeleteFailure(nid, "NodeIdNotFound", f"Node {nid} not found."))
            continue
        group = cur.spec.group(node.group)
        if group_busy(cur.group_states, node.group):
            raise ConflictException(
                f"Instance group {node.group} is {cur.group_states[node.group].status.value}; nodes can be "
                "deleted once it is InService."
            )
        if group is not None and group.node_type == NodeType.CONTROLLER:
            batch.failures.append(NodeDeleteFailure(
                nid, "NodeIdInUse", f"Node {nid} is a Slurm controller node and cannot be deleted."))
            continue
        if not node.active:
            batch.failures.append(NodeDeleteFailure(nid, "InvalidNodeStatus", f"Node {nid} is already being deleted."))
            continue
        if node.status not in (InstanceStatus.RUNNING, InstanceStatus.FAILURE):
            batch.failures.append(NodeDeleteFailure(
                nid, "InvalidNodeStatus",
                f"Node {nid} is in {node.status.value} status; wait for it to finish its current change."))
            continue
        batch.changed.append(node_to(node, InstanceStatus.SHUTTING_DOWN, message="Deleted by request"))
        batch.ok.append(nid)
    return batch


def batch_delete_nodes(
    svc: ClusterService, caller: Caller, name_or_arn: str, node_ids: Sequence[str]
) -> tuple[list[str], list[NodeDeleteFailure]]:
    """Marks nodes for removal and shrinks their groups; per-node failures use the modeled codes."""
    batch = NodeBatch()

    def change(cur: ClusterRecord) -> ClusterWrite | None:
        nonlocal batch
        if cur.status != ClusterStatus.IN_SERVICE:
            raise ConflictException(
                f"Cluster {cur.name} is in {cur.status.value} status; nodes can be deleted only while it is "
                "InService."
            )
        batch = _plan_delete(cur, {n.instance_id: n for n in svc.nodes(cur)}, node_ids)
        if not batch.changed:
            return None
        counts = {g.name: g.instance_count for g in cur.spec.instance_groups}
        for n in batch.changed:
            counts[n.group] -= 1
        new_groups = tuple(replace(g, instance_count=max(counts[g.name], 0)) for g in cur.spec.instance_groups)
        upd = replace(cur, spec=cur.spec.with_groups(new_groups))
        upd = replace(upd, last_good_spec=upd.spec)
        now = svc.clock.now()
        evs: list[EventRecord] = [
            ev.finish(ev.instance_terminating(cur.name, n.group, n.instance_id), upd, ids.new_event_id(), now)
            for n in batch.changed
        ]
        return ClusterWrite(upd, evs, changed_nodes=batch.changed)

    if svc.retry_cluster(caller, name_or_arn, change).stored is not None:
        svc.wake()
    return batch.ok, batch.failures
