"""Cluster event construction: HyperPod's description templates, pure (ids and time are passed in).

Every AWS-worded event description slurmpod writes is built here, so the wording lives in one place and the
reconciler, the service and the planners only pick the template. ``Notification`` is the typed value a
webhook delivers (``slurmpod.notify`` wraps it in its SNS-shaped envelope).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from slurmpod.domain.model import ClusterRecord, EventDetails, EventRecord, GroupScaling
from slurmpod.domain.status import EventLevel, ResourceType, UpdatePhase

__all__ = ["EventDetails", "EventLevel", "GroupScaling", "ResourceType"]


@dataclass(frozen=True)
class EventDraft:
    """An event before it gets an id and a time (plan functions return drafts).

    ``details`` is an ``EventDetails``; a Mapping (the older wire-keyed form, e.g. ``{"FailureMessage": m}``)
    is still accepted and converted by :func:`finish`."""

    resource_type: ResourceType
    level: EventLevel
    description: str
    group: str | None = None
    instance_id: str | None = None
    details: EventDetails | Mapping[str, Any] | None = None


def as_details(details: EventDetails | Mapping[str, Any] | None) -> EventDetails:
    if isinstance(details, EventDetails):
        return details
    return EventDetails.from_dict(details)


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
        details=as_details(draft.details),
    )


def _failure(failure: str | None) -> EventDetails | None:
    return EventDetails(failure_message=failure) if failure else None


# ---- generic templates ---------------------------------------------------------------------------


def cluster_event(cluster_name: str, operation: str, outcome: str, *, level: EventLevel = EventLevel.INFO,
                  failure: str | None = None) -> EventDraft:
    """``Cluster <c> <operation> started successfully`` / ``completed successfully`` / ``failed``."""
    text = {
        "started": f"Cluster {cluster_name} {operation} started successfully",
        "completed": f"Cluster {cluster_name} {operation} completed successfully",
        "failed": f"Cluster {cluster_name} {operation} failed",
    }[outcome]
    return EventDraft(ResourceType.CLUSTER, level, text, details=_failure(failure))


def group_event(cluster_name: str, group: str, operation: str, outcome: str, *,
                level: EventLevel = EventLevel.INFO, failure: str | None = None) -> EventDraft:
    text = {
        "started": f"InstanceGroup {group} {operation} started successfully in Cluster {cluster_name}",
        "completed": f"Instance Group {group} {operation} in Cluster {cluster_name} completed successfully",
        "failed": f"Instance Group {group} {operation} in Cluster {cluster_name} failed",
    }[outcome]
    return EventDraft(ResourceType.INSTANCE_GROUP, level, text, group=group, details=_failure(failure))


def instance_event(description: str, group: str, instance_id: str | None, *,
                   level: EventLevel = EventLevel.INFO, failure: str | None = None) -> EventDraft:
    return EventDraft(ResourceType.INSTANCE, level, description, group=group, instance_id=instance_id,
                      details=_failure(failure))


def _group_note(text: str, group: str, level: EventLevel = EventLevel.INFO) -> EventDraft:
    return EventDraft(ResourceType.INSTANCE_GROUP, level, text, group=group)


def _cluster_note(text: str, level: EventLevel = EventLevel.INFO, failure: str | None = None) -> EventDraft:
    return EventDraft(ResourceType.CLUSTER, level, text, details=_failure(failure))


# ---- instances: creation, boot, removal ------------------------------------------------------------


def instance_creation_started(cluster_name: str, group: str) -> EventDraft:
    return instance_event(f"Instance creation started successfully in Cluster {cluster_name} and IG {group}",
                          group, None)


def instance_provisioned(cluster_name: str, group: str, instance_id: str) -> EventDraft:
    return instance_event(
        f"EC2 Instance {instance_id} successfully provisioned in Cluster {cluster_name} and IG {group}",
        group, instance_id)


def instance_failed(cluster_name: str, group: str, instance_id: str, failure: str) -> EventDraft:
    return instance_event(
        f"Instance creation in Cluster {cluster_name} and InstanceGroup {group} failed",
        group, instance_id, level=EventLevel.ERROR, failure=failure)


def instance_launch_retry(cluster_name: str, group: str, instance_id: str, delay: float, failure: str) -> EventDraft:
    """Continuous mode: a failed launch is retried after ``delay`` seconds."""
    return instance_event(f"Instance launch in Cluster {cluster_name} and IG {group} will be retried in "
                          f"{int(delay)} s", group, instance_id, level=EventLevel.WARN, failure=failure)


def lifecycle_script_completed(group: str, instance_id: str, script: str, digest: str | None) -> EventDraft:
    return instance_event(f"Instance lifecycle script execution for EC2 Instance {instance_id} has Completed "
                          f"({script} from {digest})", group, instance_id)


def instance_terminating(cluster_name: str, group: str, instance_id: str) -> EventDraft:
    return instance_event(
        f"Termination of EC2 Instance {instance_id} is currently in progress in Cluster {cluster_name} "
        f"and IG {group}", group, instance_id)


def jobs_text(jobs: Sequence[str]) -> str:
    """Job ids for an event: the first 20, then how many more."""
    return ", ".join(jobs[:20]) + (f" and {len(jobs) - 20} more" if len(jobs) > 20 else "")


def drain_waiting(group: str, instance_id: str, jobs: Sequence[str], timeout: float, *, removal: bool) -> EventDraft:
    """A drained node runs jobs: slurmpod waits up to ``timeout`` before removing it / replacing its root volume."""
    then = "it is removed" if removal else "its root volume is replaced"
    return instance_event(f"Instance {instance_id} in IG {group} runs job(s) {jobs_text(jobs)}: drained, waiting up "
                          f"to {int(timeout)} s for them to end before {then}", group, instance_id)


def drain_timed_out(group: str, instance_id: str, jobs: Sequence[str], timeout: float, *,
                    removal: bool) -> EventDraft:
    """Jobs still ran after the drain timeout: removing the node / replacing its root volume ends them."""
    what = jobs_text(jobs) or "(unknown)"
    if removal:
        text = (f"Instance {instance_id} in IG {group}: job(s) {what} still running after the drain timeout "
                f"({int(timeout)} s) were ended to remove it")
    else:
        text = (f"Instance {instance_id} in IG {group}: job(s) {what} still running after the drain timeout "
                f"({int(timeout)} s); replacing the root volume ends them")
    return instance_event(text, group, instance_id, level=EventLevel.WARN)


def removed_with_jobs(group: str, instance_id: str, jobs: Sequence[str], why: str) -> EventDraft:
    """A node removed without a drain wait (``why``: the cluster is deleted, its creation failed)."""
    return instance_event(f"Instance {instance_id} in IG {group} is removed with job(s) {jobs_text(jobs)} running: "
                          f"{why}", group, instance_id, level=EventLevel.WARN)


def instance_leaked(cluster_name: str, instance_id: str) -> EventDraft:
    """A provider instance no record owns was terminated (the leak guard)."""
    return EventDraft(ResourceType.INSTANCE, EventLevel.WARN,
                      f"Instance {instance_id} runs in Cluster {cluster_name} but no record of slurmpod owns it "
                      "(leaked); it was terminated", instance_id=instance_id)


# ---- node operations and health --------------------------------------------------------------------


def node_op_failed(cluster_name: str, group: str, instance_id: str, op: str, failure: str) -> EventDraft:
    """A reboot or refresh (``op``) of a node failed."""
    return instance_event(f"Instance {op} {instance_id} in Cluster {cluster_name} and IG {group} failed",
                          group, instance_id, level=EventLevel.ERROR, failure=failure)


def instance_unhealthy(group: str, instance_id: str, *, automatic: bool) -> EventDraft:
    """A dead instance: NodeRecovery Automatic reboots it, None leaves it (Failure) to the operator."""
    if automatic:
        return instance_event(f"Instance {instance_id} in IG {group} is unhealthy (its processes are gone); "
                              "NodeRecovery Automatic is rebooting it", group, instance_id, level=EventLevel.WARN)
    return instance_event(f"Instance {instance_id} in IG {group} is unhealthy; NodeRecovery is None, so it is left "
                          "to the operator", group, instance_id, level=EventLevel.ERROR)


def slurm_requested(group: str, instance_id: str, action: str) -> EventDraft:
    """Slurm's ``Action:Replace`` / ``Action:Reboot`` reason on an idle node."""
    return instance_event(f"Slurm asked to {action.lower()} instance {instance_id} in IG {group} "
                          f"(Action:{action}); its jobs have ended", group, instance_id)


