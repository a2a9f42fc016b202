"""Tests for slurmpod.domain.diff."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurmpod.domain.diff import SpecDiff, diff_specs, partitions_of
from slurmpod.domain.spec import (
    ClusterSpec,
    InstanceGroupSpec,
    LifeCycleConfig,
    NodeProvisioningMode,
    NodeRecovery,
    SlurmConfig,
)
from slurmpod.domain.status import NodeType, SlurmConfigStrategy

LCC = LifeCycleConfig(source_s3_uri="s3://b/base/", on_create="on_create.sh")


def g(
    name: str, count: int = 1, node_type: NodeType | None = None, partition: str | None = None
) -> InstanceGroupSpec:
    sc = None if node_type is None else SlurmConfig(node_type, (partition,) if partition else ())
    return InstanceGroupSpec(
        name=name, instance_count=count, instance_type="ml.t3.medium", slurm_config=sc, life_cycle_config=LCC
    )


def base(**kw: object) -> ClusterSpec:
    groups = (g("ctl", 1, NodeType.CONTROLLER), g("cmp", 2, NodeType.COMPUTE, "compute"))
    return ClusterSpec(name="c", instance_groups=groups, **kw)  # type: ignore[arg-type]


def with_group(spec: ClusterSpec, name: str, **changes: object) -> ClusterSpec:
    return spec.with_groups(
        tuple(replace(x, **changes) if x.name == name else x for x in spec.instance_groups)  # type: ignore[arg-type]
    )


def test_identical_specs_give_empty_diff() -> None:
    d = diff_specs(base(), base())
    assert d == SpecDiff() and d.empty


def test_add_group_seed000() -> None:
    old = base()
    new = old.with_groups(old.instance_groups + (g("extra-group", 1, NodeType.COMPUTE, "extra"),))
    d = diff_specs(old, new)
    assert d.added_groups == ("extra-group",)
    assert d.removed_groups == ()
    assert d.topology_changed
    assert d.partitions_added == ("extra",) and d.partitions_removed == ()
    assert d.scaled == ()
    assert not d.empty


def test_remove_group() -> None:
    old = base()
    new = old.with_groups(old.instance_groups[:1])
    d = diff_specs(old, new)
    assert d.removed_groups == ("cmp",) and d.topology_changed
    assert d.partitions_removed == ("compute",)


def test_scaling_compute_is_not_a_topology_change() -> None:
    d = diff_specs(base(), with_group(base(), "cmp", instance_count=5))
    assert d.scaled == (("cmp", 2, 5),)
    assert not d.topology_changed and not d.controller_scaled


def test_scaling_controller_is_flagged() -> None:
    d = diff_specs(base(), with_group(base(), "ctl", instance_count=2))
    assert d.scaled == (("ctl", 1, 2),) and d.controller_scaled and not d.topology_changed


def test_partition_rename_is_topology_change() -> None:
    new = with_group(base(), "cmp", slurm_config=SlurmConfig(NodeType.COMPUTE, ("gpu",)))
    d = diff_specs(base(), new)
    assert d.topology_changed
    assert d.partitions_added == ("gpu",) and d.partitions_removed == ("compute",)


def test_legacy_to_api_driven_is_topology_change() -> None:
    old = ClusterSpec(name="c", instance_groups=(g("ctl", 1), g("cmp", 2)))
    d = diff_specs(old, base())
    assert d.topology_changed and d.added_groups == () and d.partitions_added == ("compute",)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"life_cycle_config": LifeCycleConfig("s3://b/v2/", on_create="on_create.sh")}, "lifecycle_changed"),
        ({"life_cycle_config": None}, "lifecycle_changed"),
        ({"image_id": "ami-0123456789abcdef0"}, "image_changed"),
        ({"min_instance_count": 1}, "min_count_changed"),
    ],
)
def test_per_group_changes(changes: dict[str, object], field: str) -> None:
    d = diff_specs(base(), with_group(base(), "cmp", **changes))
    assert getattr(d, field) == ("cmp",)
    assert not d.topology_changed and d.scaled == ()


def test_cluster_level_changes() -> None:
    d = diff_specs(base(), base(slurm_config_strategy=SlurmConfigStrategy.OVERWRITE))
    assert d.strategy_changed and not d.node_recovery_changed
    d = diff_specs(base(), base(node_recovery=NodeRecovery.AUTOMATIC))
    assert d.node_recovery_changed and not d.strategy_changed
    d = diff_specs(base(), base(node_provisioning_mode=NodeProvisioningMode.CONTINUOUS))
    assert d.provisioning_mode_changed


def test_reordering_groups_changes_nothing() -> None:
    old = base()
    new = old.with_groups(tuple(reversed(old.instance_groups)))
    assert diff_specs(old, new).empty


def test_shared_partition_kept_when_one_group_removed() -> None:
    old = base().with_groups(base().instance_groups + (g("cmp2", 1, NodeType.COMPUTE, "compute"),))
    d = diff_specs(old, base())
    assert d.removed_groups == ("cmp2",) and d.partitions_removed == ()


def test_partitions_of_dedupes_in_order() -> None:
    spec = base().with_groups(
        base().instance_groups + (g("b", 1, NodeType.COMPUTE, "b"), g("c", 1, NodeType.COMPUTE, "compute"))
    )
    assert partitions_of(spec) == ("compute", "b")
    assert partitions_of(ClusterSpec(name="x", instance_groups=(g("w", 1),))) == ()
