"""Appliers: the plan's store-only actions, run on the loop thread (no runtime call, no wait).

Each takes the cluster as the pass observed it and the action, writes with the store's version check, and
returns the cluster as stored (the next action of the same pass builds on it). Slow actions are not here: the
loop hands them to a worker (``reconciler/workers``).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from slurmpod import ids
from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord, EventRecord, NodeRecord
from slurmpod.domain.software import new_software_update
from slurmpod.domain.status import ClusterStatus, InstanceStatus, SoftwareUpdateStatus
from slurmpod.domain.transitions import cluster_to, node_to
from slurmpod.reconciler import plan as p
from slurmpod.reconciler import rolling
from slurmpod.reconciler.work import Context

log = logging.getLogger("slurmpod.reconciler")


def create_nodes(ctx: Context, cluster: ClusterRecord, *actions: p.CreateNodes) -> None:
    """Records the new instances of ``actions`` (one per group) in one write (ids minted before any launch: a
    crash never launches one twice)."""
    seq = ctx.store.max_node_seq(cluster.cluster_id)
    now = ctx.clock.now()
    recs = []
    events = []
    for action in actions:
        group = cluster.spec.group(action.group)
        image_id, image_release = ctx.image_lookup(group.image_id if group else None)
        events.append(ctx.event(cluster, ev.instance_creation_started(cluster.name, action.group)))
        for k in range(action.count):
            seq += 1
            iid = ids.new_instance_id()
            data: dict[str, object] = {}
            if k < len(action.takeover):
                t = action.takeover[k]
                # boots once the predecessor released the address (plan), then keeps its hostname and NodeName
                data = {"address": t.address, "replaces": t.predecessor, "resume_on_join": True}
                if t.ctl_slot is not None:
                    data["ctl_slot"] = t.ctl_slot
                    data.pop("resume_on_join")  # controllers are not Slurm nodes
                events.append(ctx.event(cluster, ev.successor_created(cluster.name, action.group, iid,
                                                                      t.predecessor, t.address, t.hostname)))
            recs.append(NodeRecord(
                instance_id=iid, cluster_id=cluster.cluster_id, group=action.group, seq=seq,
                status=InstanceStatus.PENDING, launch_time=now, logical_id=f"{action.group}-{seq}",
                image_id=image_id, image_release=image_release,
                lifecycle_digest=cluster.lifecycle_snapshots.get(action.group), data=data,
            ))
    ctx.store.add_nodes(recs, events)
    ctx.wake()  # the new records can boot in the next pass
    for action in actions:
        log.info("cluster %s: %d new instance(s) in %s", cluster.name, action.count, action.group)


def mark_removing(ctx: Context, cluster: ClusterRecord, node: NodeRecord, reason: str, *,
                  replaced: bool = False) -> NodeRecord:
    """ShuttingDown (with an event) before the removal worker takes the node; a ``replaced`` node's successor takes
    over its address."""
    if node.status == InstanceStatus.SHUTTING_DOWN:
        return node
    stored = ctx.store.update_node(*removing(ctx, cluster, node, reason, replaced=replaced))
    log.info("node %s (%s): %s -> ShuttingDown (%s)", node.instance_id, node.group, node.status.value, reason)
    return stored


def removing(ctx: Context, cluster: ClusterRecord, node: NodeRecord, reason: str, *,
             replaced: bool = False) -> tuple[NodeRecord, list[EventRecord]]:
    """``node`` ShuttingDown, as ``mark_removing`` writes it, and the events of that write."""
    data = {**node.data, "replaced": True} if replaced else node.data
    drafts = [ev.instance_terminating(cluster.name, node.group, node.instance_id)]
    if replaced:
        drafts.insert(0, ev.replacement_started(cluster.name, node.group, node.instance_id))
    return (node_to(node, InstanceStatus.SHUTTING_DOWN, message=reason, data=data), ctx.events(cluster, drafts))


def set_status(ctx: Context, cluster: ClusterRecord, action: p.SetStatus) -> ClusterRecord:
    upd = cluster_to(cluster, action.status, failure_message=action.failure_message)
    if action.spec is not None:
        upd = replace(upd, spec=action.spec)
    if action.mark_good:
        upd = replace(upd, last_good_spec=upd.spec)
    stored = ctx.store.update_cluster(upd, ctx.events(upd, action.events))
    log.info("cluster %s: %s -> %s%s", cluster.name, cluster.status.value, action.status.value,
             f" ({action.failure_message})" if action.failure_message else "")
    return stored


def update_groups(ctx: Context, cluster: ClusterRecord, action: p.UpdateGroups) -> ClusterRecord:
    upd = replace(cluster, group_states=dict(action.group_states))
    if action.spec is not None:
        upd = replace(upd, spec=action.spec)
    stored = ctx.store.update_cluster(upd, ctx.events(upd, action.events))
    for d in action.events:
        log.info("cluster %s: %s", cluster.name, d.description)
    return stored


def start_node_updates(ctx: Context, cluster: ClusterRecord, action: rolling.StartNodeUpdates) -> ClusterRecord:
    changed = []
    for iid in action.instance_ids:
        node = ctx.store.get_node(iid)
        if node is None:
            continue
        data = {**node.data, "update_to": action.image, "update_from": node.image_id, "update_step": "drain"}
        data.pop("rollback_failed", None)
        changed.append(replace(node, data=data))
    upd = replace(cluster, software_update=action.update)
    stored = ctx.store.update_cluster(upd, ctx.events(upd, action.events), changed_nodes=changed)
    log.info("cluster %s: software update batch %d: %s -> %s", cluster.name, action.update.batches,
             ", ".join(action.instance_ids), action.image)
    ctx.wake()
    return stored


def set_software_update(ctx: Context, cluster: ClusterRecord, action: rolling.SetSoftwareUpdate) -> ClusterRecord:
    upd = replace(cluster, software_update=action.update)
    return ctx.store.update_cluster(upd, ctx.events(upd, action.events))


def begin_scheduled_update(ctx: Context, cluster: ClusterRecord,
                           action: rolling.BeginScheduledUpdate) -> ClusterRecord:
    now = ctx.clock.now()
    groups = sorted(action.fired)
    target = ctx.image_lookup(None)[0]
    su = new_software_update(ids.new_operation_id(), target, groups, action.deployment, now)
    schedules = {g: dict(v) for g, v in cluster.schedules.items()}
    for g, t in action.fired.items():
        schedules[g]["last_fired"] = t
    upd = cluster_to(cluster, ClusterStatus.SYSTEM_UPDATING, software_update=su, schedules=schedules,
                     operation_id=su.operation_id,
                     software_update_status={**cluster.software_update_status,
                                             **{g: SoftwareUpdateStatus.IN_PROGRESS for g in groups}})
    drafts = [ev.software_update_scheduled(cluster.name, g) for g in groups]
    stored = ctx.store.update_cluster(upd, ctx.events(upd, drafts))
    log.info("cluster %s: scheduled software update of %s to %s", cluster.name, ", ".join(groups), target)
    return stored


def finish_software_update(ctx: Context, cluster: ClusterRecord,
                           action: rolling.FinishSoftwareUpdate) -> ClusterRecord:
    su = cluster.software_update
    groups = su.groups if su else ()
    spec = cluster.spec
    if su is not None and action.status == SoftwareUpdateStatus.SUCCEEDED:
        # the groups now run the target: a group that names an image (or would default to another one) names the
        # target from now on, so DesiredImageId and nodes launched later follow the update (a rollback keeps it)
        latest = ctx.image_lookup(None)[0]
        spec = spec.with_groups(tuple(
            replace(g, image_id=su.target_image)
            if g.name in groups and g.image_id != su.target_image
            and ((g.image_id not in (None, "", "default")) or su.target_image != latest) else g
            for g in spec.instance_groups))
    upd = cluster_to(cluster, ClusterStatus.IN_SERVICE, software_update=None, failure_message=action.failure_message,
                     spec=spec,
                     software_update_status={**cluster.software_update_status, **{g: action.status for g in groups}})
    stored = ctx.store.update_cluster(upd, ctx.events(upd, action.events))
    log.info("cluster %s: SystemUpdating -> InService (software update %s)", cluster.name, action.status)
    return stored