def health_fault(group: str, instance_id: str, host: str, fault: str, detail: str, action: str, *,
                 automatic: bool) -> EventDraft:
    """A node's health agent found a fault and marked the node ``Action:<action>`` in Slurm (HyperPod's HMA
    wording)."""
    seen = f" ({detail})" if detail else ""
    text = (f"Instance {instance_id} ({host}) is unhealthy. The health monitoring agent has detected fault type "
            f"{fault} on this node{seen} and marked it Action:{action} in Slurm. ")
    if automatic:
        return instance_event(text + f"Repair action: {action}.", group, instance_id, level=EventLevel.WARN)
    return instance_event(text + "NodeRecovery is None: the node stays marked for the operator.", group,
                          instance_id, level=EventLevel.ERROR)


def fault_injected(group: str, instance_id: str, host: str, kind: str, *, duration: float | None) -> EventDraft:
    """``slurmpod faults inject``: a rehearsal fault, said in the cluster's events so the story reads whole."""
    lasting = f" for {duration:.0f} s" if duration else ""
    return instance_event(f"Fault {kind} injected into instance {instance_id} ({host}){lasting} with "
                          "`slurmpod faults inject` (a rehearsal)", group, instance_id, level=EventLevel.WARN)


def replacement_started(cluster_name: str, group: str, instance_id: str) -> EventDraft:
    """A node is being replaced (BatchReplaceClusterNodes, Slurm's ``Action:Replace``): HyperPod's wording."""
    return instance_event(f"Instance {instance_id} is starting as part of instance replacement in Cluster "
                          f"{cluster_name} and IG {group}", group, instance_id)


