"""Table-driven tests for the cluster spec rules (slurmpod.domain.validation)."""

from __future__ import annotations

from typing import Any

import pytest

from slurmpod.domain.spec import (
    ClusterSpec,
    InstanceGroupSpec,
    LifeCycleConfig,
    NodeProvisioningMode,
    NodeRecovery,
    SlurmConfig,
)
from slurmpod.domain.status import NodeType, SlurmConfigStrategy
from slurmpod.domain.validation import (
    effective_min_count,
    effective_strategy,
    merge_update,
    validate_create,
    validate_update,
)
from slurmpod.errors import validation_message

LCC = LifeCycleConfig(source_s3_uri="s3://sagemaker-bucket/base-config/", on_create="on_create.sh")
_DEFAULT: Any = object()
MISSING = "missing-node-type"


def grp(
    name: str,
    count: int = 1,
    node_type: NodeType | str | None = None,
    partitions: tuple[str, ...] = (),
    *,
    itype: str | None = "ml.t3.medium",
    lcc: LifeCycleConfig | None = _DEFAULT,
    min_count: int | None = None,
    image: str | None = None,
) -> InstanceGroupSpec:
    """Builds a group; node_type None = legacy (no SlurmConfig), MISSING = SlurmConfig without NodeType."""
    if node_type is None:
        sc = None
    elif node_type == MISSING:
        sc = SlurmConfig(node_type=None, partition_names=partitions)
    else:
        sc = SlurmConfig(node_type=NodeType(node_type), partition_names=partitions)
    return InstanceGroupSpec(
        name=name,
        instance_count=count,
        instance_type=itype,
        execution_role="arn:aws:iam::123456789012:role/exec",
        min_instance_count=min_count,
        life_cycle_config=LCC if lcc is _DEFAULT else lcc,
        slurm_config=sc,
        image_id=image,
    )


def ctl(name: str = "controller-group", count: int = 1, **kw: Any) -> InstanceGroupSpec:
    return grp(name, count, NodeType.CONTROLLER, **kw)


def cmp(
    name: str = "compute-group", count: int = 2, partition: str = "compute", **kw: Any
) -> InstanceGroupSpec:
    return grp(name, count, NodeType.COMPUTE, (partition,) if partition else (), **kw)


def login(name: str = "login-group", count: int = 1, **kw: Any) -> InstanceGroupSpec:
    return grp(name, count, NodeType.LOGIN, **kw)


def spec(
    *groups: InstanceGroupSpec,
    mode: NodeProvisioningMode | None = None,
    strategy: SlurmConfigStrategy | None = None,
    recovery: NodeRecovery | None = None,
    name: str = "c1",
) -> ClusterSpec:
    return ClusterSpec(
        name=name,
        instance_groups=tuple(groups),
        node_provisioning_mode=mode,
        node_recovery=recovery,
        slurm_config_strategy=strategy,
        has_orchestrator=strategy is not None,
    )


CONT = NodeProvisioningMode.CONTINUOUS
MANAGED = SlurmConfigStrategy.MANAGED

