"""Derived, read-only views: group status and counts from a cluster record and its nodes (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.spec import InstanceGroupSpec
from slurmpod.domain.status import ClusterStatus, InstanceGroupStatus, InstanceStatus
from slurmpod.domain.validation import effective_min_count


def current_count(group: str, nodes: Sequence[NodeRecord]) -> int:
    return sum(1 for n in nodes if n.group == group and n.status == InstanceStatus.RUNNING)


def group_status(cluster: ClusterRecord, group: InstanceGroupSpec, nodes: Sequence[NodeRecord]) -> InstanceGroupStatus:
    mine = [n for n in nodes if n.group == group.name and n.active]
    running = current_count(group.name, nodes)
    settled = running == group.instance_count and len(mine) == group.instance_count
    s = cluster.status
    state = cluster.group_states.get(group.name)
    if cluster.spec.continuous and state is not None and s in (ClusterStatus.CREATING, ClusterStatus.IN_SERVICE):
        if state.status != InstanceGroupStatus.IN_SERVICE:
            return state.status
        # HyperPod: InService while MinCount <= CurrentCount <= TargetCount; below MinCount it is degraded
        if running < effective_min_count(group, True):
            return InstanceGroupStatus.DEGRADED
        return InstanceGroupStatus.IN_SERVICE
    if s == ClusterStatus.DELETING:
        return InstanceGroupStatus.DELETING
    if s == ClusterStatus.FAILED:
        return InstanceGroupStatus.FAILED
    if s == ClusterStatus.CREATING:
        return InstanceGroupStatus.IN_SERVICE if settled else InstanceGroupStatus.CREATING
    if s in (ClusterStatus.UPDATING, ClusterStatus.ROLLING_BACK):
        return InstanceGroupStatus.IN_SERVICE if settled else InstanceGroupStatus.UPDATING
    if s == ClusterStatus.SYSTEM_UPDATING:
        return InstanceGroupStatus.SYSTEM_UPDATING
    if any(n.status == InstanceStatus.FAILURE for n in mine) or running < group.instance_count:
        return InstanceGroupStatus.DEGRADED
    return InstanceGroupStatus.IN_SERVICE
