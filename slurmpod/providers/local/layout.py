"""Names of host resources and paths of the local provider's state, in one place.

Every host resource slurmpod creates is recognisable: network namespaces are ``sp-<cluster>-<id8>``,
bridges ``sp<cluster[:10]>``, host-side veths ``spv<ip as 8 hex>``, and bridges/veths carry the link
alias ``slurmpod:<state dir>`` so ``cleanup`` can tell one state dir's leftovers from another's.

State layout (``<state_dir>/local/``)::

    lock                      flock for allocations (subnets, addresses, capacity, hosts files)
    subnets.json              {cluster_id: "10.231.7.0/24"}
    clusters/<cluster_id>/
        network.json          {"subnet", "bridge", "next", "ips": {instance_id: ip}}
        hosts                 "ip hostname" lines of every instance (bind-mounted at /etc/hosts)
        volumes/<name>/       per-cluster volumes
        instances/<instance_id>/
            meta.json         the instance record (see ``state.InstanceRecord``)
            boot.json         input of nodeinit for the current boot
            holder.log        nodeinit's stderr
            upper/ work/      the root volume (overlay upper and work dirs)
            containers/ docker/  the root volume's container storage (podman's, Docker's), bind-mounted at
                              ``NODE_DATA_DIRS``: their overlay drivers cannot sit on the node's overlay root
            mnt/              assembly point of the overlay (only visible inside the node)
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

NETNS_PREFIX = "sp-"
#: instance subdirectory -> node path: parts of the root volume a systemd node gets as plain directories
NODE_DATA_DIRS = (("containers", "/var/lib/containers"), ("docker", "/var/lib/docker"))
BRIDGE_PREFIX = "sp"
VETH_PREFIX = "spv"
ALIAS_PREFIX = "slurmpod:"


def bridge_name(cluster_id: str) -> str:
    """``sp`` + the first 10 characters of the cluster id (interface names have at most 15)."""
    return BRIDGE_PREFIX + cluster_id[:10]


def netns_name(cluster_id: str, instance_id: str) -> str:
    return f"{NETNS_PREFIX}{cluster_id}-{instance_id[-8:]}"


def veth_name(ip: str) -> str:
    """Host end of an instance's veth pair: unique on the host because addresses are."""
    return f"{VETH_PREFIX}{int(ipaddress.IPv4Address(ip)):08x}"


def link_alias(state_dir: Path) -> str:
    """The alias put on bridges and veths to mark them as this state dir's."""
    return ALIAS_PREFIX + str(state_dir.resolve())


@dataclass(frozen=True)
class Layout:
    """Paths under ``<state_dir>/local``."""

    state_dir: Path

    @property
    def root(self) -> Path:
        return self.state_dir.resolve() / "local"

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def subnets(self) -> Path:
        return self.root / "subnets.json"

    @property
    def clusters(self) -> Path:
        return self.root / "clusters"

    @property
    def seed_pool(self) -> Path:
        """Volumes' seeds copied ahead (``volumes.SeedPool``): on the volumes' filesystem, so taking one is a rename."""
        return self.root / "seed-pool"

    def cluster(self, cluster_id: str) -> Path:
        return self.clusters / cluster_id

    def network(self, cluster_id: str) -> Path:
        return self.cluster(cluster_id) / "network.json"

    def hosts(self, cluster_id: str) -> Path:
        return self.cluster(cluster_id) / "hosts"

    def volume(self, cluster_id: str, name: str) -> Path:
        return self.cluster(cluster_id) / "volumes" / name

    def instances(self, cluster_id: str) -> Path:
        return self.cluster(cluster_id) / "instances"

    def instance(self, cluster_id: str, instance_id: str) -> Path:
        return self.instances(cluster_id) / instance_id
