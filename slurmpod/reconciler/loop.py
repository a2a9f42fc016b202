"""The reconcile loop: observe (store + in-flight work) -> plan (pure) -> apply (store writes, workers).

One thread plans every cluster in turn; store-only actions are applied on it (``apply.py``), slow work runs in
the worker pool (``workers/``), each worker checkpointing progress in the store so a server killed at any moment
resumes from the last completed step and never launches an instance twice (instance ids are recorded before any
launch, and providers are idempotent on them). Health observation runs on its own threads (``monitor.py``): the
loop thread never waits for a node.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from slurmpod.clock import Clock
from slurmpod.domain import deep_health as dh
from slurmpod.domain.model import ClusterRecord
from slurmpod.domain.status import ClusterStatus, InstanceStatus
from slurmpod.errors import LeaseLost, VersionConflict
from slurmpod.notify import Notifier
from slurmpod.observability import metrics
from slurmpod.reconciler import apply, batching, rolling
from slurmpod.reconciler import plan as p
from slurmpod.reconciler.monitor import HealthMonitor
from slurmpod.reconciler.runtime import ClusterRuntime
from slurmpod.reconciler.work import Context, ImageLookup, Timeouts, WorkPool
from slurmpod.reconciler.workers import boot, deep_health, nodeops, removal, topology, update
from slurmpod.store.protocol import Store

log = logging.getLogger("slurmpod.reconciler")

QUIET_REPLAN = 30.0  # a skipped (unchanged, settled) cluster is planned again at least this often
PASS_CHUNK = 25  # clusters whose rows (and quiet ones' node fingerprints) a pass reads in one store call each
CAPACITY_KEY = "capacity"

#: action -> what to do with it: an applier returns the cluster as stored (or None when it did not write it)
Dispatch = Callable[["Reconciler", ClusterRecord, Any, p.Observation], ClusterRecord | None]


def _submit(worker: Callable[[Context, str, str], Any], key_of: Callable[[Any], str]) -> Dispatch:
    def dispatch(rec: Reconciler, cluster: ClusterRecord, action: Any, obs: p.Observation) -> None:
        key = key_of(action)
        rec.pool.submit(cluster.cluster_id, key, functools.partial(worker, rec.ctx, cluster.cluster_id, key))

    return dispatch


def _store_only(fn: Callable[[Context, ClusterRecord, Any], ClusterRecord]) -> Dispatch:
    return lambda rec, cluster, action, obs: fn(rec.ctx, cluster, action)


def _remove(rec: Reconciler, cluster: ClusterRecord, action: p.RemoveNode, obs: p.Observation) -> None:
    node = obs.node(action.instance_id)
    if node is None or node.instance_id in obs.busy:
        return
    apply.mark_removing(rec.ctx, cluster, node, action.reason, replaced=action.replaced)
    rec.pool.submit(cluster.cluster_id, node.instance_id,
                    functools.partial(removal.remove, rec.ctx, cluster.cluster_id, node.instance_id))


def _interrupt(rec: Reconciler, cluster: ClusterRecord, action: p.InterruptNode, obs: p.Observation) -> None:
    node = obs.node(action.instance_id)
    if node is not None:
        rec.ctx.runtime.interrupt(cluster, node)


def _create(rec: Reconciler, cluster: ClusterRecord, action: p.CreateNodes, obs: p.Observation) -> None:
    apply.create_nodes(rec.ctx, cluster, action)


def _creates_together(actions: list[Any]) -> list[Any]:
    """``actions`` with the pass's ``CreateNodes`` of every group as one (where the first was): one store write
    (and one seq read) for a new cluster's groups instead of one each."""
    creates = [a for a in actions if isinstance(a, p.CreateNodes)]
    if len(creates) < 2:
        return actions
    first = actions.index(creates[0])
    rest = [a for a in actions if not isinstance(a, p.CreateNodes)]
    return [*rest[:first], _Creates(tuple(creates)), *rest[first:]]


@dataclasses.dataclass(frozen=True)
class _Creates:
    actions: tuple[p.CreateNodes, ...]


def _create_all(rec: Reconciler, cluster: ClusterRecord, action: _Creates, obs: p.Observation) -> None:
    apply.create_nodes(rec.ctx, cluster, *action.actions)


def _set_status(rec: Reconciler, cluster: ClusterRecord, action: p.SetStatus, obs: p.Observation
                ) -> ClusterRecord | None:
    if action.status == ClusterStatus.FAILED and cluster.last_good_spec is None:
        # a failed creation releases its cluster-level resources first: slow, so a worker
        rec.pool.submit(cluster.cluster_id, "teardown",
                        functools.partial(removal.release_failed_creation, rec.ctx, cluster.cluster_id, action))
        return None
    return apply.set_status(rec.ctx, cluster, action)


