"""A Reconciler over the simulated runtime and a real (SQLite) store, no HTTP: for direct reconciler tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmpod.api.translate import spec_from_create
from slurmpod.clock import FakeClock
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.spec import CapacitySize, CapacitySizeType, DeploymentSpec
from slurmpod.domain.status import ClusterStatus
from slurmpod.lifecycle.images import ImageCatalog
from slurmpod.providers.simulated import SimulatedProvider
from slurmpod.reconciler.loop import Reconciler
from slurmpod.reconciler.simulated import SimulatedRuntime
from slurmpod.service.clusters import Caller, ClusterService
from slurmpod.store.sql import SqlStore

CALLER = Caller("123456789012", "us-west-2")


def groups(compute: int, *, compute_type: str = "ml.c5.xlarge") -> list[dict[str, Any]]:
    return [
        {"InstanceGroupName": "controller", "InstanceType": "ml.m5.xlarge", "InstanceCount": 1,
         "ExecutionRole": "arn:aws:iam::123456789012:role/r",
         "SlurmConfig": {"NodeType": "Controller"}},
        {"InstanceGroupName": "compute", "InstanceType": compute_type, "InstanceCount": compute,
         "ExecutionRole": "arn:aws:iam::123456789012:role/r",
         "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["batch"]}},
    ]


class Harness:
    def __init__(self, tmp_path: Path, *, max_workers: int = 8, drain_timeout: float = 3600.0,
                 interval: float = 0.05) -> None:
        self.store = SqlStore(f"sqlite:///{tmp_path}/slurmpod.db")
        self.clock = FakeClock()
        self.provider = SimulatedProvider(tmp_path)
        self.images = ImageCatalog(self.store)
        self.runtime = SimulatedRuntime(self.provider, self.images.latest().image_id)

        def image_of(image_id: str | None) -> tuple[str, str]:
            img = (self.images.get(image_id) if image_id else None) or self.images.latest()
            return img.image_id, img.release

        self.rec = Reconciler(self.store, self.runtime, self.clock, interval=interval, max_workers=max_workers,
                              drain_timeout=drain_timeout, image_lookup=image_of)
        self.service = ClusterService(self.store, self.clock, provider_name="simulated", wake=self.rec.wake,
                                      images=self.images)

    def close(self) -> None:
        self.rec.stop()
        self.store.close()

    def create(self, name: str, compute: int = 2, **params: Any) -> ClusterRecord:
        spec = spec_from_create({"ClusterName": name, "InstanceGroups": groups(compute),
                                 "Orchestrator": {"Slurm": {"SlurmConfigStrategy": "Managed"}}, **params})
        return self.service.create(CALLER, spec)

    def cluster(self, cluster_id: str) -> ClusterRecord:
        c = self.store.get_cluster(cluster_id)
        assert c is not None
        return c

    def nodes(self, cluster_id: str, group: str | None = None) -> list[NodeRecord]:
        return [n for n in self.store.list_nodes(cluster_id) if group is None or n.group == group]

    def settle(self, done: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> float:
        """Runs passes in this thread (workers run in the pool) until ``done``; returns the seconds it took."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            self.rec.run_once()
            if done():
                return time.monotonic() - t0
            time.sleep(0.02)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")

    def in_service(self, cluster_id: str) -> Callable[[], bool]:
        return lambda: self.cluster(cluster_id).status == ClusterStatus.IN_SERVICE and not self.rec.pool.busy_for(
            cluster_id)

    def update_software(self, cluster_id: str, batch: int, image_id: str | None = None) -> ClusterRecord:
        dep = DeploymentSpec(batch=CapacitySize(CapacitySizeType.INSTANCE_COUNT, batch), wait_seconds=0)
        return self.service.update_software(CALLER, self.cluster(cluster_id).arn, ["compute"], image_id, dep)

    def publish(self, release: str) -> str:
        return self.images.publish(base=None, script="true", description=release, now=self.clock.now(),
                                   release=release).image_id

    def events(self, cluster_id: str) -> list[str]:
        return [e.description for e in self.store.list_events(cluster_id)]
