"""What changed between two desired specs, so the reconciler knows which work an update needs.

``topology_changed`` means slurm.conf must be rewritten (and slurmctld restarted gracefully): groups
added or removed (one NodeSet per group), a NodeType or partition changed, or SlurmConfig appeared
(legacy → API-driven). Scaling alone never rewrites slurm.conf; ``controller_scaled`` is reported
separately because the SlurmctldHost lines follow the controller instances.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec
from slurmpod.domain.status import NodeType

__all__ = ["SpecDiff", "diff_specs", "partitions_of"]


@dataclass(frozen=True)
class SpecDiff:
    added_groups: tuple[str, ...] = ()
    removed_groups: tuple[str, ...] = ()
    scaled: tuple[tuple[str, int, int], ...] = ()  # (group, old InstanceCount, new InstanceCount)
    topology_changed: bool = False
    controller_scaled: bool = False
    partitions_added: tuple[str, ...] = ()
    partitions_removed: tuple[str, ...] = ()
    lifecycle_changed: tuple[str, ...] = ()  # groups present in both specs whose LifeCycleConfig differs
    image_changed: tuple[str, ...] = ()
    min_count_changed: tuple[str, ...] = ()
    strategy_changed: bool = False
    node_recovery_changed: bool = False
    provisioning_mode_changed: bool = False

    @property
    def empty(self) -> bool:
        """True when the update asks for nothing at all (the reconciler may skip straight to InService)."""
        return self == SpecDiff()


def partitions_of(spec: ClusterSpec) -> tuple[str, ...]:
    """User partitions in first-seen order (``dev`` is implicit and not listed)."""
    seen: dict[str, None] = {}
    for g in spec.instance_groups:
        if g.node_type == NodeType.COMPUTE and g.slurm_config is not None:
            for p in g.slurm_config.partition_names:
                seen.setdefault(p, None)
    return tuple(seen)


def _role(g: InstanceGroupSpec) -> tuple[NodeType | None, tuple[str, ...]] | None:
    if g.slurm_config is None:
        return None
    return g.slurm_config.node_type, g.slurm_config.partition_names


def diff_specs(old: ClusterSpec, new: ClusterSpec) -> SpecDiff:
    """Compare two desired specs of the same cluster (pure)."""
    old_names = [g.name for g in old.instance_groups]
    new_names = [g.name for g in new.instance_groups]
    added = tuple(n for n in new_names if n not in old_names)
    removed = tuple(n for n in old_names if n not in new_names)

    scaled: list[tuple[str, int, int]] = []
    lifecycle: list[str] = []
    image: list[str] = []
    min_count: list[str] = []
    role_changed = False
    controller_scaled = False
    for g in new.instance_groups:
        before = old.group(g.name)
        if before is None:
            continue
        if before.instance_count != g.instance_count:
            scaled.append((g.name, before.instance_count, g.instance_count))
            if g.node_type == NodeType.CONTROLLER:
                controller_scaled = True
        if before.life_cycle_config != g.life_cycle_config:
            lifecycle.append(g.name)
        if before.image_id != g.image_id:
            image.append(g.name)
        if before.min_instance_count != g.min_instance_count:
            min_count.append(g.name)
        if _role(before) != _role(g):
            role_changed = True

    old_parts, new_parts = partitions_of(old), partitions_of(new)
    return SpecDiff(
        added_groups=added,
        removed_groups=removed,
        scaled=tuple(scaled),
        topology_changed=bool(added or removed or role_changed),
        controller_scaled=controller_scaled,
        partitions_added=tuple(p for p in new_parts if p not in old_parts),
        partitions_removed=tuple(p for p in old_parts if p not in new_parts),
        lifecycle_changed=tuple(lifecycle),
        image_changed=tuple(image),
        min_count_changed=tuple(min_count),
        strategy_changed=old.slurm_config_strategy != new.slurm_config_strategy,
        node_recovery_changed=old.node_recovery != new.node_recovery,
        provisioning_mode_changed=old.node_provisioning_mode != new.node_provisioning_mode,
    )
