"""Compatibility shim: the instruments moved to ``slurmpod.observability.metrics`` (the store gauges to
``slurmpod.store.collector``). Kept only for ``slurmpod.reconciler`` (loop.py: ``from slurmpod import metrics``)
until its import is switched; delete it then."""

from slurmpod.observability.metrics import (
    API_LATENCY,
    CONTENT_TYPE,
    LAUNCH_FAILURES,
    RECONCILE_PASS,
    REGISTRY,
    launch_failure_reason,
    observe_request,
    record_launch_failure,
    render,
)

__all__ = [
    "API_LATENCY",
    "CONTENT_TYPE",
    "LAUNCH_FAILURES",
    "RECONCILE_PASS",
    "REGISTRY",
    "launch_failure_reason",
    "observe_request",
    "record_launch_failure",
    "render",
]
