"""The lease keeper on its own (issue 18): two keepers on one SQLite store, stepped by hand with a fake clock.

Each cluster gets exactly one owner and both keepers get some; a keeper that stops stepping (a dead server) has
its clusters taken over once its leases run out, and it stops claiming them by its own deadline; a clean stop
hands them over at once; an owned-set change is reported (``on_change``); a busy cluster is not handed back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmpod.clock import FakeClock
from slurmpod.domain.ownership import Candidate
from slurmpod.reconciler.ownership import Ownership
from slurmpod.store.sql import SqlStore
from tests.store.test_store import make_cluster

LEASE = 0.4


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SqlStore]:
    s = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        for i in range(12):
            s.create_cluster(make_cluster(cluster_id=f"cluster{i:05d}", name=f"c{i}"))
        yield s
    finally:
        s.close()


def _keeper(db: SqlStore, clock: FakeClock, rid: str, changes: list[str] | None = None) -> Ownership:
    k = Ownership(db.leases, Candidate(rid, "m1", "simulated"), clock, lease_seconds=LEASE)
    if changes is not None:
        k.on_change = lambda: changes.append(rid)
    return k


def _steps(*keepers: Ownership, n: int = 3) -> None:
    for _ in range(n):
        for k in keepers:
            k.step()


def test_spread_takeover_and_clean_stop(db: SqlStore) -> None:
    clock = FakeClock()
    changes: list[str] = []
    a, b = _keeper(db, clock, "a", changes), _keeper(db, clock, "b", changes)
    _steps(a, b)
    # a took everything free at first, then handed b's share back once b was live: both own some, none twice
    clock.advance(LEASE + 0.1)
    _steps(a, b, n=4)
    oa, ob = set(a.owned()), set(b.owned())
    assert not oa & ob and len(oa | ob) == 12 and oa and ob
    assert "a" in changes and "b" in changes

    # a dies (stops stepping): b takes its clusters once they have been free for a lease period
    time.sleep(LEASE + 0.05)  # a's own deadline passes: it no longer claims what it held
    assert a.owned() == [] and not any(a.owns(c) for c in oa)
    clock.advance(LEASE + 0.1)
    b.step()
    clock.advance(LEASE + 0.1)
    b.step()
    assert set(b.owned()) == oa | ob

    # a clean stop of b: a (back) takes everything at once, without waiting for the leases to run out
    a2 = _keeper(db, clock, "a")
    b.release_all()
    a2.step()
    assert len(a2.owned()) == 12


def test_a_busy_cluster_is_not_handed_back(db: SqlStore) -> None:
    clock = FakeClock()
    a = _keeper(db, clock, "a")
    a.busy = lambda _cid: True  # e.g. a boot in progress
    a.step()
    assert len(a.owned()) == 12
    b = _keeper(db, clock, "b")
    _steps(b, a, n=3)
    assert len(a.owned()) == 12 and b.owned() == []
    a.busy = lambda _cid: False
    _steps(b, a, b, n=2)
    assert a.owned() and b.owned()


def test_a_pass_reads_only_what_changed(db: SqlStore) -> None:
    """After its first pass a keeper reads no lease and no cluster row while nothing changes (a count and the
    free leases only); a new cluster, a deleted one and leases freed by a dead keeper are still seen."""
    from slurmpod.reconciler import ownership

    clock = FakeClock()
    a, b = _keeper(db, clock, "a"), _keeper(db, clock, "b")
    rows: dict[str, int] = {"clusters": 0, "leases": 0}
    store = db.leases
    clusters, leases_of = store.clusters, store._leases

    def counted_clusters() -> list:  # type: ignore[type-arg]
        got = clusters()
        rows["clusters"] += len(got)
        return got

    def counted_leases(where: object) -> dict:  # type: ignore[type-arg]
        got = leases_of(where)
        rows["leases"] += len(got)
        return got

    store.clusters, store._leases = counted_clusters, counted_leases  # type: ignore[method-assign]
    _steps(a, b, n=3)
    clock.advance(LEASE + 0.1)
    _steps(a, b, n=3)
    assert len(a.owned()) + len(b.owned()) == 12 and a.owned() and b.owned()
    rows.update(clusters=0, leases=0)
    _steps(a, b, n=5)
    assert rows == {"clusters": 0, "leases": 0}

    db.create_cluster(make_cluster(cluster_id="cluster99999", name="late"))
    _steps(a, b, n=2)
    assert "cluster99999" in set(a.owned()) | set(b.owned())
    gone = a.owned()[0]
    db.delete_cluster(gone)
    _steps(a, b)
    assert gone not in a.owned() and gone not in b.owned()

    # b dies: a reads b's leases once they run out (the free ones) and takes them all
    held_by_b = set(b.owned())
    clock.advance(LEASE + 0.1)
    _steps(a, n=2)
    assert held_by_b <= set(a.owned()) and len(a.owned()) == 12
    assert ownership.RESYNC > 5  # the quiet passes above did not reread the cluster list by the resync
