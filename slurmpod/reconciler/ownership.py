"""The lease keeper: which clusters this server reconciles when several servers share one database (issue 18).

A thread that, every ``tick`` (a quarter of the lease, at most 1 s): heartbeats this replica, renews the
leases it holds once a third of the lease has passed (one UPDATE), forgets those it lost, takes free leases of
the clusters it is the preferred owner of (``domain.ownership.preferred``: reachable nodes, rendezvous hash),
takes any free lease left untaken for a whole lease period (so no cluster waits on a server that cannot take it),
and hands back idle clusters another live server is preferred for (the spread after a server joins). ``owns``
answers the reconciler; ``epoch`` answers the fenced store (``store.leases``). ``release_all`` on a clean stop
lets the others take over at once instead of after the lease expires.

A pass takes its leases in one transaction (``LeaseStore.acquire_many``), at most ``MAX_TAKES``: taking 500 one
transaction each took longer than a lease under load, so the first ones expired before their first renewal and the
servers took them from each other over and over. A lease taken runs a whole period from its take.

A pass reads only what may have changed (reading every lease and cluster each second was 13-24 % of a server's
time at 1,000 clusters): the free leases (released or expired: held ones need nothing from the others), the
lease rows of clusters it has not seen one of yet (a row's machine never changes), and the cluster count; the
cluster list is reread when the count changes and every ``RESYNC`` passes. Who is preferred for a cluster is
computed again only when the live servers change.

A server that cannot renew (database unreachable) stops reconciling its clusters when its own lease deadline
passes, by its monotonic clock, before anyone else may take them over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurmpod.clock import Clock
from slurmpod.domain.ownership import Candidate, preferred, unreachable_reason
from slurmpod.observability import metrics
from slurmpod.store.leases import ClusterRef, LeaseStore, Replica

log = logging.getLogger("slurmpod.leases")

__all__ = ["Held", "Ownership"]

MAX_TAKES = 500  # leases taken per pass at most
RESYNC = 30  # passes between full rereads of the cluster list
RENEW_AFTER = 1 / 3  # share of a lease period after which the held leases are renewed


@dataclass
class Held:
    epoch: int
    deadline: float  # monotonic: after this, without a renewal, the lease may be someone else's


@dataclass
class Ownership:
    """This server's leases. ``home_of(cluster id)`` is the machine a first lease pins the cluster to (None: any)."""

    leases: LeaseStore
    me: Candidate
    clock: Clock
    lease_seconds: float = 15.0
    home_of: Callable[[str], str | None] = lambda _c: None
    busy: Callable[[str], bool] = lambda _cid: False
    on_change: Callable[[], None] = lambda: None
    held: dict[str, Held] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # cluster id -> why this server may not own it
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _free_since: dict[str, float] = field(default_factory=dict)
    _draining: bool = False
    # what a pass remembers of the previous ones (``_cluster_refs``, ``_free_leases``)
    _live: list[Candidate] = field(default_factory=list)
    _refs: dict[str, ClusterRef] = field(default_factory=dict)
    _passes: int = 0
    _renewed: float = float("-inf")  # clock time of the last renewal
    _machine: dict[str, str | None] = field(default_factory=dict)  # cluster id -> its lease row's machine
    _homes: dict[str, str | None] = field(default_factory=dict)  # home_of, for clusters without a lease row
    _verdicts: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)

    @property
    def owner(self) -> str:
        return self.me.replica_id

    @property
    def tick(self) -> float:
        return min(1.0, self.lease_seconds / 4)

    # ---- what the reconciler and the fenced store ask ------------------------------------------------

    def owns(self, cluster_id: str) -> bool:
        return self.epoch(cluster_id) is not None

    def epoch(self, cluster_id: str) -> int | None:
        with self._lock:
            h = self.held.get(cluster_id)
            return h.epoch if h is not None and h.deadline > time.monotonic() else None

    def owned(self) -> list[str]:
        with self._lock:
            now = time.monotonic()
            return sorted(c for c, h in self.held.items() if h.deadline > now)

    def detail(self) -> dict[str, Any]:
        """For ``/readyz``: this replica, the clusters it owns and those it may not own (and why)."""
        return {"replica": self.owner, "machine": self.me.machine, "leaseSeconds": self.lease_seconds,
                "ownedClusters": self.owned(), "unreachableClusters": dict(sorted(self.refused.items()))}

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        stale = self.leases.release_stale(self.owner)
        if stale:
            log.info("freed %d lease(s) a previous server with id %s held", stale, self.owner)
        self.step()
        self._thread = threading.Thread(target=self._run, name="slurmpod-leases", daemon=True)
        self._thread.start()

    def drain(self) -> None:
        """A clean stop begins: keep renewing what is held, take and hand back nothing (``release_all`` follows)."""
        self._draining = True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def release_all(self) -> None:
        """A clean stop (after the reconciler stopped): hand every lease back and leave the replica list."""
        with self._lock:
            held, self.held = self.held, {}
        for cid, h in held.items():
            try:
                self.leases.release(self.owner, cid, h.epoch)
                metrics.LEASE_CHANGES.labels("released").inc()
            except Exception:
                log.exception("releasing the lease of cluster %s failed (it expires by itself)", cid)
        try:
            self.leases.drop_replica(self.owner)
        except Exception:
            log.exception("leaving the replica list failed")
        metrics.OWNED_CLUSTERS.set(0)
        log.info("released %d cluster lease(s) (clean stop)", len(held))

    def _run(self) -> None:
        while not self._stop.wait(self.tick):
            try:
                self.step()
            except Exception:  # database unreachable: leases run out by their deadline (``epoch``)
                log.exception("lease pass failed")

    # ---- one pass -------------------------------------------------------------------------------

    def step(self) -> None:
        now = self.clock.now()
        until = now + self.lease_seconds
        started = time.monotonic()
        deadline = started + self.lease_seconds
        self.leases.heartbeat(Replica(self.owner, self.me.machine, self.me.provider, until))
        with self._lock:
            before = set(self.held)
        self._renew(now, until, deadline)
        if self._draining:
            return
        live = [Candidate(r.replica_id, r.machine, r.provider) for r in self.leases.live_replicas(now)]
        if self.me not in live:
            live.append(self.me)
        if live != self._live:  # a server joined or left: every cluster's preferred owner may have changed
            self._live, self._verdicts = live, {}
        refs = self._cluster_refs()
        free = self._free_leases(now, refs)
        for cid in refs:
            if cid not in self._verdicts:
                self._verdicts[cid] = self._verdict(refs[cid], live)
        changed = False
        for cid in self.owned():
            why, best = self._verdicts.get(cid, (None, self.owner))
            if why is None and best != self.owner and not self.busy(cid):
                changed |= self._hand_back(cid, best)
        takes: dict[str, tuple[ClusterRef, str | None]] = {}
        for cid in free:
            why, best = self._verdicts.get(cid, ("deleted", None))
            if why is not None or self.owns(cid):
                continue
            first_free = self._free_since.setdefault(cid, started)
            if (best == self.owner or started - first_free >= self.lease_seconds) and len(takes) < MAX_TAKES:
                takes[cid] = (refs[cid], self._home(cid))
        self._free_since = {c: t for c, t in self._free_since.items() if c in free}
        changed |= self._take(takes)
        gone = set(self.held) - set(refs)
        for cid in gone:
            with self._lock:
                self.held.pop(cid, None)
        if gone:
            self.leases.forget_deleted()
        metrics.OWNED_CLUSTERS.set(len(self.held))
        with self._lock:
            changed |= set(self.held) != before  # a lease lost, a deleted cluster forgotten
        if changed:
            self.on_change()

    # ---- what a pass reads: only what may have changed -------------------------------------------

    def _cluster_refs(self) -> dict[str, ClusterRef]:
        """The clusters, reread only when their count changed (a create or a delete) and every ``RESYNC``
        passes (a create and a delete in one pass): a count is one row where the list is 1,000."""
        self._passes += 1
        count = self.leases.cluster_count()
        if count != len(self._refs) or self._passes >= RESYNC:
            self._passes = 0
            self._refs = {c.cluster_id: c for c in self.leases.clusters()}
            for cache in (self._machine, self._verdicts, self._homes, self.refused):
                for cid in [c for c in cache if c not in self._refs]:
                    del cache[cid]
        return self._refs

    def _free_leases(self, now: float, refs: dict[str, ClusterRef]) -> set[str]:
        """The clusters whose lease is free: released or expired rows, and clusters without a row yet (a row's
        machine never changes once written, so it is read once per cluster)."""
        rows = self.leases.free(now)
        unknown = [cid for cid in refs if cid not in self._machine and cid not in rows]
        rows.update(self.leases.of(unknown))
        for cid, lease in rows.items():
            self._note_machine(cid, lease.machine)
        free = {cid for cid, lease in rows.items() if lease.released or lease.expires <= now}
        return {cid for cid in free if cid in refs} | {cid for cid in unknown if cid not in rows}

    def _note_machine(self, cluster_id: str, machine: str | None) -> None:
        if cluster_id not in self._machine:
            self._machine[cluster_id] = machine
            self._verdicts.pop(cluster_id, None)  # its home is the row's from now on
            self._homes.pop(cluster_id, None)

    def _home(self, cluster_id: str) -> str | None:
        if cluster_id in self._machine:
            return self._machine[cluster_id]
        if cluster_id not in self._homes:
            self._homes[cluster_id] = self.home_of(cluster_id)
        return self._homes[cluster_id]

    def _verdict(self, cluster: ClusterRef, live: list[Candidate]) -> tuple[str | None, str | None]:
        """(why this server may not own ``cluster`` or None, the live server preferred for it)."""
        cid = cluster.cluster_id
        home = self._home(cid)
        why = unreachable_reason(self.me, cluster.provider, home)
        if why is not None:
            if self.refused.get(cid) != why:
                log.warning("not taking cluster %s (%s): %s", cluster.name, cid, why)
                self.refused[cid] = why
            return why, None
        self.refused.pop(cid, None)
        return None, preferred(cid, cluster.provider, home, live)

    def _renew(self, now: float, until: float, deadline: float) -> None:
        """Renews every held lease once a third of the period has passed since the last renewal (renewing 500
        leases each second was 4 % of a busy server's time, and every renewal waits for the fence locks of the
        writes in flight): a lease always has two thirds of its period left when renewed."""
        with self._lock:
            mine = {cid: h.epoch for cid, h in self.held.items()}
        if not mine or now - self._renewed < self.lease_seconds * RENEW_AFTER:
            return
        still = self.leases.renew(self.owner, until, mine)
        self._renewed = now
        with self._lock:
            for cid, h in list(self.held.items()):
                if still.get(cid) == h.epoch:
                    h.deadline = deadline
                else:
                    del self.held[cid]
                    metrics.LEASE_CHANGES.labels("lost").inc()
                    log.warning("lost the lease of cluster %s (another server took it over)", cid)

    def _take(self, takes: dict[str, tuple[ClusterRef, str | None]]) -> bool:
        """Takes the free leases of ``takes`` in one transaction, each for a whole lease period from now (not
        from the pass's start); whether any was taken."""
        if not takes:
            return False
        now, deadline = self.clock.now(), time.monotonic() + self.lease_seconds
        got = self.leases.acquire_many({cid: home for cid, (_c, home) in takes.items()}, self.owner, now=now,
                                       until=now + self.lease_seconds, machine=self.me.machine)
        with self._lock:
            for cid, epoch in got.items():
                self.held[cid] = Held(epoch, deadline)
        for cid in got:
            self._note_machine(cid, takes[cid][1])  # a first lease pins the home it was taken with
        for cid, epoch in got.items():
            self._free_since.pop(cid, None)
            metrics.LEASE_CHANGES.labels("acquired").inc()
            log.info("took the lease of cluster %s (%s), epoch %d", takes[cid][0].name, cid, epoch)
        return bool(got)

    def _hand_back(self, cluster_id: str, to: str | None) -> bool:
        with self._lock:
            h = self.held.pop(cluster_id, None)
        if h is None:
            return False
        self.leases.release(self.owner, cluster_id, h.epoch)
        metrics.LEASE_CHANGES.labels("released").inc()
        log.info("handed cluster %s back for %s (the spread over servers)", cluster_id, to)
        return True
