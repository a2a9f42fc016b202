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
