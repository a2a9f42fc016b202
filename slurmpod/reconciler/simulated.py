"""``SimulatedRuntime``: the runtime over the SIMULATED provider (no Slurm; for tests and scale benchmarks)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.spec import DeepHealthCheck
from slurmpod.lifecycle.images import Image
from slurmpod.providers.base import InstanceRequest, ProviderError, TemporaryProviderError
from slurmpod.providers.simulated import SimulatedProvider
from slurmpod.reconciler.health import SlurmRequest
from slurmpod.reconciler.runtime import DeepHealthResult, NodeBootError
from slurmpod.reconciler.topology import topology_key

SIMULATED_IMAGE_ROOT = "/nonexistent-simulated-image"


class SimulatedRuntime:
    name = "simulated"
    checkpoint_every_phase = False  # phases after the launch do nothing: coalesce their checkpoints

    def __init__(self, provider: SimulatedProvider, image_id: str) -> None:
        self.provider = provider
        self.image_id = image_id
        self.fail_images: set[str] = set()  # test hook: updates onto these images fail
        #: test hook: instance id -> ids of the "jobs" it runs (drain waits; the simulated runtime has no Slurm)
        self.jobs: dict[str, list[str]] = {}
        #: test hook: cluster ids whose health observation blocks until this event is set (a hung scontrol)
        self.hang: dict[str, threading.Event] = {}
        #: test hook: instance ids whose deep health checks fail
        self.dhc_fail: set[str] = set()

    def set_image_lookup(self, lookup: Callable[[str | None], Image]) -> None:
        return None  # simulated instances have no root filesystem

    def batch(self) -> AbstractContextManager[None]:
        return self.provider.deferred_sync()  # one journal fsync per batch of launches or terminations

    def set_capacity(self, table: Mapping[str, int]) -> None:
        self.provider.set_capacity(table)

    def desired_topology(self, cluster: ClusterRecord) -> str:
        return topology_key(cluster.spec)

    def boot_step(
        self, cluster: ClusterRecord, node: NodeRecord, phase: str, nodes: Sequence[NodeRecord]
    ) -> Mapping[str, Any]:
        if phase != "launched":
            if phase == "daemons" and cluster.spec.group(node.group) and _is_controller(cluster, node):
                return {"applied_topology": self.desired_topology(cluster)}
            return {}
        group = cluster.spec.group(node.group)
        req = InstanceRequest(
            cluster_id=cluster.cluster_id,
            instance_id=node.instance_id,
            group=node.group,
            instance_type=(group.instance_type if group else None) or "ml.t3.medium",
            image_id=self.image_id,
            image_root=SIMULATED_IMAGE_ROOT,
        )
        try:
            inst = self.provider.launch(req)
        except TemporaryProviderError as exc:
            raise NodeBootError(str(exc), retryable=True, delay=exc.delay) from exc
        except ProviderError as exc:
            raise NodeBootError(str(exc)) from exc
        return {"ip": inst.ip, "hostname": inst.hostname}

    def apply_topology(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> str:
        return self.desired_topology(cluster)

    def remove_node(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
        self.provider.terminate(cluster.cluster_id, node.instance_id)

    def drain(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord], reason: str) -> bool:
        return True

    def jobs_done(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> bool:
        return not self.jobs.get(node.instance_id)

    def running_jobs(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> list[str]:
        return list(self.jobs.get(node.instance_id, ()))

    def resume(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
        return None

    def replace_root(
        self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord], image_id: str
    ) -> None:
        if self.fail_images and image_id in self.fail_images:
            raise NodeBootError(f"simulated failure replacing the root volume with {image_id} (injected)")
        if self.provider.launch_delay:
            time.sleep(self.provider.launch_delay)

    def reboot_node(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
        self.provider.revive(node.instance_id)

    def slurm_requests(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> Mapping[str, SlurmRequest]:
        hung = self.hang.get(cluster.cluster_id)
        if hung is not None:
            hung.wait(60)
        return {}

    def unreachable(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> set[str]:
        return set()

    def teardown_cluster(self, cluster: ClusterRecord) -> None:
        self.provider.teardown_cluster(cluster.cluster_id)

    def alive(self, cluster: ClusterRecord) -> Mapping[str, bool]:
        return {i.instance_id: i.alive for i in self.provider.list_instances(cluster.cluster_id)}

    def service_instances(self, cluster: ClusterRecord) -> set[str]:
        return set()

    def terminate_instance(self, cluster: ClusterRecord, instance_id: str) -> None:
        self.provider.terminate(cluster.cluster_id, instance_id)

    def interrupt(self, cluster: ClusterRecord, node: NodeRecord) -> None:
        return None  # simulated phases do not block

    def heal_services(self, cluster: ClusterRecord) -> list[tuple[bool, str]]:
        return []  # the simulated runtime has no cluster-level services

    def dhc_isolate(self, cluster: ClusterRecord, targets: Sequence[NodeRecord], nodes: Sequence[NodeRecord]) -> None:
        return None

    def dhc_run(self, cluster: ClusterRecord, targets: Sequence[NodeRecord], checks: Sequence[DeepHealthCheck],
                nodes: Sequence[NodeRecord], stress_seconds: float) -> Mapping[str, DeepHealthResult]:
        return {n.instance_id: DeepHealthResult(False, "simulated deep health check failure (injected)")
                if n.instance_id in self.dhc_fail else DeepHealthResult(True, "passed") for n in targets}

    def dhc_release(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord], *,
                    passed: bool) -> None:
        return None


def _is_controller(cluster: ClusterRecord, node: NodeRecord) -> bool:
    g = cluster.spec.group(node.group)
    return g is not None and g.node_type is not None and g.node_type.value == "Controller"
