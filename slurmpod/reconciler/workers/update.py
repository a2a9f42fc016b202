"""Software update of one node by root-volume replacement: drain, wait for its jobs, replace, boot.

Resumable at every step (``data.update_step``). The wait for running jobs is parked, never slept: each pass
looks at the node's jobs again until they end or the drain timeout passes (then the root volume is replaced
anyway, and an event names the jobs that were still running).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.status import InstanceStatus, UpdatePhase
from slurmpod.domain.transitions import node_to
from slurmpod.reconciler.runtime import NodeBootError
from slurmpod.reconciler.work import Context, Park
from slurmpod.reconciler.workers.boot import run_phases

log = logging.getLogger("slurmpod.reconciler")

DRAIN_REASON = "slurmpod: software update"


def update_node(ctx: Context, cluster_id: str, instance_id: str) -> Park | None:
    node = ctx.store.get_node(instance_id)
    cluster = ctx.store.get_cluster(cluster_id)
    if node is None or cluster is None or not node.data.get("update_to") or cluster.software_update is None:
        return None
    su = cluster.software_update
    target = str(node.data["update_to"])
    step = node.data.get("update_step", "drain")
    rt = ctx.runtime
    try:
        if step == "drain":
            nodes = ctx.store.list_nodes(cluster_id)
            ours = rt.drain(cluster, node, nodes, DRAIN_REASON)
            jobs = list(rt.running_jobs(cluster, node, nodes))
            drafts = ([ev.drain_waiting(node.group, instance_id, jobs, ctx.timeouts.drain, removal=False)]
                      if jobs else [])
            node = ctx.save_node(replace(node, data={
                **node.data, "update_step": "wait", "drained_by_us": ours or bool(node.data.get("drained_by_us")),
                "wait_started": ctx.clock.now()}), *drafts)
            step = "wait"
        if step == "wait":
            if ctx.stopping.is_set():
                return None
            drafts = []
            nodes = ctx.store.list_nodes(cluster_id)
            if not rt.jobs_done(cluster, node, nodes):
                deadline = float(node.data.get("wait_started") or ctx.clock.now()) + ctx.timeouts.drain
                if ctx.clock.now() < deadline:
                    return Park(ctx.timeouts.drain_poll)
                jobs = list(rt.running_jobs(cluster, node, nodes))
                log.warning("node %s: jobs %s still running after %.0f s; replacing anyway", instance_id, jobs,
                            ctx.timeouts.drain)
                drafts.append(ev.drain_timed_out(node.group, instance_id, jobs, ctx.timeouts.drain, removal=False))
            # a node rolled back from Failure is provisioned again (Pending); a running one is SystemUpdating
            status = InstanceStatus.SYSTEM_UPDATING if node.status != InstanceStatus.FAILURE else InstanceStatus.PENDING
            drafts.append(ev.root_volume_replacement_started(node.group, instance_id))
            node = ctx.save_node(node_to(node, status, data={**node.data, "update_step": "replace"}), *drafts)
            step = "replace"
        if step == "replace":
            rt.replace_root(cluster, node, ctx.store.list_nodes(cluster_id), target)
            image_id, release = ctx.image_lookup(target)
            node = ctx.save_node(replace(node, phases=("launched",), image_id=image_id, image_release=release,
                                         data={**node.data, "update_step": "boot"}))
        done = run_phases(ctx, cluster, node, resume_key="drained_by_us", record_topology=False)
    except NodeBootError as exc:
        node_update_failed(ctx, cluster_id, instance_id, exc.message)
        return None
    except Exception as exc:
        log.exception("software update of %s failed", instance_id)
        node_update_failed(ctx, cluster_id, instance_id, f"internal error: {exc}")
        return None
    if isinstance(done, Park):
        return Park(ctx.timeouts.drain_poll)  # the daemons gate: the controller is not back yet
    if done is None:
        return None
    _updated(ctx, cluster_id, done, su.phase)
    return None


def _updated(ctx: Context, cluster_id: str, node: NodeRecord, phase: UpdatePhase) -> None:
    iid = node.instance_id
    previous = str(node.data.get("update_from") or "")
    target = str(node.data.get("update_to") or "")
    data = {k: v for k, v in node.data.items() if not k.startswith(("update_", "drained_by_us", "wait_"))}
    ctx.save_node(
        node_to(node, InstanceStatus.RUNNING, message=None, last_software_update_time=ctx.clock.now(), data=data),
        ev.instance_software_updated(node.group, iid, phase))
    log.info("node %s (%s): software %s -> %s", iid, node.group, previous, target)

    def record(c: ClusterRecord) -> ClusterRecord | None:
        if c.software_update is None:
            return None
        done = dict(c.software_update.done)
        if c.software_update.phase == UpdatePhase.UPDATE:
            done[iid] = previous
        return replace(c, software_update=replace(c.software_update, done=done, last_batch_end=ctx.clock.now()))

    ctx.update_cluster_with(cluster_id, record)


def node_update_failed(ctx: Context, cluster_id: str, instance_id: str, message: str) -> None:
    node = ctx.store.get_node(instance_id)
    cluster = ctx.store.get_cluster(cluster_id)
    if node is None or cluster is None or cluster.software_update is None:
        return
    phase = cluster.software_update.phase
    rollback = phase == UpdatePhase.ROLLBACK
    data = {k: v for k, v in node.data.items() if k not in ("update_to", "update_step", "wait_started")}
    if rollback:
        data["rollback_failed"] = message
    ctx.save_node(node_to(node, InstanceStatus.FAILURE, message=message, data=data),
                  ev.instance_software_update_failed(node.group, instance_id, phase, message))
    log.warning("node %s: software update failed: %s", instance_id, message)

    def record(c: ClusterRecord) -> ClusterRecord | None:
        if c.software_update is None:
            return None
        failed = {**c.software_update.failed}
        if not rollback:
            failed[instance_id] = message
        return replace(c, software_update=replace(c.software_update, failed=failed, last_batch_end=ctx.clock.now()))

    ctx.update_cluster_with(cluster_id, record)
