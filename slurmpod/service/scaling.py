"""BatchAddClusterNodes: raise instance groups' target counts and hand back the new nodes' NodeLogicalIds.

HyperPod's rules: Continuous clusters only; at most 5 groups and 50 nodes per call; per-group failures
(InstanceGroupNotFound, InvalidInstanceGroupStatus, IncompatibleAvailabilityZones, IncompatibleInstanceTypes)
are reported, the other groups are still scaled; a ClientToken makes the call idempotent for 8 hours (the same
token with the same parameters answers the same NodeLogicalIds; with other parameters it is refused).

The new nodes are recorded Pending in the same transaction as the new counts (as the reconciler's own
``create_nodes`` would: ids minted before any launch), so their NodeLogicalIds exist at once and the reconciler
boots them like any other new instance.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from slurmpod import ids
from slurmpod.domain import events as ev
from slurmpod.domain.continuous import group_busy, updated_group_states
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.operations import ClientTokenRecord, OperationKind
from slurmpod.domain.status import ClusterStatus, InstanceStatus
from slurmpod.domain.transitions import cluster_to
from slurmpod.domain.validation import validate_update
from slurmpod.errors import (
    ClientTokenTaken,
    ConflictException,
    ResourceLimitExceeded,
    ValidationException,
    validation_message,
)
from slurmpod.store.retry import ClusterWrite

if TYPE_CHECKING:
    from slurmpod.service.clusters import Caller, ClusterService

OPERATION = "BatchAddClusterNodes"
MAX_NODES_PER_CALL = 50
MAX_GROUP_INSTANCES = 6758  # the model's ClusterInstanceCount maximum
CONTINUOUS_ONLY = f"{OPERATION} is only supported for cluster with NodeProvisioningMode set to Continuous"


@dataclass(frozen=True)
class NodeAddition:
    """One NodesToAdd entry."""

    group: str
    count: int
    availability_zones: tuple[str, ...] | None = None
    instance_types: tuple[str, ...] | None = None


@dataclass(frozen=True)
class AddedNode:
    logical_id: str
    group: str
    instance_id: str


@dataclass(frozen=True)
class AddFailure:
    group: str
    code: str  # the model's BatchAddClusterNodesErrorCode
    count: int
    message: str


@dataclass(frozen=True)
class BatchAddResult:
    added: tuple[AddedNode, ...]
    failed: tuple[AddFailure, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"added": [[a.logical_id, a.group, a.instance_id] for a in self.added],
                "failed": [[f.group, f.code, f.count, f.message] for f in self.failed]}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> BatchAddResult:
        return BatchAddResult(tuple(AddedNode(str(a[0]), str(a[1]), str(a[2])) for a in d.get("added") or ()),
                              tuple(AddFailure(str(f[0]), str(f[1]), int(f[2]), str(f[3]))
                                    for f in d.get("failed") or ()))


def _fingerprint(cluster_id: str, additions: Sequence[NodeAddition]) -> str:
    raw = json.dumps([cluster_id, [[a.group, a.count, a.availability_zones, a.instance_types] for a in additions]],
                     sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()


def request_findings(additions: Sequence[NodeAddition]) -> list[str]:
    """What is wrong with the request as a whole (before any cluster is read)."""
    out: list[str] = []
    names = [a.group for a in additions]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        out.append(f"NodesToAdd contains duplicate instance group names: {', '.join(dupes)}.")
    total = sum(a.count for a in additions)
    if total > MAX_NODES_PER_CALL:
        out.append(f"NodesToAdd adds {total} nodes; at most {MAX_NODES_PER_CALL} nodes can be added across all "
                   "instance groups in a single request.")
    return out


def _group_failure(cur: ClusterRecord, a: NodeAddition) -> AddFailure | None:
    group = cur.spec.group(a.group)
    if group is None:
        return AddFailure(a.group, "InstanceGroupNotFound", a.count,
                          f"Instance group {a.group} not found in cluster {cur.name}.")
    su = cur.software_update
    if su is not None and a.group in su.groups:
        return AddFailure(a.group, "InvalidInstanceGroupStatus", a.count,
                          f"Instance group {a.group} is SystemUpdating; wait until the software update completes.")
    if group_busy(cur.group_states, a.group):
        status = cur.group_states[a.group].status.value
        return AddFailure(a.group, "InvalidInstanceGroupStatus", a.count,
                          f"Instance group {a.group} is {status}; wait until it is InService.")
    if a.instance_types is not None and group.instance_type not in a.instance_types:
        return AddFailure(a.group, "IncompatibleInstanceTypes", a.count,
                          f"Instance group {a.group} runs {group.instance_type}, which is not in InstanceTypes "
                          f"[{', '.join(a.instance_types)}].")
    if a.availability_zones is not None:
        return AddFailure(a.group, "IncompatibleAvailabilityZones", a.count,
                          f"slurmpod has no availability zones: instance group {a.group} cannot be placed in "
                          f"[{', '.join(a.availability_zones)}]; omit AvailabilityZones.")
    return None


def batch_add_nodes(svc: ClusterService, caller: Caller, name_or_arn: str, additions: Sequence[NodeAddition],
                    client_token: str | None) -> BatchAddResult:
    findings = request_findings(additions)
    if findings:
        raise ValidationException(validation_message(findings))
    rec = svc.resolve(caller, name_or_arn)
    fingerprint = _fingerprint(rec.cluster_id, additions)

    def recorded() -> BatchAddResult | None:
        if not client_token:
            return None
        held = svc.store.get_client_token(caller.account_id, caller.region, OPERATION, client_token,
                                          svc.clock.now())
        if held is None:
            return None
        if held.fingerprint != fingerprint:
            raise ValidationException(f"ClientToken {client_token} was already used with different parameters "
                                      "within the last 8 hours; use a new ClientToken.")
        return BatchAddResult.from_dict(held.result)

    earlier = recorded()
    if earlier is not None:
        return earlier
    outcome: dict[str, BatchAddResult] = {}

    def change(cur: ClusterRecord) -> ClusterWrite | None:
        if not cur.spec.continuous:
            raise ValidationException(CONTINUOUS_ONLY)
        if cur.status != ClusterStatus.IN_SERVICE:
            raise ConflictException(f"Cluster {cur.name} is in {cur.status.value} status; {OPERATION} needs "
                                    "InService.")
        failed: list[AddFailure] = []
        accepted: list[NodeAddition] = []
        for a in additions:
            failure = _group_failure(cur, a)
            (failed.append(failure) if failure is not None else accepted.append(a))
        if not accepted:
            outcome["r"] = BatchAddResult((), tuple(failed))
            return None
        counts = {a.group: a.count for a in accepted}
        groups = []
        for g in cur.spec.instance_groups:
            n = g.instance_count + counts.get(g.name, 0)
            if n > MAX_GROUP_INSTANCES:
                raise ResourceLimitExceeded(f"Instance group {g.name} would have {n} instances; the limit is "
                                            f"{MAX_GROUP_INSTANCES}.")
            groups.append(replace(g, instance_count=n))
        new_spec = replace(cur.spec, instance_groups=tuple(groups))
        problems = validate_update(cur.spec, new_spec, (), strict=svc.strict, orchestrator_given=False)
        if problems:
            raise ValidationException(validation_message(problems))
        now = svc.clock.now()
        upd = cluster_to(cur, ClusterStatus.IN_SERVICE, spec=new_spec, operation_id=ids.new_operation_id(),
                         group_states=updated_group_states(cur.spec, new_spec, cur.group_states, now),
                         generation=cur.generation + 1)
        seq = svc.store.max_node_seq(cur.cluster_id)
        nodes: list[NodeRecord] = []
        added: list[AddedNode] = []
        drafts: list[ev.EventDraft] = []
        for a in accepted:
            group = new_spec.group(a.group)
            image = svc._image_of(group.image_id if group else None)
            drafts += [ev.group_event(cur.name, a.group, "scaling", "started"),
                       ev.instance_creation_started(cur.name, a.group)]
            for _ in range(a.count):
                seq += 1
                node = NodeRecord(
                    instance_id=ids.new_instance_id(), cluster_id=cur.cluster_id, group=a.group, seq=seq,
                    status=InstanceStatus.PENDING, launch_time=now, logical_id=f"{a.group}-{seq}",
                    image_id=image.image_id if image else None, image_release=image.release if image else None,
                    lifecycle_digest=cur.lifecycle_snapshots.get(a.group))
                nodes.append(node)
                added.append(AddedNode(node.logical_id or "", a.group, node.instance_id))
        result = BatchAddResult(tuple(added), tuple(failed))
        outcome["r"] = result
        token = None if not client_token else ClientTokenRecord(
            caller.account_id, caller.region, OPERATION, client_token, fingerprint, cur.cluster_id,
            result.to_dict(), now)
        return ClusterWrite(upd, [ev.finish(d, upd, ids.new_event_id(), now) for d in drafts], new_nodes=nodes,
                            operation_kind=OperationKind.SCALING, client_token=token)

    try:
        done = svc.retry_cluster(caller, name_or_arn, change)
    except ClientTokenTaken:  # a concurrent call with the same token won: answer what it answered
        again = recorded()
        if again is None:  # pragma: no cover - the winner's binding expired in between
            raise ConflictException(f"ClientToken {client_token} is in use; retry.") from None
        return again
    if done.stored is not None:
        svc.wake()
    return outcome["r"]
