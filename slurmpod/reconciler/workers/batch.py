"""Booting and removing many nodes per work item, for a runtime whose boot phases are cheap and idempotent
(``checkpoint_every_phase = False``: the simulated one).

One read of the batch's nodes and cluster, their phases run in memory, one transaction writes them all (each
version-checked: a node changed meanwhile is skipped and planned again from its stored record). A crash before that
write simply reruns the phases: a launch is idempotent on the instance id, which was recorded before it. A runtime
that checkpoints every phase (real nodes) keeps one work item per node (``boot.boot``, ``removal.remove``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import replace

from slurmpod.domain.model import PHASES, ClusterRecord, EventRecord, NodeRecord
from slurmpod.domain.status import ClusterStatus, InstanceStatus
from slurmpod.reconciler import plan as p
from slurmpod.reconciler.runtime import NodeBootError
from slurmpod.reconciler.work import Context, Park, with_topology
from slurmpod.reconciler.workers import removal
from slurmpod.reconciler.workers.boot import GATE_CLOSED, boot_failed, booted, log_booted, step

log = logging.getLogger("slurmpod.reconciler")

RESUME_KEY = "resume_on_join"


class _Controllers:
    """The cluster's controller records, read once per batch and kept current with the batch's own progress:
    the baseline and daemons gates of every node of the batch ask them (``plan.may_start_*``)."""

    def __init__(self, ctx: Context, cluster: ClusterRecord) -> None:
        self._ctx = ctx
        self.groups = set(p.controller_groups(cluster.spec))
        self._nodes: dict[str, NodeRecord] | None = None

    def _all(self, cluster_id: str) -> dict[str, NodeRecord]:
        if self._nodes is None:
            self._nodes = {n.instance_id: n for n in self._ctx.store.list_nodes(cluster_id, sorted(self.groups))}
        return self._nodes

    def note(self, node: NodeRecord) -> None:
        if node.group in self.groups:
            self._all(node.cluster_id)[node.instance_id] = node

    def baseline_open(self, cluster: ClusterRecord) -> bool:
        return p.may_start_baseline(cluster, list(self._all(cluster.cluster_id).values()))

    def daemons_open(self, cluster: ClusterRecord, node: NodeRecord) -> bool:
        return p.may_start_daemons(cluster, node.group, list(self._all(cluster.cluster_id).values()),
                                   self._ctx.runtime.desired_topology(cluster))


def _phases(ctx: Context, cluster: ClusterRecord, node: NodeRecord, ctls: _Controllers, view: Sequence[NodeRecord]
            ) -> tuple[NodeRecord, list[EventRecord], ClusterRecord, bool]:
    """Runs the node's remaining phases in memory: (node, events, cluster, all phases done). Raises NodeBootError."""
    current, cid = node, node.cluster_id
    evs: list[EventRecord] = []
    for phase in PHASES:
        if phase in current.phases:
            continue
        if phase == "joined" and current.data.get(RESUME_KEY):
            ctx.runtime.resume(cluster, current, view)
            current = replace(current, data={k: v for k, v in current.data.items() if k != RESUME_KEY})
        if (phase == "baseline" and not ctls.baseline_open(cluster)) or (
                phase == "daemons" and not ctls.daemons_open(cluster, current)):
            return current, evs, cluster, False
        current, step_evs, topology, _ = step(ctx, cluster, current, phase, view)
        evs += step_evs
        ctls.note(current)
        if topology:
            cluster = ctx.update_cluster_with(cid, functools.partial(with_topology, topology=str(topology))) or cluster
    return current, evs, cluster, True


def boot_batch(ctx: Context, cluster_id: str, instance_ids: Sequence[str]) -> Park | None:
    """Boots the Pending nodes among ``instance_ids`` as far as their gates let them, in one write."""
    cluster = ctx.store.get_cluster(cluster_id)
    if cluster is None:
        return None
    found = ctx.store.get_nodes(instance_ids)
    ctls = _Controllers(ctx, cluster)
    view = ctx.store.node_view(cluster_id)  # read only if the runtime looks at the nodes
    writes: list[tuple[NodeRecord, Sequence[EventRecord]]] = []
    gate_closed = False
    with ctx.runtime.batch():  # the launches are durable at the provider when it ends, before they are recorded
        for iid in instance_ids:
            node = found.get(iid)
            if node is None or node.status != InstanceStatus.PENDING:
                continue
            try:
                current, evs, cluster, done = _phases(ctx, cluster, node, ctls, view)
            except NodeBootError as exc:
                boot_failed(ctx, cluster, node, exc)  # nothing of this node's progress was written yet
                continue
            if done:
                current, final_evs = booted(ctx, cluster, current)
                evs += final_evs
                ctls.note(current)
            else:
                gate_closed = True
            if current != node:
                writes.append((current, evs))
    for stored in ctx.store.update_nodes(writes):  # a node changed meanwhile is skipped: the plan sees it again
        if stored is not None and stored.status != InstanceStatus.PENDING:
            log_booted(stored)
    return GATE_CLOSED if gate_closed else None


def remove_batch(ctx: Context, cluster_id: str, instance_ids: Sequence[str]) -> Park | None:
    """Removes nodes of a cluster being deleted (nothing to drain, no successor): every instance terminated, then
    the records deleted in one transaction. Any other removal takes the per-node path (``removal.remove``)."""
    cluster = ctx.store.get_cluster(cluster_id)
    if cluster is None:
        return None
    if cluster.status != ClusterStatus.DELETING:  # not planned so; per node, should it happen
        parks = [pk for pk in (removal.remove(ctx, cluster_id, iid) for iid in instance_ids) if pk is not None]
        return min(parks, key=lambda pk: pk.seconds) if parks else None
    found = ctx.store.get_nodes(instance_ids)
    view = ctx.store.node_view(cluster_id)
    gone = []
    with ctx.runtime.batch():
        for iid in instance_ids:
            node = found.get(iid)
            if node is None:
                continue
            if not node.data.get("terminated"):
                ctx.runtime.remove_node(cluster, node, view)
            gone.append(iid)
    ctx.store.delete_nodes(gone)
    log.info("cluster %s: %d node(s) ShuttingDown -> terminated", cluster.name, len(gone))
    return None
