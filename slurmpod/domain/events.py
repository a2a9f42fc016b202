"""Cluster event construction: HyperPod's description templates, pure (ids and time are passed in)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slurmpod.domain.model import ClusterRecord, EventRecord
from slurmpod.domain.status import EventLevel, ResourceType


@dataclass(frozen=True)
class EventDraft:
    """An event before it gets an id and a time (plan functions return drafts)."""

    resource_type: ResourceType
    level: EventLevel
    description: str
    group: str | None = None
    instance_id: str | None = None
    details: Mapping[str, Any] | None = None


def finish(draft: EventDraft, cluster: ClusterRecord, event_id: str, now: float) -> EventRecord:
    return EventRecord(
        event_id=event_id,
        cluster_id=cluster.cluster_id,
        cluster_name=cluster.name,
        cluster_arn=cluster.arn,
        resource_type=draft.resource_type,
        level=draft.level,
        description=draft.description,
        event_time=now,
        group=draft.group,
        instance_id=draft.instance_id,
        operation_id=cluster.operation_id,
        details=dict(draft.details or {}),
    )


def cluster_event(cluster_name: str, operation: str, outcome: str, *, level: EventLevel = EventLevel.INFO,
                  failure: str | None = None) -> EventDraft:
    """``Cluster <c> <operation> started successfully`` / ``completed successfully`` / ``failed``."""
    text = {
        "started": f"Cluster {cluster_name} {operation} started successfully",
        "completed": f"Cluster {cluster_name} {operation} completed successfully",
        "failed": f"Cluster {cluster_name} {operation} failed",
    }[outcome]
    details = {"FailureMessage": failure} if failure else None
    return EventDraft(ResourceType.CLUSTER, level, text, details=details)


def group_event(cluster_name: str, group: str, operation: str, outcome: str, *,
                level: EventLevel = EventLevel.INFO, failure: str | None = None) -> EventDraft:
    text = {
        "started": f"InstanceGroup {group} {operation} started successfully in Cluster {cluster_name}",
        "completed": f"Instance Group {group} {operation} in Cluster {cluster_name} completed successfully",
        "failed": f"Instance Group {group} {operation} in Cluster {cluster_name} failed",
    }[outcome]
    details = {"FailureMessage": failure} if failure else None
    return EventDraft(ResourceType.INSTANCE_GROUP, level, text, group=group, details=details)


def instance_event(description: str, group: str, instance_id: str | None, *,
                   level: EventLevel = EventLevel.INFO, failure: str | None = None) -> EventDraft:
    details = {"FailureMessage": failure} if failure else None
    return EventDraft(ResourceType.INSTANCE, level, description, group=group, instance_id=instance_id,
                      details=details)


def instance_provisioned(cluster_name: str, group: str, instance_id: str) -> EventDraft:
    return instance_event(
        f"EC2 Instance {instance_id} successfully provisioned in Cluster {cluster_name} and IG {group}",
        group, instance_id)


def instance_failed(cluster_name: str, group: str, instance_id: str, failure: str) -> EventDraft:
    return instance_event(
        f"Instance creation in Cluster {cluster_name} and InstanceGroup {group} failed",
        group, instance_id, level=EventLevel.ERROR, failure=failure)


def instance_terminating(cluster_name: str, group: str, instance_id: str) -> EventDraft:
    return instance_event(
        f"Termination of EC2 Instance {instance_id} is currently in progress in Cluster {cluster_name} "
        f"and IG {group}", group, instance_id)
