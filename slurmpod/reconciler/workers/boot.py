"""Booting a node: its remaining boot phases, each checkpointed in the store, then Running.

``run_phases`` is shared with the software-update worker (a replaced root volume boots the same way), so both
honour the ``may_start_daemons`` gate and both record the lifecycle-script events.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from slurmpod.domain import deep_health as dh
from slurmpod.domain import events as ev
from slurmpod.domain.model import PHASES, ClusterRecord, EventRecord, NodeRecord
from slurmpod.domain.status import InstanceStatus
from slurmpod.domain.transitions import node_to
from slurmpod.errors import VersionConflict
from slurmpod.observability import metrics
from slurmpod.reconciler import plan as p
from slurmpod.reconciler.runtime import NodeBootError
from slurmpod.reconciler.work import Context, Park, with_topology

log = logging.getLogger("slurmpod.reconciler")

#: a gate is closed (baseline: a controller has no address yet; daemons: no Running controller yet, or slurm.conf
#: behind): run again later
GATE_CLOSED = Park(0.0)


def _gate_open(ctx: Context, cluster: ClusterRecord, node: NodeRecord) -> bool:
    # only a Running controller matters: no full read of the nodes
    ctl = ctx.store.any_node(cluster.cluster_id, p.controller_groups(cluster.spec), InstanceStatus.RUNNING)
    return p.may_start_daemons(cluster, node.group, [ctl] if ctl is not None else [],
                               ctx.runtime.desired_topology(cluster))


def run_phases(ctx: Context, cluster: ClusterRecord, node: NodeRecord, *, resume_key: str, coalesce: bool = False,
               record_topology: bool = True) -> NodeRecord | Park | None:
    """Runs the node's remaining boot phases while it keeps its status.

    Returns the node after the last phase (with ``coalesce``, possibly not yet written: the caller's final write
    carries it), ``GATE_CLOSED`` when the daemons phase must wait, or None when the record changed under it.
    Before ``joined``, a node marked ``resume_key`` is resumed in Slurm. Raises ``NodeBootError``.
    """
    status, iid, cid = node.status, node.instance_id, node.cluster_id
    current: NodeRecord | None = node
    fresh: ClusterRecord | None = cluster
    dirty = False
    for phase in PHASES:
        if not coalesce:
            current, fresh = ctx.store.get_node(iid), ctx.store.get_cluster(cid)
        if current is None or fresh is None or current.status != status:
            return None
        if phase in current.phases:
            continue
        if phase == "joined" and current.data.get(resume_key):
            ctx.runtime.resume(fresh, current, ctx.store.list_nodes(cid))
            current = ctx.store.update_node(replace(current, data={
                k: v for k, v in current.data.items() if k != resume_key}))
            dirty = False
        if phase == "baseline" and not p.may_start_baseline(
                fresh, ctx.store.list_nodes(cid, p.controller_groups(fresh.spec))):  # only controllers matter
            if dirty:
                _flush(ctx, current)
            return GATE_CLOSED  # a controller has no address yet: resource_config.json would not name it
        if phase == "daemons" and not _gate_open(ctx, fresh, current):
            if dirty:
                _flush(ctx, current)
            return GATE_CLOSED  # waits for the controller / topology; the plan boots it again when ready
        # node_view: read only if the runtime looks at the nodes
        current, evs, topology, changed = step(ctx, fresh, current, phase, ctx.store.node_view(cid))
        if coalesce and not evs and not topology and not changed:
            dirty = True
        else:
            current = ctx.store.update_node(current, evs)
            dirty = False
        if topology and record_topology:
            ctx.update_cluster_with(cid, functools.partial(with_topology, topology=str(topology)))
    return current


def step(ctx: Context, cluster: ClusterRecord, node: NodeRecord, phase: str, view: Sequence[NodeRecord]
         ) -> tuple[NodeRecord, list[EventRecord], str | None, bool]:
    """One boot phase in memory: (node with the phase done, events, the topology it applied, whether the phase
    changed the record beyond its phase list). Raises NodeBootError (an unexpected exception becomes one)."""
    try:
        result: dict[str, Any] = dict(ctx.runtime.boot_step(cluster, node, phase, view))
    except NodeBootError:
        raise
    except Exception as exc:
        log.exception("boot of %s failed in phase %s", node.instance_id, phase)
        raise NodeBootError(f"internal error during {phase}: {exc}") from exc
    topology = result.pop("applied_topology", None)
    script = result.pop("script", None)
    evs = [ctx.event(cluster, ev.lifecycle_script_completed(node.group, node.instance_id, str(script),
                                                            node.lifecycle_digest))] if script else []
    return (replace(node, phases=(*node.phases, phase), **result), evs, str(topology) if topology else None,
            bool(result))


def _flush(ctx: Context, node: NodeRecord) -> None:
    try:
        ctx.store.update_node(node)
    except VersionConflict:
        pass


def boot(ctx: Context, cluster_id: str, instance_id: str) -> Park | None:
    """Boots a Pending node to Running. A runtime whose phases are cheap and idempotent
    (``checkpoint_every_phase = False``: the simulated one) has its phase checkpoints coalesced into the next real
    write; after a crash such phases simply rerun."""
    coalesce = not ctx.runtime.checkpoint_every_phase
    node = ctx.store.get_node(instance_id)
    cluster = ctx.store.get_cluster(cluster_id)
    if node is None or cluster is None or node.status != InstanceStatus.PENDING:
        return None
    try:
        done = run_phases(ctx, cluster, node, resume_key="resume_on_join", coalesce=coalesce)
    except NodeBootError as exc:
        failed, now = ctx.store.get_node(instance_id), ctx.store.get_cluster(cluster_id)
        if now is not None and p.releasing(now):  # interrupted (InterruptNode): the node goes anyway
            log.info("node %s: boot stopped, cluster %s is %s (%s)", instance_id, now.name, now.status.value,
                     exc.message)
        elif failed is not None and failed.status == InstanceStatus.PENDING:
            boot_failed(ctx, cluster, failed, exc)
        return None
    if not isinstance(done, NodeRecord):
        return None
    if not coalesce:
        done, fresh = ctx.store.get_node(instance_id), ctx.store.get_cluster(cluster_id)
        if done is None or fresh is None or done.status != InstanceStatus.PENDING:
            return None
        cluster = fresh
    final, evs = booted(ctx, cluster, done)
    try:
        ctx.store.update_node(final, evs)
    except VersionConflict:
        return None  # changed meanwhile (e.g. being deleted): the next pass plans from the stored record
    log_booted(final)
    return None


def booted(ctx: Context, cluster: ClusterRecord, done: NodeRecord) -> tuple[NodeRecord, list[EventRecord]]:
    """A node whose phases are all done, as it is to be written (Running, or DeepHealthCheckInProgress when its
    group checks nodes on start), and the events of that write."""
    group = cluster.spec.group(done.group)
    check = dh.on_start_request(group, ctx.clock.now()) if group is not None else None
    provisioned = ctx.event(cluster, ev.instance_provisioned(cluster.name, done.group, done.instance_id))
    if check is not None:  # OnStartDeepHealthChecks: checked before it takes jobs (workers.deep_health)
        return (node_to(done, InstanceStatus.DEEP_HEALTH_CHECK_IN_PROGRESS, message=None,
                        data=dh.with_request(done.data, check)),
                [provisioned, ctx.event(cluster, ev.dhc_started(done.group, done.instance_id,
                                                                [c.value for c in check.checks]))])
    return node_to(done, InstanceStatus.RUNNING, message=None), [provisioned]


def log_booted(node: NodeRecord) -> None:
    log.info("node %s (%s %s): Pending -> %s", node.instance_id, node.group, node.hostname, node.status.value)


def boot_failed(ctx: Context, cluster: ClusterRecord, node: NodeRecord, exc: NodeBootError) -> None:
    metrics.record_launch_failure(exc)
    if cluster.spec.continuous:
        # Desired state: every failure is retried asynchronously with capped exponential backoff.
        delay = min(ctx.timeouts.max_backoff, ctx.timeouts.retry_delay * (2 ** min(node.attempts, 8)))
        ctx.store.update_node(
            replace(node, attempts=node.attempts + 1, next_attempt=ctx.clock.now() + delay, message=exc.message),
            [ctx.event(cluster, ev.instance_launch_retry(cluster.name, node.group, node.instance_id, delay,
                                                         exc.message))],
        )
        return
    ctx.store.update_node(
        node_to(node, InstanceStatus.FAILURE, message=exc.message, attempts=node.attempts + 1),
        [ctx.event(cluster, ev.instance_failed(cluster.name, node.group, node.instance_id, exc.message))],
    )
    log.info("node %s (%s): Pending -> Failure (%s)", node.instance_id, node.group, exc.message)
