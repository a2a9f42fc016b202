"""Prometheus metrics served at ``/metrics`` (text exposition format).

Two kinds:

* process-wide instruments in ``REGISTRY``, updated where things happen: API request latency by operation
  and code (``api.app``), reconcile pass duration (``Reconciler.run_once``), provider launch failures by
  reason (``Reconciler._boot_failed``), plus the standard ``process_*`` collector;
* gauges computed from the store at scrape time (``slurmpod.store.collector.StoreCollector``, passed to
  ``render``): clusters and nodes by status and the cluster operations in flight.

This module is a leaf (prometheus_client only): the reconciler and the API import it without SQLAlchemy.

Label values are bounded: operations outside the implemented set are reported as ``other`` by the caller,
failure reasons are a small fixed vocabulary (``launch_failure_reason``), statuses are enum values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = [
    "API_LATENCY",
    "CONTENT_TYPE",
    "LAUNCH_FAILURES",
    "LEASE_CHANGES",
    "NODE_FAULTS",
    "OWNED_CLUSTERS",
    "RECONCILE_PASS",
    "RECONCILER_FAMILIES",
    "REGISTRY",
    "launch_failure_reason",
    "observe_request",
    "record_launch_failure",
    "record_node_fault",
    "render",
    "render_reconciler",
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
LEASE_CHANGES = Counter(
    "slurmpod_lease_changes",
    "Cluster leases this server acquired, lost (taken over by another server) or released (several servers).",
    ["change"],
    registry=REGISTRY,
)
OWNED_CLUSTERS = Gauge(
    "slurmpod_owned_clusters",
    "Clusters this server holds the lease of (reconciles); every cluster with a single server on SQLite.",
    registry=REGISTRY,
)
LAUNCH_FAILURES = Counter(
    "slurmpod_provider_launch_failures",
    "Node launches that failed (each failed attempt), by reason.",
    ["reason"],
    registry=REGISTRY,
)

NODE_FAULTS = Counter(
    "slurmpod_node_faults",
    "Faults the nodes' health agents found (each marked node), by fault type and repair action.",
    ["fault", "action"],
    registry=REGISTRY,
)
#: fault types the health agents report (slurmpod/node/checks.py); anything else is counted as ``other``
FAULT_TYPES = frozenset({"NvidiaGPUUnhealthy", "NvidiaGPUCountMismatch", "SlurmdUnresponsive", "MungeUnhealthy",
                         "DiskFull", "DiskUnhealthy", "MemoryPressure", "MemoryUnhealthy"})


def record_node_fault(fault: str, action: str) -> None:
    NODE_FAULTS.labels(fault=fault if fault in FAULT_TYPES else "other",
                       action=action if action in ("Replace", "Reboot") else "other").inc()


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


#: the reconciler's instruments: rendered by the reconciler's process when it is not the API's
#: (``slurmpod.background.ReconcilerProcess``)
RECONCILER_FAMILIES = frozenset({"slurmpod_reconcile_pass_duration_seconds", "slurmpod_lease_changes",
                                 "slurmpod_owned_clusters", "slurmpod_provider_launch_failures",
                                 "slurmpod_node_faults"})


class _Families:
    """``REGISTRY``'s families whose name is (``keep``) or is not in ``names``."""

    def __init__(self, names: frozenset[str], keep: bool) -> None:
        self.names = names
        self.keep = keep

    def collect(self) -> Iterator[Metric]:
        return (m for m in REGISTRY.collect() if (m.name in self.names) == self.keep)


def render(*collectors: Collector, reconciler: bytes | None = None) -> bytes:
    """The whole exposition: the process-wide instruments, then ``collectors`` (e.g. ``store.collector``'s
    gauges), each collected at scrape time. ``reconciler``: the reconciler's instruments as its own process
    rendered them (``render_reconciler``), in place of this process's."""
    scrape = CollectorRegistry()
    for collector in collectors:
        scrape.register(collector)
    if reconciler is None:
        return generate_latest(REGISTRY) + generate_latest(scrape)
    mine = CollectorRegistry()
    mine.register(_Families(RECONCILER_FAMILIES, keep=False))
    return generate_latest(mine) + reconciler + generate_latest(scrape)


def render_reconciler() -> bytes:
    """The reconciler's instruments alone (its process's side of ``render(reconciler=...)``)."""
    only = CollectorRegistry()
    only.register(_Families(RECONCILER_FAMILIES, keep=True))
    return generate_latest(only)
