"""Store gauges for ``/metrics``, computed at scrape time: clusters and nodes by status and the cluster operations
in flight. They are exact, never stale, and cost two ``GROUP BY`` queries per scrape (all accounts, no names:
counts only). Pass a ``StoreCollector`` to ``slurmpod.observability.metrics.render``."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from slurmpod.domain.status import ClusterStatus, InstanceStatus
from slurmpod.observability import metrics
from slurmpod.store import tables

__all__ = ["StoreCollector", "render"]

# Cluster status -> the operation a cluster in that status is carrying out.
_IN_FLIGHT = {
    ClusterStatus.CREATING.value: "CreateCluster",
    ClusterStatus.UPDATING.value: "UpdateCluster",
    ClusterStatus.SYSTEM_UPDATING.value: "UpdateClusterSoftware",
    ClusterStatus.ROLLING_BACK.value: "Rollback",
    ClusterStatus.DELETING.value: "DeleteCluster",
}


class StoreCollector(Collector):
    """Gauges read from the store on every scrape."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _counts(self) -> tuple[dict[str, int], dict[str, int]]:
        with self.engine.connect() as conn:
            cl = conn.execute(
                select(tables.clusters.c.status, func.count()).group_by(tables.clusters.c.status)).all()
            nd = conn.execute(select(tables.nodes.c.status, func.count()).group_by(tables.nodes.c.status)).all()
        return {str(k): int(v) for k, v in cl}, {str(k): int(v) for k, v in nd}

    def collect(self) -> Iterator[Metric]:
        clusters, nodes = self._counts()
        c = GaugeMetricFamily("slurmpod_clusters", "Clusters by status.", labels=["status"])
        for s in ClusterStatus:
            c.add_metric([s.value], clusters.get(s.value, 0))
        yield c
        n = GaugeMetricFamily("slurmpod_nodes", "Nodes (instances) by status.", labels=["status"])
        for st in InstanceStatus:
            n.add_metric([st.value], nodes.get(st.value, 0))
        yield n
        o = GaugeMetricFamily("slurmpod_operations_in_flight",
                              "Cluster operations being carried out now, by operation.", labels=["operation"])
        for status, op in _IN_FLIGHT.items():
            o.add_metric([op], clusters.get(status, 0))
        yield o


def render(engine: Engine, reconciler: bytes | None = None) -> bytes:
    """The whole exposition of this server: process-wide instruments, then the store gauges of ``engine``;
    ``reconciler``: the reconciler's instruments from its own process (``metrics.render``)."""
    return metrics.render(StoreCollector(engine), reconciler=reconciler)
