"""Persisted records: what the store keeps about clusters, nodes and events (pure dataclasses)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmpod.domain import stored_v1
from slurmpod.domain.spec import CapacitySize, ClusterSpec, DeploymentSpec, deployment_from_dict, deployment_to_dict
from slurmpod.domain.status import (
    ClusterStatus,
    EventLevel,
    InstanceGroupStatus,
    InstanceStatus,
    ResourceType,
    SoftwareUpdateStatus,
    UpdatePhase,
)

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
class SoftwareUpdate:
    """One UpdateClusterSoftware operation (root-volume replacement, rolling).

    ``phase`` is ``update`` then, if a node fails, ``rollback`` (back to each node's previous image).
    ``done`` maps updated instance ids to the image they had before; ``failed`` maps ids to the failure.
    ``deployment`` is the deployment configuration as requested (echoed as ActiveSoftwareUpdateConfig);
    ``batch``/``rollback_batch``/``wait_seconds`` are its effective values.
    """

    operation_id: str
    target_image: str
    groups: tuple[str, ...]
    deployment: DeploymentSpec
    started: float
    phase: UpdatePhase = UpdatePhase.UPDATE
    done: Mapping[str, str] = field(default_factory=dict, hash=False)
    failed: Mapping[str, str] = field(default_factory=dict, hash=False)
    last_batch_end: float = 0.0
    batches: int = 0
    #: the target image carries a later Slurm major release than the nodes run: controllers go first (slurmdbd
    #: before them, see the accounting host), compute and login nodes after, as SchedMD's upgrade order says
    slurm_upgrade: bool = False

    @property
    def batch(self) -> CapacitySize:
        return self.deployment.effective_batch

    @property
    def rollback_batch(self) -> CapacitySize:
        return self.deployment.effective_rollback_batch

    @property
    def wait_seconds(self) -> int:
        return self.deployment.effective_wait_seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "operation_id": self.operation_id, "target_image": self.target_image, "groups": list(self.groups),
            "deployment": deployment_to_dict(self.deployment), "started": self.started, "phase": self.phase.value,
            "done": dict(self.done), "failed": dict(self.failed), "last_batch_end": self.last_batch_end,
            "batches": self.batches, "slurm_upgrade": self.slurm_upgrade,
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> SoftwareUpdate:
        """Also reads rows written before ``deployment`` existed (the raw wire ``config``)."""
        dep = d["deployment"] if "deployment" in d else stored_v1.deployment(d.get("config"))
        return SoftwareUpdate(
            operation_id=d["operation_id"], target_image=d["target_image"], groups=tuple(d["groups"]),
            deployment=deployment_from_dict(dep), started=float(d["started"]),
            phase=UpdatePhase(d.get("phase") or UpdatePhase.UPDATE.value),
            done=dict(d.get("done") or {}), failed=dict(d.get("failed") or {}),
            last_batch_end=float(d.get("last_batch_end") or 0.0), batches=int(d.get("batches") or 0),
            slurm_upgrade=bool(d.get("slurm_upgrade", False)),
        )


def software_update_status_from_dict(d: Mapping[str, Any]) -> dict[str, SoftwareUpdateStatus]:
    return {str(g): SoftwareUpdateStatus(v) for g, v in d.items()}


@dataclass(frozen=True)
class ClusterSummary:
    """What ListClusters shows of a cluster (read without its spec: a page of 100 out of 1,000 clusters parsed all
    1,000 specs)."""

    cluster_id: str
    name: str
    arn: str
    status: ClusterStatus
    creation_time: float


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
    # per group: outcome of the last software update, for DescribeCluster
    software_update_status: Mapping[str, SoftwareUpdateStatus] = field(default_factory=dict, hash=False)
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
class GroupScaling:
    """An instance group's counts when an event about its capacity was written."""

    instance_count: int
    target_count: int
    min_count: int


@dataclass(frozen=True)
class EventDetails:
    """What an event carries besides its description (its metadata on the wire)."""

    failure_message: str | None = None
    scaling: GroupScaling | None = None

    def __bool__(self) -> bool:
        return self.failure_message is not None or self.scaling is not None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.failure_message is not None:
            out["failure_message"] = self.failure_message
        if self.scaling is not None:
            s = self.scaling
            out["scaling"] = {"instance_count": s.instance_count, "target_count": s.target_count,
                              "min_count": s.min_count}
        return out

    @staticmethod
    def from_dict(d: Mapping[str, Any] | None) -> EventDetails:
        """Tolerant: also reads the wire-keyed details of rows written before EventDetails existed."""
        if not d:
            return NO_DETAILS
        if not ({"failure_message", "scaling"} & d.keys()):
            d = stored_v1.event_details(d)
        s = d.get("scaling")
        scaling = None
        if isinstance(s, Mapping) and {"instance_count", "target_count", "min_count"} <= s.keys():
            scaling = GroupScaling(int(s["instance_count"]), int(s["target_count"]), int(s["min_count"]))
        message = d.get("failure_message")
        return EventDetails(message if isinstance(message, str) else None, scaling)


NO_DETAILS = EventDetails()


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
    details: EventDetails = NO_DETAILS
    seq: int = 0
