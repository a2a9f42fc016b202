"""Rolling software updates by root-volume replacement (pure planning).

While a cluster is SystemUpdating, every pass asks: is a batch in flight? (resubmit its nodes' work after a
restart); did a node fail? (switch to rollback: every updated node goes back to its previous image, in
batches of RollbackMaximumBatchSize); else, after WaitIntervalInSeconds, select the next batch of at most
MaximumBatchSize nodes (compute and login groups first, the controller group last; the controllers first when the
target is a later Slurm major release); when nothing is left,
the cluster returns to InService.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from slurmpod.domain import events as ev
from slurmpod.domain.continuous import group_busy
from slurmpod.domain.model import ClusterRecord, NodeRecord, SoftwareUpdate
from slurmpod.domain.software import deployment_of, due_schedules
from slurmpod.domain.spec import DeploymentSpec
from slurmpod.domain.status import ClusterStatus, InstanceStatus, NodeType, SoftwareUpdateStatus, UpdatePhase


@dataclass(frozen=True)
class StartNodeUpdates:
    """Mark these nodes for replacement onto ``image`` (recording where each comes from) and record ``update``."""

    instance_ids: tuple[str, ...]
    image: str
    update: SoftwareUpdate
    events: tuple[ev.EventDraft, ...] = ()


@dataclass(frozen=True)
class ResumeNodeUpdate:
    instance_id: str


@dataclass(frozen=True)
class SetSoftwareUpdate:
    update: SoftwareUpdate
    events: tuple[ev.EventDraft, ...] = ()


@dataclass(frozen=True)
class FinishSoftwareUpdate:
    status: SoftwareUpdateStatus  # for the groups: Succeeded | RollbackComplete | Failed
    failure_message: str | None
    events: tuple[ev.EventDraft, ...] = ()


@dataclass(frozen=True)
class BeginScheduledUpdate:
    """A ScheduledUpdateConfig fired: update these groups to the latest release (fire times recorded)."""

    fired: Mapping[str, float]
    deployment: DeploymentSpec


RollingAction = StartNodeUpdates | ResumeNodeUpdate | SetSoftwareUpdate | FinishSoftwareUpdate | BeginScheduledUpdate


def plan_scheduled_updates(cluster: ClusterRecord, now: float) -> list[RollingAction]:
    """InService and idle: start the software update of every group whose schedule is due (all at once)."""
    if cluster.status != ClusterStatus.IN_SERVICE or cluster.software_update is not None:
        return []
    fired = {g: t for g, t in due_schedules(cluster, now).items() if not group_busy(cluster.group_states, g)}
    if not fired:
        return []
    return [BeginScheduledUpdate(fired, deployment_of(cluster, sorted(fired)[0]))]


def _controller_groups(cluster: ClusterRecord) -> set[str]:
    return {g.name for g in cluster.spec.groups_of(NodeType.CONTROLLER)}


def _ordered_groups(cluster: ClusterRecord, groups: Sequence[str], controllers_first: bool = False) -> list[str]:
    """Compute and login groups first, controllers last (a same-release update keeps the heads longest); for a
    Slurm major upgrade the controllers first (slurmctld may be newer than slurmd, never older)."""
    ctl = {g.name for g in cluster.spec.groups_of(NodeType.CONTROLLER)}
    workers, heads = [g for g in groups if g not in ctl], [g for g in groups if g in ctl]
    return heads + workers if controllers_first else workers + heads


def plan_software_update(cluster: ClusterRecord, nodes: Sequence[NodeRecord], busy: frozenset[str],
                         now: float) -> list[RollingAction]:
    su = cluster.software_update
    if su is None or cluster.status != ClusterStatus.SYSTEM_UPDATING:
        return []
    c = cluster.name
    mine = [n for n in nodes if n.group in su.groups and n.active]
    in_flight = [n for n in mine if n.data.get("update_to")]
    if in_flight:
        return [ResumeNodeUpdate(n.instance_id) for n in in_flight if n.instance_id not in busy]

    if su.phase == UpdatePhase.UPDATE and su.failed:
        drafts = tuple(ev.software_update_rollback_initiated(c, g) for g in su.groups)
        return [SetSoftwareUpdate(replace(su, phase=UpdatePhase.ROLLBACK, last_batch_end=0.0), drafts)]

    if su.phase == UpdatePhase.UPDATE:
        pending = {g: [n for n in mine if n.group == g and n.image_id != su.target_image
                       and n.instance_id not in su.done and n.status == InstanceStatus.RUNNING]
                   for g in su.groups}
        if not any(pending.values()):
            drafts = tuple(ev.software_update_completed(c, g) for g in su.groups)
            return [FinishSoftwareUpdate(SoftwareUpdateStatus.SUCCEEDED, None, drafts)]
        if su.batches and now < su.last_batch_end + su.wait_seconds:
            return []
        group = next(g for g in _ordered_groups(cluster, su.groups, su.slurm_upgrade) if pending[g])
        total = sum(1 for n in mine if n.group == group)
        size = 1 if group in _controller_groups(cluster) else su.batch.size(total)  # never all heads at once
        batch = sorted(pending[group], key=lambda n: n.seq)[:size]
        draft = ev.update_batch_selected(c, group, UpdatePhase.UPDATE)
        return [StartNodeUpdates(tuple(n.instance_id for n in batch), su.target_image,
                                 replace(su, batches=su.batches + 1), (draft,))]

    # rollback: every node this operation touched goes back to the image it had
    back = {iid: prev for iid, prev in su.done.items()}
    for n in mine:
        if n.instance_id in su.failed and n.data.get("update_from"):
            back[n.instance_id] = str(n.data["update_from"])
    todo = [n for n in mine if n.instance_id in back and not n.data.get("rollback_failed")
            and (n.image_id != back[n.instance_id] or n.status == InstanceStatus.FAILURE)]
    if not todo:
        failed = "; ".join(f"{iid}: {msg}" for iid, msg in sorted(su.failed.items()))
        broken = [n.instance_id for n in mine if n.data.get("rollback_failed")]
        if broken:
            msg = (f"UpdateClusterSoftware to {su.target_image} failed ({failed}) and rolling back failed for "
                   f"{', '.join(broken)}")
            drafts = tuple(ev.software_update_rollback_failed(c, g) for g in su.groups)
            return [FinishSoftwareUpdate(SoftwareUpdateStatus.FAILED, msg, drafts)]
        msg = f"UpdateClusterSoftware to {su.target_image} failed and was rolled back: {failed}"
        drafts = tuple(ev.software_update_rolled_back(c, g) for g in su.groups)
        return [FinishSoftwareUpdate(SoftwareUpdateStatus.ROLLBACK_COMPLETE, msg, drafts)]
    if su.last_batch_end and now < su.last_batch_end + su.wait_seconds:
        return []
    group = next(g for g in _ordered_groups(cluster, su.groups) if any(n.group == g for n in todo))
    total = sum(1 for n in mine if n.group == group)
    size = 1 if group in _controller_groups(cluster) else su.rollback_batch.size(total)
    batch = sorted((n for n in todo if n.group == group), key=lambda n: n.seq)[:size]
    by_image: dict[str, list[str]] = {}
    for n in batch:
        by_image.setdefault(back[n.instance_id], []).append(n.instance_id)
    image, iids = next(iter(by_image.items()))
    draft = ev.update_batch_selected(c, group, UpdatePhase.ROLLBACK)
    return [StartNodeUpdates(tuple(iids), image, replace(su, batches=su.batches + 1), (draft,))]
