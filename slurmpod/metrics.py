"""Prometheus metrics served at ``/metrics`` (text exposition format).

Two kinds:

* process-wide instruments in ``REGISTRY``, updated where things happen: API request latency by operation
  and code (``api.app``), reconcile pass duration (``Reconciler.run_once``), provider launch failures by
  reason (``Reconciler._boot_failed``), plus the standard ``process_*`` collector;
* gauges computed from the store at scrape time (``StoreCollector``): clusters and nodes by status and the
  cluster operations in flight. They are exact, never stale, and cost two ``GROUP BY`` queries per scrape.

Label values are bounded: operations outside the implemented set are reported as ``other`` by the caller,
failure reasons are a small fixed vocabulary (``launch_failure_reason``), statuses are enum values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from slurmpod.domain.status import ClusterStatus, InstanceStatus
from slurmpod.store import tables

__all__ = [
    "API_LATENCY",
    "CONTENT_TYPE",
    "LAUNCH_FAILURES",
    "RECONCILE_PASS",
    "REGISTRY",
    "StoreCollector",
    "launch_failure_reason",
    "observe_request",
    "record_launch_failure",
    "render",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

API_LATENCY = Histogram(
    "slurmpod_api_request_duration_seconds",
    "API request latency (POST /) by operation and result code (OK or the error code).",
    ["operation", "code"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
RECONCILE_PASS = Histogram(
    "slurmpod_reconcile_pass_duration_seconds",
    "Duration of one reconcile pass over every cluster.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=REGISTRY,
)
LAUNCH_FAILURES = Counter(
    "slurmpod_provider_launch_failures",
    "Node launches that failed (each failed attempt), by reason.",
    ["reason"],
    registry=REGISTRY,
)

# Cluster status -> the operation a cluster in that status is carrying out.
_IN_FLIGHT = {
    ClusterStatus.CREATING.value: "CreateCluster",
    ClusterStatus.UPDATING.value: "UpdateCluster",
    ClusterStatus.SYSTEM_UPDATING.value: "UpdateClusterSoftware",
    ClusterStatus.ROLLING_BACK.value: "Rollback",
    ClusterStatus.DELETING.value: "DeleteCluster",
}


class BootFailure(Protocol):
    message: str
    retryable: bool


def observe_request(operation: str, code: str, seconds: float) -> None:
    """One API request; ``operation`` must already be bounded (an implemented operation, ``other`` or ``-``)."""
    API_LATENCY.labels(operation=operation, code=code).observe(seconds)


def launch_failure_reason(exc: BootFailure) -> str:
    """A small fixed vocabulary: capacity, internal, lifecycle_script, slurm, image, launch."""
    text = exc.message.lower()
    if exc.retryable or "capacity" in text:
        return "capacity"
    if text.startswith("internal error"):
        return "internal"
    if "lifecycle" in text or "script" in text or "on_create" in text or "oncreate" in text:
        return "lifecycle_script"
    if "slurm" in text or "controller" in text or "join" in text:
        return "slurm"
    if "image" in text or "root volume" in text:
        return "image"
    return "launch"


def record_launch_failure(exc: BootFailure) -> None:
    LAUNCH_FAILURES.labels(reason=launch_failure_reason(exc)).inc()


class StoreCollector(Collector):
    """Gauges read from the store on every scrape (all accounts, no names: counts only)."""

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


def render(engine: Engine) -> bytes:
    """The whole exposition: process-wide instruments, then the store gauges of this server."""
    scrape = CollectorRegistry()
    scrape.register(StoreCollector(engine))
    return generate_latest(REGISTRY) + generate_latest(scrape)
