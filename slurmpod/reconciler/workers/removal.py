"""Removing nodes and clusters.

A node leaving a cluster that stays (scale-down, BatchDelete, replacement, a deleted group) is drained first;
while it still runs jobs the removal is parked and looked at again each pass, for as long as a software update's
drain may take (``Timeouts.drain``). Jobs still running then are ended, and an event names them: removal never
ends a job silently. A dead instance, a cluster being deleted and a failed creation being released do not
wait. The record is deleted only after the provider terminated the instance.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.status import ClusterStatus
from slurmpod.domain.transitions import cluster_to
from slurmpod.reconciler import plan as p
from slurmpod.reconciler.work import Context, Park

log = logging.getLogger("slurmpod.reconciler")

DRAIN_REASON = "slurmpod: removing"


def _waits_for_jobs(ctx: Context, cluster: ClusterRecord, node: NodeRecord) -> bool:
    if cluster.status == ClusterStatus.DELETING:
        return False
    if cluster.status == ClusterStatus.ROLLING_BACK and cluster.last_good_spec is None:
        return False  # a failed creation is released at once
    return bool(ctx.runtime.alive(cluster).get(node.instance_id, False))


def remove(ctx: Context, cluster_id: str, instance_id: str) -> Park | None:
    node = ctx.store.get_node(instance_id)
    cluster = ctx.store.get_cluster(cluster_id)
    if node is None or cluster is None:
        return None
    rt = ctx.runtime
    step = node.data.get("remove_step")
    if step is None and "daemons" in node.phases and _waits_for_jobs(ctx, cluster, node):
        nodes = ctx.store.list_nodes(cluster_id)
        jobs = list(rt.running_jobs(cluster, node, nodes))
        if jobs:
            rt.drain(cluster, node, nodes, DRAIN_REASON)
            node = ctx.save_node(
                replace(node, data={**node.data, "remove_step": "wait", "wait_started": ctx.clock.now()}),
                ev.drain_waiting(node.group, instance_id, jobs, ctx.timeouts.drain, removal=True))
            step = "wait"
    if step == "wait" and not ctx.stopping.is_set():
        nodes = ctx.store.list_nodes(cluster_id)
        alive = rt.alive(cluster).get(instance_id, False)
        if alive and cluster.status != ClusterStatus.DELETING and not rt.jobs_done(cluster, node, nodes):
            deadline = float(node.data.get("wait_started") or ctx.clock.now()) + ctx.timeouts.drain
            if ctx.clock.now() < deadline:
                return Park(ctx.timeouts.drain_poll)
            jobs = list(rt.running_jobs(cluster, node, nodes))
            ctx.add_events(cluster, ev.drain_timed_out(node.group, instance_id, jobs, ctx.timeouts.drain,
                                                       removal=True))
            log.warning("node %s: removal ends jobs %s after %.0f s", instance_id, jobs, ctx.timeouts.drain)
    elif step is None and "daemons" in node.phases:
        jobs = list(rt.running_jobs(cluster, node, ctx.store.list_nodes(cluster_id))) \
            if rt.alive(cluster).get(instance_id, False) else []
        if jobs:
            why = "the cluster is deleted" if cluster.status == ClusterStatus.DELETING else "its creation failed"
            ctx.add_events(cluster, ev.removed_with_jobs(node.group, instance_id, jobs, why))
    rt.remove_node(cluster, node, ctx.store.node_view(cluster_id))  # node_view: read only if looked at
    ctx.store.delete_node(instance_id)
    log.info("node %s (%s): ShuttingDown -> terminated", instance_id, node.group)
    return None


def finish_delete(ctx: Context, cluster_id: str) -> Park | None:
    cluster = ctx.store.get_cluster(cluster_id)
    if cluster is None or cluster.status != ClusterStatus.DELETING:
        return None
    if ctx.store.list_nodes(cluster_id):
        return None
    ctx.runtime.teardown_cluster(cluster)
    ctx.store.delete_cluster(cluster_id)
    log.info("cluster %s: Deleting -> deleted", cluster.name)
    return None


def release_failed_creation(ctx: Context, cluster_id: str, action: p.SetStatus) -> Park | None:
    """A failed creation releases everything, cluster-level services (the accounting host) included, then
    becomes Failed (in that order: a crash in between releases again)."""
    cluster = ctx.store.get_cluster(cluster_id)
    if cluster is None or cluster.status != ClusterStatus.ROLLING_BACK or ctx.store.list_nodes(cluster_id):
        return None
    ctx.runtime.teardown_cluster(cluster)
    upd = cluster_to(cluster, ClusterStatus.FAILED, failure_message=action.failure_message)
    ctx.store.update_cluster(upd, ctx.events(upd, action.events))
    log.info("cluster %s: RollingBack -> Failed (%s)", cluster.name, action.failure_message)
    return None
