"""User intent: frozen dataclasses mirroring the HyperPod cluster request shapes in snake_case.

``extras`` carries wire members slurmpod stores and echoes but does not interpret (storage configs,
deep health checks, VPC overrides ...); it is opaque to the domain. ``to_dict``/``spec_from_dict`` give
the JSON form the store keeps (``SPEC_SCHEMA_VERSION`` travels with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from slurmpod.domain.status import NodeType, SlurmConfigStrategy

SPEC_SCHEMA_VERSION = 1
CONTINUOUS = "Continuous"


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
    node_provisioning_mode: str | None = None
    node_recovery: str | None = None
    slurm_config_strategy: SlurmConfigStrategy | None = None
    has_orchestrator: bool = False
    accounting_database: AccountingDatabaseSpec | None = None
    extras: Mapping[str, Any] = field(default_factory=dict, hash=False)
    # "api" (SlurmConfig in the request) or "provisioning_parameters" (legacy: roles derived from the file)
    topology_source: str = "api"

    @property
    def continuous(self) -> bool:
        return self.node_provisioning_mode == CONTINUOUS

    def group(self, name: str) -> InstanceGroupSpec | None:
        for g in self.instance_groups:
            if g.name == name:
                return g
        return None

    def groups_of(self, node_type: NodeType) -> list[InstanceGroupSpec]:
        return [g for g in self.instance_groups if g.node_type == node_type]

    def with_groups(self, groups: tuple[InstanceGroupSpec, ...]) -> ClusterSpec:
        return replace(self, instance_groups=groups)


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
        "extras": dict(g.extras),
    }


def to_dict(spec: ClusterSpec) -> dict[str, Any]:
    return {
        "schema_version": SPEC_SCHEMA_VERSION,
        "name": spec.name,
        "instance_groups": [group_to_dict(g) for g in spec.instance_groups],
        "node_provisioning_mode": spec.node_provisioning_mode,
        "node_recovery": spec.node_recovery,
        "slurm_config_strategy": spec.slurm_config_strategy.value if spec.slurm_config_strategy else None,
        "has_orchestrator": spec.has_orchestrator,
        "accounting_database": None if spec.accounting_database is None else {
            "endpoint": spec.accounting_database.endpoint, "secret_arn": spec.accounting_database.secret_arn,
            "port": spec.accounting_database.port, "name": spec.accounting_database.name,
        },
        "extras": dict(spec.extras),
        "topology_source": spec.topology_source,
    }


def group_from_dict(d: Mapping[str, Any]) -> InstanceGroupSpec:
    lcc = d.get("life_cycle_config")
    sc = d.get("slurm_config")
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
        extras=dict(d.get("extras") or {}),
    )


def spec_from_dict(d: Mapping[str, Any]) -> ClusterSpec:
    strategy = d.get("slurm_config_strategy")
    adb = d.get("accounting_database")
    return ClusterSpec(
        name=d["name"],
        instance_groups=tuple(group_from_dict(g) for g in d.get("instance_groups") or ()),
        node_provisioning_mode=d.get("node_provisioning_mode"),
        node_recovery=d.get("node_recovery"),
        slurm_config_strategy=SlurmConfigStrategy(strategy) if strategy else None,
        has_orchestrator=bool(d.get("has_orchestrator")),
        accounting_database=None if not adb else AccountingDatabaseSpec(
            endpoint=adb["endpoint"], secret_arn=adb["secret_arn"], port=adb.get("port"), name=adb.get("name")),
        extras=dict(d.get("extras") or {}),
        topology_source=d.get("topology_source") or "api",
    )