CREATE_CASES: list[tuple[str, ClusterSpec, bool, list[str]]] = [
    ("seed000_valid", spec(ctl(), cmp(), strategy=MANAGED), False, []),
    ("with_login_valid", spec(ctl(), login(), cmp()), False, []),
    ("legacy_valid", spec(grp("controller", 1), grp("workers", 4)), False, []),
    (
        "two_computes_share_partition",
        spec(ctl(), cmp("a", partition="gpu"), cmp("b", partition="gpu")),
        False,
        [],
    ),
    ("no_groups", spec(), False, ["InstanceGroups must contain at least one instance group."]),
    (
        "missing_instance_type",
        spec(ctl(), cmp(itype=None)),
        False,
        ["InstanceType is required for instance group compute-group."],
    ),
    (
        "duplicate_names",
        spec(ctl(), cmp("w", partition="a"), cmp("w", partition="b")),
        False,
        ["Instance group names must be unique: w is specified 2 times."],
    ),
    (
        "mixed_slurm_config",
        spec(ctl(), grp("legacy-a", 2), grp("legacy-b", 1), cmp()),
        False,
        [
            "SlurmConfig must be specified for all instance groups or for none: missing for "
            "legacy-a, legacy-b."
        ],
    ),
    (
        "two_controllers",
        spec(ctl("c1"), ctl("c2"), cmp()),
        False,
        ["2 Controller Groups found: SlurmConfig for InstanceGroups may only have one Controller Group."],
    ),
    (
        "three_controllers",
        spec(ctl("c1"), ctl("c2"), ctl("c3"), cmp()),
        False,
        ["3 Controller Groups found: SlurmConfig for InstanceGroups may only have one Controller Group."],
    ),
    (
        "no_controller",
        spec(login(), cmp(), name="my-cluster"),
        False,
        ["Cluster my-cluster has no InstanceGroup with Controller node type."],
    ),
    (
        "node_type_missing",
        spec(ctl(), grp("odd", 1, MISSING)),
        False,
        ["SlurmConfig.NodeType is required for instance group odd."],
    ),
    (
        "two_logins",
        spec(ctl(), login("l1"), login("l2"), cmp()),
        False,
        ["2 Login Groups found: SlurmConfig for InstanceGroups may have at most one Login Group."],
    ),
    (
        "partition_on_controller",
        spec(grp("head", 1, NodeType.CONTROLLER, ("p",)), cmp()),
        False,
        [
            "Partitions can only be assigned to Compute node types: instance group head has NodeType "
            "Controller."
        ],
    ),
    (
        "partition_on_login",
        spec(ctl(), grp("lg", 1, NodeType.LOGIN, ("p",)), cmp()),
        False,
        ["Partitions can only be assigned to Compute node types: instance group lg has NodeType Login."],
    ),
    (
        "compute_without_partition",
        spec(ctl(), cmp(partition="")),
        False,
        ["PartitionNames is required for Compute instance group compute-group."],
    ),
    (
        "compute_two_partitions",
        spec(ctl(), grp("w", 2, NodeType.COMPUTE, ("a", "b"))),
        False,
        [
            "Compute instance group w specifies 2 partition names; "
            "only one partition name per instance group is supported."
        ],
    ),
    (
        "dev_reserved",
        spec(ctl(), cmp(partition="dev")),
        False,
        [
            "Partition name 'dev' in instance group compute-group is reserved for the universal partition "
            "that contains every compute node."
        ],
    ),
    (
        "controller_count_zero",
        spec(ctl(count=0), cmp()),
        False,
        ["Controller instance group controller-group must have an InstanceCount of at least 1."],
    ),
    (
        "login_count_zero",
        spec(ctl(), login(count=0), cmp()),
        False,
        ["Login instance group login-group must have an InstanceCount of at least 1."],
    ),
    ("compute_count_zero_ok", spec(ctl(), cmp(count=0)), False, []),
    ("multi_head_extended_ok", spec(ctl(count=2), cmp()), False, []),
    (
        "multi_head_strict",
        spec(ctl(count=2), cmp()),
        True,
        [
            "Multiple head nodes are not supported with API-driven Slurm configuration: Controller "
            "instance group controller-group has InstanceCount 2, it must be 1."
        ],
    ),
    ("multi_head_legacy_strict_ok", spec(grp("controller", 2), grp("w", 2)), True, []),
    (
        "lcc_empty",
        spec(ctl(lcc=LifeCycleConfig()), cmp()),
        False,
        [
            "LifeCycleConfig for instance group controller-group must not be empty: specify SourceS3Uri "
            "and one of OnCreate or OnInitComplete."
        ],
    ),
    ("lcc_omitted_ok", spec(ctl(lcc=None), cmp(lcc=None)), False, []),
    (
        "lcc_init_complete_ok",
        spec(ctl(lcc=LifeCycleConfig("s3://b/x/", on_init_complete="ext.sh")), cmp()),
        False,
        [],
    ),
    (
        "lcc_both_entry_points",
        spec(ctl(lcc=LifeCycleConfig("s3://b/x/", "on_create.sh", "ext.sh")), cmp()),
        False,
        [
            "LifeCycleConfig for instance group controller-group cannot specify both OnCreate and "
            "OnInitComplete."
        ],
    ),
    (
        "lcc_uri_without_entry",
        spec(ctl(), cmp(lcc=LifeCycleConfig("s3://b/x/"))),
        False,
        [
            "LifeCycleConfig for instance group compute-group must specify OnCreate or OnInitComplete "
            "together with SourceS3Uri."
        ],
    ),
    (
        "lcc_entry_without_uri",
        spec(ctl(), cmp(lcc=LifeCycleConfig(on_init_complete="ext.sh"))),
        False,
        [
            "LifeCycleConfig for instance group compute-group must specify SourceS3Uri together with "
            "OnInitComplete."
        ],
    ),
    (
        "lcc_empty_uri_counts_as_missing",
        spec(ctl(lcc=LifeCycleConfig("", on_create="on_create.sh")), cmp()),
        False,
        [
            "LifeCycleConfig for instance group controller-group must specify SourceS3Uri together "
            "with OnCreate."
        ],
    ),
    (
        "lcc_bad_scheme",
        spec(ctl(lcc=LifeCycleConfig("ftp://host/x", on_create="a.sh")), cmp()),
        False,
        ["SourceS3Uri for instance group controller-group must start with s3://, https:// or file://."],
    ),
    (
        "lcc_file_and_https_ok",
        spec(
            ctl(lcc=LifeCycleConfig("file:///srv/lcc", on_create="a.sh")),
            cmp(lcc=LifeCycleConfig("https://example.org/lcc/", on_create="a.sh")),
        ),
        False,
        [],
    ),
    ("continuous_valid", spec(ctl(), login(), cmp(min_count=1), mode=CONT), False, []),
    (
        "continuous_with_strategy",
        spec(ctl(), cmp(), mode=CONT, strategy=SlurmConfigStrategy.MERGE),
        False,
        ["SlurmConfigStrategy is not supported when NodeProvisioningMode is set to Continuous."],
    ),
    (
        "continuous_legacy",
        spec(grp("controller", 1), grp("w", 2), mode=CONT),
        False,
        [
            "NodeProvisioningMode Continuous requires SlurmConfig in every instance group; clusters using "
            "provisioning_parameters.json are not supported."
        ],
    ),
    (
        "min_count_without_continuous",
        spec(ctl(), cmp(min_count=1)),
        False,
        [
            "MinInstanceCount for instance group compute-group is only available for clusters with "
            "NodeProvisioningMode set to Continuous."
        ],
    ),
    (
        "min_count_above_count",
        spec(ctl(), cmp(count=2, min_count=3), mode=CONT),
        False,
        [
            "MinInstanceCount must be between 0 and InstanceCount (inclusive): instance group compute-group "
            "has MinInstanceCount 3 and InstanceCount 2."
        ],
    ),
    (
        "min_count_negative",
        spec(ctl(), cmp(count=2, min_count=-1), mode=CONT),
        False,
        [
            "MinInstanceCount must be between 0 and InstanceCount (inclusive): instance group compute-group "
            "has MinInstanceCount -1 and InstanceCount 2."
        ],
    ),
    ("min_count_equal_count_ok", spec(ctl(), cmp(count=2, min_count=2), mode=CONT), False, []),
    ("min_count_zero_ok", spec(ctl(), cmp(count=2, min_count=0), mode=CONT), False, []),
    (
        "many_violations_reported_together",
        spec(
            ctl("c1", partitions=()),
            ctl("c2", count=0),
            cmp("w", itype=None, partition="dev", lcc=LifeCycleConfig()),
            mode=CONT,
            strategy=MANAGED,
        ),
        True,
        [
            "InstanceType is required for instance group w.",
            "LifeCycleConfig for instance group w must not be empty: specify SourceS3Uri and one of "
            "OnCreate or OnInitComplete.",
            "2 Controller Groups found: SlurmConfig for InstanceGroups may only have one Controller Group.",
            "Controller instance group c2 must have an InstanceCount of at least 1.",
            "Partition name 'dev' in instance group w is reserved for the universal partition that contains "
            "every compute node.",
            "SlurmConfigStrategy is not supported when NodeProvisioningMode is set to Continuous.",
        ],
    ),
    (
        "mixed_and_no_controller_and_min_count",
        spec(grp("legacy", 1), cmp(min_count=1), name="cx"),
        False,
        [
            "SlurmConfig must be specified for all instance groups or for none: missing for legacy.",
            "Cluster cx has no InstanceGroup with Controller node type.",
            "MinInstanceCount for instance group compute-group is only available for clusters with "
            "NodeProvisioningMode set to Continuous.",
        ],
    ),
]


