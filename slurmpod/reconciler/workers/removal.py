"""Removing nodes and clusters.

A node leaving a cluster that stays (scale-down, BatchDelete, replacement, a deleted group) is drained first;
while it still runs jobs the removal is parked and looked at again each pass, for as long as a software update's
drain may take (``Timeouts.drain``). Jobs still running then are ended, and an event names them: removal never
ends a job silently. A dead instance (its jobs died with it), a cluster being deleted (DeleteCluster ends all
of its jobs) and a failed creation being released do not wait. The record is deleted only after the provider
terminated the instance, and a replaced node's only once its successor claimed its address (the plan reads the
address from the record: a successor planned after a quick termination would otherwise get a new one).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.status import ClusterStatus, NodeType
from slurmpod.domain.transitions import cluster_to
from slurmpod.reconciler import plan as p
from slurmpod.reconciler.work import Context, Park

log = logging.getLogger("slurmpod.reconciler")

DRAIN_REASON = "slurmpod: removing"


def _cluster_stays(cluster: ClusterRecord) -> bool:
    """Whether the node leaves a cluster that keeps running (its jobs are worth waiting for)."""
    if cluster.status == ClusterStatus.DELETING:
        return False
    return not (cluster.status == ClusterStatus.ROLLING_BACK and cluster.last_good_spec is None)


def remove(ctx: Context, cluster_id: str, instance_id: str) -> Park | None:
    node = ctx.store.get_node(instance_id)
    cluster = ctx.store.get_cluster(cluster_id)
    if node is None or cluster is None:
        return None
    rt = ctx.runtime
    step = node.data.get("remove_step")
    stays = _cluster_stays(cluster)
    if node.data.get("terminated"):  # gone already: the record waits for its successor
        if not (stays and _successor_pending(cluster, node, ctx.store.list_nodes(cluster_id))):
            ctx.store.delete_node(instance_id)
        return None
    if step is None and stays and "daemons" in node.phases:
        nodes = ctx.store.list_nodes(cluster_id)
        jobs = list(rt.running_jobs(cluster, node, nodes))
        # a dead instance's jobs are gone with it: only a live node is worth waiting for
        if jobs and rt.alive(cluster).get(instance_id, False):
            rt.drain(cluster, node, nodes, DRAIN_REASON)
            node = ctx.save_node(
                replace(node, data={**node.data, "remove_step": "wait", "wait_started": ctx.clock.now()}),
                ev.drain_waiting(node.group, instance_id, jobs, ctx.timeouts.drain, removal=True))
            step = "wait"
    if step == "wait" and not ctx.stopping.is_set():
        nodes = ctx.store.list_nodes(cluster_id)
        if stays and not rt.jobs_done(cluster, node, nodes) and rt.alive(cluster).get(instance_id, False):
            deadline = float(node.data.get("wait_started") or ctx.clock.now()) + ctx.timeouts.drain
            if ctx.clock.now() < deadline:
                return Park(ctx.timeouts.drain_poll)
            jobs = list(rt.running_jobs(cluster, node, nodes))
            ctx.add_events(cluster, ev.drain_timed_out(node.group, instance_id, jobs, ctx.timeouts.drain,
                                                       removal=True))
            log.warning("node %s: removal ends jobs %s after %.0f s", instance_id, jobs, ctx.timeouts.drain)
    rt.remove_node(cluster, node, ctx.store.node_view(cluster_id))  # node_view: read only if looked at
    log.info("node %s (%s): ShuttingDown -> terminated", instance_id, node.group)
    if stays and _successor_pending(cluster, node, ctx.store.list_nodes(cluster_id)):
        # the record carries the address its successor takes over: kept (terminated) until one claims it
        ctx.save_node(replace(node, data={**node.data, "terminated": True}))
        return None
    ctx.store.delete_node(instance_id)
    return None


def _successor_pending(cluster: ClusterRecord, node: NodeRecord, nodes: list[NodeRecord]) -> bool:
    """Whether ``node``'s successor is still to take over its address: the group wants another node and none of
    its nodes holds or claims the address yet (planning reads the address from this record)."""
    group = cluster.spec.group(node.group)
    if group is None or not node.ip:
        return False
    is_ctl = group.node_type == NodeType.CONTROLLER
    if not p.replaced_by_successor(node, is_ctl):
        return False
    mine = [n for n in nodes if n.group == node.group and n.active]
    if any(n.ip == node.ip or n.data.get("address") == node.ip for n in mine):
        return False
    return len(mine) < group.instance_count


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
