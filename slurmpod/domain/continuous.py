"""Continuous provisioning bookkeeping (pure): which groups are Creating/Updating after a request."""

from __future__ import annotations

from collections.abc import Mapping

from slurmpod.domain.model import GroupState
from slurmpod.domain.spec import ClusterSpec
from slurmpod.domain.status import InstanceGroupStatus
from slurmpod.domain.validation import effective_min_count


def initial_group_states(spec: ClusterSpec, now: float) -> dict[str, GroupState]:
    return {g.name: GroupState(InstanceGroupStatus.CREATING, now) for g in spec.instance_groups}


def updated_group_states(
    old: ClusterSpec, new: ClusterSpec, states: Mapping[str, GroupState], now: float
) -> dict[str, GroupState]:
    """New groups start Creating; a group whose InstanceCount or MinCount changed becomes Updating (the
    MinCount timer restarts) and remembers its last InService counts for a rollback."""
    out: dict[str, GroupState] = {}
    for g in new.instance_groups:
        before = old.group(g.name)
        cur = states.get(g.name)
        if before is None:
            out[g.name] = GroupState(InstanceGroupStatus.CREATING, now)
            continue
        changed = (before.instance_count != g.instance_count
                   or effective_min_count(before, True) != effective_min_count(g, True))
        if not changed and cur is not None:
            out[g.name] = cur
            continue
        if not changed:
            out[g.name] = GroupState(InstanceGroupStatus.IN_SERVICE, now, before.instance_count,
                                     effective_min_count(before, True))
            continue
        if cur is not None and cur.status == InstanceGroupStatus.CREATING:
            out[g.name] = GroupState(InstanceGroupStatus.CREATING, now)
        elif cur is not None and cur.status == InstanceGroupStatus.UPDATING:
            out[g.name] = GroupState(InstanceGroupStatus.UPDATING, now, cur.good_count, cur.good_min)
        else:
            out[g.name] = GroupState(InstanceGroupStatus.UPDATING, now, before.instance_count,
                                     effective_min_count(before, True))
    return out


def group_busy(states: Mapping[str, GroupState], group: str) -> bool:
    """Mutations like BatchDeleteClusterNodes are blocked while a group is Creating/Updating."""
    st = states.get(group)
    return st is not None and st.status in (InstanceGroupStatus.CREATING, InstanceGroupStatus.UPDATING)