@pytest.mark.parametrize(
    ("cluster", "strict", "expected"),
    [c[1:] for c in CREATE_CASES],
    ids=[c[0] for c in CREATE_CASES],
)
def test_validate_create(cluster: ClusterSpec, strict: bool, expected: list[str]) -> None:
    assert validate_create(cluster, strict=strict) == expected


CURRENT = spec(ctl(), cmp(), strategy=MANAGED, name="hp")
CURRENT_LEGACY = spec(grp("controller", 1), grp("workers", 2), name="old")
CURRENT_CONT = spec(ctl(), cmp(), mode=CONT, name="cc")

# (id, current, requested, to_delete, orchestrator_given, strict, expected)
UPDATE_CASES: list[tuple[str, ClusterSpec, ClusterSpec, tuple[str, ...], bool, bool, list[str]]] = [
    (
        "seed000_add_extra_group",
        CURRENT,
        spec(ctl(), cmp(), cmp("extra-group", 1, "extra")),
        (),
        False,
        False,
        [],
    ),
    ("scale_compute", CURRENT, spec(ctl(), cmp(count=5)), (), False, False, []),
    ("omit_slurm_config_keeps_it", CURRENT, spec(ctl(), grp("compute-group", 3)), (), False, False, []),
    ("instance_groups_omitted", CURRENT, spec(recovery=NodeRecovery.AUTOMATIC), (), False, False, []),
    (
        "change_node_type",
        CURRENT,
        spec(ctl(), grp("compute-group", 1, NodeType.LOGIN)),
        (),
        False,
        False,
        [
            "NodeType of instance group compute-group cannot be changed from Compute to Login. "
            "To use a different node type, create a new instance group."
        ],
    ),
    (
        "change_instance_type",
        CURRENT,
        spec(ctl(), cmp(itype="ml.c5.xlarge")),
        (),
        False,
        False,
        ["InstanceType of instance group compute-group cannot be changed from ml.t3.medium to ml.c5.xlarge."],
    ),
    ("omit_instance_type_existing_ok", CURRENT, spec(ctl(), cmp(itype=None)), (), False, False, []),
    (
        "new_group_without_instance_type",
        CURRENT,
        spec(ctl(), cmp(), cmp("new", 1, "p2", itype=None)),
        (),
        False,
        False,
        ["InstanceType is required for instance group new."],
    ),
    (
        "group_missing_from_request",
        CURRENT,
        spec(ctl(), cmp("extra-group", 1, "extra")),
        (),
        False,
        False,
        ["Instance group compute-group must be specified in InstanceGroups or in InstanceGroupsToDelete."],
    ),
    ("delete_compute_group", CURRENT, spec(ctl()), ("compute-group",), False, False, []),
    (
        "delete_and_update_same_group",
        CURRENT,
        spec(ctl(), cmp()),
        ("compute-group",),
        False,
        False,
        [
            "Instance group compute-group cannot be both updated and deleted: it appears in InstanceGroups "
            "and in InstanceGroupsToDelete."
        ],
    ),
    (
        "delete_unknown_group",
        CURRENT,
        spec(ctl(), cmp()),
        ("ghost",),
        False,
        False,
        ["Instance group ghost in InstanceGroupsToDelete does not exist in cluster hp."],
    ),
    (
        "delete_twice",
        CURRENT,
        spec(ctl()),
        ("compute-group", "compute-group"),
        False,
        False,
        ["Instance group compute-group is specified more than once in InstanceGroupsToDelete."],
    ),
    (
        "delete_controller",
        CURRENT,
        spec(cmp()),
        ("controller-group",),
        False,
        False,
        [
            "Controller instance group controller-group cannot be deleted.",
            "Cluster hp has no InstanceGroup with Controller node type.",
        ],
    ),
    (
        "add_second_controller",
        CURRENT,
        spec(ctl(), cmp(), ctl("ctl2")),
        (),
        False,
        False,
        ["2 Controller Groups found: SlurmConfig for InstanceGroups may only have one Controller Group."],
    ),
    (
        "add_legacy_group_to_api_driven",
        CURRENT,
        spec(ctl(), cmp(), grp("plain", 1)),
        (),
        False,
        False,
        ["SlurmConfig must be specified for all instance groups or for none: missing for plain."],
    ),
    (
        "new_group_partition_dev",
        CURRENT,
        spec(ctl(), cmp(), cmp("x", 1, "dev")),
        (),
        False,
        False,
        [
            "Partition name 'dev' in instance group x is reserved for the universal partition that contains "
            "every compute node."
        ],
    ),
    ("migrate_legacy_to_api", CURRENT_LEGACY, spec(ctl("controller"), cmp("workers")), (), False, False, []),
    (
        "partial_migration",
        CURRENT_LEGACY,
        spec(ctl("controller"), grp("workers", 2)),
        (),
        False,
        False,
        ["SlurmConfig must be specified for all instance groups or for none: missing for workers."],
    ),
    ("legacy_scale", CURRENT_LEGACY, spec(grp("controller", 1), grp("workers", 8)), (), False, False, []),
    (
        "scale_controller_strict",
        CURRENT,
        spec(ctl(count=2), cmp()),
        (),
        False,
        True,
        [
            "Multiple head nodes are not supported with API-driven Slurm configuration: Controller "
            "instance group controller-group has InstanceCount 2, it must be 1."
        ],
    ),
    ("scale_controller_extended", CURRENT, spec(ctl(count=2), cmp()), (), False, False, []),
    (
        "switch_strategy",
        CURRENT,
        spec(ctl(), cmp(), strategy=SlurmConfigStrategy.OVERWRITE),
        (),
        True,
        False,
        [],
    ),
    (
        "continuous_update_with_strategy",
        CURRENT_CONT,
        spec(ctl(), cmp(), strategy=SlurmConfigStrategy.MERGE),
        (),
        True,
        False,
        ["SlurmConfigStrategy is not supported when NodeProvisioningMode is set to Continuous."],
    ),
    ("continuous_set_min_count", CURRENT_CONT, spec(ctl(), cmp(count=4, min_count=2)), (), False, False, []),
    (
        "continuous_min_count_too_high",
        CURRENT_CONT,
        spec(ctl(), cmp(count=1, min_count=2)),
        (),
        False,
        False,
        [
            "MinInstanceCount must be between 0 and InstanceCount (inclusive): instance group compute-group "
            "has MinInstanceCount 2 and InstanceCount 1."
        ],
    ),
    (
        "min_count_on_non_continuous_update",
        CURRENT,
        spec(ctl(), cmp(min_count=1)),
        (),
        False,
        False,
        [
            "MinInstanceCount for instance group compute-group is only available for clusters with "
            "NodeProvisioningMode set to Continuous."
        ],
    ),
    ("enable_continuous_on_api_driven", CURRENT, spec(ctl(), cmp(), mode=CONT), (), False, False, []),
    (
        "enable_continuous_on_legacy",
        CURRENT_LEGACY,
        spec(grp("controller", 1), grp("workers", 2), mode=CONT),
        (),
        False,
        False,
        [
            "NodeProvisioningMode Continuous requires SlurmConfig in every instance group; clusters using "
            "provisioning_parameters.json are not supported."
        ],
    ),
    (
        "delete_everything_legacy",
        CURRENT_LEGACY,
        spec(),
        ("controller", "workers"),
        False,
        False,
        ["Cluster old must keep at least one instance group."],
    ),
    (
        "many_update_violations",
        CURRENT,
        spec(
            grp("controller-group", 1, NodeType.COMPUTE, ("p",)),
            cmp("new", 1, "q", lcc=LifeCycleConfig("s3://b/", "a.sh", "b.sh")),
        ),
        ("ghost",),
        False,
        False,
        [
            "Instance group ghost in InstanceGroupsToDelete does not exist in cluster hp.",
            "Instance group compute-group must be specified in InstanceGroups or in InstanceGroupsToDelete.",
            "NodeType of instance group controller-group cannot be changed from Controller to Compute. "
            "To use a different node type, create a new instance group.",
            "LifeCycleConfig for instance group new cannot specify both OnCreate and OnInitComplete.",
            "Cluster hp has no InstanceGroup with Controller node type.",
        ],
    ),
]


