"""Topology changes: rewrite slurm.conf on the controllers under the cluster's SlurmConfigStrategy; a Managed
cluster whose live conf drifted fails the update instead (and rolls back; nothing on the cluster changes)."""

from __future__ import annotations

import functools
import logging

from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord
from slurmpod.domain.status import ClusterStatus, EventLevel
from slurmpod.domain.transitions import cluster_to
from slurmpod.reconciler.runtime import TopologyDriftError
from slurmpod.reconciler.work import Context, Park, with_topology

log = logging.getLogger("slurmpod.reconciler")


def apply_topology(ctx: Context, cluster_id: str) -> Park | None:
    cluster = ctx.store.get_cluster(cluster_id)
    if cluster is None:
        return None
    try:
        digest = ctx.runtime.apply_topology(cluster, ctx.store.list_nodes(cluster_id))
    except TopologyDriftError as exc:
        drift_detected(ctx, cluster_id, exc)
        return None
    ctx.update_cluster_with(cluster_id, functools.partial(with_topology, topology=digest))
    ctx.add_events(cluster, ev.slurm_reconfigured())
    log.info("cluster %s: slurm topology applied (%s)", cluster.name, digest[:12])
    return None


def drift_detected(ctx: Context, cluster_id: str, exc: TopologyDriftError) -> None:
    message = ev.drift_message(exc.drift)

    def fail(c: ClusterRecord) -> ClusterRecord | None:
        if c.status != ClusterStatus.UPDATING or c.last_good_spec is None:
            return None
        return cluster_to(c, ClusterStatus.ROLLING_BACK, spec=c.last_good_spec, failure_message=message)

    cluster = ctx.update_cluster_with(cluster_id, fail)
    if cluster is not None:
        ctx.add_events(
            cluster,
            ev.drift_detected(exc.drift),
            ev.cluster_event(cluster.name, "update", "failed", level=EventLevel.ERROR, failure=message),
        )
    log.warning("cluster %s: %s", cluster_id, message)
