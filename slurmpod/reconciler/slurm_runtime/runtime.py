"""The ``ClusterRuntime`` of real Slurm clusters: per-cluster state, topology and accounting wiring, and the
facade over the boot phases, membership changes, reconfiguration and health probes of this package."""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from slurmpod.domain import deep_health as dh
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.slurm_release import is_major_upgrade
from slurmpod.domain.spec import ClusterSpec, DeepHealthCheck
from slurmpod.domain.status import InstanceStatus, NodeType, UpdatePhase
from slurmpod.lifecycle.images import Image
from slurmpod.lifecycle.logstreams import LogStreams
from slurmpod.lifecycle.sources import LifecycleSourceError
from slurmpod.providers.base import (
    CommandRunner,
    InstanceRequest,
    Provider,
    ProviderError,
    TemporaryProviderError,
    VolumeMount,
)
from slurmpod.reconciler import headnodes
from slurmpod.reconciler.accounting import AccountingService, ExternalDatabase
from slurmpod.reconciler.health import SlurmRequest
from slurmpod.reconciler.plan import controller_slot
from slurmpod.reconciler.runtime import DeepHealthResult, NodeBootError
from slurmpod.reconciler.slurm_runtime import deep_health, gpus, membership, phases, probes, reconfigure
from slurmpod.reconciler.slurm_runtime.files import ClusterFiles
from slurmpod.reconciler.topology import topology_key
from slurmpod.security.secrets import DatabaseCredentials, SecretError
from slurmpod.slurm import control
from slurmpod.slurm.conf import DEFAULT_STATE_SAVE_LOCATION, AccountingConfig, SlurmTopology, render_slurm_conf

log = logging.getLogger("slurmpod.runtime")

STATE_VOLUME = VolumeMount("slurm-state", DEFAULT_STATE_SAVE_LOCATION)
#: per-cluster shared home (HyperPod's FSx for OpenZFS equivalent): job files visible on every node
HOME_VOLUME = VolumeMount("home", "/home")
#: per-cluster shared /fsx (HyperPod's FSx for Lustre mount point)
FSX_VOLUME = VolumeMount("fsx", "/fsx")
JOIN_TIMEOUT = 60.0