def successor_created(cluster_name: str, group: str, instance_id: str, predecessor: str, address: str,
                      hostname: str | None) -> EventDraft:
    """The new instance that replaces ``predecessor`` keeps its address and hostname (and so its Slurm NodeName)."""
    host = f"hostname {hostname} and " if hostname else ""
    return instance_event(
        f"Instance {instance_id} replaces Instance {predecessor} in Cluster {cluster_name} and IG {group}: it keeps "
        f"{host}address {address} and boots once {predecessor} is terminated", group, instance_id)


def service_health(text: str, *, restored: bool) -> EventDraft:
    """A cluster service (the accounting host) was restored (Warn) or could not be (Error)."""
    return _cluster_note(text, EventLevel.WARN if restored else EventLevel.ERROR)


class NotificationKind(str, Enum):
    CONTROLLER_DOWN = "ControllerDown"
    CONTROLLER_UP = "ControllerUp"


@dataclass(frozen=True)
class Notification:
    """What a cluster's webhooks are told (besides the cluster itself)."""

    kind: NotificationKind
    instance_id: str
    hostname: str
    description: str


def controller_up(cluster_name: str, group: str, instance_id: str, host: str, *,
                  primary: bool) -> tuple[EventDraft, Notification]:
    """A controller came back: as the primary again (first in SlurmctldHost order) or as a backup."""
    text = (f"Slurm controller {host} (instance {instance_id}) in Cluster {cluster_name} is back"
            + (" and serves as primary again" if primary else " as a backup"))
    return (instance_event(text, group, instance_id),
            Notification(NotificationKind.CONTROLLER_UP, instance_id, host, text))


def controller_down(cluster_name: str, group: str, instance_id: str, host: str, *,
                    backup: str | None) -> tuple[EventDraft, Notification]:
    """A controller went down; ``backup`` is the hostname of the Running controller that takes over, if any."""
    text = (f"Slurm controller {host} (instance {instance_id}) in Cluster {cluster_name} is down; "
            + (f"backup controller {backup} takes over" if backup else "no backup controller serves"))
    level = EventLevel.WARN if backup else EventLevel.ERROR
    return (instance_event(text, group, instance_id, level=level),
            Notification(NotificationKind.CONTROLLER_DOWN, instance_id, host, text))


# ---- topology ---------------------------------------------------------------------------------------


def slurm_reconfigured() -> EventDraft:
    return _cluster_note("Slurm was reconfigured successfully. Slurm config updated to match desired state")


def drift_message(drift: Sequence[str]) -> str:
    """The cluster's FailureMessage when a Managed update finds configuration drift."""
    return f"Configuration drift detected. {'; '.join(drift)}"


def drift_detected(drift: Sequence[str]) -> EventDraft:
    return _cluster_note(f"Slurm configuration drift detected: {'; '.join(drift)}", EventLevel.ERROR,
                         failure=drift_message(drift))


# ---- Continuous provisioning: MinCount ---------------------------------------------------------------


def min_capacity_reached(cluster_name: str, group: str, running: int, target: int, minimum: int) -> EventDraft:
    return EventDraft(
        ResourceType.INSTANCE_GROUP, EventLevel.INFO,
        f"Minimum capacity reached for InstanceGroup {group} in Cluster {cluster_name} "
        f"({running}/{target} instances, MinCount {minimum})",
        group=group, details=EventDetails(scaling=GroupScaling(running, target, minimum)))


def min_count_rollback(cluster_name: str, group: str, count: int, target: int, minimum: int, restored_min: int,
                       failure: str) -> EventDraft:
    """MinCount was not reached in time: the group goes back to ``count`` instances and MinCount ``restored_min``."""
    return EventDraft(
        ResourceType.INSTANCE_GROUP, EventLevel.WARN,
        f"Rollback initiated for InstanceGroup {group} in Cluster {cluster_name}: restoring InstanceCount "
        f"{count} and MinCount {restored_min}", group=group,
        details=EventDetails(failure_message=failure, scaling=GroupScaling(count, target, minimum)))


