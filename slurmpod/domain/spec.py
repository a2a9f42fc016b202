"""User intent: frozen dataclasses mirroring the HyperPod cluster request shapes in snake_case.

``extras`` carries wire members slurmpod stores and echoes but does not interpret (storage configs,
deep health checks, VPC overrides ...); it is opaque to the domain: whatever the domain acts on (schedules,
deployment policies, tags) has a typed field. ``to_dict``/``spec_from_dict`` give the JSON form the store
keeps (``SPEC_SCHEMA_VERSION`` travels with it; rows of schema 1 are read through ``domain.stored_v1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from slurmpod.domain import stored_v1
from slurmpod.domain.status import NodeType, SlurmConfigStrategy

SPEC_SCHEMA_VERSION = 2


class NodeRecovery(str, Enum):
    """What happens to an unhealthy node of an InService cluster (``None``: the operator decides)."""

    AUTOMATIC = "Automatic"
    NONE = "None"


class DeepHealthCheck(str, Enum):
    """OnStartDeepHealthChecks / StartClusterHealthCheck check types (``domain.deep_health`` runs them)."""

    INSTANCE_STRESS = "InstanceStress"
    INSTANCE_CONNECTIVITY = "InstanceConnectivity"
    MULTI_NODE_TRAINING_VALIDATION = "MultiNodeTrainingValidation"


class NodeProvisioningMode(str, Enum):
    CONTINUOUS = "Continuous"


CONTINUOUS = NodeProvisioningMode.CONTINUOUS


class CapacitySizeType(str, Enum):
    INSTANCE_COUNT = "INSTANCE_COUNT"
    CAPACITY_PERCENTAGE = "CAPACITY_PERCENTAGE"


@dataclass(frozen=True)
class CapacitySize:
    """A batch size: ``INSTANCE_COUNT`` n, or ``CAPACITY_PERCENTAGE`` p of the nodes being updated."""

    type: CapacitySizeType = CapacitySizeType.INSTANCE_COUNT
    value: int = 1

    def size(self, total: int) -> int:
        if self.type == CapacitySizeType.CAPACITY_PERCENTAGE:
            return max(1, (total * self.value + 99) // 100)
        return max(1, self.value)


DEFAULT_BATCH = CapacitySize(CapacitySizeType.INSTANCE_COUNT, 1)


@dataclass(frozen=True)
class DeploymentSpec:
    """How a software update rolls (a deployment configuration), as requested: None = not given.

    ``batch``/``rollback_batch`` bound how many nodes are replaced at once while updating / rolling back;
    ``wait_seconds`` is the pause between batches; ``rollback_alarms`` are alarm names (echoed only)."""

    batch: CapacitySize | None = None
    rollback_batch: CapacitySize | None = None
    wait_seconds: int | None = None
    rollback_alarms: tuple[str, ...] | None = None

    @property
    def effective_batch(self) -> CapacitySize:
        return self.batch or DEFAULT_BATCH

    @property
    def effective_rollback_batch(self) -> CapacitySize:
        return self.rollback_batch or self.effective_batch

    @property
    def effective_wait_seconds(self) -> int:
        return self.wait_seconds or 0

    @property
    def empty(self) -> bool:
        return self == DeploymentSpec()


@dataclass(frozen=True)
class ScheduledUpdateSpec:
    """A group's recurring software update: a schedule expression and the deployment it starts."""

    expression: str
    deployment: DeploymentSpec | None = None


@dataclass(frozen=True)
class Tag:
    key: str
    value: str


@dataclass(frozen=True)
class LifeCycleConfig:
    source_s3_uri: str | None = None
    on_create: str | None = None
    on_init_complete: str | None = None

    @property
    def entry_point(self) -> str | None:
        return self.on_create or self.on_init_complete


DEFAULT_ACCOUNTING_DB_PORT = 3306


@dataclass(frozen=True)
class AccountingDatabaseSpec:
    """An existing MariaDB/MySQL that the cluster's slurmdbd uses (``Orchestrator.Slurm.AccountingDatabase``).

    ``port``/``name`` are None when the request omitted them; ``effective_*`` give HyperPod's defaults."""

    endpoint: str
    secret_arn: str
    port: int | None = None
    name: str | None = None

    @property
    def effective_port(self) -> int:
        return self.port or DEFAULT_ACCOUNTING_DB_PORT

    def effective_name(self, cluster_id: str) -> str:
        return self.name or f"slurm_acct_db_{cluster_id}"


