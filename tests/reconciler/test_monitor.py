"""The health monitor's pass (issue 18's scale): one read of its clusters' rows, and no observation for a booting
cluster whose leak check is not due (1,000 booting clusters were one read and one pool task each per interval)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from slurmpod.domain.status import ClusterStatus
from tests.reconciler.harness import Harness


def test_booting_cluster_observed_only_when_its_leak_check_is_due(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    try:
        c = h.create("boot")
        assert h.cluster(c.cluster_id).status == ClusterStatus.CREATING
        submitted: list[str] = []
        pool_submit = h.rec.health._pool.submit

        def counted(fn: Any, cid: str) -> Any:
            submitted.append(cid)
            return pool_submit(fn, cid)

        h.rec.health._pool.submit = counted  # type: ignore[method-assign]
        reads: list[int] = []
        get_clusters = h.store.get_clusters
        h.store.get_clusters = lambda ids: reads.append(len(ids)) or get_clusters(ids)  # type: ignore[method-assign]

        def drained() -> None:
            t0 = time.monotonic()
            while h.rec.health._in_flight and time.monotonic() - t0 < 10:
                time.sleep(0.01)

        h.rec.health.check_all()  # first sighting: due
        drained()
        h.rec.health.check_all()  # within leak_interval / 2: not submitted
        drained()
        assert submitted == [c.cluster_id] and reads == [1, 1]
        h.settle(h.in_service(c.cluster_id), what="InService")
        h.rec.health.check_all()  # InService clusters are observed every pass
        drained()
        assert submitted == [c.cluster_id, c.cluster_id]
    finally:
        h.close()