# ---- software updates ----------------------------------------------------------------------------------


def software_update_initiated(cluster_name: str, group: str) -> EventDraft:
    return _group_note(f"UpdateClusterSoftware initiated for IG {group} in Cluster {cluster_name} using rolling "
                       "strategy.", group)


def software_update_scheduled(cluster_name: str, group: str) -> EventDraft:
    return _group_note(f"InstanceGroup {group} in Cluster {cluster_name} has been scheduled for "
                       "UpdateClusterSoftware to latest.", group)


def update_batch_selected(cluster_name: str, group: str, phase: UpdatePhase) -> EventDraft:
    if phase == UpdatePhase.ROLLBACK:
        return _group_note(f"Next rollback batch selected for IG {group} in Cluster {cluster_name}.", group,
                           EventLevel.WARN)
    return _group_note(f"Next update batch selected for IG {group} in Cluster {cluster_name}.", group)


def software_update_rollback_initiated(cluster_name: str, group: str) -> EventDraft:
    return _group_note(f"UpdateClusterSoftware failed for IG {group} in Cluster {cluster_name}. Initiating rollback.",
                       group, EventLevel.ERROR)


def software_update_completed(cluster_name: str, group: str) -> EventDraft:
    return _group_note(f"UpdateClusterSoftware completed successfully for IG {group} in Cluster {cluster_name}.",
                       group)


def software_update_rolled_back(cluster_name: str, group: str) -> EventDraft:
    return _group_note(f"Rollback of UpdateClusterSoftware completed for IG {group} in Cluster {cluster_name}.",
                       group, EventLevel.WARN)


def software_update_rollback_failed(cluster_name: str, group: str) -> EventDraft:
    return _group_note(f"Rollback failed for IG {group} in Cluster {cluster_name}. Some instances may be in "
                       "FailedMaintenance state.", group, EventLevel.ERROR)


def root_volume_replacement_started(group: str, instance_id: str) -> EventDraft:
    return instance_event(f"Root volume replacement started for Instance {instance_id} in IG {group}.",
                          group, instance_id)


def instance_software_updated(group: str, instance_id: str, phase: UpdatePhase) -> EventDraft:
    """A node finished its replacement: onto the target image (update) or back to its previous one (rollback)."""
    if phase == UpdatePhase.ROLLBACK:
        return instance_event(f"Instance {instance_id} in IG {group} rolled back successfully to previous AMI.",
                              group, instance_id)
    return instance_event(f"Instance {instance_id} in IG {group} updated successfully.", group, instance_id)


def instance_software_update_failed(group: str, instance_id: str, phase: UpdatePhase, failure: str) -> EventDraft:
    if phase == UpdatePhase.ROLLBACK:
        text = f"UpdateClusterSoftware rollback failed for instance {instance_id} in IG {group}."
    else:
        text = f"Instance {instance_id} in IG {group} failed to update. Rollback initiated."
    return instance_event(text, group, instance_id, level=EventLevel.ERROR, failure=failure)


# ---- deep health checks -------------------------------------------------------------------------------------


def dhc_requested(cluster_name: str, group: str, checks: Sequence[str], count: int) -> EventDraft:
    """StartClusterHealthCheck accepted for ``count`` instances of a group."""
    return _group_note(f"On-demand deep health checks ({', '.join(checks)}) requested for {count} instance(s) of "
                       f"IG {group} in Cluster {cluster_name}", group)


def dhc_started(group: str, instance_id: str, checks: Sequence[str]) -> EventDraft:
    return instance_event(f"Deep health checks ({', '.join(checks)}) started on Instance {instance_id} in IG {group}",
                          group, instance_id)


def dhc_passed(group: str, instance_id: str, seconds: float) -> EventDraft:
    return instance_event(f"Deep health checks passed on Instance {instance_id} in IG {group} "
                          f"({seconds:.0f} s); it serves its partitions", group, instance_id)


def dhc_failed(group: str, instance_id: str, failure: str) -> EventDraft:
    """HyperPod's failure wording ("Encountered FaultyInstance. Replace the Instance."), the cause as details."""
    return instance_event(f"Deep health checks failed on Instance {instance_id} in IG {group}: Encountered "
                          "FaultyInstance. Replace the Instance.", group, instance_id, level=EventLevel.ERROR,
                          failure=failure)


def dhc_skipped(group: str, instance_id: str, jobs: Sequence[str], timeout: float) -> EventDraft:
    return instance_event(f"Deep health checks skipped on Instance {instance_id} in IG {group}: its running "
                          f"jobs ({jobs_text(jobs)}) did not complete within {timeout / 60:g} minutes", group,
                          instance_id, level=EventLevel.WARN)
