"""Persisted records: what the store keeps about clusters, nodes and events (pure dataclasses)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmpod.domain.spec import ClusterSpec
from slurmpod.domain.status import ClusterStatus, EventLevel, InstanceGroupStatus, InstanceStatus, ResourceType

# Internal boot phases of a node, in order. A node records the phases it has completed so a restarted
# server resumes a half-booted node instead of repeating (or skipping) a step.
PHASES = ("launched", "baseline", "on_create", "daemons", "joined", "on_init_complete")


@dataclass(frozen=True)
class GroupState:
    """Per-group progress of a Continuous cluster (HyperPod's MinCount semantics).

    ``status`` is Creating (new group) or Updating (counts changed) until CurrentCount >= MinCount, then
    InService. ``since`` starts the MinCount deadline; ``good_count``/``good_min`` are the counts of the last
    InService state (None for a group that never was InService: it rolls back to (0, 0)).
    """

    status: InstanceGroupStatus
    since: float
    good_count: int | None = None
    good_min: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "since": self.since, "good_count": self.good_count,
                "good_min": self.good_min}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> GroupState:
        return GroupState(InstanceGroupStatus(d["status"]), float(d["since"]), d.get("good_count"),
                          d.get("good_min"))


@dataclass(frozen=True)
class BatchPolicy:
    """``CapacitySizeConfig``: INSTANCE_COUNT n, or CAPACITY_PERCENTAGE p of the nodes being updated."""

    kind: str = "INSTANCE_COUNT"
    value: int = 1

    def size(self, total: int) -> int:
        if self.kind == "CAPACITY_PERCENTAGE":
            return max(1, (total * self.value + 99) // 100)
        return max(1, self.value)


@dataclass(frozen=True)
class SoftwareUpdate:
    """One UpdateClusterSoftware operation (root-volume replacement, rolling).

    ``phase`` is ``update`` then, if a node fails, ``rollback`` (back to each node's previous image).
    ``done`` maps updated instance ids to the image they had before; ``failed`` maps ids to the failure.
    """

    operation_id: str
    target_image: str
    groups: tuple[str, ...]
    batch: BatchPolicy
    rollback_batch: BatchPolicy
    wait_seconds: int
    started: float
    phase: str = "update"
    done: Mapping[str, str] = field(default_factory=dict, hash=False)
    failed: Mapping[str, str] = field(default_factory=dict, hash=False)
    last_batch_end: float = 0.0
    batches: int = 0
    config: Mapping[str, Any] = field(default_factory=dict, hash=False)  # DeploymentConfig as requested

    def to_dict(self) -> dict[str, Any]:
        return {
            "operation_id": self.operation_id, "target_image": self.target_image, "groups": list(self.groups),
            "batch": [self.batch.kind, self.batch.value],
            "rollback_batch": [self.rollback_batch.kind, self.rollback_batch.value],
            "wait_seconds": self.wait_seconds, "started": self.started, "phase": self.phase,
            "done": dict(self.done), "failed": dict(self.failed), "last_batch_end": self.last_batch_end,
            "batches": self.batches, "config": dict(self.config),
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> SoftwareUpdate:
        return SoftwareUpdate(
            operation_id=d["operation_id"], target_image=d["target_image"], groups=tuple(d["groups"]),
            batch=BatchPolicy(*d["batch"]), rollback_batch=BatchPolicy(*d["rollback_batch"]),
            wait_seconds=int(d["wait_seconds"]), started=float(d["started"]), phase=d.get("phase", "update"),
            done=dict(d.get("done") or {}), failed=dict(d.get("failed") or {}),
            last_batch_end=float(d.get("last_batch_end") or 0.0), batches=int(d.get("batches") or 0),
            config=dict(d.get("config") or {}),
        )


@dataclass(frozen=True)
class ClusterRecord:
    cluster_id: str
    account_id: str
    region: str
    name: str
    arn: str
    spec: ClusterSpec
    status: ClusterStatus
    creation_time: float
    last_good_spec: ClusterSpec | None = None
    failure_message: str | None = None
    operation_id: str | None = None
    applied_topology: str | None = None  # digest of the slurm.conf topology the controllers run
    generation: int = 1
    version: int = 1
    lifecycle_snapshots: Mapping[str, str] = field(default_factory=dict, hash=False)  # group -> digest
    provider: str = "simulated"
    group_states: Mapping[str, GroupState] = field(default_factory=dict, hash=False)
    software_update: SoftwareUpdate | None = None
    # per group: outcome of the last software update (SoftwareUpdateStatus) for DescribeCluster
    software_update_status: Mapping[str, str] = field(default_factory=dict, hash=False)
    # per group with a ScheduledUpdateConfig: {"expression": str, "since": float, "last_fired": float | None}
    schedules: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class NodeRecord:
    instance_id: str
    cluster_id: str
    group: str
    seq: int  # launch order within the cluster: newest = highest
    status: InstanceStatus
    launch_time: float
    message: str | None = None
    ip: str | None = None
    hostname: str | None = None
    logical_id: str | None = None
    image_id: str | None = None
    image_release: str | None = None
    lifecycle_digest: str | None = None
    last_software_update_time: float | None = None
    phases: tuple[str, ...] = ()
    attempts: int = 0
    next_attempt: float = 0.0
    data: Mapping[str, Any] = field(default_factory=dict, hash=False)
    version: int = 1

    @property
    def active(self) -> bool:
        """Counts towards its group: not being removed."""
        return self.status not in (InstanceStatus.SHUTTING_DOWN, InstanceStatus.NOT_FOUND)


@dataclass(frozen=True)
class EventRecord:
    event_id: str
    cluster_id: str
    cluster_name: str
    cluster_arn: str
    resource_type: ResourceType
    level: EventLevel
    description: str
    event_time: float
    group: str | None = None
    instance_id: str | None = None
    operation_id: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict, hash=False)
    seq: int = 0