DISPATCH: dict[type, Dispatch] = {
    p.CreateNodes: _create,
    _Creates: _create_all,
    p.BootNode: _submit(boot.boot, lambda a: a.instance_id),
    p.RemoveNode: _remove,
    p.InterruptNode: _interrupt,
    p.ApplyTopology: _submit(lambda ctx, cid, _k: topology.apply_topology(ctx, cid), lambda a: "topology"),
    p.SetStatus: _set_status,
    p.NodeOp: _submit(nodeops.node_op, lambda a: a.instance_id),
    p.DeepHealthCheckGroup: _submit(deep_health.check_group, lambda a: dh.worker_key(a.group)),
    p.UpdateGroups: _store_only(apply.update_groups),
    p.FinishDelete: _submit(lambda ctx, cid, _k: removal.finish_delete(ctx, cid), lambda a: "delete"),
    rolling.StartNodeUpdates: _store_only(apply.start_node_updates),
    rolling.ResumeNodeUpdate: _submit(update.update_node, lambda a: a.instance_id),
    rolling.SetSoftwareUpdate: _store_only(apply.set_software_update),
    rolling.BeginScheduledUpdate: _store_only(apply.begin_scheduled_update),
    rolling.FinishSoftwareUpdate: _store_only(apply.finish_software_update),
}


class _PassImages:
    """The image catalogue's answers, read once per reconcile pass (``clear`` at its start): creating a cluster's
    nodes read the catalogue setting twice per group."""

    def __init__(self, lookup: ImageLookup) -> None:
        self._lookup = lookup
        self._memo: dict[str | None, tuple[str, str]] = {}

    def clear(self) -> None:
        self._memo = {}

    def __call__(self, image_id: str | None) -> tuple[str, str]:
        memo = self._memo
        if image_id not in memo:
            memo[image_id] = self._lookup(image_id)
        return memo[image_id]


