"""Leases and the fence (several servers on one database, issue 18): on SQLite and, when available, PostgreSQL.

A lease is taken only when free, by a machine that may reach the cluster's nodes; a take-over bumps the epoch;
a store fenced by a server that lost its lease writes nothing (cluster, node, event writes all raise LeaseLost).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import pytest
import sqlalchemy as sa

from slurmpod.domain.status import ClusterStatus
from slurmpod.errors import LeaseLost
from slurmpod.store.leases import Replica
from slurmpod.store.sql import SqlStore
from tests.store.test_store import make_cluster, make_event, make_node


@dataclass
class FakeFence:
    owner: str
    epochs: dict[str, int]

    def epoch(self, cluster_id: str) -> int | None:
        return self.epochs.get(cluster_id)


def test_first_lease_then_exclusive_until_expiry(store: SqlStore) -> None:
    c = make_cluster()
    store.create_cluster(c)
    assert store.leases.acquire(c.cluster_id, "a", now=100.0, until=110.0, machine="m1", home="m1") == 1
    assert store.leases.acquire(c.cluster_id, "b", now=105.0, until=115.0, machine="m1", home="m1") is None
    assert store.leases.renew("a", 120.0, {c.cluster_id: 1}) == {c.cluster_id: 1}
    assert store.leases.renew("a", 120.0, {c.cluster_id: 7}) == {}  # another epoch: not this holder's
    assert store.leases.acquire(c.cluster_id, "b", now=115.0, until=125.0, machine="m1", home="m1") is None
    # expired: another server of the same machine takes it, the epoch moves on
    assert store.leases.acquire(c.cluster_id, "b", now=121.0, until=131.0, machine="m1", home="m1") == 2
    assert store.leases.renew("a", 140.0, {c.cluster_id: 1}) == {}
    assert store.leases.release_stale("b") == 1  # restarted under the same id
    assert store.leases.acquire(c.cluster_id, "c", now=122.0, until=131.0, machine="m1", home="m1") == 3
    lease = store.leases.all()[c.cluster_id]
    assert (lease.owner, lease.epoch, lease.machine) == ("c", 3, "m1")


def test_pinned_cluster_only_on_its_machine(store: SqlStore) -> None:
    c = make_cluster()
    store.create_cluster(c)
    assert store.leases.acquire(c.cluster_id, "a", now=0.0, until=10.0, machine="m1", home="m1") == 1
    assert store.leases.acquire(c.cluster_id, "z", now=50.0, until=60.0, machine="m2", home="m2") is None
    store.leases.release("a", c.cluster_id, 1)
    assert store.leases.acquire(c.cluster_id, "z", now=50.0, until=60.0, machine="m2", home="m2") is None
    assert store.leases.acquire(c.cluster_id, "b", now=50.0, until=60.0, machine="m1", home="m1") == 2


def test_released_lease_is_taken_at_once_and_deleted_clusters_forgotten(store: SqlStore) -> None:
    c = make_cluster()
    store.create_cluster(c)
    assert store.leases.acquire(c.cluster_id, "a", now=0.0, until=100.0, machine="m", home=None) == 1
    store.leases.release("a", c.cluster_id, 1)
    assert store.leases.acquire(c.cluster_id, "b", now=1.0, until=100.0, machine="other", home=None) == 2
    assert store.leases.acquire("nosuchclust1", "b", now=1.0, until=100.0, machine="m", home=None) is None
    store.delete_cluster(c.cluster_id)
    assert store.leases.forget_deleted() == 1
    assert store.leases.all() == {}


def test_fence_stale_owner_writes_nothing(store: SqlStore) -> None:
    c = make_cluster()
    store.create_cluster(c)
    n = make_node(c.cluster_id, 1)
    store.add_nodes([n])
    assert store.leases.acquire(c.cluster_id, "a", now=0.0, until=10.0, machine="m", home=None) == 1
    old = store.fenced(FakeFence("a", {c.cluster_id: 1}))
    cur = store.get_cluster(c.cluster_id)
    assert cur is not None
    cur = old.update_cluster(replace(cur, status=ClusterStatus.IN_SERVICE))  # the owner writes
    # taken over by b (a's lease expired): a's writes all fail and leave nothing behind
    assert store.leases.acquire(c.cluster_id, "b", now=20.0, until=30.0, machine="m", home=None) == 2
    events_before = len(store.list_events(c.cluster_id))
    with pytest.raises(LeaseLost):
        old.update_cluster(replace(cur, failure_message="stale"), [make_event(c)])
    node = store.get_node(n.instance_id)
    assert node is not None
    with pytest.raises(LeaseLost):
        old.update_node(replace(node, message="stale"))
    with pytest.raises(LeaseLost):
        old.add_events([make_event(c)])
    with pytest.raises(LeaseLost):
        old.delete_node(n.instance_id)
    with pytest.raises(LeaseLost):
        old.delete_cluster(c.cluster_id)
    after = store.get_cluster(c.cluster_id)
    assert after is not None and after.failure_message is None and after.version == cur.version
    assert store.get_node(n.instance_id) == node
    assert len(store.list_events(c.cluster_id)) == events_before
    # the new owner writes; the unfenced store (the API's) is not fenced at all
    new = store.fenced(FakeFence("b", {c.cluster_id: 2}))
    new.update_node(replace(node, message="new owner"))
    store.add_events([make_event(c)])


def test_concurrent_takers_one_wins(store: SqlStore) -> None:
    c = make_cluster()
    store.create_cluster(c)
    won: list[int | None] = []

    def take(owner: str) -> None:
        won.append(store.leases.acquire(c.cluster_id, owner, now=0.0, until=10.0, machine="m", home=None))

    threads = [threading.Thread(target=take, args=(f"r{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(w for w in won if w is not None) == [1]


def test_replicas_heartbeat(store: SqlStore) -> None:
    store.leases.heartbeat(Replica("a", "m1", "simulated", 10.0))
    store.leases.heartbeat(Replica("b", "m2", "simulated", 20.0))
    store.leases.heartbeat(Replica("a", "m1", "simulated", 30.0))
    assert [r.replica_id for r in store.leases.live_replicas(15.0)] == ["a", "b"]
    assert {r.replica_id for r in store.leases.live_replicas(25.0)} == {"a"}
    store.leases.drop_replica("a")
    assert store.leases.live_replicas(0.0) == [Replica("b", "m2", "simulated", 20.0)]


def test_schema_has_lease_columns(store: SqlStore) -> None:
    cols = {c["name"] for c in sa.inspect(store.engine).get_columns("leases")}
    assert {"cluster_id", "owner", "expires", "released", "epoch", "machine"} <= cols
    assert "replicas" in sa.inspect(store.engine).get_table_names()


def test_acquire_many_in_one_transaction(store: SqlStore) -> None:
    ids = [f"abcdefghij{i:02d}" for i in range(6)]
    for i, cid in enumerate(ids[:5]):
        store.create_cluster(make_cluster(cid, f"c{i}"))
    leases = store.leases
    assert leases.acquire(ids[0], "other", now=0.0, until=100.0, machine="m1", home=None) == 1  # held
    assert leases.acquire(ids[1], "other", now=0.0, until=5.0, machine="m1", home=None) == 1  # expires at 5
    assert leases.acquire(ids[2], "other", now=0.0, until=100.0, machine="m2", home="m2") == 1
    leases.release("other", ids[2], 1)  # free, but pinned to m2
    homes: dict[str, str | None] = {cid: "m1" for cid in ids}  # ids[5] was never created (or was deleted)
    got = leases.acquire_many(homes, "me", now=10.0, until=20.0, machine="m1")
    assert got == {ids[1]: 2, ids[3]: 1, ids[4]: 1}
    rows = leases.all()
    assert rows[ids[0]].owner == "other" and rows[ids[2]].owner == "other" and ids[5] not in rows
    assert rows[ids[3]].machine == "m1" and rows[ids[3]].expires == 20.0 and not rows[ids[3]].released
    assert leases.acquire_many(homes, "third", now=11.0, until=21.0, machine="m1") == {}  # nothing free now


def test_acquire_many_concurrent_takers_each_lease_once(store: SqlStore) -> None:
    ids = [f"abcdefghij{i:02d}" for i in range(10)]
    for i, cid in enumerate(ids):
        store.create_cluster(make_cluster(cid, f"c{i}"))
    won: dict[str, list[str]] = {}
    lock = threading.Lock()

    def take(owner: str) -> None:
        got = store.leases.acquire_many(dict.fromkeys(ids), owner, now=0.0, until=10.0, machine="m")
        with lock:
            for cid in got:
                won.setdefault(cid, []).append(owner)

    threads = [threading.Thread(target=take, args=(f"r{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == ids and all(len(owners) == 1 for owners in won.values())
    assert {cid: lease.owner for cid, lease in store.leases.all().items()} == {c: o[0] for c, o in won.items()}
