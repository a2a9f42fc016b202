"""Wire (PascalCase, botocore shapes) <-> domain translation. The only place wire member names live."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slurmpod.domain.deep_health import HealthCheckTarget
from slurmpod.domain.model import ClusterRecord, ClusterSummary, NodeRecord
from slurmpod.domain.spec import (
    AccountingDatabaseSpec,
    CapacitySize,
    CapacitySizeType,
    ClusterSpec,
    DeepHealthCheck,
    DeploymentSpec,
    InstanceGroupSpec,
    LifeCycleConfig,
    NodeProvisioningMode,
    NodeRecovery,
    ScheduledUpdateSpec,
    SlurmConfig,
    Tag,
)
from slurmpod.domain.status import (
    ClusterStatus,
    ImageVersionStatus,
    InstanceGroupStatus,
    InstanceStatus,
    NodeType,
    SlurmConfigStrategy,
    SoftwareUpdateStatus,
)
from slurmpod.domain.validation import effective_min_count

_GROUP_KNOWN = {
    "InstanceCount", "MinInstanceCount", "InstanceGroupName", "InstanceType", "LifeCycleConfig",
    "ExecutionRole", "ThreadsPerCore", "SlurmConfig", "ImageId", "ScheduledUpdateConfig", "OnStartDeepHealthChecks",
}
# Group members stored opaquely and echoed in ClusterInstanceGroupDetails / ClusterNodeDetails.
_GROUP_ECHO = (
    "InstanceRequirements", "InstanceStorageConfigs", "OnStartDeepHealthChecks", "TrainingPlanArn",
    "OverrideVpcConfig", "KubernetesConfig", "CapacityRequirements", "NetworkInterface",
)
_NODE_ECHO = ("OverrideVpcConfig", "InstanceStorageConfigs", "KubernetesConfig", "NetworkInterface")
_CLUSTER_ECHO = ("VpcConfig", "RestrictedInstanceGroups", "TieredStorageConfig", "ClusterRole", "AutoScaling")


def slurm_group_findings(groups: Any) -> list[str]:
    """Instance-group members a Slurm cluster on slurmpod cannot honour (refused before anything is stored):
    AutoPatchConfig's DrainFirst strategy and DrainPolicy are EKS-only on HyperPod; the other strategies would need
    automatic patch releases, which slurmpod does not make (ScheduledUpdateConfig and UpdateClusterSoftware do);
    CapacityRequirements.Spot needs a Spot market no slurmpod provider has (OnDemand is what every node is)."""
    out: list[str] = []
    for g in groups if isinstance(groups, list) else ():
        if not isinstance(g, Mapping):
            continue
        name = g.get("InstanceGroupName")
        patch = g.get("AutoPatchConfig")
        if isinstance(patch, Mapping):
            if patch.get("PatchingStrategy") == "DrainFirst" or "DrainPolicy" in patch:
                out.append(f"Instance group {name}: AutoPatchConfig PatchingStrategy DrainFirst and DrainPolicy are "
                           "available only for clusters that use Amazon EKS as the orchestrator.")
            else:
                out.append(f"Instance group {name}: slurmpod does not implement AutoPatchConfig (automatic patch "
                           "releases); use ScheduledUpdateConfig or UpdateClusterSoftware.")
        capacity = g.get("CapacityRequirements")
        if isinstance(capacity, Mapping) and "Spot" in capacity:
            out.append(f"Instance group {name}: CapacityRequirements.Spot is not available: slurmpod's providers "
                       "have no Spot capacity (use OnDemand, or omit CapacityRequirements).")
    return out


# ---- deployment, schedule, tags ------------------------------------------------------------------------
# Echoed with their members in sorted order: the order the stored (sort_keys) wire dicts had before these
# members were typed, so DescribeCluster's bytes are unchanged.


def _capacity_from_wire(w: Any) -> CapacitySize | None:
    if not isinstance(w, Mapping):
        return None
    return CapacitySize(CapacitySizeType(w["Type"]), int(w["Value"]))


def _capacity_to_wire(c: CapacitySize) -> dict[str, Any]:
    return {"Type": c.type.value, "Value": c.value}


def deployment_from_wire(w: Mapping[str, Any] | None) -> DeploymentSpec:
    """A ``DeploymentConfiguration`` (UpdateClusterSoftware, ScheduledUpdateConfig) as a DeploymentSpec."""
    if not w:
        return DeploymentSpec()
    policy = w.get("RollingUpdatePolicy")
    policy = policy if isinstance(policy, Mapping) else {}
    alarms = w.get("AutoRollbackConfiguration")
    wait = w.get("WaitIntervalInSeconds")
    return DeploymentSpec(
        batch=_capacity_from_wire(policy.get("MaximumBatchSize")),
        rollback_batch=_capacity_from_wire(policy.get("RollbackMaximumBatchSize")),
        wait_seconds=None if wait is None else int(wait),
        rollback_alarms=None if alarms is None else tuple(a["AlarmName"] for a in alarms),
    )


def deployment_to_wire(d: DeploymentSpec) -> dict[str, Any]:
    """The DeploymentConfiguration as requested (members not given stay absent)."""
    out: dict[str, Any] = {}
    if d.rollback_alarms is not None:
        out["AutoRollbackConfiguration"] = [{"AlarmName": a} for a in d.rollback_alarms]
    if d.batch is not None or d.rollback_batch is not None:
        policy: dict[str, Any] = {}
        if d.batch is not None:
            policy["MaximumBatchSize"] = _capacity_to_wire(d.batch)
        if d.rollback_batch is not None:
            policy["RollbackMaximumBatchSize"] = _capacity_to_wire(d.rollback_batch)
        out["RollingUpdatePolicy"] = policy
    if d.wait_seconds is not None:
        out["WaitIntervalInSeconds"] = d.wait_seconds
    return out


def scheduled_update_from_wire(w: Any) -> ScheduledUpdateSpec | None:
    if not isinstance(w, Mapping) or not isinstance(w.get("ScheduleExpression"), str):
        return None
    dep = w.get("DeploymentConfig")
    return ScheduledUpdateSpec(w["ScheduleExpression"], None if dep is None else deployment_from_wire(dep))


def scheduled_update_to_wire(s: ScheduledUpdateSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if s.deployment is not None:
        out["DeploymentConfig"] = deployment_to_wire(s.deployment)
    out["ScheduleExpression"] = s.expression
    return out


def _tags_from_wire(w: Any) -> tuple[Tag, ...]:
    return tuple(Tag(t["Key"], t["Value"]) for t in w or () if isinstance(t, Mapping))


def _enum_or_none(kind: Any, value: Any) -> Any:
    return None if value is None else kind(value)


def _group_echo(group: InstanceGroupSpec, members: tuple[str, ...]) -> dict[str, Any]:
    echo = {k: v for k, v in group.extras.items() if k in members}
    if "ScheduledUpdateConfig" in members and group.scheduled_update is not None:
        echo["ScheduledUpdateConfig"] = scheduled_update_to_wire(group.scheduled_update)
    if "OnStartDeepHealthChecks" in members and group.deep_health_checks:
        echo["OnStartDeepHealthChecks"] = [c.value for c in group.deep_health_checks]
    return dict(sorted(echo.items()))


def group_from_wire(w: Mapping[str, Any]) -> InstanceGroupSpec:
    lcc = w.get("LifeCycleConfig")
    sc = w.get("SlurmConfig")
    node_type = None
    if isinstance(sc, Mapping) and sc.get("NodeType") in {t.value for t in NodeType}:
        node_type = NodeType(sc["NodeType"])
    return InstanceGroupSpec(
        name=w["InstanceGroupName"],
        instance_count=w["InstanceCount"],
        instance_type=w.get("InstanceType"),
        execution_role=w.get("ExecutionRole"),
        min_instance_count=w.get("MinInstanceCount"),
        life_cycle_config=None
        if lcc is None
        else LifeCycleConfig(
            source_s3_uri=lcc.get("SourceS3Uri"),
            on_create=lcc.get("OnCreate"),
            on_init_complete=lcc.get("OnInitComplete"),
        ),
        threads_per_core=w.get("ThreadsPerCore"),
        slurm_config=None
        if sc is None
        else SlurmConfig(node_type=node_type, partition_names=tuple(sc.get("PartitionNames") or ())),
        image_id=w.get("ImageId"),
        scheduled_update=scheduled_update_from_wire(w.get("ScheduledUpdateConfig")),
        deep_health_checks=tuple(DeepHealthCheck(c) for c in w.get("OnStartDeepHealthChecks") or ()),
        extras={k: v for k, v in w.items() if k not in _GROUP_KNOWN and k in _GROUP_ECHO},
    )


def health_check_target_from_wire(w: Mapping[str, Any]) -> HealthCheckTarget:
    """An ``InstanceGroupHealthCheckConfiguration`` (shape-checked already)."""
    ids = w.get("InstanceIds")
    return HealthCheckTarget(w["InstanceGroupName"], tuple(DeepHealthCheck(c) for c in w["DeepHealthChecks"]),
                             None if ids is None else tuple(ids))


def _strategy(params: Mapping[str, Any]) -> tuple[SlurmConfigStrategy | None, bool]:
    orch = params.get("Orchestrator")
    if not isinstance(orch, Mapping):
        return None, False
    slurm = orch.get("Slurm")
    if isinstance(slurm, Mapping) and slurm.get("SlurmConfigStrategy"):
        return SlurmConfigStrategy(slurm["SlurmConfigStrategy"]), True
    return None, True


def _accounting_database(params: Mapping[str, Any]) -> AccountingDatabaseSpec | None:
    orch = params.get("Orchestrator")
    slurm = orch.get("Slurm") if isinstance(orch, Mapping) else None
    adb = slurm.get("AccountingDatabase") if isinstance(slurm, Mapping) else None
    if not isinstance(adb, Mapping):
        return None
    return AccountingDatabaseSpec(endpoint=adb["Endpoint"], secret_arn=adb["SecretArn"], port=adb.get("Port"),
                                  name=adb.get("Name"))


def spec_from_create(params: Mapping[str, Any]) -> ClusterSpec:
    strategy, has_orch = _strategy(params)
    return ClusterSpec(
        name=params["ClusterName"],
        instance_groups=tuple(group_from_wire(g) for g in params.get("InstanceGroups") or ()),
        node_provisioning_mode=_enum_or_none(NodeProvisioningMode, params.get("NodeProvisioningMode")),
        node_recovery=_enum_or_none(NodeRecovery, params.get("NodeRecovery")),
        slurm_config_strategy=strategy,
        has_orchestrator=has_orch,
        accounting_database=_accounting_database(params),
        tags=_tags_from_wire(params.get("Tags")),
        extras={k: params[k] for k in _CLUSTER_ECHO if k in params},
    )


def spec_from_update(params: Mapping[str, Any], current: ClusterSpec) -> tuple[ClusterSpec, bool]:
    """The requested spec of an UpdateCluster call (unset members taken from ``current``)."""
    strategy, has_orch = _strategy(params)
    extras = dict(current.extras)
    extras.update({k: params[k] for k in _CLUSTER_ECHO if k in params})
    groups = params.get("InstanceGroups")
    spec = ClusterSpec(
        name=current.name,
        # omitted InstanceGroups: () -- validation/merge keep every group not being deleted
        instance_groups=tuple(group_from_wire(g) for g in groups) if groups is not None else (),
        node_provisioning_mode=_enum_or_none(NodeProvisioningMode, params["NodeProvisioningMode"])
        if "NodeProvisioningMode" in params else current.node_provisioning_mode,
        node_recovery=_enum_or_none(NodeRecovery, params["NodeRecovery"])
        if "NodeRecovery" in params else current.node_recovery,
        slurm_config_strategy=strategy,
        has_orchestrator=has_orch or current.has_orchestrator,
        # omitted: unchanged (merge_update keeps it; an attached database can never be detached, AWS's rule)
        accounting_database=_accounting_database(params),
        tags=_tags_from_wire(params["Tags"]) if "Tags" in params else current.tags,
        extras=extras,
    )
    return spec, has_orch


def _lcc_to_wire(lcc: LifeCycleConfig | None) -> dict[str, Any] | None:
    if lcc is None:
        return None
    out = {"SourceS3Uri": lcc.source_s3_uri, "OnCreate": lcc.on_create, "OnInitComplete": lcc.on_init_complete}
    return {k: v for k, v in out.items() if v is not None}


def _slurm_to_wire(sc: SlurmConfig | None) -> dict[str, Any] | None:
    if sc is None or sc.node_type is None:
        return None
    out: dict[str, Any] = {"NodeType": sc.node_type.value}
    if sc.partition_names:
        out["PartitionNames"] = list(sc.partition_names)
    return out


@dataclass(frozen=True)
class ImageView:
    """What DescribeCluster/ListClusterNodes say about images (computed by the handler from the catalogue)."""

    current: str
    desired: str
    status: ImageVersionStatus
    software_update_status: SoftwareUpdateStatus | None = None
    active_update: DeploymentSpec | None = None


def group_details(
    cluster: ClusterRecord,
    group: InstanceGroupSpec,
    status: InstanceGroupStatus,
    current_count: int,
    image: ImageView,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "CurrentCount": current_count,
        "TargetCount": group.instance_count,
        "MinCount": effective_min_count(group, cluster.spec.continuous),
        "InstanceGroupName": group.name,
        "InstanceType": group.instance_type,
        "LifeCycleConfig": _lcc_to_wire(group.life_cycle_config),
        "ExecutionRole": group.execution_role,
        "ThreadsPerCore": group.threads_per_core,
        "Status": status.value,
        "CurrentImageId": image.current,
        "DesiredImageId": image.desired,
        "ImageVersionStatus": image.status.value,
        "SoftwareUpdateStatus": image.software_update_status.value if image.software_update_status else None,
        "ActiveSoftwareUpdateConfig": (deployment_to_wire(image.active_update) or None) if image.active_update
        else None,
        "SlurmConfig": _slurm_to_wire(group.slurm_config),
    }
    out.update(_group_echo(group, (*_GROUP_ECHO, "ScheduledUpdateConfig")))
    return out


def describe_cluster(cluster: ClusterRecord, groups: list[dict[str, Any]]) -> dict[str, Any]:
    spec = cluster.spec
    out: dict[str, Any] = {
        "ClusterArn": cluster.arn,
        "ClusterName": cluster.name,
        "ClusterStatus": cluster.status.value,
        "CreationTime": cluster.creation_time,
        "FailureMessage": cluster.failure_message,
        "InstanceGroups": groups,
        "NodeRecovery": spec.node_recovery.value if spec.node_recovery else None,
        "NodeProvisioningMode": spec.node_provisioning_mode.value if spec.node_provisioning_mode else None,
    }
    api_driven = spec.topology_source == "api" and any(g.slurm_config for g in spec.instance_groups)
    if spec.has_orchestrator or spec.slurm_config_strategy or api_driven or spec.accounting_database:
        slurm: dict[str, Any] = {}
        strategy = spec.slurm_config_strategy
        if strategy is None and not spec.continuous and api_driven:
            strategy = SlurmConfigStrategy.MANAGED
        if strategy is not None:
            slurm["SlurmConfigStrategy"] = strategy.value
        adb = spec.accounting_database
        if adb is not None:
            slurm["AccountingDatabase"] = {
                "Endpoint": adb.endpoint, "Port": adb.effective_port,
                "Name": adb.effective_name(cluster.cluster_id), "SecretArn": adb.secret_arn,
            }
        out["Orchestrator"] = {"Slurm": slurm}
    out.update({k: v for k, v in spec.extras.items() if k in _CLUSTER_ECHO})
    return out


def cluster_summary(c: ClusterRecord | ClusterSummary) -> dict[str, Any]:
    return {
        "ClusterArn": c.arn,
        "ClusterName": c.name,
        "CreationTime": c.creation_time,
        "ClusterStatus": c.status.value,
    }


def _instance_status(n: NodeRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"Status": n.status.value}
    if n.message:
        out["Message"] = n.message
    elif n.lifecycle_digest and n.status == InstanceStatus.RUNNING:
        out["Message"] = f"Lifecycle scripts ran from snapshot {n.lifecycle_digest}"
    return out


def node_summary(
    n: NodeRecord, instance_type: str | None, include_logical: bool, image_status: ImageVersionStatus
) -> dict[str, Any]:
    return {
        "InstanceGroupName": n.group,
        "InstanceId": n.instance_id,
        "NodeLogicalId": n.logical_id if include_logical else None,
        "InstanceType": instance_type,
        "LaunchTime": n.launch_time,
        "LastSoftwareUpdateTime": n.last_software_update_time,
        "InstanceStatus": _instance_status(n),
        "PrivateDnsHostname": n.hostname,
        "ImageVersionStatus": image_status.value,
    }


def node_details(n: NodeRecord, group: InstanceGroupSpec | None, region: str, image: ImageView) -> dict[str, Any]:
    out: dict[str, Any] = {
        "InstanceGroupName": n.group,
        "InstanceId": n.instance_id,
        "NodeLogicalId": n.logical_id,
        "InstanceStatus": _instance_status(n),
        "InstanceType": group.instance_type if group else None,
        "LaunchTime": n.launch_time,
        "LastSoftwareUpdateTime": n.last_software_update_time,
        "LifeCycleConfig": _lcc_to_wire(group.life_cycle_config) if group else None,
        "ThreadsPerCore": group.threads_per_core if group else None,
        "PrivatePrimaryIp": n.ip,
        "PrivateDnsHostname": n.hostname,
        "Placement": {"AvailabilityZone": f"{region}a", "AvailabilityZoneId": "local-az1"},
        "CurrentImageId": n.image_id,
        "DesiredImageId": image.desired,
        "ImageVersionStatus": image.status.value,
        "CapacityType": "OnDemand",
    }
    if group:
        out.update(_group_echo(group, _NODE_ECHO))
    return out


__all__ = [
    "ClusterStatus",
    "InstanceStatus",
    "cluster_summary",
    "describe_cluster",
    "group_details",
    "node_details",
    "node_summary",
    "spec_from_create",
    "spec_from_update",
]
