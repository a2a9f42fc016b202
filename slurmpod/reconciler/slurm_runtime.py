"""``SlurmRuntime``: real Slurm clusters over a host ``Provider`` (the ``local`` provider by default).

Boot phases of a node (``domain.model.PHASES``), each idempotent so a restarted server can resume:

* ``launched``   the provider makes the host (namespaces, overlay root volume, address)
* ``baseline``   the image baseline: munge key and munged, Slurm dirs, cluster SSH key, log rotation,
                 ``/opt/ml/config/resource_config.json``
* ``on_create``  the group's OnCreate script from the operation's snapshot (before Slurm starts)
* ``daemons``    controller: slurmctld; compute: dynamic configless slurmd; login: client config
* ``joined``     the node is idle/usable in Slurm (compute), answers ping (controller), sinfo works (login)
* ``on_init_complete``  the group's OnInitComplete script
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec, LifeCycleConfig
from slurmpod.domain.status import ClusterStatus, InstanceStatus, NodeType, SlurmConfigStrategy
from slurmpod.domain.validation import effective_strategy
from slurmpod.lifecycle.images import Image
from slurmpod.lifecycle.resource_config import (
    RESOURCE_CONFIG_PATH,
    ResourceGroup,
    ResourceInstance,
    render_resource_config,
)
from slurmpod.lifecycle.run import format_failure, run_lifecycle_script, write_node_file
from slurmpod.lifecycle.snapshot import load_snapshot
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
from slurmpod.reconciler.plan import controller_slot
from slurmpod.reconciler.runtime import NodeBootError, TopologyDriftError
from slurmpod.reconciler.topology import topology_key
from slurmpod.secretstore import DatabaseCredentials, SecretError, secret_file
from slurmpod.slurm import control
from slurmpod.slurm.conf import (
    DEFAULT_STATE_SAVE_LOCATION,
    AccountingConfig,
    SlurmTopology,
    conf_value,
    detect_drift,
    extract_user_lines,
    merge_user_lines,
    parse_partitions,
    partition_map,
    render_cgroup_conf,
    render_slurm_conf,
)

log = logging.getLogger("slurmpod.runtime")

STATE_VOLUME = VolumeMount("slurm-state", DEFAULT_STATE_SAVE_LOCATION)
#: per-cluster shared home (HyperPod's FSx equivalent): job files visible on every node
HOME_VOLUME = VolumeMount("home", "/home")
JOIN_TIMEOUT = 60.0
DRAIN_TIMEOUT = 120.0
LOGROTATE = b"""/var/log/slurm/*.log /var/log/slurmpod/*.log {
    weekly
    rotate 4
    compress
    missingok
    notifempty
    copytruncate
}
"""


class SlurmRuntime:
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
        self.snapshots_dir = state_dir / "lifecycle"
        self.image = image
        self.join_timeout = join_timeout
        self._secrets_lock = threading.Lock()  # nodes boot in parallel; per-cluster secrets are made once

    # ---- per-cluster secrets --------------------------------------------------------------------

    def _cluster_dir(self, cluster_id: str) -> Path:
        d = self.dir / cluster_id
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        return d

    def munge_key(self, cluster_id: str) -> bytes:
        with self._secrets_lock:
            return self._munge_key(cluster_id)

    def _munge_key(self, cluster_id: str) -> bytes:
        return secret_file(self._cluster_dir(cluster_id) / "munge.key", lambda: secrets.token_bytes(1024))

    def ssh_key(self, cluster_id: str) -> tuple[bytes, bytes]:
        with self._secrets_lock:
            return self._ssh_key(cluster_id)

    def _ssh_key(self, cluster_id: str) -> tuple[bytes, bytes]:
        d = self._cluster_dir(cluster_id)
        key = d / "id_ed25519"
        if not key.exists():
            for p in (key, key.with_suffix(".pub")):
                p.unlink(missing_ok=True)
            subprocess.run(  # noqa: S603
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"slurmpod-{cluster_id}", "-f", str(key)],
                check=True, timeout=30, capture_output=True,
            )
        return key.read_bytes(), key.with_suffix(".pub").read_bytes()

    def _save_conf(self, cluster_id: str, conf: str) -> None:
        path = self._cluster_dir(cluster_id) / "slurm.conf"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(conf)
        os.replace(tmp, path)

    def _saved_conf(self, cluster_id: str) -> str | None:
        path = self.dir / cluster_id / "slurm.conf"
        return path.read_text() if path.exists() else None

    # ---- topology -------------------------------------------------------------------------------

    def set_capacity(self, table: Mapping[str, int]) -> None:
        self.provider.set_capacity(table)

    def desired_topology(self, cluster: ClusterRecord) -> str:
        return topology_key(cluster.spec)

    @staticmethod
    def _controllers(cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> list[NodeRecord]:
        ctl = {g.name for g in cluster.spec.groups_of(NodeType.CONTROLLER)}
        return sorted((n for n in nodes if n.group in ctl and n.ip and n.active), key=controller_slot)

    def _external_db(self, cluster: ClusterRecord) -> ExternalDatabase | None:
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

    def _wants_accounting(self, cluster: ClusterRecord) -> bool:
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

    def _ensure_accounting(self, cluster: ClusterRecord) -> AccountingConfig | None:
        if self.accounting is None or not self._wants_accounting(cluster):
            return None
        return self.accounting.ensure(cluster.cluster_id, cluster.name, self.munge_key(cluster.cluster_id),
                                      self._external_db(cluster))

    def _accounting_config(self, cluster: ClusterRecord) -> AccountingConfig | None:
        """Where slurmctld finds slurmdbd: the last config of this process, else (after a restart, or when the
        AccountingDatabase changed) ensure()."""
        if self.accounting is None or not self._wants_accounting(cluster):
            return None
        external = self._external_db(cluster)
        cfg = self.accounting.cached(cluster.cluster_id, external)
        return cfg if cfg is not None else self._ensure_accounting(cluster)

    def _topology(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord],
                  accounting: AccountingConfig | None = None) -> SlurmTopology:
        ctls = self._controllers(cluster, nodes)
        return SlurmTopology(
            cluster_name=cluster.name,
            controllers=tuple((n.hostname or "", n.ip or "") for n in ctls),
            compute_groups=_compute_groups(cluster.spec),
            accounting=accounting or self._accounting_config(cluster),
        )

    def _conf(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord],
              accounting: AccountingConfig | None = None) -> str:
        return render_slurm_conf(self._topology(cluster, nodes, accounting))

    def _runner(self, cluster: ClusterRecord, node: NodeRecord) -> CommandRunner:
        return self.provider.runner(cluster.cluster_id, node.instance_id)

    def _runner_of(self, cluster: ClusterRecord) -> headnodes.RunnerOf:
        return lambda node: self._runner(cluster, node)

    def _primary(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> CommandRunner | None:
        """A runner on the first live controller (admin commands fail over with Slurm's own HA)."""
        ctls = [n for n in self._controllers(cluster, nodes) if n.status == InstanceStatus.RUNNING or
                "daemons" in n.phases]
        if len(ctls) > 1:
            alive = self.alive(cluster)
            ctls = [n for n in ctls if alive.get(n.instance_id, True)] or ctls
        return self._runner(cluster, ctls[0]) if ctls else None

    # ---- boot -----------------------------------------------------------------------------------

    def boot_step(
        self, cluster: ClusterRecord, node: NodeRecord, phase: str, nodes: Sequence[NodeRecord]
    ) -> Mapping[str, Any]:
        group = cluster.spec.group(node.group)
        if group is None:
            raise NodeBootError(f"instance group {node.group} no longer exists")
        try:
            return getattr(self, f"_phase_{phase}")(cluster, node, group, nodes)  # type: ignore[no-any-return]
        except NodeBootError:
            raise
        except control.SlurmError as exc:
            raise NodeBootError(f"{phase}: {exc}") from exc
        except TemporaryProviderError as exc:
            raise NodeBootError(str(exc), retryable=True, delay=exc.delay) from exc
        except (ProviderError, LifecycleSourceError, OSError, subprocess.SubprocessError) as exc:
            raise NodeBootError(f"{phase}: {exc}") from exc

    def _request(self, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec) -> InstanceRequest:
        volumes = (STATE_VOLUME, HOME_VOLUME) if group.node_type == NodeType.CONTROLLER else (HOME_VOLUME,)
        return InstanceRequest(
            cluster_id=cluster.cluster_id,
            instance_id=node.instance_id,
            group=node.group,
            instance_type=group.instance_type or "ml.t3.medium",
            image_id=node.image_id or self.image.image_id,
            image_root=self.image_lookup(node.image_id).root,
            volumes=volumes,
            labels={"slurmpod/cluster": cluster.name, "slurmpod/group": node.group},
            address=node.data.get("address") if group.node_type == NodeType.CONTROLLER else None,
        )

    def _phase_launched(self, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
                        nodes: Sequence[NodeRecord]) -> Mapping[str, Any]:
        self.provider.prepare_cluster(cluster.cluster_id)
        if self.accounting is not None and self._wants_accounting(cluster) and \
                group.node_type == NodeType.CONTROLLER:
            # the accounting host boots in parallel with the controller; _phase_daemons waits for it
            self.accounting.begin(cluster.cluster_id, cluster.name, self.munge_key(cluster.cluster_id),
                                  self._external_db(cluster))
        inst = self.provider.launch(self._request(cluster, node, group))
        return {"ip": inst.ip, "hostname": inst.hostname}

    def _phase_baseline(self, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
                        nodes: Sequence[NodeRecord]) -> Mapping[str, Any]:
        r = self._runner(cluster, node)
        control.start_munge(r, self.munge_key(cluster.cluster_id))
        for d in ("/var/log/slurm", "/var/log/slurmpod"):
            control.ensure_dir(r, d, 0o755, "slurm" if d.endswith("slurm") else "root")
        private, public = self.ssh_key(cluster.cluster_id)
        control.ensure_dir(r, "/root/.ssh", 0o700)
        control.write_file(r, "/root/.ssh/id_ed25519", private, 0o600, "root")
        control.write_file(r, "/root/.ssh/id_ed25519.pub", public, 0o644, "root")
        control.write_file(r, "/root/.ssh/authorized_keys", public, 0o600, "root")
        control.write_file(r, "/etc/logrotate.d/slurmpod", LOGROTATE, 0o644, "root")
        write_node_file(r, RESOURCE_CONFIG_PATH, self._resource_config(cluster, nodes))
        image = self.image_lookup(node.image_id)
        write_node_file(r, "/etc/slurmpod/image", f"{image.image_id} {image.release}\n")
        if image.setup_script:
            res = r.run(["bash", "-euo", "pipefail", "-s"], input=image.setup_script.encode(), timeout=600)
            if res.returncode != 0:
                tail = "\n".join((res.stdout + res.stderr).splitlines()[-10:])
                raise NodeBootError(f"image {image.image_id} ({image.release}) setup step failed with exit code "
                                    f"{res.returncode}: {tail}")
        return {}

    def _resource_config(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> str:
        groups = [
            ResourceGroup(
                g.name, g.instance_type or "",
                tuple(ResourceInstance(n.instance_id, n.ip or "", n.hostname) for n in nodes
                      if n.group == g.name and n.ip and n.active),
            )
            for g in cluster.spec.instance_groups
        ]
        return render_resource_config(groups, cluster_name=cluster.name, cluster_arn=cluster.arn)

    def _script(
        self, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec, entry: str | None
    ) -> Mapping[str, Any]:
        lcc: LifeCycleConfig | None = group.life_cycle_config
        digest = node.lifecycle_digest or cluster.lifecycle_snapshots.get(group.name)
        if lcc is None or entry is None or digest is None:
            return {}
        snap = load_snapshot(self.snapshots_dir, digest)
        result = run_lifecycle_script(
            self._runner(cluster, node), snap, entry,
            env={"SLURMPOD_CLUSTER": cluster.name, "SLURMPOD_INSTANCE_ID": node.instance_id,
                 "SLURMPOD_INSTANCE_GROUP": group.name},
        )
        log.info("node %s: %s exited %d (%s)", node.instance_id, entry, result.exit_code, digest[:19])
        if not result.ok:
            raise NodeBootError(format_failure(entry, result))
        return {"script": entry}

    def _phase_on_create(self, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
                         nodes: Sequence[NodeRecord]) -> Mapping[str, Any]:
        entry = group.life_cycle_config.on_create if group.life_cycle_config else None
        return self._script(cluster, node, group, entry)

    def _phase_on_init_complete(self, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
                                nodes: Sequence[NodeRecord]) -> Mapping[str, Any]:
        entry = group.life_cycle_config.on_init_complete if group.life_cycle_config else None
        return self._script(cluster, node, group, entry)

    def _phase_daemons(self, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
                       nodes: Sequence[NodeRecord]) -> Mapping[str, Any]:
        r = self._runner(cluster, node)
        if group.node_type == NodeType.CONTROLLER:
            saved = self._saved_conf(cluster.cluster_id)
            applied = cluster.applied_topology == self.desired_topology(cluster)
            acct = self._ensure_accounting(cluster)
            if saved and ((acct is not None and conf_value(saved, "AccountingStorageHost") != acct.host_ip)
                          or headnodes.ctld_hosts(saved) != headnodes.ctld_hosts(self._conf(cluster, nodes, acct))):
                # the accounting host or a controller (BatchReplace) is at a new address: same conf (user lines
                # included), new AccountingStorageHost / SlurmctldHost lines
                saved = render_slurm_conf(replace(self._topology(cluster, nodes, acct),
                                                  user_lines=extract_user_lines(saved)))
            # a controller whose root volume was replaced gets the conf it ran (user lines included) back
            conf = saved if saved and applied else self._conf(cluster, nodes, acct)
            ctls = self._controllers(cluster, nodes)
            if ctls and ctls[0].instance_id != node.instance_id:
                _wait_for_shared_state(r)
            control.start_slurmctld(r, conf, render_cgroup_conf())
            self._save_conf(cluster.cluster_id, conf)
            return {"applied_topology": self.desired_topology(cluster)}
        if group.node_type == NodeType.LOGIN:
            control.configure_login(r, self._conf(cluster, nodes))
            return {}
        ctls = self._controllers(cluster, nodes)
        if not ctls:
            raise NodeBootError("no controller is running", retryable=True)
        if len(ctls) > 1:
            headnodes.wait_for_controller_in_charge(ctls, self._runner_of(cluster))
        headnodes.start_compute_slurmd(r, control.conf_server_arg(n.ip or "" for n in ctls), group)
        return {}

    def _phase_joined(self, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
                      nodes: Sequence[NodeRecord]) -> Mapping[str, Any]:
        r = self._runner(cluster, node)
        if group.node_type == NodeType.CONTROLLER:
            if not any(control.ping(r).values()):
                raise NodeBootError("slurmctld does not answer scontrol ping")
            ctls = self._controllers(cluster, nodes)
            conf = self._saved_conf(cluster.cluster_id)
            if conf:
                headnodes.refresh_controllers(node, ctls, self.alive(cluster), self._runner_of(cluster), conf)
            headnodes.refresh_conf_servers(cluster.spec, nodes, ctls, self._runner_of(cluster),
                                           lambda: self._conf(cluster, nodes))
            return {}
        if group.node_type == NodeType.LOGIN:
            res = r.run(["sinfo", "-h"], timeout=30)
            if res.returncode != 0:
                raise NodeBootError(f"sinfo fails on the login node: {res.stderr.strip()[-300:]}")
            return {}
        primary = self._primary(cluster, nodes)
        if primary is None:
            raise NodeBootError("no controller is running", retryable=True)
        name = node.hostname or ""
        joined = control.SlurmControl(primary).wait_for_nodes([name], self.join_timeout)
        if name not in joined:
            tail = control.log_tail(r, "/var/log/slurm/slurmd.log")
            raise NodeBootError(f"node {name} did not join Slurm within {self.join_timeout:.0f}s; slurmd log: {tail}")
        return {}

    # ---- topology changes, removal, teardown ------------------------------------------------------

    def apply_topology(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> str:
        """Re-renders slurm.conf under the cluster's SlurmConfigStrategy and restarts the controllers.

        Managed: drift between the live conf and what slurmpod last wrote fails the change
        (``TopologyDriftError``) before anything is touched. Overwrite: manual partition edits are replaced.
        Merge (and Continuous): manual partitions are kept. Lines with keys slurmpod does not own are kept always.
        """
        primary = self._primary(cluster, nodes)
        live = ""
        if primary is not None:
            res = primary.run(["cat", control.SLURM_CONF], timeout=30)
            live = res.stdout if res.returncode == 0 else ""
        strategy = effective_strategy(cluster.spec)
        if strategy == SlurmConfigStrategy.MANAGED and live and cluster.last_good_spec is not None:
            # drift = the live conf matches none of what slurmpod wrote or is writing (a crash between saving and
            # restarting may leave either the old or the new conf live: neither is drift)
            saved = self._saved_conf(cluster.cluster_id)
            candidates = [partition_map(_compute_groups(cluster.last_good_spec)),
                          partition_map(_compute_groups(cluster.spec))]
            if saved:
                candidates.insert(0, {p: m for p, m in parse_partitions(saved).items() if p != "dev"})
            findings = [detect_drift(live, expected) for expected in candidates]
            drift = [] if any(not f for f in findings) else findings[0]
            if drift:
                raise TopologyDriftError(drift)
        api_partitions = {g.partition for g in cluster.spec.instance_groups if g.partition}
        keep_manual = strategy in (None, SlurmConfigStrategy.MERGE)
        user_lines = merge_user_lines(live, api_partitions, keep_manual_partitions=keep_manual) if live else ()
        conf = render_slurm_conf(replace(self._topology(cluster, nodes), user_lines=user_lines))
        ctls = self._controllers(cluster, nodes)
        self._save_conf(cluster.cluster_id, conf)
        for n in reversed(ctls):  # backups first, then the primary
            control.restart_slurmctld(self._runner(cluster, n), conf, render_cgroup_conf())
        login = {g.name for g in cluster.spec.groups_of(NodeType.LOGIN)}
        for n in nodes:
            if n.group in login and n.active and "daemons" in n.phases:
                control.configure_login(self._runner(cluster, n), conf)
        return self.desired_topology(cluster)

    def remove_node(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
        group = cluster.spec.group(node.group) or (cluster.last_good_spec.group(node.group)
                                                   if cluster.last_good_spec else None)
        is_compute = group is None or group.node_type in (NodeType.COMPUTE, None)
        # a controller leaving a cluster that stays hands over first (not when the whole cluster goes away)
        staying = cluster.status not in (ClusterStatus.DELETING, ClusterStatus.ROLLING_BACK)
        if staying and group is not None and group.node_type == NodeType.CONTROLLER and "daemons" in node.phases \
                and self.alive(cluster).get(node.instance_id, False):
            self._graceful_stop(cluster, node, nodes)
        if is_compute and node.hostname and "daemons" in node.phases:
            primary = self._primary(cluster, [n for n in nodes if n.instance_id != node.instance_id])
            if primary is not None:
                try:
                    self._leave_slurm(primary, cluster, node)
                except (control.SlurmError, ProviderError) as exc:
                    log.warning("node %s: leaving Slurm failed (%s); terminating anyway", node.instance_id, exc)
        self.provider.terminate(cluster.cluster_id, node.instance_id)

    def _leave_slurm(self, primary: CommandRunner, cluster: ClusterRecord, node: NodeRecord) -> None:
        import time

        ctl = control.SlurmControl(primary)
        name = node.hostname or ""
        if ctl.node(name) is None:
            return
        ctl.drain(name, "removed by slurmpod")
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < deadline:
            sn = ctl.node(name)
            if sn is None or not sn.has_jobs():
                break
            time.sleep(0.5)
        try:
            control.stop_slurmd(self._runner(cluster, node), timeout=10)
        except (control.SlurmError, ProviderError):
            pass
        ctl.delete_node(name)

    # ---- software updates: drain, wait, replace the root volume, resume ----------------------------

    def _slurm_name(self, cluster: ClusterRecord, node: NodeRecord) -> str | None:
        group = cluster.spec.group(node.group)
        if group is None or group.node_type not in (NodeType.COMPUTE, None) or not node.hostname:
            return None
        return node.hostname

    def drain(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord], reason: str) -> bool:
        name = self._slurm_name(cluster, node)
        primary = self._primary(cluster, nodes)
        if name is None or primary is None:
            return False
        ctl = control.SlurmControl(primary)
        sn = ctl.node(name)
        if sn is None:
            return False
        if sn.is_drained() or sn.is_draining():
            return (sn.reason or "").startswith(control.REASON_PREFIX)
        ctl.drain(name, reason)
        return True

    def jobs_done(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> bool:
        name = self._slurm_name(cluster, node)
        primary = self._primary(cluster, nodes)
        if name is None or primary is None:
            return True
        sn = control.SlurmControl(primary).node(name)
        return sn is None or not sn.has_jobs()

    def resume(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
        name = self._slurm_name(cluster, node)
        primary = self._primary(cluster, nodes)
        if name is None or primary is None:
            return
        ctl = control.SlurmControl(primary)
        sn = ctl.node(name)
        # idempotent: after a crash the node may already be resumed (Slurm refuses to resume an idle node)
        if sn is not None and (sn.is_drained() or sn.is_draining() or "FAIL" in sn.states or "DOWN" in sn.states):
            ctl.resume(name)

    def replace_root(
        self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord], image_id: str
    ) -> None:
        group = cluster.spec.group(node.group)
        if group is None:
            raise NodeBootError(f"instance group {node.group} no longer exists")
        if self.alive(cluster).get(node.instance_id, False):
            self._graceful_stop(cluster, node, nodes)
        req = replace(self._request(cluster, node, group), image_id=image_id,
                      image_root=self.image_lookup(image_id).root)
        try:
            self.provider.replace_root_volume(req)
        except ProviderError as exc:
            raise NodeBootError(f"root volume replacement failed: {exc}") from exc

    def _graceful_stop(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord] = ()) -> None:
        group = cluster.spec.group(node.group)
        r = self._runner(cluster, node)
        try:  # slurmctld saves its state (the job queue) on the shared volume before the node goes down
            if group is not None and group.node_type == NodeType.CONTROLLER:
                try:
                    # the stopping controller keeps its place in SlurmctldHost order even when marked for removal
                    ctls = sorted({n.instance_id: n for n in [*self._controllers(cluster, nodes), node]
                                   if n.ip}.values(), key=controller_slot)
                    headnodes.hand_over(node, ctls, self.alive(cluster), self._runner_of(cluster))
                except (control.SlurmError, ProviderError) as exc:  # the stop below still saves the state
                    log.warning("controller %s: hand-over failed: %s", node.instance_id, exc)
                control.stop_daemon(r, control.SLURMCTLD_PID_FILE, "slurmctld")
            else:
                control.stop_slurmd(r, timeout=20)
        except (control.SlurmError, ProviderError) as exc:
            log.warning("node %s: graceful stop failed: %s", node.instance_id, exc)

    def reboot_node(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
        alive = self.alive(cluster).get(node.instance_id, False)
        if alive:
            self._graceful_stop(cluster, node, nodes)
        try:
            self.provider.reboot(cluster.cluster_id, node.instance_id)
        except ProviderError as exc:
            raise NodeBootError(f"reboot failed: {exc}") from exc

    def slurm_requests(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> Mapping[str, str]:
        primary = self._primary(cluster, nodes)
        if primary is None:
            return {}
        try:
            states = {n.name: n for n in control.SlurmControl(primary).nodes()}
        except (control.SlurmError, ProviderError):
            return {}
        out: dict[str, str] = {}
        for n in nodes:
            sn = states.get(n.hostname or "")
            if sn is None or "FAIL" not in sn.states or sn.has_jobs():
                continue
            reason = (sn.reason or "").strip()
            for action in ("Replace", "Reboot"):
                if reason.lower().startswith(f"action:{action.lower()}"):
                    out[n.instance_id] = action
        return out

    def unreachable(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> set[str]:
        out: set[str] = set()
        for n in nodes:
            if n.status != InstanceStatus.RUNNING or self._slurm_name(cluster, n) is None:
                continue
            try:
                pid = control.read_pid(self._runner(cluster, n), control.SLURMD_PID_FILE, "slurmd")
            except ProviderError:
                continue  # a dead instance is handled by alive()
            if pid is None:
                out.add(n.instance_id)
        return out

    def teardown_cluster(self, cluster: ClusterRecord) -> None:
        if self.accounting is not None:
            self.accounting.teardown(cluster.cluster_id)
        self.provider.teardown_cluster(cluster.cluster_id)
        shutil.rmtree(self.dir / cluster.cluster_id, ignore_errors=True)

    def heal_services(self, cluster: ClusterRecord) -> list[tuple[bool, str]]:
        """The accounting host (instance or slurmdbd) found dead is brought back on its volume and address;
        slurmctld reconnects by itself and sends what it queued meanwhile."""
        if self.accounting is None or not self._wants_accounting(cluster):
            return []
        if self.accounting.alive(cluster.cluster_id):
            return []
        t0 = time.monotonic()
        try:
            cfg = self._ensure_accounting(cluster)
        except (control.SlurmError, ProviderError) as exc:
            return [(False, f"The accounting host of Cluster {cluster.name} is down and could not be restarted: {exc}")]
        where = f" at {cfg.host_ip}" if cfg is not None else ""
        return [(True, f"The accounting host of Cluster {cluster.name} was down; slurmdbd runs again{where} "
                       f"({time.monotonic() - t0:.1f}s).")]

    def alive(self, cluster: ClusterRecord) -> Mapping[str, bool]:
        return {i.instance_id: i.alive for i in self.provider.list_instances(cluster.cluster_id)}


def _wait_for_shared_state(r: CommandRunner, timeout: float = 30.0) -> None:
    """A backup controller starts only once the shared StateSaveLocation is initialised: two slurmctlds creating
    its ``clustername`` file at once can read it half-written and die ("CLUSTER NAME MISMATCH", seen here)."""
    path = f"{DEFAULT_STATE_SAVE_LOCATION}/clustername"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if r.run(["test", "-s", path], timeout=10).returncode == 0:
            return
        time.sleep(0.2)
    log.warning("%s still missing after %.0f s; starting slurmctld anyway", path, timeout)


def _compute_groups(spec: ClusterSpec) -> tuple[tuple[str, str | None], ...]:
    return tuple((g.name, g.partition) for g in spec.instance_groups if g.node_type == NodeType.COMPUTE)
