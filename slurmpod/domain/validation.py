"""Cluster specification rules beyond the botocore shapes (SPEC §2), as pure functions.

Every check appends a human-readable finding (AWS wording where AWS documents one) to a list; the
service layer raises ``ValidationException(validation_message(findings))`` when the list is not empty,
so a request that breaks several rules is told about all of them at once and nothing is stored.

Decisions where HyperPod is silent or inconsistent (see SPEC §2 and reference §5):

* ``strict`` reproduces HyperPod's limitation that a Controller group with InstanceCount > 1
  (multiple head nodes) cannot use API-driven topology; the extended profile allows it.
* Login groups, like the Controller group, need InstanceCount >= 1 (a login group without nodes would
  keep a Continuous cluster from ever becoming InService; delete the group instead).
* In UpdateCluster an omitted ``InstanceGroups`` (the model forbids an empty list) keeps every current
  group not being deleted; an existing group that omits ``SlurmConfig``, ``InstanceType`` or ``ImageId``
  keeps its current value. ``NodeRecovery`` and ``NodeProvisioningMode`` omitted keep theirs, and an
  omitted ``Orchestrator`` (or one without a strategy) keeps the current SlurmConfigStrategy.
* Switching an existing cluster to Continuous is accepted (the model allows it) when the cluster is
  API-driven; the stored strategy is then dropped because Continuous always runs in merge mode.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from slurmpod.domain import catalog, deep_health
from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec, LifeCycleConfig
from slurmpod.domain.status import NodeType, SlurmConfigStrategy

__all__ = [
    "DEV_PARTITION",
    "LIFECYCLE_URI_SCHEMES",
    "effective_min_count",
    "effective_strategy",
    "merge_update",
    "validate_create",
    "validate_update",
]

DEV_PARTITION = "dev"
LIFECYCLE_URI_SCHEMES = ("s3://", "https://", "file://")


def effective_min_count(group: InstanceGroupSpec, continuous: bool) -> int:
    """The MinCount a group must reach before it is InService.

    Outside Continuous mode provisioning is all-or-nothing, so it is the InstanceCount. In Continuous
    mode an explicit MinInstanceCount wins; otherwise Compute defaults to 0 and Controller/Login to 1
    (never more than InstanceCount).
    """
    if not continuous:
        return group.instance_count
    if group.min_instance_count is not None:
        return group.min_instance_count
    if group.node_type in (NodeType.CONTROLLER, NodeType.LOGIN):
        return min(1, group.instance_count)
    return 0


def effective_strategy(
    spec: ClusterSpec, default: SlurmConfigStrategy = SlurmConfigStrategy.MANAGED
) -> SlurmConfigStrategy | None:
    """The strategy slurm.conf is managed with: ``None`` for Continuous (merge mode, no strategy)."""
    if spec.continuous:
        return None
    return spec.slurm_config_strategy or default


def validate_create(spec: ClusterSpec, *, strict: bool = False) -> list[str]:
    """All findings for a CreateCluster request (empty list = valid)."""
    findings: list[str] = []
    if not spec.instance_groups:
        findings.append("InstanceGroups must contain at least one instance group.")
        return findings
    _check_groups(spec.instance_groups, set(), findings)
    _check_topology(spec, strict, findings)
    _check_continuous(spec, spec.slurm_config_strategy, findings)
    _check_deep_health(spec, strict, findings)
    return findings


def validate_update(
    current: ClusterSpec,
    requested: ClusterSpec,
    groups_to_delete: tuple[str, ...],
    *,
    strict: bool = False,
    orchestrator_given: bool,
) -> list[str]:
    """All findings for an UpdateCluster request against the cluster's current desired spec.

    ``requested`` holds only what the request carried (``None``/empty where a member was omitted).
    The rules of :func:`validate_create` are applied to the spec :func:`merge_update` would store.
    """
    findings: list[str] = []
    current_names = {g.name for g in current.instance_groups}
    requested_names = [g.name for g in requested.instance_groups]

    for name, n in Counter(groups_to_delete).items():
        if n > 1:
            findings.append(f"Instance group {name} is specified more than once in InstanceGroupsToDelete.")
    for name in dict.fromkeys(groups_to_delete):
        group = current.group(name)
        if group is None:
            findings.append(
                f"Instance group {name} in InstanceGroupsToDelete does not exist in cluster {current.name}."
            )
            continue
        if name in requested_names:
            findings.append(
                f"Instance group {name} cannot be both updated and deleted: "
                "it appears in InstanceGroups and in InstanceGroupsToDelete."
            )
        if group.node_type == NodeType.CONTROLLER:
            findings.append(f"Controller instance group {name} cannot be deleted.")

    if requested.instance_groups:
        for group in current.instance_groups:
            if group.name not in requested_names and group.name not in groups_to_delete:
                findings.append(
                    f"Instance group {group.name} must be specified in InstanceGroups "
                    "or in InstanceGroupsToDelete."
                )

    for req in requested.instance_groups:
        cur = current.group(req.name)
        if cur is None:
            continue
        if req.instance_type is not None and cur.instance_type is not None:
            if req.instance_type != cur.instance_type:
                findings.append(
                    f"InstanceType of instance group {req.name} cannot be changed "
                    f"from {cur.instance_type} to {req.instance_type}."
                )
        old_type, new_type = cur.node_type, req.node_type
        if old_type is not None and new_type is not None and old_type != new_type:
            findings.append(
                f"NodeType of instance group {req.name} cannot be changed from {old_type.value} to "
                f"{new_type.value}. To use a different node type, create a new instance group."
            )

    merged = merge_update(current, requested, groups_to_delete, orchestrator_given)
    if not merged.instance_groups:
        findings.append(f"Cluster {current.name} must keep at least one instance group.")
        return findings
    _check_groups(merged.instance_groups, current_names, findings)
    _check_topology(merged, strict, findings)
    _check_continuous(merged, requested.slurm_config_strategy, findings)
    _check_deep_health(merged, strict, findings)
    return findings


def merge_update(
    current: ClusterSpec,
    requested: ClusterSpec,
    groups_to_delete: tuple[str, ...],
    orchestrator_given: bool,
) -> ClusterSpec:
    """The desired spec after an UpdateCluster (call it only once validation found nothing)."""
    if requested.instance_groups:
        groups = tuple(_merge_group(current.group(g.name), g) for g in requested.instance_groups)
    else:
        groups = tuple(g for g in current.instance_groups if g.name not in groups_to_delete)

    mode = requested.node_provisioning_mode or current.node_provisioning_mode
    strategy = current.slurm_config_strategy
    if orchestrator_given and requested.slurm_config_strategy is not None:
        strategy = requested.slurm_config_strategy
    if mode is not None and requested.slurm_config_strategy is None:
        strategy = None  # Continuous: merge mode, no strategy is kept
    return replace(
        current,
        instance_groups=groups,
        node_provisioning_mode=mode,
        node_recovery=requested.node_recovery or current.node_recovery,
        slurm_config_strategy=strategy,
        has_orchestrator=current.has_orchestrator or orchestrator_given,
        # an attached external accounting database is never detached; a new one replaces it
        accounting_database=requested.accounting_database or current.accounting_database,
        tags=requested.tags or current.tags,
        extras={**current.extras, **requested.extras},
    )


def _merge_group(cur: InstanceGroupSpec | None, req: InstanceGroupSpec) -> InstanceGroupSpec:
    if cur is None:
        return req
    return replace(
        req,
        slurm_config=req.slurm_config if req.slurm_config is not None else cur.slurm_config,
        instance_type=req.instance_type if req.instance_type is not None else cur.instance_type,
        image_id=req.image_id if req.image_id is not None else cur.image_id,
    )


def _check_groups(groups: tuple[InstanceGroupSpec, ...], existing: set[str], findings: list[str]) -> None:
    """Per-group rules: unique names, InstanceType on new groups, LifeCycleConfig shape."""
    for name, n in Counter(g.name for g in groups).items():
        if n > 1:
            findings.append(f"Instance group names must be unique: {name} is specified {n} times.")
    for g in groups:
        if g.instance_type is None and g.name not in existing:
            findings.append(f"InstanceType is required for instance group {g.name}.")
        if g.life_cycle_config is not None:
            _check_lifecycle(g.name, g.life_cycle_config, findings)


def _check_lifecycle(group: str, lcc: LifeCycleConfig, findings: list[str]) -> None:
    uri = lcc.source_s3_uri or None
    has_create, has_init = lcc.on_create is not None, lcc.on_init_complete is not None
    prefix = f"LifeCycleConfig for instance group {group}"
    if uri is None and not has_create and not has_init:
        findings.append(
            f"{prefix} must not be empty: specify SourceS3Uri and one of OnCreate or OnInitComplete."
        )
        return
    if has_create and has_init:
        findings.append(f"{prefix} cannot specify both OnCreate and OnInitComplete.")
    if uri is None:
        entry = "OnCreate" if has_create else "OnInitComplete"
        findings.append(f"{prefix} must specify SourceS3Uri together with {entry}.")
    else:
        if not has_create and not has_init:
            findings.append(f"{prefix} must specify OnCreate or OnInitComplete together with SourceS3Uri.")
        if not uri.startswith(LIFECYCLE_URI_SCHEMES):
            findings.append(
                f"SourceS3Uri for instance group {group} must start with s3://, https:// or file://."
            )


def _check_topology(spec: ClusterSpec, strict: bool, findings: list[str]) -> None:
    """API-driven topology rules; a legacy cluster (no SlurmConfig anywhere) has nothing to check here."""
    with_config = [g for g in spec.instance_groups if g.slurm_config is not None]
    if not with_config:
        return
    without = [g.name for g in spec.instance_groups if g.slurm_config is None]
    if without:
        findings.append(
            "SlurmConfig must be specified for all instance groups or for none: missing for "
            + ", ".join(without)
            + "."
        )
    for g in with_config:
        if g.node_type is None:
            findings.append(f"SlurmConfig.NodeType is required for instance group {g.name}.")

    controllers = spec.groups_of(NodeType.CONTROLLER)
    if len(controllers) > 1:
        findings.append(
            f"{len(controllers)} Controller Groups found: SlurmConfig for InstanceGroups may only have "
            "one Controller Group."
        )
    elif not controllers:
        findings.append(f"Cluster {spec.name} has no InstanceGroup with Controller node type.")
    logins = spec.groups_of(NodeType.LOGIN)
    if len(logins) > 1:
        findings.append(
            f"{len(logins)} Login Groups found: SlurmConfig for InstanceGroups may have at most one "
            "Login Group."
        )

    for g in with_config:
        _check_group_role(g, strict, findings)


def _check_group_role(g: InstanceGroupSpec, strict: bool, findings: list[str]) -> None:
    if g.slurm_config is None:
        return
    partitions = g.slurm_config.partition_names
    node_type = g.node_type
    if node_type is NodeType.CONTROLLER or node_type is NodeType.LOGIN:
        if partitions:
            findings.append(
                "Partitions can only be assigned to Compute node types: "
                f"instance group {g.name} has NodeType {node_type.value}."
            )
        if g.instance_count < 1:
            findings.append(
                f"{node_type.value} instance group {g.name} must have an InstanceCount of at least 1."
            )
        if strict and node_type == NodeType.CONTROLLER and g.instance_count > 1:
            findings.append(
                "Multiple head nodes are not supported with API-driven Slurm configuration: Controller "
                f"instance group {g.name} has InstanceCount {g.instance_count}, it must be 1."
            )
    elif node_type == NodeType.COMPUTE:
        if not partitions:
            findings.append(f"PartitionNames is required for Compute instance group {g.name}.")
        elif len(partitions) > 1:
            findings.append(
                f"Compute instance group {g.name} specifies {len(partitions)} partition names; "
                "only one partition name per instance group is supported."
            )
    for p in partitions:
        if p == DEV_PARTITION:
            findings.append(
                f"Partition name '{DEV_PARTITION}' in instance group {g.name} is reserved for the universal "
                "partition that contains every compute node."
            )


def _check_continuous(
    spec: ClusterSpec, explicit_strategy: SlurmConfigStrategy | None, findings: list[str]
) -> None:
    """NodeProvisioningMode=Continuous rules and MinInstanceCount."""
    if spec.accounting_database is not None and not spec.continuous:
        findings.append(
            "AccountingDatabase is only supported for clusters using Continuous as the NodeProvisioningMode."
        )
    if spec.continuous:
        if explicit_strategy is not None:
            findings.append(
                "SlurmConfigStrategy is not supported when NodeProvisioningMode is set to Continuous."
            )
        if any(g.slurm_config is None for g in spec.instance_groups):
            findings.append(
                "NodeProvisioningMode Continuous requires SlurmConfig in every instance group; clusters "
                "using provisioning_parameters.json are not supported."
            )
    for g in spec.instance_groups:
        if g.min_instance_count is None:
            continue
        if not spec.continuous:
            findings.append(
                f"MinInstanceCount for instance group {g.name} is only available for clusters with "
                "NodeProvisioningMode set to Continuous."
            )
        elif not 0 <= g.min_instance_count <= g.instance_count:
            findings.append(
                "MinInstanceCount must be between 0 and InstanceCount (inclusive): instance group "
                f"{g.name} has MinInstanceCount {g.min_instance_count} and InstanceCount {g.instance_count}."
            )


def _check_deep_health(spec: ClusterSpec, strict: bool, findings: list[str]) -> None:
    """OnStartDeepHealthChecks: InstanceStress and InstanceConnectivity, on Compute groups; GPU/Trainium instance
    types only with ``strict`` (AWS's rule; the extended profile also checks CPU instances)."""
    for g in spec.instance_groups:
        info = catalog.instance_type_info(g.instance_type) if g.instance_type and \
            catalog.is_known(g.instance_type) else None
        findings += deep_health.group_findings(g, accelerated=bool(info and info.gpus), strict=strict)
