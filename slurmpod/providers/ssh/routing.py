"""``PooledProvider``: local namespaces for most instance types, ssh hosts for the types that have a pool.

Routing: an instance whose type has a host pool launches on an ssh host; every other type stays on the
local provider. Ownership is persistent without a table of its own: an instance belongs to ssh exactly
when the host registry has a host assigned to it, and to local when the local provider has its record.

Mixed clusters (e.g. a local controller with ssh compute nodes) need the two networks routed to each
other. This machine never forwards packets for slurmpod, so a launch that makes a cluster mixed checks
reachability first (a TCP connection attempt between one instance of each side: a refusal proves the
path, a timeout or "no route" does not) and fails with a clear message when there is none.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from slurmpod.providers.base import (
    CommandRunner,
    InstanceRequest,
    Provider,
    ProviderError,
    ProviderInstance,
    SetupError,
    TemporaryProviderError,
)
from slurmpod.providers.local.provider import LocalProvider
from slurmpod.providers.ssh.pool import HostPool

if TYPE_CHECKING:  # imported when pools exist: asyncssh (the ``ssh`` extra) is needed only then
    from slurmpod.providers.ssh.provider import SshProvider

log = logging.getLogger("slurmpod.ssh")

#: bash -c PROBE probe IP PORT: exit 0 when IP answers (connects or refuses), 1 when there is no path
PROBE = """
out=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>&1); rc=$?
[ $rc = 0 ] && exit 0
case $out in *refused*) exit 0;; esac
echo "${out:-timed out}"; exit 1
"""
PROBE_PORT = 6818  # slurmd's port: closed or open, the answer proves the route


class PooledProvider:
    """Implements ``Provider`` by routing each instance to ``local`` or ``ssh`` (see the module docstring)."""

    name = "local"

    def __init__(self, local: LocalProvider, ssh: SshProvider) -> None:
        self.local = local
        self.ssh = ssh

    def _for(self, cluster_id: str, instance_id: str) -> Provider:
        return self.ssh if self.ssh.owns(cluster_id, instance_id) else self.local

    def _local_has(self, cluster_id: str, instance_id: str) -> bool:
        return (self.local.layout.instance(cluster_id, instance_id) / "meta.json").exists()

    def set_capacity(self, table: Mapping[str, int]) -> None:
        self.local.set_capacity(table)
        self.ssh.set_capacity(table)

    def prepare_cluster(self, cluster_id: str) -> None:
        """Nothing up front: the local provider prepares its network when it launches the first instance."""
        self.ssh.prepare_cluster(cluster_id)

    def launch(self, request: InstanceRequest) -> ProviderInstance:
        cid, iid = request.cluster_id, request.instance_id
        to_ssh = not self._local_has(cid, iid) and (self.ssh.owns(cid, iid) or self.ssh.handles(request.instance_type))
        provider: Provider = self.ssh if to_ssh else self.local
        inst = provider.launch(request)
        try:
            self._check_mixed(request, inst, to_ssh)
        except ProviderError:
            provider.terminate(cid, iid)
            raise
        return inst

    def _check_mixed(self, request: InstanceRequest, inst: ProviderInstance, on_ssh: bool) -> None:
        """A launch on one side of a cluster that has live instances on the other side must reach them."""
        others = self.local.list_instances(request.cluster_id) if on_ssh else \
            self.ssh.list_instances(request.cluster_id)
        peer = next((o for o in others if o.alive and o.instance_id != request.instance_id), None)
        if peer is None:
            return
        runner = (self.ssh if on_ssh else self.local).runner(request.cluster_id, request.instance_id)
        res = runner.run(["bash", "-c", PROBE, "probe", peer.ip, str(PROBE_PORT)], timeout=15)
        if res.returncode == 0:
            return
        here, there = ("ssh host", "local") if on_ssh else ("local node", "ssh host")
        raise TemporaryProviderError(
            f"{here} {inst.hostname} ({inst.ip}) of instance {request.instance_id} cannot reach {there} instance "
            f"{peer.instance_id} ({peer.ip}:{PROBE_PORT}): {res.stdout.strip() or res.stderr.strip()}. A cluster "
            "mixing local and ssh instances needs routed networks between them (slurmpod never enables forwarding "
            "on this machine); put the whole cluster on ssh pools or route the networks", delay=60.0)

    def cancel_commands(self, cluster_id: str, instance_id: str) -> int:
        return self._for(cluster_id, instance_id).cancel_commands(cluster_id, instance_id)

    def terminate(self, cluster_id: str, instance_id: str) -> None:
        self._for(cluster_id, instance_id).terminate(cluster_id, instance_id)

    def reboot(self, cluster_id: str, instance_id: str) -> ProviderInstance:
        return self._for(cluster_id, instance_id).reboot(cluster_id, instance_id)

    def replace_root_volume(self, request: InstanceRequest) -> ProviderInstance:
        return self._for(request.cluster_id, request.instance_id).replace_root_volume(request)

    def list_instances(self, cluster_id: str) -> list[ProviderInstance]:
        return [*self.local.list_instances(cluster_id), *self.ssh.list_instances(cluster_id)]

    def runner(self, cluster_id: str, instance_id: str) -> CommandRunner:
        return self._for(cluster_id, instance_id).runner(cluster_id, instance_id)

    def teardown_cluster(self, cluster_id: str) -> None:
        try:
            self.ssh.teardown_cluster(cluster_id)
        finally:
            self.local.teardown_cluster(cluster_id)


def build_node_provider(state_dir: Path, cidr: str = "10.231.0.0/16") -> LocalProvider | PooledProvider:
    """The local provider, wrapped with the ssh pools when ``<state_dir>/ssh/hosts.json`` has hosts."""
    local = LocalProvider(state_dir, cidr=cidr)
    if not HostPool(state_dir).exists():
        return local
    try:
        from slurmpod.providers.ssh.provider import SshProvider
    except ModuleNotFoundError as exc:
        if exc.name != "asyncssh":
            raise
        raise SetupError("ssh host pools are registered but asyncssh is not installed: "
                         "pip install 'slurmpod[ssh]'") from exc
    return PooledProvider(local, SshProvider(state_dir))