@dataclass(frozen=True)
class SlurmConfig:
    node_type: NodeType | None
    partition_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class InstanceGroupSpec:
    name: str
    instance_count: int
    instance_type: str | None = None
    execution_role: str | None = None
    min_instance_count: int | None = None
    life_cycle_config: LifeCycleConfig | None = None
    threads_per_core: int | None = None
    slurm_config: SlurmConfig | None = None
    image_id: str | None = None
    scheduled_update: ScheduledUpdateSpec | None = None
    #: OnStartDeepHealthChecks: run on every new node of the group before it takes jobs
    deep_health_checks: tuple[DeepHealthCheck, ...] = ()
    extras: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def node_type(self) -> NodeType | None:
        return self.slurm_config.node_type if self.slurm_config else None

    @property
    def partition(self) -> str | None:
        if self.slurm_config and self.slurm_config.partition_names:
            return self.slurm_config.partition_names[0]
        return None


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    instance_groups: tuple[InstanceGroupSpec, ...] = ()
    node_provisioning_mode: NodeProvisioningMode | None = None
    node_recovery: NodeRecovery | None = None
    slurm_config_strategy: SlurmConfigStrategy | None = None
    has_orchestrator: bool = False
    accounting_database: AccountingDatabaseSpec | None = None
    tags: tuple[Tag, ...] = ()
    extras: Mapping[str, Any] = field(default_factory=dict, hash=False)
    # "api" (SlurmConfig in the request) or "provisioning_parameters" (legacy: roles derived from the file)
    topology_source: str = "api"

    @property
    def continuous(self) -> bool:
        return self.node_provisioning_mode == NodeProvisioningMode.CONTINUOUS

    @property
    def automatic_recovery(self) -> bool:
        """NodeRecovery Automatic (also HyperPod's default when the request leaves it out)."""
        return (self.node_recovery or NodeRecovery.AUTOMATIC) == NodeRecovery.AUTOMATIC

    def tag_values(self, key: str) -> list[str]:
        return [t.value for t in self.tags if t.key == key]

    def group(self, name: str) -> InstanceGroupSpec | None:
        for g in self.instance_groups:
            if g.name == name:
                return g
        return None

    def groups_of(self, node_type: NodeType) -> list[InstanceGroupSpec]:
        return [g for g in self.instance_groups if g.node_type == node_type]

    def with_groups(self, groups: tuple[InstanceGroupSpec, ...]) -> ClusterSpec:
        return replace(self, instance_groups=groups)


def capacity_to_dict(c: CapacitySize | None) -> list[Any] | None:
    return None if c is None else [c.type.value, c.value]


def capacity_from_dict(d: Any) -> CapacitySize | None:
    return None if not d else CapacitySize(CapacitySizeType(d[0]), int(d[1]))


def deployment_to_dict(d: DeploymentSpec) -> dict[str, Any]:
    return {"batch": capacity_to_dict(d.batch), "rollback_batch": capacity_to_dict(d.rollback_batch),
            "wait_seconds": d.wait_seconds,
            "rollback_alarms": None if d.rollback_alarms is None else list(d.rollback_alarms)}


def deployment_from_dict(d: Mapping[str, Any]) -> DeploymentSpec:
    alarms = d.get("rollback_alarms")
    wait = d.get("wait_seconds")
    return DeploymentSpec(batch=capacity_from_dict(d.get("batch")),
                          rollback_batch=capacity_from_dict(d.get("rollback_batch")),
                          wait_seconds=None if wait is None else int(wait),
                          rollback_alarms=None if alarms is None else tuple(str(a) for a in alarms))


def _scheduled_to_dict(s: ScheduledUpdateSpec | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"expression": s.expression,
            "deployment": None if s.deployment is None else deployment_to_dict(s.deployment)}


def _scheduled_from_dict(d: Mapping[str, Any] | None) -> ScheduledUpdateSpec | None:
    if not d:
        return None
    dep = d.get("deployment")
    return ScheduledUpdateSpec(str(d["expression"]), None if dep is None else deployment_from_dict(dep))


def _lcc_to_dict(lcc: LifeCycleConfig | None) -> dict[str, Any] | None:
    if lcc is None:
        return None
    return {"source_s3_uri": lcc.source_s3_uri, "on_create": lcc.on_create, "on_init_complete": lcc.on_init_complete}