class SlurmRuntime:
    checkpoint_every_phase = True

    def __init__(self, provider: Provider, state_dir: Path, image: Image, *, join_timeout: float = JOIN_TIMEOUT,
                 image_lookup: Callable[[str | None], Image] | None = None,
                 accounting: AccountingService | None = None, internal_accounting: bool = True,
                 database_secret: Callable[[str], DatabaseCredentials] | None = None,
                 remote_type: Callable[[str], bool] | None = None):
        self.provider = provider
        #: slurmdbd on a per-cluster service host (None: AccountingStorageType=accounting_storage/none)
        self.accounting = accounting
        #: clusters without AccountingDatabase get slurmdbd + MariaDB on that host (False: no accounting)
        self.internal_accounting = internal_accounting
        #: resolves AccountingDatabase.SecretArn (the secret store)
        self.database_secret = database_secret
        #: instance types whose instances run on other machines (ssh pools): no route to local service hosts
        self.remote_type: Callable[[str], bool] = remote_type or (lambda _type: False)
        self._accounting_skipped: set[str] = set()
        self.image_lookup = image_lookup or (lambda _id: image)
        self.name = provider.name
        self.dir = state_dir / "clusters"
        self.files = ClusterFiles(self.dir)
        self.snapshots_dir = state_dir / "lifecycle"
        self.logs = LogStreams(state_dir)
        self.image = image
        self.join_timeout = join_timeout

    def set_image_lookup(self, lookup: Callable[[str | None], Image]) -> None:
        self.image_lookup = lookup

    def batch(self) -> AbstractContextManager[None]:
        return nullcontext()  # real nodes boot one per work item, every phase checkpointed

    def munge_key(self, cluster_id: str) -> bytes:
        return self.files.munge_key(cluster_id)

    # ---- topology and accounting ------------------------------------------------------------------

    def set_capacity(self, table: Mapping[str, int]) -> None:
        self.provider.set_capacity(table)

    def desired_topology(self, cluster: ClusterRecord) -> str:
        return topology_key(cluster.spec)

    @staticmethod
    def controllers(cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> list[NodeRecord]:
        ctl = {g.name for g in cluster.spec.groups_of(NodeType.CONTROLLER)}
        return sorted((n for n in nodes if n.group in ctl and n.ip and n.active), key=controller_slot)

    def external_db(self, cluster: ClusterRecord) -> ExternalDatabase | None:
        """The cluster's AccountingDatabase with its credentials, or None (the host's own MariaDB)."""
        adb = cluster.spec.accounting_database
        if adb is None:
            return None
        if self.database_secret is None:
            raise control.SlurmError("AccountingDatabase: this server has no secret store")
        try:
            creds = self.database_secret(adb.secret_arn)
        except SecretError as exc:
            raise control.SlurmError(f"AccountingDatabase: {exc}") from exc
        return ExternalDatabase(host=adb.endpoint, port=adb.effective_port, name=adb.effective_name(cluster.cluster_id),
                                user=creds.username, password=creds.password)

    def wants_accounting(self, cluster: ClusterRecord) -> bool:
        if self.accounting is None:
            return False
        remote = [g.name for g in cluster.spec.groups_of(NodeType.CONTROLLER)
                  if self.remote_type(g.instance_type or "")]
        if remote:
            # slurmdbd runs on slurmpod's local accounting host, which a controller on another machine cannot
            # reach (slurmpod never routes its node networks): no accounting rather than a controller that waits
            if cluster.cluster_id not in self._accounting_skipped:
                self._accounting_skipped.add(cluster.cluster_id)
                log.warning("cluster %s: no Slurm accounting: controller group %s runs on ssh hosts, which cannot "
                            "reach the local accounting host", cluster.name, ", ".join(remote))
            return False
        return self.internal_accounting or cluster.spec.accounting_database is not None

    def warm(self) -> None:
        """Server start: what the first cluster's boot will need made ahead (the accounting host's database)."""
        if self.accounting is not None and self.internal_accounting:
            self.accounting.warm()

    def ensure_accounting(self, cluster: ClusterRecord) -> AccountingConfig | None:
        if self.accounting is None or not self.wants_accounting(cluster):
            return None
        return self.accounting.ensure(cluster.cluster_id, cluster.name, self.munge_key(cluster.cluster_id),
                                      self.external_db(cluster), self.accounting_image(cluster))

    def accounting_image(self, cluster: ClusterRecord) -> Image:
        """The image of the cluster's controllers, which the accounting host follows to later Slurm releases (never
        back): the controller group's, or the target of a software update of that group (slurmdbd goes first)."""
        ctl = next(iter(cluster.spec.groups_of(NodeType.CONTROLLER)), None)
        image = self.image_lookup(ctl.image_id if ctl is not None else None)
        su = cluster.software_update
        if ctl is not None and su is not None and su.phase == UpdatePhase.UPDATE and ctl.name in su.groups:
            target = self.image_lookup(su.target_image)
            if is_major_upgrade(image.slurm_version, target.slurm_version):
                return target
        return image

    def accounting_address(self, cluster: ClusterRecord) -> AccountingConfig | None:
        """Where slurmctld finds slurmdbd, known as soon as the accounting host has its address (its database and
        slurmdbd may still be starting: ``ensure_accounting`` waits for them)."""
        if self.accounting is None or not self.wants_accounting(cluster):
            return None
        return self.accounting.address(cluster.cluster_id, cluster.name, self.munge_key(cluster.cluster_id),
                                       self.external_db(cluster), self.accounting_image(cluster))

    def accounting_config(self, cluster: ClusterRecord) -> AccountingConfig | None:
        """Where slurmctld finds slurmdbd: the last config of this process, else (after a restart, or when the
        AccountingDatabase changed) ensure()."""
        if self.accounting is None or not self.wants_accounting(cluster):
            return None
        external = self.external_db(cluster)
        cfg = self.accounting.cached(cluster.cluster_id, external)
        return cfg if cfg is not None else self.ensure_accounting(cluster)

    def topology(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord],
                 accounting: AccountingConfig | None = None) -> SlurmTopology:
        ctls = self.controllers(cluster, nodes)
        return SlurmTopology(
            cluster_name=cluster.name,
            controllers=tuple((n.hostname or "", n.ip or "") for n in ctls),
            compute_groups=compute_groups(cluster),
            accounting=accounting or self.accounting_config(cluster),
            gres_types=gpus.gres_types(cluster.spec),
        )

    def conf(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord],
             accounting: AccountingConfig | None = None) -> str:
        return render_slurm_conf(self.topology(cluster, nodes, accounting))

    def runner(self, cluster: ClusterRecord, node: NodeRecord) -> CommandRunner:
        return self.provider.runner(cluster.cluster_id, node.instance_id)

    def runner_of(self, cluster: ClusterRecord) -> headnodes.RunnerOf:
        return lambda node: self.runner(cluster, node)

    def primary(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> CommandRunner | None:
        """A runner on the first live controller (admin commands fail over with Slurm's own HA)."""
        ctls = [n for n in self.controllers(cluster, nodes) if n.status == InstanceStatus.RUNNING or
                "daemons" in n.phases]
        if len(ctls) > 1:
            alive = self.alive(cluster)
            ctls = [n for n in ctls if alive.get(n.instance_id, True)] or ctls
        return self.runner(cluster, ctls[0]) if ctls else None

    def request(self, cluster: ClusterRecord, node: NodeRecord, image_id: str | None = None) -> InstanceRequest:
        group = cluster.spec.group(node.group)
        if group is None:
            raise NodeBootError(f"instance group {node.group} no longer exists")
        shared = (HOME_VOLUME, FSX_VOLUME)
        volumes = (STATE_VOLUME, *shared) if group.node_type == NodeType.CONTROLLER else shared
        image = image_id or node.image_id
        return InstanceRequest(
            cluster_id=cluster.cluster_id,
            instance_id=node.instance_id,
            group=node.group,
            instance_type=group.instance_type or "ml.t3.medium",
            image_id=image or self.image.image_id,
            image_root=self.image_lookup(image).root,
            volumes=volumes,
            labels={"slurmpod/cluster": cluster.name, "slurmpod/group": node.group},
            # a replacement keeps its predecessor's address (so its hostname and NodeName) where the provider can
            address=node.data.get("address"),
            devices=gpus.group_devices(group),
            # served by the node's instance metadata (IMDS) as on EC2
            metadata={"region": cluster.region, "availability-zone": f"{cluster.region}a",
                      "account-id": cluster.account_id},
            files=tuple(phases.boot_files(self, cluster, group)),
        )

    # ---- the ClusterRuntime protocol ----------------------------------------------------------------

    def boot_step(
        self, cluster: ClusterRecord, node: NodeRecord, phase: str, nodes: Sequence[NodeRecord]
    ) -> Mapping[str, Any]:
        group = cluster.spec.group(node.group)
        if group is None:
            raise NodeBootError(f"instance group {node.group} no longer exists")
        step = phases.PHASES.get(phase)
        if step is None:
            raise NodeBootError(f"unknown boot phase {phase}")
        try:
            return step(self, cluster, node, group, nodes)
        except NodeBootError:
            raise
        except control.SlurmError as exc:
            raise NodeBootError(f"{phase}: {exc}") from exc
        except TemporaryProviderError as exc:
            raise NodeBootError(str(exc), retryable=True, delay=exc.delay) from exc
        except (ProviderError, LifecycleSourceError, OSError, subprocess.SubprocessError) as exc:
            raise NodeBootError(f"{phase}: {exc}") from exc

    def apply_topology(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> str:
        return reconfigure.apply_topology(self, cluster, nodes)

    def remove_node(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
        if dh.request_of(node) is not None and "daemons" in node.phases:
            try:  # removed in the middle of a check: out of the reservation first
                deep_health.release(self, cluster, node, nodes, passed=True)
            except (control.SlurmError, ProviderError) as exc:
                log.warning("node %s: leaving the deep health check reservation failed: %s", node.instance_id, exc)
        membership.remove_node(self, cluster, node, nodes)

    def drain(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord], reason: str) -> bool:
        return membership.drain(self, cluster, node, nodes, reason)

    def jobs_done(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> bool:
        return membership.jobs_done(self, cluster, node, nodes)

    def running_jobs(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> list[str]:
        return membership.running_jobs(self, cluster, node, nodes)

    def resume(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
        membership.resume(self, cluster, node, nodes)

    def replace_root(
        self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord], image_id: str
    ) -> None:
        membership.replace_root(self, cluster, node, nodes, image_id)

    def reboot_node(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
        membership.reboot_node(self, cluster, node, nodes)

    def slurm_requests(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> Mapping[str, SlurmRequest]:
        return probes.slurm_requests(self, cluster, nodes)

    def unreachable(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> set[str]:
        return probes.unreachable(self, cluster, nodes)

    def heal_services(self, cluster: ClusterRecord) -> list[tuple[bool, str]]:
        return probes.heal_services(self, cluster)

    def alive(self, cluster: ClusterRecord) -> Mapping[str, bool]:
        return {i.instance_id: i.alive for i in self.provider.list_instances(cluster.cluster_id)}

    def service_instances(self, cluster: ClusterRecord) -> set[str]:
        return {self.accounting.instance_id(cluster.cluster_id)} if self.accounting is not None else set()

    def terminate_instance(self, cluster: ClusterRecord, instance_id: str) -> None:
        self.provider.terminate(cluster.cluster_id, instance_id)

    def interrupt(self, cluster: ClusterRecord, node: NodeRecord) -> None:
        if self.provider.cancel_commands(cluster.cluster_id, node.instance_id):
            log.info("node %s: its running commands were cancelled (it is being removed)", node.instance_id)

    def dhc_isolate(self, cluster: ClusterRecord, targets: Sequence[NodeRecord], nodes: Sequence[NodeRecord]) -> None:
        deep_health.isolate(self, cluster, targets, nodes)

    def dhc_run(self, cluster: ClusterRecord, targets: Sequence[NodeRecord], checks: Sequence[DeepHealthCheck],
                nodes: Sequence[NodeRecord], stress_seconds: float) -> Mapping[str, DeepHealthResult]:
        return deep_health.run(self, cluster, targets, checks, nodes, stress_seconds)

    def dhc_release(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord], *,
                    passed: bool) -> None:
        deep_health.release(self, cluster, node, nodes, passed=passed)

    def teardown_cluster(self, cluster: ClusterRecord) -> None:
        if self.accounting is not None:
            self.accounting.teardown(cluster.cluster_id)
        self.provider.teardown_cluster(cluster.cluster_id)
        shutil.rmtree(self.dir / cluster.cluster_id, ignore_errors=True)


def compute_groups(cluster: ClusterRecord) -> tuple[tuple[str, str | None], ...]:
    return spec_compute_groups(cluster.spec)


def spec_compute_groups(spec: ClusterSpec) -> tuple[tuple[str, str | None], ...]:
    return tuple((g.name, g.partition) for g in spec.instance_groups if g.node_type == NodeType.COMPUTE)