class Reconciler:
    def __init__(
        self,
        store: Store,
        runtime: ClusterRuntime,
        clock: Clock,
        *,
        interval: float = 2.0,
        max_workers: int = 8,
        min_count_timeout: float = p.DEFAULT_MIN_COUNT_TIMEOUT,
        retry_delay: float = 2.0,
        drain_timeout: float = 3600.0,
        health_interval: float = 5.0,
        notifier: Notifier | None = None,
        image_lookup: ImageLookup | None = None,
        image: tuple[str, str] = ("ami-00000000000000000", "0.0.0"),
        health_workers: int = 4,
        dhc_busy_timeout: float = dh.DEFAULT_BUSY_TIMEOUT,
        dhc_stress_seconds: float = dh.DEFAULT_STRESS_SECONDS,
        owns: Callable[[str], bool] = lambda _cluster_id: True,
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.clock = clock
        self.interval = interval
        self.timeouts = Timeouts(min_count=min_count_timeout, retry_delay=retry_delay, drain=drain_timeout,
                                 health_interval=health_interval, dhc_busy=dhc_busy_timeout,
                                dhc_stress=dhc_stress_seconds)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.pool = WorkPool(max_workers, self._wake.set)
        self._images = _PassImages(image_lookup or (lambda _i: image))
        self.ctx = Context(store=store, runtime=runtime, clock=clock,
                           image_lookup=self._images, timeouts=self.timeouts,
                           wake=self._wake.set, notifier=notifier or Notifier(store), stopping=self._stop,
                           owns=owns)
        self.health = HealthMonitor(self.ctx, self.pool.busy_for, workers=health_workers)
        self._thread: threading.Thread | None = None
        self.passes = 0
        self._capacity: object = None
        self.last_pass_seconds = 0.0
        #: cluster id -> monotonic time its last pass started (tests: no cluster waits for another)
        self.last_reconciled: dict[str, float] = {}
        # cluster id -> (cluster version, nodes fingerprint, when) of its last pass that found nothing to do
        self._quiet: dict[str, tuple[int, tuple[int, int, int, int], float]] = {}

    @property
    def health_interval(self) -> float:
        return self.ctx.timeouts.health_interval

    @health_interval.setter
    def health_interval(self, seconds: float) -> None:
        self.timeouts = dataclasses.replace(self.timeouts, health_interval=seconds)
        self.ctx.timeouts = self.timeouts

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="slurmpod-reconciler", daemon=True)
        self._thread.start()
        self.health.start()

    def stop(self, wait: bool = True) -> None:
        self._stop.set()
        self._wake.set()
        self.health.stop(wait)
        if self._thread is not None and wait:
            self._thread.join(timeout=30)
        self.pool.shutdown(wait)

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        self._wake.set()

    def idle(self) -> bool:
        return self.pool.idle()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.run_once()
            except Exception:  # the one catch-all at the loop top: log and keep reconciling
                log.exception("reconcile pass failed")
            # a woken pass first waits twice as long as the last one took: while 10,000 nodes boot, back-to-back
            # passes (each reading every node) took half the CPU from the boot workers; now at most a third
            self._stop.wait(min(2 * self.last_pass_seconds, self.interval))
            self._wake.wait(self.interval)

    def run_once(self) -> None:
        started = time.monotonic()
        self._images.clear()
        capacity = self.store.get_setting(CAPACITY_KEY)
        if capacity != self._capacity:
            self._capacity = capacity
            self.runtime.set_capacity(capacity or {})
            log.info("capacity table: %s", capacity or "unlimited")
        owned = []
        for cluster_id in self.store.cluster_ids():
            if not self.ctx.owns(cluster_id):  # several servers: another one holds its lease
                self._quiet.pop(cluster_id, None)
            else:
                owned.append(cluster_id)
        for i in range(0, len(owned), PASS_CHUNK):
            self._reconcile_chunk(owned[i:i + PASS_CHUNK])
        self.passes += 1
        self.last_pass_seconds = time.monotonic() - started
        metrics.RECONCILE_PASS.observe(self.last_pass_seconds)

    def _reconcile_chunk(self, cluster_ids: list[str]) -> None:
        """Reconciles ``cluster_ids`` in turn from one read of their rows and one of their quiet candidates' node
        fingerprints (a pass over 500 clusters read each of them one store call at a time)."""
        try:
            rows = self.store.get_clusters(cluster_ids)
            prints = self.store.nodes_fingerprints([c for c in cluster_ids if c in self._quiet])
        except Exception:
            log.exception("reading clusters %s..%s failed", cluster_ids[0], cluster_ids[-1])
            return
        for cluster_id in cluster_ids:
            if not self.ctx.owns(cluster_id):
                continue
            self.last_reconciled[cluster_id] = time.monotonic()
            try:
                self._reconcile(cluster_id, rows.get(cluster_id), prints.get(cluster_id, (0, 0, 0, 0)))
            except VersionConflict:
                self._wake.set()  # someone else wrote; plan again soon
            except LeaseLost as exc:
                log.info("%s", exc)
            except Exception:
                log.exception("reconciling cluster %s failed", cluster_id)

    # ---- one cluster ----------------------------------------------------------------------------

    def _quiet_key(self, cluster: ClusterRecord, fingerprint: tuple[int, int, int, int] | None = None
                   ) -> tuple[int, tuple[int, int, int, int]] | None:
        """What must not change for a quiet cluster to be skipped; None when it may not be skipped at all:
        only a settled cluster (InService/Failed, nothing in flight, no update or schedule, not Continuous)
        whose plan depends on nothing but its rows (health findings are node writes: they change the key)."""
        if cluster.status not in (ClusterStatus.IN_SERVICE, ClusterStatus.FAILED) or cluster.spec.continuous:
            return None
        if cluster.software_update is not None or cluster.schedules or self.pool.busy_for(cluster.cluster_id):
            return None
        if fingerprint is None:
            fingerprint = self.store.nodes_fingerprint(cluster.cluster_id)
        return cluster.version, fingerprint

    def _skip_unchanged(self, cluster: ClusterRecord, fingerprint: tuple[int, int, int, int]) -> bool:
        """Idle pass cost in proportion to what changed: a cluster whose last pass planned nothing is skipped
        while its row and its nodes' fingerprint are unchanged (re-planned anyway every 30 s)."""
        quiet = self._quiet.get(cluster.cluster_id)
        if quiet is None or time.monotonic() - quiet[2] > QUIET_REPLAN:
            return False
        return self._quiet_key(cluster, fingerprint) == quiet[:2]

    def _reconcile(self, cluster_id: str, cluster: ClusterRecord | None,
                   fingerprint: tuple[int, int, int, int]) -> None:
        """One cluster's pass from its row and its nodes' fingerprint as read for its chunk (both read before
        its nodes: a write in between re-plans it next pass)."""
        if cluster is None:
            self._quiet.pop(cluster_id, None)
            self.last_reconciled.pop(cluster_id, None)
            self.pool.forget(cluster_id)
            return
        if self._skip_unchanged(cluster, fingerprint):
            return
        quiet = self._quiet.pop(cluster_id, None)
        # taken before the nodes are read: a write in between re-plans next pass (the chunk's fingerprint when
        # it was read for this cluster, else one read now)
        key = self._quiet_key(cluster, fingerprint if quiet is not None else None)
        nodes = tuple(self.store.list_nodes(cluster_id))
        obs = p.Observation(
            cluster=cluster,
            nodes=nodes,
            busy=self.pool.busy_for(cluster_id),
            now=self.clock.now(),
            desired_topology=self.runtime.desired_topology(cluster),
            min_count_timeout=self.timeouts.min_count,
        )
        actions = p.plan(obs)
        if actions and self.store.cluster_version(cluster_id) != cluster.version:
            # the record changed after it was read (a request's write): the plan mixed two states
            # (BatchAddClusterNodes' new nodes against the count before it: scaled down as excess, then added again
            # under other ids); plan again from a fresh read (a pass with nothing to do does not re-read)
            self._wake.set()
            return
        if key is not None and not actions and all(n.status == InstanceStatus.RUNNING for n in nodes):
            self._quiet[cluster_id] = (*key, time.monotonic())
        if not self.runtime.checkpoint_every_phase:  # cheap phases: many nodes per work item (workers.batch)
            actions = batching.submit_batches(self.ctx, self.pool, cluster, actions, obs)
        actions = _creates_together(list(actions))
        current: ClusterRecord = cluster
        for action in actions:
            stored = DISPATCH[type(action)](self, current, action, obs)
            if stored is not None:
                current = stored
