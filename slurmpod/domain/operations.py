"""Cluster operations (pure): every create, update, scaling, software update, deletion and health check.

A cluster record carries the id of its current operation (``ClusterRecord.operation_id``, also on every event the
operation writes). When a write gives a cluster a new operation id, the store records an ``OperationRecord``
from the record before and after the write (``operation_started``). Its status is read from the cluster:
``InProgress`` while it is the cluster's current operation and the cluster (or one of its groups) is still busy,
``Superseded`` when a newer operation started while it was in progress, else ``Done``.

The model's ClusterOperationType has only ``Scaling`` and ``DeepHealthCheck``: an operation that changed a
group's counts (a creation, an UpdateCluster or BatchAddClusterNodes that scales) is ``Scaling``; one that did not
(a software update, a deletion, an update of other settings) has no type on the wire.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from slurmpod.domain.continuous import group_busy
from slurmpod.domain.model import ClusterRecord, GroupScaling
from slurmpod.domain.spec import ClusterSpec
from slurmpod.domain.status import ClusterStatus
from slurmpod.domain.validation import effective_min_count


class OperationKind(str, Enum):
    CREATION = "creation"
    UPDATE = "update"
    SCALING = "scaling"  # BatchAddClusterNodes
    SOFTWARE_UPDATE = "software_update"
    DELETION = "deletion"
    HEALTH_CHECK = "health_check"


class OperationType(str, Enum):
    """The model's ClusterOperationType."""

    SCALING = "Scaling"
    DEEP_HEALTH_CHECK = "DeepHealthCheck"


class OperationStatus(str, Enum):
    """The model's ClusterOperationStatus."""

    IN_PROGRESS = "InProgress"
    SUPERSEDED = "Superseded"
    DONE = "Done"


@dataclass(frozen=True)
class GroupScalingChange:
    """One instance group's counts before (``original``; None for a new group) and as requested."""

    group: str
    original: GroupScaling | None
    desired: GroupScaling


@dataclass(frozen=True)
class OperationRecord:
    operation_id: str
    cluster_id: str
    kind: OperationKind
    creation_time: float
    scaling: tuple[GroupScalingChange, ...] = ()
    superseded: bool = False

    @property
    def type(self) -> OperationType | None:
        if self.kind == OperationKind.HEALTH_CHECK:
            return OperationType.DEEP_HEALTH_CHECK
        return OperationType.SCALING if self.scaling else None

    def details_dict(self) -> dict[str, Any]:
        def counts(s: GroupScaling | None) -> dict[str, int] | None:
            return None if s is None else {"current": s.instance_count, "target": s.target_count,
                                           "min": s.min_count}
        return {"scaling": [{"group": c.group, "original": counts(c.original), "desired": counts(c.desired)}
                            for c in self.scaling]}

    @staticmethod
    def scaling_from_dict(d: Mapping[str, Any]) -> tuple[GroupScalingChange, ...]:
        def counts(s: Any) -> GroupScaling | None:
            if not isinstance(s, Mapping):
                return None
            return GroupScaling(int(s["current"]), int(s["target"]), int(s["min"]))
        out = []
        for c in d.get("scaling") or ():
            desired = counts(c.get("desired"))
            if desired is not None:
                out.append(GroupScalingChange(str(c["group"]), counts(c.get("original")), desired))
        return tuple(out)


#: the kinds whose operations carry per-group scaling details
SCALING_KINDS = frozenset({OperationKind.CREATION, OperationKind.UPDATE, OperationKind.SCALING})

_BUSY = (ClusterStatus.CREATING, ClusterStatus.UPDATING, ClusterStatus.SYSTEM_UPDATING, ClusterStatus.ROLLING_BACK,
         ClusterStatus.DELETING)


def cluster_busy(rec: ClusterRecord) -> bool:
    """The cluster's current operation is still running."""
    if rec.status in _BUSY or rec.software_update is not None:
        return True
    return any(group_busy(rec.group_states, g) for g in rec.group_states)


def _kind(old: ClusterRecord | None, new: ClusterRecord) -> OperationKind:
    if old is None:
        return OperationKind.CREATION
    if new.status == ClusterStatus.DELETING:
        return OperationKind.DELETION
    if new.software_update is not None and new.software_update.operation_id == new.operation_id:
        return OperationKind.SOFTWARE_UPDATE
    return OperationKind.UPDATE


def scaling_changes(old: ClusterSpec | None, new: ClusterSpec,
                    current: Mapping[str, int]) -> tuple[GroupScalingChange, ...]:
    """Per group whose InstanceCount or MinCount differs between ``old`` and ``new`` (a new group: from nothing;
    a deleted group: to 0). ``current``: the group's active nodes when the operation started."""
    cont_old = old.continuous if old is not None else new.continuous
    out: list[GroupScalingChange] = []
    names = [g.name for g in new.instance_groups]
    if old is not None:
        names += [g.name for g in old.instance_groups if new.group(g.name) is None]
    for name in names:
        before = old.group(name) if old is not None else None
        after = new.group(name)
        orig = None if before is None else GroupScaling(current.get(name, 0), before.instance_count,
                                                        effective_min_count(before, cont_old))
        want = (GroupScaling(0, 0, 0) if after is None
                else GroupScaling(current.get(name, 0), after.instance_count,
                                  effective_min_count(after, new.continuous)))
        if orig is None or (orig.target_count, orig.min_count) != (want.target_count, want.min_count):
            out.append(GroupScalingChange(name, orig, want))
    return tuple(out)


def operation_started(old: ClusterRecord | None, new: ClusterRecord, now: float, current: Mapping[str, int],
                      kind_hint: OperationKind | None = None) -> OperationRecord | None:
    """The operation a write starts, if it gives the cluster a new operation id; None otherwise. ``kind_hint``:
    what the writer says it is (else read from the records)."""
    if not new.operation_id or (old is not None and old.operation_id == new.operation_id):
        return None
    kind = kind_hint or _kind(old, new)
    scaling: tuple[GroupScalingChange, ...] = ()
    if kind in SCALING_KINDS:
        scaling = scaling_changes(old.spec if old is not None else None, new.spec, current)
    return OperationRecord(new.operation_id, new.cluster_id, kind, now, scaling)


def operation_status(op: OperationRecord, cluster: ClusterRecord,
                     running: frozenset[str] = frozenset()) -> OperationStatus:
    """``running``: operation ids nodes still work on (a deep health check runs on its nodes while the
    cluster stays InService and may start other operations)."""
    if op.operation_id in running:
        return OperationStatus.IN_PROGRESS
    if op.superseded:
        return OperationStatus.SUPERSEDED
    if op.operation_id == cluster.operation_id and cluster_busy(cluster):
        return OperationStatus.IN_PROGRESS
    return OperationStatus.DONE


#: how long a ClientToken stays bound to its request (HyperPod: 8 hours)
CLIENT_TOKEN_TTL = 8 * 3600.0


@dataclass(frozen=True)
class ClientTokenRecord:
    """An accepted request's idempotency token: a retry with the same token and the same parameters
    (``fingerprint``) within ``CLIENT_TOKEN_TTL`` answers from ``result`` instead of acting again."""

    account_id: str
    region: str
    operation: str
    token: str
    fingerprint: str
    cluster_id: str
    result: Mapping[str, Any]
    created: float

    def live(self, now: float) -> bool:
        return now - self.created < CLIENT_TOKEN_TTL
