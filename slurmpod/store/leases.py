"""Leases: which server reconciles which cluster, in the shared database (several servers, issue 18).

* ``leases``: one row per cluster: ``owner`` (a replica id), ``expires`` (wall-clock seconds), ``released``,
  ``epoch`` (+1 on every change of owner) and ``machine`` (where the cluster's local nodes live; None when any
  machine reaches them). A lease is taken only when it is free (no row, expired or released) and the
  taker's machine may reach the nodes; it is renewed by its owner and released on a clean stop.
* ``replicas``: one heartbeat row per server (id, machine, provider, expires): who may own what, for the spread.
* **The fence** (``check``): every reconciler write runs, in its own transaction, a ``SELECT … FOR SHARE`` of the
  cluster's lease row matching (owner, epoch). A server that lost its lease finds no row and writes nothing
  (``LeaseLost``); a taker's ``UPDATE`` of the row waits for the share-locked write to commit, so an old owner's
  write either lands before the take-over or not at all. Expiry uses the servers' clocks (keep them in NTP sync);
  the fence uses only the epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import (
    Engine,
    Float,
    Integer,
    String,
    and_,
    bindparam,
    delete,
    false,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from slurmpod.errors import LeaseLost
from slurmpod.store.compiled import execute
from slurmpod.store.tables import clusters, leases, replicas

__all__ = ["ClusterRef", "Fence", "Lease", "LeaseStore", "Replica"]

Begin = Callable[[], AbstractContextManager[Connection]]


class Fence(Protocol):
    """What a fenced store asks before each write: this server's id and its epoch of a cluster's lease."""

    @property
    def owner(self) -> str: ...

    def epoch(self, cluster_id: str) -> int | None:
        """The epoch of the lease this server holds on ``cluster_id``; None when it holds none."""
        ...


@dataclass(frozen=True)
class Lease:
    cluster_id: str
    owner: str
    expires: float
    released: bool
    epoch: int
    machine: str | None


@dataclass(frozen=True)
class ClusterRef:
    """What the lease keeper needs of a cluster (no spec parsing for 1,000 clusters a second)."""

    cluster_id: str
    name: str
    provider: str


@dataclass(frozen=True)
class Replica:
    replica_id: str
    machine: str
    provider: str
    expires: float


class LeaseStore:
    def __init__(self, engine: Engine, begin: Begin) -> None:
        self.engine = engine
        self._begin = begin
        self._postgres = engine.dialect.name == "postgresql"
        q = select(leases.c.epoch).where(and_(leases.c.cluster_id == bindparam("c"), leases.c.owner == bindparam("o"),
                                              leases.c.epoch == bindparam("e")))
        # SQLite has no row locks (and one writer at a time: its write lock already orders the take-over)
        self._fence_q = q.with_for_update(read=True) if self._postgres else q

    # ---- the fence ------------------------------------------------------------------------------

    def check(self, conn: Connection, fence: Fence, cluster_id: str) -> None:
        """Inside a write transaction: raises ``LeaseLost`` unless ``fence.owner`` holds the lease at its epoch."""
        epoch = fence.epoch(cluster_id)
        held = epoch is not None and execute(
            conn, self._fence_q, {"c": cluster_id, "o": fence.owner, "e": epoch}).first() is not None
        if not held:
            raise LeaseLost(f"cluster {cluster_id}: this server ({fence.owner}) does not hold its lease")

    # ---- replicas -------------------------------------------------------------------------------

    def heartbeat(self, replica: Replica) -> None:
        with self._begin() as conn:
            res = conn.execute(update(replicas).where(replicas.c.replica_id == replica.replica_id)
                               .values(machine=replica.machine, provider=replica.provider, expires=replica.expires))
            if res.rowcount == 0:
                try:
                    with conn.begin_nested():
                        conn.execute(insert(replicas).values(replica_id=replica.replica_id, machine=replica.machine,
                                                             provider=replica.provider, expires=replica.expires))
                except IntegrityError:
                    pass  # inserted concurrently by a server of the same id: its heartbeat stands

    def live_replicas(self, now: float) -> list[Replica]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(replicas).where(replicas.c.expires > now).order_by(replicas.c.replica_id))
            return [Replica(r.replica_id, r.machine, r.provider, r.expires) for r in rows]

    def drop_replica(self, replica_id: str) -> None:
        with self._begin() as conn:
            conn.execute(delete(replicas).where(replicas.c.replica_id == replica_id))

    # ---- leases ---------------------------------------------------------------------------------

    def clusters(self) -> list[ClusterRef]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(clusters.c.cluster_id, clusters.c.name, clusters.c.provider))
            return [ClusterRef(r[0], r[1], r[2]) for r in rows]

    def cluster_count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(clusters)).scalar_one())

    def all(self) -> dict[str, Lease]:
        return self._leases(None)

    def free(self, now: float) -> dict[str, Lease]:
        """The leases that may be taken at ``now`` (released or expired): what a lease pass reads each second
        instead of every lease (held leases are renewed every second and need nothing from the others)."""
        return self._leases(or_(leases.c.released.is_(True), leases.c.expires <= now))

    def of(self, cluster_ids: list[str]) -> dict[str, Lease]:
        """The lease rows of ``cluster_ids`` that exist."""
        return self._leases(self._among(leases.c.cluster_id, cluster_ids)) if cluster_ids else {}

    def _among(self, column: Any, ids: list[str]) -> Any:
        """``column IN ids``; on PostgreSQL ``column = ANY(<one array>)``: the same statement for any number of ids
        (an IN list of 500 was rendered, and parsed by psycopg, anew at each call)."""
        if self._postgres:
            return column == func.any(literal(list(ids), ARRAY(String)))
        return column.in_(ids)

    def _leases(self, where: Any) -> dict[str, Lease]:
        q = select(leases) if where is None else select(leases).where(where)
        with self.engine.connect() as conn:
            return {r.cluster_id: Lease(r.cluster_id, r.owner, r.expires, bool(r.released), int(r.epoch), r.machine)
                    for r in conn.execute(q)}

    def acquire(self, cluster_id: str, owner: str, *, now: float, until: float, machine: str,
                home: str | None) -> int | None:
        """Takes the lease of ``cluster_id`` if it is free and ``machine`` may own it (the row's machine is None or
        ``machine``); a first lease records ``home``. Returns the new epoch, or None when not taken (held, pinned
        to another machine, the cluster deleted, or another server inserted it first): ``acquire_many`` of one."""
        return self.acquire_many({cluster_id: home}, owner, now=now, until=until, machine=machine).get(cluster_id)

    def acquire_many(self, homes: dict[str, str | None], owner: str, *, now: float, until: float,
                     machine: str) -> dict[str, int]:
        """``acquire`` of every cluster of ``homes`` (cluster id -> the machine a first lease pins it to) in one
        transaction: free leases taken in one UPDATE, first leases inserted (``ON CONFLICT DO NOTHING``: a server
        inserting the same one first wins it) for clusters that still exist. Returns the new epochs of those
        taken (one transaction each cost up to six round trips: 500 new clusters took a pass longer than a lease).
        """
        if not homes:
            return {}
        ids = sorted(homes)  # rows locked in one order by every server (no deadlock between two takers)
        with self._begin() as conn:
            rows = conn.execute(
                update(leases)
                .where(and_(self._among(leases.c.cluster_id, ids),
                            or_(leases.c.expires <= now, leases.c.released.is_(True)),
                            or_(leases.c.machine.is_(None), leases.c.machine == machine)))
                .values(owner=owner, expires=until, released=False, epoch=leases.c.epoch + 1)
                .returning(leases.c.cluster_id, leases.c.epoch))
            got = {r[0]: int(r[1]) for r in rows}
            rest = [c for c in ids if c not in got]
            if rest:
                have = set(conn.execute(select(leases.c.cluster_id)
                                        .where(self._among(leases.c.cluster_id, rest))).scalars())
                by_home: dict[str | None, list[str]] = {}
                for c in rest:
                    if c not in have:
                        by_home.setdefault(homes[c], []).append(c)
                for home, cids in by_home.items():
                    got.update({r[0]: 1 for r in conn.execute(self._insert_first(cids, owner, until, home))})
            return got

    def _insert_first(self, cluster_ids: list[str], owner: str, until: float, home: str | None) -> Any:
        """INSERT … SELECT of first leases (epoch 1) for those of ``cluster_ids`` that exist, skipping conflicts."""
        from sqlalchemy.dialects import postgresql, sqlite

        dialect_insert = postgresql.insert if self._postgres else sqlite.insert
        source = select(clusters.c.cluster_id, literal(owner, String), literal(until, Float), false(),
                        literal(1, Integer), literal(home, String)
                        ).where(self._among(clusters.c.cluster_id, cluster_ids)).order_by(clusters.c.cluster_id)
        return (dialect_insert(leases)
                .from_select(["cluster_id", "owner", "expires", "released", "epoch", "machine"], source)
                .on_conflict_do_nothing(index_elements=["cluster_id"]).returning(leases.c.cluster_id))

    def renew(self, owner: str, until: float, held: dict[str, int]) -> dict[str, int]:
        """Extends the leases of ``held`` (cluster id -> epoch) ``owner`` still holds at that epoch; returns them."""
        if not held:
            return {}
        with self._begin() as conn:
            rows = conn.execute(update(leases).where(and_(leases.c.owner == owner, leases.c.released.is_(False),
                                                          self._among(leases.c.cluster_id, list(held))))
                                .values(expires=until).returning(leases.c.cluster_id, leases.c.epoch))
            return {r[0]: int(r[1]) for r in rows if held.get(r[0]) == int(r[1])}

    def release_stale(self, owner: str) -> int:
        """A server starting under the id of a previous process: that process's leases are free at once (their
        epochs are unknown here, so they cannot be renewed; a take-over bumps the epoch and fences it)."""
        with self._begin() as conn:
            res = conn.execute(update(leases).where(and_(leases.c.owner == owner, leases.c.released.is_(False)))
                               .values(released=True, expires=0.0))
            return int(res.rowcount or 0)

    def release(self, owner: str, cluster_id: str, epoch: int) -> None:
        with self._begin() as conn:
            conn.execute(update(leases).where(and_(leases.c.cluster_id == cluster_id, leases.c.owner == owner,
                                                   leases.c.epoch == epoch)).values(released=True, expires=0.0))

    def forget_deleted(self) -> int:
        """Removes the leases of clusters that no longer exist; how many."""
        with self._begin() as conn:
            res = conn.execute(delete(leases).where(~leases.c.cluster_id.in_(select(clusters.c.cluster_id))))
            return int(res.rowcount or 0)


