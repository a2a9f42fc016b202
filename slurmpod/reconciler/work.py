"""What every part of the reconciler shares: the worker pool with its busy registry, and the ``Context``.

A work item is keyed (an instance id, ``topology``, ``delete`` ...) so one key of a cluster runs at most once at
a time. A worker never sleeps through a long wait (a drain, a slow job): it returns ``Park(seconds)`` and the
key stays *in flight* without holding a thread until that time has passed; the plan then submits it again and
the worker picks up where the store says it stopped. Workers share no objects with the loop: each re-reads its
cluster and node from the store by id and reports only through store writes and ``wake()``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from slurmpod import ids
from slurmpod.clock import Clock
from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord, EventRecord, NodeRecord
from slurmpod.errors import LeaseLost, VersionConflict
from slurmpod.notify import Notifier
from slurmpod.reconciler.runtime import ClusterRuntime
from slurmpod.store.protocol import Store

log = logging.getLogger("slurmpod.reconciler")

#: image id (None = latest) -> (image id, release)
ImageLookup = Callable[[str | None], tuple[str, str]]


def with_topology(cluster: ClusterRecord, topology: str) -> ClusterRecord:
    """The cluster recording that its controllers run the slurm.conf topology ``topology`` (a digest)."""
    return replace(cluster, applied_topology=topology)


@dataclass(frozen=True)
class Park:
    """A worker's answer "not yet": keep the key in flight, submit me again after ``seconds``."""

    seconds: float


WorkFn = Callable[[], Park | None]


@dataclass(frozen=True)
class Timeouts:
    """Every duration the reconciler waits for, in one place (seconds)."""

    min_count: float = 3 * 3600.0
    retry_delay: float = 2.0  # Continuous: first relaunch delay (doubles per attempt)
    max_backoff: float = 300.0
    drain: float = 3600.0  # software update and node removal: how long running jobs may keep a node
    drain_poll: float = 2.0  # how often a parked drain wait looks at the node's jobs again
    health_interval: float = 5.0
    health_observe: float = 120.0  # one cluster's health observation longer than this is reported
    leak_interval: float = 30.0  # clusters not InService are looked at for leaked instances this often
    dhc_busy: float = 600.0  # an on-demand deep health check skips a node whose jobs run longer than this
    dhc_stress: float = 5.0  # InstanceStress: seconds of stress-ng per node


class WorkPool:
    def __init__(self, max_workers: int, wake: Callable[[], None]) -> None:
        self.max_workers = max_workers
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="slurmpod-work")
        self._busy: dict[str, set[str]] = {}
        self._parked: dict[tuple[str, str], float] = {}  # (cluster id, key) -> monotonic time it may run again
        self._lock = threading.Lock()
        self._wake = wake
        self.running = 0  # items holding a thread right now (tests and metrics)

    def busy_for(self, cluster_id: str) -> frozenset[str]:
        now = time.monotonic()
        with self._lock:
            parked = {k for (c, k), until in self._parked.items() if c == cluster_id and until > now}
            return frozenset(self._busy.get(cluster_id, set()) | parked)

    def idle(self) -> bool:
        now = time.monotonic()
        with self._lock:
            return not any(self._busy.values()) and not any(u > now for u in self._parked.values())

    def submit(self, cluster_id: str, key: str, fn: WorkFn) -> bool:
        """Runs ``fn`` unless the key is in flight (running or parked); False when it was."""
        return bool(self.submit_batch(cluster_id, [key], lambda _keys: fn()))

    def submit_batch(self, cluster_id: str, keys: list[str], fn: Callable[[list[str]], Park | None]) -> list[str]:
        """Runs ``fn(accepted)`` as one work item holding every key of ``keys`` that is not in flight; returns the
        accepted keys (none: nothing submitted). A ``Park`` answer parks all of them."""
        now = time.monotonic()
        with self._lock:
            busy = self._busy.setdefault(cluster_id, set())
            accepted = [k for k in keys if k not in busy and self._parked.get((cluster_id, k), 0.0) <= now]
            if not accepted:
                return []
            for k in accepted:
                self._parked.pop((cluster_id, k), None)
                busy.add(k)
        key = accepted[0] if len(accepted) == 1 else f"{accepted[0]} (+{len(accepted) - 1})"

        def run() -> None:
            parked: Park | None = None
            with self._lock:
                self.running += 1
            try:
                parked = fn(accepted)
            except LeaseLost as exc:  # another server took the cluster over: it carries on from the store
                log.info("work item %s stopped: %s", key, exc)
            except Exception:
                log.exception("work item %s of cluster %s failed", key, cluster_id)
            finally:
                with self._lock:
                    self.running -= 1
                    self._busy.get(cluster_id, set()).difference_update(accepted)
                    if parked is not None and parked.seconds > 0:  # Park(0): plan it again next pass
                        until = time.monotonic() + parked.seconds
                        self._parked.update({(cluster_id, k): until for k in accepted})
                self._wake()

        self._pool.submit(run)
        return accepted

    def forget(self, cluster_id: str) -> None:
        """A deleted cluster: drop its parked keys."""
        with self._lock:
            for k in [k for k in self._parked if k[0] == cluster_id]:
                del self._parked[k]
            if not self._busy.get(cluster_id):
                self._busy.pop(cluster_id, None)

    def shutdown(self, wait: bool) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=True)


@dataclass
class Context:
    """What appliers, workers and the health monitor need; built once by the ``Reconciler``."""

    store: Store
    runtime: ClusterRuntime
    clock: Clock
    image_lookup: ImageLookup
    timeouts: Timeouts
    wake: Callable[[], None]
    notifier: Notifier
    stopping: threading.Event = field(default_factory=threading.Event)
    #: whether this server reconciles the cluster (several servers: it holds the cluster's lease)
    owns: Callable[[str], bool] = lambda _cluster_id: True

    def event(self, cluster: ClusterRecord, draft: ev.EventDraft) -> EventRecord:
        return ev.finish(draft, cluster, ids.new_event_id(), self.clock.now())

    def events(self, cluster: ClusterRecord, drafts: tuple[ev.EventDraft, ...] | list[ev.EventDraft]
               ) -> list[EventRecord]:
        return [self.event(cluster, d) for d in drafts]

    def save_node(self, node: NodeRecord, *drafts: ev.EventDraft) -> NodeRecord:
        """Version-checked write of ``node`` with events of its cluster (raises VersionConflict)."""
        cluster = self.store.get_cluster(node.cluster_id) if drafts else None
        evs = [self.event(cluster, d) for d in drafts] if cluster else []
        return self.store.update_node(node, evs)

    def add_events(self, cluster: ClusterRecord, *drafts: ev.EventDraft) -> None:
        self.store.add_events([self.event(cluster, d) for d in drafts])

    def update_cluster_with(self, cluster_id: str, change: Callable[[ClusterRecord], ClusterRecord | None],
                            attempts: int = 20) -> ClusterRecord | None:
        """Re-reads the cluster and applies ``change`` (None: nothing to do) until the versioned write wins."""
        for _ in range(attempts):
            cur = self.store.get_cluster(cluster_id)
            if cur is None:
                return None
            new = change(cur)
            if new is None:
                return cur
            try:
                return self.store.update_cluster(new)
            except VersionConflict:
                continue
        raise VersionConflict(f"cluster {cluster_id}: {attempts} conflicting writes in a row")
