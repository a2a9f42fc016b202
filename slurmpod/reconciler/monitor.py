"""The health monitor: observes every cluster off the loop thread and applies ``plan_health``'s decisions.

Each cluster has at most one observation in flight, on a small pool of its own (not the boot workers): a cluster
whose Slurm commands hang delays only its own health checks, never another cluster's reconcile pass. Restoring a
dead accounting host (up to a minute and a half) runs in that cluster's observation too, for the same reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from slurmpod.domain.model import ClusterRecord
from slurmpod.domain.status import ClusterStatus, InstanceStatus
from slurmpod.domain.transitions import node_to
from slurmpod.errors import LeaseLost, VersionConflict
from slurmpod.observability import metrics
from slurmpod.reconciler.health import HealthPlan, HealthReport, NodeChange, plan_health
from slurmpod.reconciler.work import Context

log = logging.getLogger("slurmpod.health")

#: statuses whose instances are watched (leaks everywhere but while deleting; node health only InService)
WATCHED = (ClusterStatus.IN_SERVICE, ClusterStatus.CREATING, ClusterStatus.UPDATING, ClusterStatus.SYSTEM_UPDATING,
           ClusterStatus.ROLLING_BACK)


def observe(ctx: Context, cluster: ClusterRecord) -> HealthReport:
    """What the runtime sees of ``cluster`` now (instances, slurmd, Slurm's requests, cluster services)."""
    rt = ctx.runtime
    if cluster.status != ClusterStatus.IN_SERVICE:
        return HealthReport(alive=dict(rt.alive(cluster)), service_ids=frozenset(rt.service_instances(cluster)))
    services = tuple(rt.heal_services(cluster))
    alive = dict(rt.alive(cluster))
    nodes = ctx.store.list_nodes(cluster.cluster_id)
    running = [n for n in nodes if n.status == InstanceStatus.RUNNING and alive.get(n.instance_id, True)]
    return HealthReport(alive=alive, service_ids=frozenset(rt.service_instances(cluster)),
                        unreachable=frozenset(rt.unreachable(cluster, running)),
                        requests=dict(rt.slurm_requests(cluster, nodes)), services=services)


class HealthMonitor:
    def __init__(self, ctx: Context, busy_for: Callable[[str], frozenset[str]], *, workers: int = 4) -> None:
        self.ctx = ctx
        self.busy_for = busy_for
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="slurmpod-health")
        self._in_flight: set[str] = set()
        self._lock = threading.Lock()
        self._suspects: dict[str, frozenset[str]] = {}
        self._leak_suspects: dict[str, frozenset[str]] = {}
        self._last_leak_check: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.checks = 0  # completed observations (tests)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="slurmpod-health", daemon=True)
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        self._stop.set()
        if self._thread is not None and wait:
            self._thread.join(timeout=30)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.check_all()
            except Exception:
                log.exception("health pass failed")
            self._stop.wait(self.ctx.timeouts.health_interval)

    def check_all(self) -> None:
        """Submits one observation per watched cluster that has none in flight and is due one (the rows read in
        one store call: 1,000 booting clusters were one read and one pool task each per interval, only to find
        their leak check not due)."""
        owned = [cid for cid in self.ctx.store.cluster_ids() if self.ctx.owns(cid)]
        rows = self.ctx.store.get_clusters(owned) if owned else {}
        now = time.monotonic()
        for cid in owned:
            cluster = rows.get(cid)
            if (cluster is not None and cluster.status in WATCHED and cluster.status != ClusterStatus.IN_SERVICE
                    and not self._leak_check_due(cid, now)):
                continue
            with self._lock:
                if cid in self._in_flight:
                    continue
                self._in_flight.add(cid)
            self._pool.submit(self._check_quietly, cid)

    def _leak_check_due(self, cluster_id: str, now: float) -> bool:
        """The leak guard's two sightings are ``leak_interval / 2`` apart at least."""
        return now - self._last_leak_check.get(cluster_id, 0.0) >= self.ctx.timeouts.leak_interval / 2

    def _check_quietly(self, cluster_id: str) -> None:
        try:
            self.check(cluster_id)
        except LeaseLost as exc:  # another server took the cluster over
            log.info("health check stopped: %s", exc)
        except Exception:
            log.exception("health check of cluster %s failed", cluster_id)
        finally:
            with self._lock:
                self._in_flight.discard(cluster_id)

    def check(self, cluster_id: str) -> HealthPlan | None:
        """Observes one cluster and applies the decisions (synchronously: tests call this)."""
        cluster = self.ctx.store.get_cluster(cluster_id)
        if cluster is None or cluster.status not in WATCHED:
            self._suspects.pop(cluster_id, None)
            self._leak_suspects.pop(cluster_id, None)
            self._last_leak_check.pop(cluster_id, None)
            return None
        t0 = time.monotonic()
        if cluster.status != ClusterStatus.IN_SERVICE:
            # only the leak guard applies (two sightings apart): no need to read every node every interval
            if not self._leak_check_due(cluster_id, t0):
                return None
            self._last_leak_check[cluster_id] = t0
        report = observe(self.ctx, cluster)
        took = time.monotonic() - t0
        if took > self.ctx.timeouts.health_observe:
            log.warning("cluster %s: health observation took %.0f s", cluster.name, took)
        # read after observing: every instance the provider showed already had its record (ids are stored first)
        cluster = self.ctx.store.get_cluster(cluster_id)
        if cluster is None:
            return None
        nodes = tuple(self.ctx.store.list_nodes(cluster_id))
        plan = plan_health(report, cluster, nodes, self._suspects.get(cluster_id, frozenset()),
                           self.busy_for(cluster_id), self._leak_suspects.get(cluster_id, frozenset()))
        self._suspects[cluster_id] = plan.suspects
        self._leak_suspects[cluster_id] = plan.leak_suspects
        self.checks += 1
        self.apply(cluster, plan)
        return plan

    def apply(self, cluster: ClusterRecord, plan: HealthPlan) -> None:
        for iid in plan.leaks:
            log.warning("cluster %s: terminating leaked instance %s", cluster.name, iid)
            self.ctx.runtime.terminate_instance(cluster, iid)
        if plan.events:
            self.ctx.add_events(cluster, *plan.events)
            for d in plan.events:
                log.warning("cluster %s: %s", cluster.name, d.description)
        changed = False
        for change in plan.changes:
            changed = self._apply_change(cluster, change) or changed
        if changed:
            self.ctx.wake()

    def _apply_change(self, cluster: ClusterRecord, change: NodeChange) -> bool:
        node = self.ctx.store.get_node(change.instance_id)
        if node is None or node.version != change.version:
            return False  # changed since the observation: the next one decides again
        data = {k: v for k, v in node.data.items() if k not in change.drop_data}
        data.update(change.set_data)
        new = (node_to(node, InstanceStatus.FAILURE, message=change.fail_message, data=data)
               if change.fail_message else replace(node, data=data))
        try:
            self.ctx.store.update_node(new, self.ctx.events(cluster, change.events))
        except VersionConflict:
            return False
        if change.fault is not None:
            metrics.record_node_fault(*change.fault)
        for note in change.notifications:
            self.ctx.notifier.notify(cluster, note, self.ctx.clock.now())
            log.warning("cluster %s: %s", cluster.name, note.description)
        return True
