"""Deep health checks of one instance group's nodes (work key ``dhc:<group>``).

A node with a request (``domain.deep_health``) is either a new node of a group with OnStartDeepHealthChecks
(``DeepHealthCheckInProgress`` since its boot ended) or a Running node named by StartClusterHealthCheck. One pass:

1. on-demand nodes not started yet enter the reservation (their running jobs go on, nothing new starts); a node
   whose jobs end starts its checks (``DeepHealthCheckInProgress``); one still busy ``Timeouts.dhc_busy`` after
   the request is skipped (released, an event says so); the others are looked at again (parked);
2. the nodes in progress are checked together (one job step per check across them);
3. a pass releases the node (reservation, partition, feature) and it is Running; a failure drains and releases
   it and replaces it (ShuttingDown, its successor keeps its address and name, and is checked again when its group
   has OnStartDeepHealthChecks, as its boot ends).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from slurmpod.domain import deep_health as dh
from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.status import InstanceStatus
from slurmpod.domain.transitions import node_to
from slurmpod.errors import VersionConflict
from slurmpod.providers.base import ProviderError
from slurmpod.reconciler.runtime import DeepHealthResult
from slurmpod.reconciler.work import Context, Park
from slurmpod.slurm.control import SlurmError

log = logging.getLogger("slurmpod.reconciler")


def _save(ctx: Context, node: NodeRecord, *drafts: ev.EventDraft) -> NodeRecord | None:
    try:
        return ctx.save_node(node, *drafts)
    except VersionConflict:
        return None  # changed meanwhile (deleted, replaced): the next pass plans from the stored record


def _start_on_demand(ctx: Context, cluster: ClusterRecord, waiting: list[NodeRecord], nodes: list[NodeRecord]
                     ) -> tuple[list[NodeRecord], bool]:
    """Step 1; returns the nodes that started and whether some still wait for their jobs."""
    rt, now = ctx.runtime, ctx.clock.now()
    rt.dhc_isolate(cluster, waiting, nodes)
    started, wait = [], False
    for n in waiting:
        req = dh.request_of(n)
        if req is None:
            continue
        jobs = rt.running_jobs(cluster, n, nodes)
        if jobs:
            if now - req.requested < ctx.timeouts.dhc_busy:
                wait = True
                continue
            rt.dhc_release(cluster, n, nodes, passed=True)
            _save(ctx, replace(n, data=dh.with_request(n.data, None)),
                  ev.dhc_skipped(n.group, n.instance_id, jobs, ctx.timeouts.dhc_busy))
            log.info("node %s: deep health checks skipped (jobs %s)", n.instance_id, jobs)
            continue
        moved = _save(ctx, node_to(n, InstanceStatus.DEEP_HEALTH_CHECK_IN_PROGRESS, message=None,
                                   data=dh.with_request(n.data, replace(req, started=True))),
                      ev.dhc_started(n.group, n.instance_id, [c.value for c in req.checks]))
        if moved is not None:
            started.append(moved)
    return started, wait


def _finish(ctx: Context, cluster: ClusterRecord, node: NodeRecord, result: DeepHealthResult, seconds: float,
            nodes: list[NodeRecord]) -> None:
    rt = ctx.runtime
    current = ctx.store.get_node(node.instance_id)
    if current is None or current.status != InstanceStatus.DEEP_HEALTH_CHECK_IN_PROGRESS:
        return
    if result.ok:
        rt.dhc_release(cluster, current, nodes, passed=True)
        _save(ctx, node_to(current, InstanceStatus.RUNNING, message=None, data=dh.with_request(current.data, None)),
              ev.dhc_passed(current.group, current.instance_id, seconds))
        log.info("node %s (%s): deep health checks passed in %.1f s", current.instance_id, current.group, seconds)
        return
    rt.dhc_release(cluster, current, nodes, passed=False)
    failure = f"Deep health check failed: {result.detail}"
    _save(ctx, node_to(current, InstanceStatus.SHUTTING_DOWN, message=failure,
                       data={**dh.with_request(current.data, None), "replaced": True}),
          ev.dhc_failed(current.group, current.instance_id, result.detail),
          ev.replacement_started(cluster.name, current.group, current.instance_id))
    log.warning("node %s (%s): deep health checks failed (%s); replacing it", current.instance_id, current.group,
                result.detail)


def check_group(ctx: Context, cluster_id: str, key: str) -> Park | None:
    group = key.split(":", 1)[1]
    cluster = ctx.store.get_cluster(cluster_id)
    if cluster is None:
        return None
    nodes = list(ctx.store.list_nodes(cluster_id))
    due = dh.due(nodes).get(group, [])
    if not due:
        return None
    wait = False
    try:
        waiting = [n for n in due if n.status == InstanceStatus.RUNNING]
        ready = [n for n in due if n.status == InstanceStatus.DEEP_HEALTH_CHECK_IN_PROGRESS]
        if waiting:
            started, wait = _start_on_demand(ctx, cluster, waiting, nodes)
            ready += started
        if ready:
            ctx.runtime.dhc_isolate(cluster, ready, nodes)
            batches: dict[tuple[dh.DeepHealthCheck, ...], list[NodeRecord]] = {}
            for n in ready:
                req = dh.request_of(n)
                if req is not None:
                    batches.setdefault(req.checks, []).append(n)
            for checks, batch in batches.items():
                began = time.monotonic()
                results = ctx.runtime.dhc_run(cluster, batch, checks, nodes, ctx.timeouts.dhc_stress)
                seconds = time.monotonic() - began
                for n in batch:
                    _finish(ctx, cluster, n, results.get(n.instance_id) or DeepHealthResult(False, "no result"),
                            seconds, nodes)
    except (SlurmError, ProviderError) as exc:
        # Slurm or the controller did not answer: nothing is decided, the next pass tries again
        log.warning("deep health checks of group %s in cluster %s: %s; retrying", group, cluster.name, exc)
        return Park(ctx.timeouts.drain_poll)
    return Park(ctx.timeouts.drain_poll) if wait else None
