"""Many nodes per work item, for a runtime whose boot phases are cheap (``checkpoint_every_phase = False``).

The plan still says what to do per node (``BootNode``, ``RemoveNode``); this groups those actions of one pass into
work items of up to ``BATCH`` nodes (``workers.batch``), so 10,000 simulated nodes cost a few hundred store
transactions instead of tens of thousands. Batches are small enough that every worker gets some at scale; a
seed-size cluster boots in one item (its controller and computes in one write).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence

from slurmpod.domain.model import ClusterRecord, EventRecord, NodeRecord
from slurmpod.domain.status import ClusterStatus, InstanceStatus
from slurmpod.reconciler import apply
from slurmpod.reconciler import plan as p
from slurmpod.reconciler.work import Context, WorkPool
from slurmpod.reconciler.workers import batch

log = logging.getLogger("slurmpod.reconciler")

BATCH = 64  # nodes per work item at most
MIN_BATCH = 16  # and at least this many (when there are): a seed-size cluster boots in one item


def chunks(ids: Sequence[str], workers: int) -> list[list[str]]:
    """``ids`` in order, cut into pieces of ``MIN_BATCH`` to ``BATCH``: as many pieces as ``workers`` when that
    is possible within those bounds."""
    size = max(MIN_BATCH, min(BATCH, math.ceil(len(ids) / max(1, workers))))
    return [list(ids[i:i + size]) for i in range(0, len(ids), size)]


def submit_batches(ctx: Context, pool: WorkPool, cluster: ClusterRecord, actions: Sequence[p.Action],
                   obs: p.Observation) -> list[p.Action]:
    """Submits the pass's ``BootNode`` actions (and a deleted cluster's ``RemoveNode`` actions) in batches; returns
    the other actions, for the loop to dispatch one by one."""
    boots = [a.instance_id for a in actions if isinstance(a, p.BootNode)]
    deleting = cluster.status == ClusterStatus.DELETING
    removes = [a for a in actions if isinstance(a, p.RemoveNode)] if deleting else []
    cid = cluster.cluster_id
    for ids in chunks(boots, pool.max_workers):
        pool.submit_batch(cid, ids, functools.partial(batch.boot_batch, ctx, cid))
    if removes:
        _remove(ctx, pool, cluster, removes, obs)
    return [a for a in actions if not isinstance(a, p.BootNode) and not (deleting and isinstance(a, p.RemoveNode))]


def _remove(ctx: Context, pool: WorkPool, cluster: ClusterRecord, removes: list[p.RemoveNode],
            obs: p.Observation) -> None:
    """ShuttingDown in one write (as ``apply.mark_removing`` writes each), then the removal in batches."""
    writes: list[tuple[NodeRecord, Sequence[EventRecord]]] = []
    ready: list[str] = []
    for a in removes:
        node = obs.node(a.instance_id)
        if node is None or node.instance_id in obs.busy:
            continue
        if node.status == InstanceStatus.SHUTTING_DOWN:
            ready.append(node.instance_id)
        else:
            writes.append(apply.removing(ctx, cluster, node, a.reason, replaced=a.replaced))
    stored = ctx.store.update_nodes(writes)
    ready += [n.instance_id for n in stored if n is not None]
    if writes:
        log.info("cluster %s: %d node(s) -> ShuttingDown (%s)", cluster.name, len(writes), removes[0].reason)
    cid = cluster.cluster_id
    for ids in chunks(ready, pool.max_workers):
        pool.submit_batch(cid, ids, functools.partial(batch.remove_batch, ctx, cid))