@pytest.mark.parametrize(
    ("current", "requested", "to_delete", "orch", "strict", "expected"),
    [c[1:] for c in UPDATE_CASES],
    ids=[c[0] for c in UPDATE_CASES],
)
def test_validate_update(
    current: ClusterSpec,
    requested: ClusterSpec,
    to_delete: tuple[str, ...],
    orch: bool,
    strict: bool,
    expected: list[str],
) -> None:
    assert validate_update(current, requested, to_delete, strict=strict, orchestrator_given=orch) == expected


def test_case_count() -> None:
    assert len(CREATE_CASES) + len(UPDATE_CASES) >= 45


def test_findings_format_as_aws_message() -> None:
    findings = validate_create(spec(ctl("a"), ctl("b"), cmp(partition="dev")))
    msg = validation_message(findings)
    assert msg.startswith("2 validation errors detected: 2 Controller Groups found:")
    assert "; Partition name 'dev'" in msg


# ---- merge_update ----


def test_merge_keeps_strategy_when_orchestrator_omitted() -> None:
    merged = merge_update(CURRENT, spec(ctl(), cmp(count=4)), (), orchestrator_given=False)
    assert merged.slurm_config_strategy == MANAGED
    assert merged.group("compute-group").instance_count == 4  # type: ignore[union-attr]
    assert merged.name == "hp"