def group_to_dict(g: InstanceGroupSpec) -> dict[str, Any]:
    return {
        "name": g.name,
        "instance_count": g.instance_count,
        "instance_type": g.instance_type,
        "execution_role": g.execution_role,
        "min_instance_count": g.min_instance_count,
        "life_cycle_config": _lcc_to_dict(g.life_cycle_config),
        "threads_per_core": g.threads_per_core,
        "slurm_config": None
        if g.slurm_config is None
        else {
            "node_type": g.slurm_config.node_type.value if g.slurm_config.node_type else None,
            "partition_names": list(g.slurm_config.partition_names),
        },
        "image_id": g.image_id,
        "scheduled_update": _scheduled_to_dict(g.scheduled_update),
        "extras": dict(g.extras),
        # only when set: specs without checks keep their stored bytes
        **({"deep_health_checks": [c.value for c in g.deep_health_checks]} if g.deep_health_checks else {}),
    }


def to_dict(spec: ClusterSpec) -> dict[str, Any]:
    return {
        "schema_version": SPEC_SCHEMA_VERSION,
        "name": spec.name,
        "instance_groups": [group_to_dict(g) for g in spec.instance_groups],
        "node_provisioning_mode": spec.node_provisioning_mode.value if spec.node_provisioning_mode else None,
        "node_recovery": spec.node_recovery.value if spec.node_recovery else None,
        "slurm_config_strategy": spec.slurm_config_strategy.value if spec.slurm_config_strategy else None,
        "has_orchestrator": spec.has_orchestrator,
        "accounting_database": None if spec.accounting_database is None else {
            "endpoint": spec.accounting_database.endpoint, "secret_arn": spec.accounting_database.secret_arn,
            "port": spec.accounting_database.port, "name": spec.accounting_database.name,
        },
        "tags": [[t.key, t.value] for t in spec.tags],
        "extras": dict(spec.extras),
        "topology_source": spec.topology_source,
    }


def group_from_dict(d: Mapping[str, Any]) -> InstanceGroupSpec:
    lcc = d.get("life_cycle_config")
    sc = d.get("slurm_config")
    extras = dict(d.get("extras") or {})
    if "scheduled_update" in d:
        scheduled = _scheduled_from_dict(d["scheduled_update"])
    else:  # schema 1: kept in extras under its wire name
        legacy = extras.pop(stored_v1.SCHEDULED_UPDATE_CONFIG, None)
        scheduled = _scheduled_from_dict(stored_v1.scheduled_update(legacy))
    # specs stored before the field was typed kept the wire list in extras
    checks = d["deep_health_checks"] if "deep_health_checks" in d else extras.pop(
        stored_v1.ON_START_DEEP_HEALTH_CHECKS, None)
    return InstanceGroupSpec(
        name=d["name"],
        instance_count=d["instance_count"],
        instance_type=d.get("instance_type"),
        execution_role=d.get("execution_role"),
        min_instance_count=d.get("min_instance_count"),
        life_cycle_config=None if lcc is None else LifeCycleConfig(**lcc),
        threads_per_core=d.get("threads_per_core"),
        slurm_config=None
        if sc is None
        else SlurmConfig(
            node_type=NodeType(sc["node_type"]) if sc.get("node_type") else None,
            partition_names=tuple(sc.get("partition_names") or ()),
        ),
        image_id=d.get("image_id"),
        scheduled_update=scheduled,
        deep_health_checks=tuple(DeepHealthCheck(c) for c in checks or () if c in _DHC_VALUES),
        extras=extras,
    )


_DHC_VALUES = frozenset(c.value for c in DeepHealthCheck)


def spec_from_dict(d: Mapping[str, Any]) -> ClusterSpec:
    strategy = d.get("slurm_config_strategy")
    adb = d.get("accounting_database")
    mode, recovery = d.get("node_provisioning_mode"), d.get("node_recovery")
    extras = dict(d.get("extras") or {})
    if "tags" in d:
        tags = tuple(Tag(str(k), str(v)) for k, v in d["tags"] or ())
    else:  # schema 1: kept in extras under its wire name
        tags = tuple(Tag(k, v) for k, v in stored_v1.tags(extras.pop(stored_v1.TAGS, None)))
    return ClusterSpec(
        name=d["name"],
        instance_groups=tuple(group_from_dict(g) for g in d.get("instance_groups") or ()),
        node_provisioning_mode=NodeProvisioningMode(mode) if mode else None,
        node_recovery=NodeRecovery(recovery) if recovery else None,
        slurm_config_strategy=SlurmConfigStrategy(strategy) if strategy else None,
        has_orchestrator=bool(d.get("has_orchestrator")),
        accounting_database=None if not adb else AccountingDatabaseSpec(
            endpoint=adb["endpoint"], secret_arn=adb["secret_arn"], port=adb.get("port"), name=adb.get("name")),
        tags=tags,
        extras=extras,
        topology_source=d.get("topology_source") or "api",
    )
