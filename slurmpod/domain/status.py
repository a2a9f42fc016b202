"""Status enums (values are the wire strings from the botocore model) and transition tables."""

from __future__ import annotations

from enum import Enum


class ClusterStatus(str, Enum):
    CREATING = "Creating"
    UPDATING = "Updating"
    SYSTEM_UPDATING = "SystemUpdating"
    IN_SERVICE = "InService"
    ROLLING_BACK = "RollingBack"
    FAILED = "Failed"
    DELETING = "Deleting"


class InstanceGroupStatus(str, Enum):
    CREATING = "Creating"
    UPDATING = "Updating"
    SYSTEM_UPDATING = "SystemUpdating"
    IN_SERVICE = "InService"
    DEGRADED = "Degraded"
    FAILED = "Failed"
    DELETING = "Deleting"


class InstanceStatus(str, Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    SYSTEM_UPDATING = "SystemUpdating"
    SHUTTING_DOWN = "ShuttingDown"
    FAILURE = "Failure"
    DEEP_HEALTH_CHECK_IN_PROGRESS = "DeepHealthCheckInProgress"
    NOT_FOUND = "NotFound"


class ImageVersionStatus(str, Enum):
    UP_TO_DATE = "UpToDate"
    UPDATE_AVAILABLE = "UpdateAvailable"
    SECURITY_UPDATE_REQUIRED = "SecurityUpdateRequired"
    END_OF_LIFE = "EndOfLife"


class NodeType(str, Enum):
    CONTROLLER = "Controller"
    LOGIN = "Login"
    COMPUTE = "Compute"


class SlurmConfigStrategy(str, Enum):
    MANAGED = "Managed"
    OVERWRITE = "Overwrite"
    MERGE = "Merge"


class EventLevel(str, Enum):
    INFO = "Info"
    WARN = "Warn"
    ERROR = "Error"


class ResourceType(str, Enum):
    CLUSTER = "Cluster"
    INSTANCE_GROUP = "InstanceGroup"
    INSTANCE = "Instance"


class SoftwareUpdateStatus(str, Enum):
    """Per group: the state of its last (or running) UpdateClusterSoftware."""

    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ROLLBACK_IN_PROGRESS = "RollbackInProgress"
    ROLLBACK_COMPLETE = "RollbackComplete"


class UpdatePhase(str, Enum):
    """A software update replaces nodes onto the target image, then, if a node failed, back (rollback)."""

    UPDATE = "update"
    ROLLBACK = "rollback"


class InvalidTransitionError(Exception):
    """A status change the transition table forbids: a programming error, never user input."""


CLUSTER_TRANSITIONS: dict[ClusterStatus, frozenset[ClusterStatus]] = {
    ClusterStatus.CREATING: frozenset(
        {ClusterStatus.IN_SERVICE, ClusterStatus.ROLLING_BACK, ClusterStatus.FAILED, ClusterStatus.DELETING}
    ),
    ClusterStatus.UPDATING: frozenset(
        {ClusterStatus.IN_SERVICE, ClusterStatus.ROLLING_BACK, ClusterStatus.DELETING}
    ),
    ClusterStatus.SYSTEM_UPDATING: frozenset(
        {ClusterStatus.IN_SERVICE, ClusterStatus.ROLLING_BACK, ClusterStatus.DELETING}
    ),
    ClusterStatus.IN_SERVICE: frozenset(
        {ClusterStatus.UPDATING, ClusterStatus.SYSTEM_UPDATING, ClusterStatus.DELETING}
    ),
    ClusterStatus.ROLLING_BACK: frozenset(
        {ClusterStatus.FAILED, ClusterStatus.IN_SERVICE, ClusterStatus.DELETING}
    ),
    ClusterStatus.FAILED: frozenset({ClusterStatus.DELETING}),
    ClusterStatus.DELETING: frozenset(),
}

INSTANCE_TRANSITIONS: dict[InstanceStatus, frozenset[InstanceStatus]] = {
    InstanceStatus.PENDING: frozenset(
        {InstanceStatus.RUNNING, InstanceStatus.FAILURE, InstanceStatus.SHUTTING_DOWN,
         InstanceStatus.DEEP_HEALTH_CHECK_IN_PROGRESS}
    ),
    InstanceStatus.RUNNING: frozenset(
        {
            InstanceStatus.SYSTEM_UPDATING,
            InstanceStatus.SHUTTING_DOWN,
            InstanceStatus.FAILURE,
            InstanceStatus.PENDING,
            InstanceStatus.DEEP_HEALTH_CHECK_IN_PROGRESS,
        }
    ),
    InstanceStatus.SYSTEM_UPDATING: frozenset(
        {InstanceStatus.RUNNING, InstanceStatus.FAILURE, InstanceStatus.SHUTTING_DOWN}
    ),
    InstanceStatus.DEEP_HEALTH_CHECK_IN_PROGRESS: frozenset(
        {InstanceStatus.RUNNING, InstanceStatus.FAILURE, InstanceStatus.SHUTTING_DOWN}
    ),
    InstanceStatus.FAILURE: frozenset({InstanceStatus.SHUTTING_DOWN, InstanceStatus.PENDING}),
    InstanceStatus.SHUTTING_DOWN: frozenset({InstanceStatus.NOT_FOUND}),
    InstanceStatus.NOT_FOUND: frozenset(),
}


def check_cluster_transition(old: ClusterStatus, new: ClusterStatus) -> None:
    if old != new and new not in CLUSTER_TRANSITIONS[old]:
        raise InvalidTransitionError(f"cluster status {old.value} -> {new.value} is not allowed")


def check_instance_transition(old: InstanceStatus, new: InstanceStatus) -> None:
    if old != new and new not in INSTANCE_TRANSITIONS[old]:
        raise InvalidTransitionError(f"instance status {old.value} -> {new.value} is not allowed")
