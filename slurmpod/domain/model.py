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