def test_merge_switches_strategy() -> None:
    req = spec(ctl(), cmp(), strategy=SlurmConfigStrategy.MERGE)
    merged = merge_update(CURRENT, req, (), orchestrator_given=True)
    assert merged.slurm_config_strategy == SlurmConfigStrategy.MERGE
    assert merged.has_orchestrator


def test_merge_orchestrator_without_strategy_keeps_current() -> None:
    merged = merge_update(CURRENT, spec(ctl(), cmp()), (), orchestrator_given=True)
    assert merged.slurm_config_strategy == MANAGED


def test_merge_omitted_slurm_config_is_preserved() -> None:
    req = spec(grp("controller-group", 1), grp("compute-group", 3, itype=None))
    merged = merge_update(CURRENT, req, (), orchestrator_given=False)
    assert merged.group("compute-group").slurm_config == SlurmConfig(NodeType.COMPUTE, ("compute",))  # type: ignore[union-attr]
    assert merged.group("compute-group").instance_type == "ml.t3.medium"  # type: ignore[union-attr]
    assert merged.group("controller-group").node_type == NodeType.CONTROLLER  # type: ignore[union-attr]
    assert validate_create(merged) == []


def test_merge_adds_and_orders_groups_as_requested() -> None:
    req = spec(cmp("extra-group", 1, "extra"), ctl(), cmp())
    merged = merge_update(CURRENT, req, (), orchestrator_given=False)
    assert [g.name for g in merged.instance_groups] == ["extra-group", "controller-group", "compute-group"]


