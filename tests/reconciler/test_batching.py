"""Many nodes per work item (``reconciler.batching``, ``workers.batch``) on the simulated runtime."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from slurmpod.domain.status import InstanceStatus
from slurmpod.reconciler.batching import BATCH, MIN_BATCH, chunks
from slurmpod.reconciler.work import Park, WorkPool
from slurmpod.reconciler.workers.batch import boot_batch
from tests.reconciler.harness import CALLER, Harness


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path, max_workers=4)
    try:
        yield harness
    finally:
        harness.close()


def test_chunks_keep_order_and_bounds() -> None:
    ids = [f"i-{k}" for k in range(1000)]
    pieces = chunks(ids, 8)
    assert [i for p in pieces for i in p] == ids
    assert all(len(p) <= BATCH for p in pieces)
    assert len(chunks(ids[:3], 8)) == 1  # a seed-size cluster: one item
    assert all(len(p) == MIN_BATCH for p in chunks(ids[:64], 8)[:-1])
    assert len(chunks(ids[:200], 8)) == 8
    assert chunks([], 8) == []


def test_submit_batch_holds_every_key_and_parks_them_together() -> None:
    woken = threading.Event()
    pool = WorkPool(2, woken.set)
    release = threading.Event()
    try:
        ran: list[list[str]] = []

        def work(keys: list[str]) -> Park | None:
            ran.append(keys)
            release.wait(10)
            return Park(60.0)

        assert pool.submit_batch("c", ["a", "b"], work) == ["a", "b"]
        assert pool.submit_batch("c", ["b", "c"], lambda keys: ran.append(keys)) == ["c"]  # "b" is in flight
        assert pool.busy_for("c") >= {"a", "b"}
        release.set()
        pool.shutdown(wait=True)
        assert sorted(map(tuple, ran)) == [("a", "b"), ("c",)]
        assert pool.busy_for("c") == frozenset({"a", "b"})  # parked together, "c" done
        assert not pool.submit("c", "a", lambda: None)
    finally:
        pool.shutdown(wait=False)


def test_large_cluster_boots_and_deletes_in_batches(h: Harness) -> None:
    c = h.create("batched", compute=150)
    h.settle(h.in_service(c.cluster_id), timeout=60, what="InService")
    nodes = h.nodes(c.cluster_id)
    assert len(nodes) == 151 and all(n.status == InstanceStatus.RUNNING and n.ip for n in nodes)
    assert len({n.ip for n in nodes}) == 151
    assert all(v == 1 for v in h.provider.launch_counts.values())
    assert sum("successfully provisioned" in e for e in h.events(c.cluster_id)) >= 151
    h.service.delete(CALLER, c.arn)
    h.settle(lambda: h.store.get_cluster(c.cluster_id) is None, timeout=60, what="gone")
    assert h.provider.list_instances(c.cluster_id) == []




def test_a_node_changed_during_its_batch_is_skipped_and_booted_later(h: Harness) -> None:
    """The batch's write is version-checked per node: a node written meanwhile keeps the other write, and the
    next pass boots it (its launch is idempotent: launched once)."""
    c = h.create("raced", compute=2)
    h.rec.run_once()  # records the nodes
    nodes = h.nodes(c.cluster_id)
    assert nodes and all(n.status == InstanceStatus.PENDING for n in nodes)
    victim = nodes[-1]
    real_launch = h.provider.launch

    def launch_and_race(request):  # type: ignore[no-untyped-def]
        inst = real_launch(request)
        if request.instance_id == victim.instance_id:
            cur = h.store.get_node(victim.instance_id)
            assert cur is not None
            h.store.update_node(replace(cur, message="written meanwhile"))
        return inst

    h.provider.launch = launch_and_race  # type: ignore[method-assign]
    boot_batch(h.rec.ctx, c.cluster_id, [n.instance_id for n in nodes])
    h.provider.launch = real_launch  # type: ignore[method-assign]
    after = h.store.get_node(victim.instance_id)
    assert after is not None and after.status == InstanceStatus.PENDING and after.message == "written meanwhile"
    assert all(n.status == InstanceStatus.RUNNING for n in h.nodes(c.cluster_id) if n.instance_id != victim.instance_id)
    h.settle(h.in_service(c.cluster_id), what="InService")
    assert h.provider.launch_counts[victim.instance_id] == 1