def test_merge_groups_omitted_keeps_current_minus_deleted() -> None:
    cur = spec(ctl(), cmp(), cmp("b", 1, "b"))
    merged = merge_update(cur, spec(), ("b",), orchestrator_given=False)
    assert [g.name for g in merged.instance_groups] == ["controller-group", "compute-group"]


def test_merge_deletes_groups() -> None:
    cur = spec(ctl(), cmp(), cmp("b", 1, "b"))
    merged = merge_update(cur, spec(ctl(), cmp()), ("b",), orchestrator_given=False)
    assert cur.group("b") is not None and merged.group("b") is None


def test_merge_keeps_continuous_and_node_recovery() -> None:
    cur = spec(ctl(), cmp(), mode=CONT, recovery=NodeRecovery.AUTOMATIC)
    merged = merge_update(cur, spec(ctl(), cmp(count=9)), (), orchestrator_given=False)
    assert merged.continuous and merged.node_recovery == "Automatic"
    assert merged.slurm_config_strategy is None


def test_merge_changes_node_recovery() -> None:
    cur = spec(ctl(), cmp(), recovery=NodeRecovery.AUTOMATIC)
    merged = merge_update(cur, spec(recovery=NodeRecovery.NONE), (), orchestrator_given=False)
    assert merged.node_recovery == "None"
    assert merged.instance_groups == cur.instance_groups


def test_merge_enabling_continuous_drops_strategy() -> None:
    merged = merge_update(CURRENT, spec(ctl(), cmp(), mode=CONT), (), orchestrator_given=False)
    assert merged.continuous and merged.slurm_config_strategy is None
    assert effective_strategy(merged) is None


def test_merge_keeps_image_when_omitted_and_merges_extras() -> None:
    cur = ClusterSpec(name="x", instance_groups=(ctl(image="ami-0123456789abcdef0"), cmp()), extras={"a": 1})
    req = ClusterSpec(name="x", instance_groups=(ctl(), cmp()), extras={"b": 2})
    merged = merge_update(cur, req, (), orchestrator_given=False)
    assert merged.group("controller-group").image_id == "ami-0123456789abcdef0"  # type: ignore[union-attr]
    assert dict(merged.extras) == {"a": 1, "b": 2}


def test_merge_is_pure() -> None:
    before = (CURRENT.instance_groups, CURRENT.slurm_config_strategy)
    merge_update(CURRENT, spec(ctl(), grp("compute-group", 7), strategy=SlurmConfigStrategy.MERGE), (), True)
    assert (CURRENT.instance_groups, CURRENT.slurm_config_strategy) == before


# ---- helpers ----


@pytest.mark.parametrize(
    ("group", "continuous", "expected"),
    [
        (cmp(count=4), False, 4),
        (ctl(count=2), False, 2),
        (cmp(count=4), True, 0),
        (ctl(count=2), True, 1),
        (login(count=3), True, 1),
        (cmp(count=4, min_count=3), True, 3),
        (ctl(count=3, min_count=2), True, 2),
        (cmp(count=4, min_count=3), False, 4),
        (login(count=0), True, 0),
    ],
)
def test_effective_min_count(group: InstanceGroupSpec, continuous: bool, expected: int) -> None:
    assert effective_min_count(group, continuous) == expected


def test_effective_strategy_defaults() -> None:
    assert effective_strategy(spec(ctl(), cmp())) == MANAGED
    assert effective_strategy(spec(ctl(), cmp()), SlurmConfigStrategy.MERGE) == SlurmConfigStrategy.MERGE
    assert effective_strategy(spec(ctl(), cmp(), strategy=SlurmConfigStrategy.OVERWRITE)) == (
        SlurmConfigStrategy.OVERWRITE
    )
