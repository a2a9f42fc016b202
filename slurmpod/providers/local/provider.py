"""``LocalProvider``: every instance is an isolated host on this machine.

An instance = a network namespace with ``eth0`` on a per-cluster bridge, plus a holder process (PID 1 of
new UTS, IPC, mount and PID namespaces) whose root is an overlay of the image (lower) and the instance's
root volume (upper/work). See ``layout.py`` for the on-disk state and ``nodeinit.py`` for the node's
filesystem. Instances survive the slurmpod process; a new provider object re-adopts them from ``meta.json``.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from slurmpod.ids import hostname_for_ip
from slurmpod.providers.base import (
    InstanceRequest,
    InsufficientCapacity,
    NodeFile,
    PermanentProviderError,
    ProviderInstance,
    SetupError,
    TemporaryProviderError,
)
from slurmpod.providers.inflight import InFlight
from slurmpod.providers.local import holder, netns
from slurmpod.providers.local.bridgeservices import BridgeServices
from slurmpod.providers.local.holder import SEED_FILE, write_seed
from slurmpod.providers.local.imds_attach import ImdsAttachments
from slurmpod.providers.local.layout import (
    NODE_DATA_DIRS,
    Layout,
    bridge_name,
    link_alias,
    netns_name,
    veth_name,
)
from slurmpod.providers.local.runner import LocalRunner, nsenter_argv
from slurmpod.providers.local.state import InstanceRecord, file_lock, read_json, rewrite_hosts, write_json
from slurmpod.providers.local.sysnode import (
    SHUTDOWN_GRACE,
    host_limits_once,
    node_files,
    systemd_image,
    wait_started,
)
from slurmpod.providers.local.volumes import SeedPool, seed_volume

log = logging.getLogger(__name__)

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_BAD_PATH_CHARS = re.compile(r"[\s,:=\\]")
#: accelerator devices a node may get (emulated directly in its /dev, e.g. /dev/nvidia0)
_DEVICE_PATH = re.compile(r"^/dev/[a-z][a-z_-]*[0-9]{1,3}$")


def _check_id(kind: str, value: str) -> None:
    if not _ID_RE.match(value):
        raise PermanentProviderError(f"invalid {kind} {value!r} for the local provider")


class LocalProvider:
    """Implements ``slurmpod.providers.base.Provider`` with namespaces and overlayfs on this host."""

    name = "local"

    def __init__(self, state_dir: Path, cidr: str = "10.231.0.0/16",
                 capacity: Mapping[str, int] | None = None) -> None:
        self.state_dir = Path(state_dir).resolve()
        if _BAD_PATH_CHARS.search(str(self.state_dir)):
            raise SetupError(f"state dir {self.state_dir} must not contain spaces, ',', ':' or '='")
        self.layout = Layout(self.state_dir)
        self.cidr = cidr
        self.capacity = dict(capacity or {})
        self._alias = link_alias(self.state_dir)
        self._popens: dict[str, subprocess.Popen[bytes]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.inflight = InFlight()  # commands running in nodes (cancel_commands)
        self.last_boot_seconds = 0.0  # duration of the most recent boot (network + holder + probe)
        # apt/pip and container images for the nodes: the state dir's apt-cacher-ng and docker-registry on its
        # bridges (bridgeservices.py), shared by every provider object of the state dir through file locks; the
        # server's stop path calls close()
        self.services = BridgeServices(self.state_dir)
        self.pkgproxy = self.services.pkgproxy
        # IMDS at 169.254.169.254 in every node (imds.py, imds_attach.py)
        self.imds = ImdsAttachments(lambda rec: self._meta(rec.cluster_id, rec.instance_id))
        # seeded volumes (the accounting host's database) copied ahead of time: a launch renames one (volumes.py)
        self.seed_pool = SeedPool(self.layout.seed_pool)

    # ------------------------------------------------------------------ clusters

    def set_capacity(self, table: Mapping[str, int]) -> None:
        """Replaces the capacity table; takes effect for the next launch."""
        self.capacity = dict(table)

    def prepare_cluster(self, cluster_id: str) -> None:
        _check_id("cluster id", cluster_id)
        with file_lock(self.layout.lock):
            net = self._ensure_network_record(cluster_id)
            self._ensure_bridge(net["bridge"], net["subnet"])
            hosts = self.layout.hosts(cluster_id)
            if not hosts.exists():
                rewrite_hosts(hosts, {})
            (self.layout.cluster(cluster_id) / "volumes").mkdir(parents=True, exist_ok=True)
        self.services.ensure(net["subnet"])  # outside the allocation lock: a (re)start takes tens of ms

    def _ensure_network_record(self, cluster_id: str) -> dict:
        path = self.layout.network(cluster_id)
        net = read_json(path, None)
        if net is not None:
            return net
        subnets: dict[str, str] = read_json(self.layout.subnets, {})
        subnet = subnets.get(cluster_id)
        if subnet is None:
            subnet = netns.choose_subnet(self.cidr, cluster_id, set(subnets.values()), netns.host_routes())
        bridge = bridge_name(cluster_id)
        for other in subnets:
            if other != cluster_id and bridge_name(other) == bridge:
                raise PermanentProviderError(
                    f"cluster ids {other} and {cluster_id} share bridge name {bridge}")
        subnets[cluster_id] = subnet
        write_json(self.layout.subnets, subnets)
        net = {"subnet": subnet, "bridge": bridge, "next": netns.FIRST_HOST, "ips": {}}
        write_json(path, net)
        return net

    def _ensure_bridge(self, bridge: str, subnet: str) -> None:
        alias_file = Path("/sys/class/net", bridge, "ifalias")
        if alias_file.exists():
            current = alias_file.read_text().strip()
            if current and current != self._alias:
                raise PermanentProviderError(f"bridge {bridge} belongs to another state dir ({current})")
            # every launch comes here: no `ip` command when the bridge is up with its address (a server killed
            # between `ip link add` and `ip addr add` left one without: ensure_bridge below adds what is missing)
            if current == self._alias and netns.link_up(bridge) and netns.has_address(netns.gateway_ip(subnet)):
                return
        netns.ensure_bridge(bridge, subnet, self._alias)

    def teardown_cluster(self, cluster_id: str) -> None:
        _check_id("cluster id", cluster_id)
        inst_dir = self.layout.instances(cluster_id)
        if inst_dir.is_dir():
            for d in sorted(inst_dir.iterdir()):
                if d.is_dir():
                    self.terminate(cluster_id, d.name)
        with file_lock(self.layout.lock):
            net = read_json(self.layout.network(cluster_id), None)
            bridge = net["bridge"] if net else bridge_name(cluster_id)
            alias_file = Path("/sys/class/net", bridge, "ifalias")
            if alias_file.exists() and alias_file.read_text().strip() in ("", self._alias):
                netns.delete_link(bridge)
            subnets = read_json(self.layout.subnets, {})
            if subnets.pop(cluster_id, None) is not None:
                write_json(self.layout.subnets, subnets)
            shutil.rmtree(self.layout.cluster(cluster_id), ignore_errors=True)
        if net is not None:
            self.services.release(net["subnet"])

    # ------------------------------------------------------------------ instances

    def launch(self, request: InstanceRequest) -> ProviderInstance:
        _check_id("cluster id", request.cluster_id)
        _check_id("instance id", request.instance_id)
        self._check_image(request.image_root)
        for vol in request.volumes:
            _check_id("volume name", vol.name)
            if not vol.path.startswith("/") or _BAD_PATH_CHARS.search(vol.path):
                raise PermanentProviderError(f"invalid volume path {vol.path!r}")
        for dev in request.devices:
            if not _DEVICE_PATH.match(dev):
                raise PermanentProviderError(f"invalid device path {dev!r} (expected /dev/<name><N>)")
        with self._instance_lock(request.instance_id):
            meta = self._meta(request.cluster_id, request.instance_id)
            rec = InstanceRecord.load(meta)
            if rec is not None:
                if self._alive(rec):
                    return self._describe(rec, True)
                self._stop(rec)  # known but not running (e.g. crashed mid-launch): boot it again
                self._boot(rec, request.files)
                self._imds_attach(rec, required=False)
                return self._describe(rec, True)
            self.prepare_cluster(request.cluster_id)
            rec = self._create_record(request)
            try:
                for vol in request.volumes:
                    if vol.seed:
                        seed_volume(self.layout.volume(rec.cluster_id, vol.name), rec.image_root, vol.seed,
                                    self.seed_pool)
                self._boot(rec, request.files)
                self._imds_attach(rec, required=True)
            except BaseException:
                self._destroy(rec)
                raise
            return self._describe(rec, True)

    def _create_record(self, request: InstanceRequest) -> InstanceRecord:
        """Capacity check, address allocation and the instance record, atomically."""
        cid, iid = request.cluster_id, request.instance_id
        with file_lock(self.layout.lock):
            limit = self.capacity.get(request.instance_type)
            if limit is not None and self._count_type(request.instance_type, exclude=iid) >= limit:
                raise InsufficientCapacity(request.instance_type)
            net = read_json(self.layout.network(cid), None)
            if net is None:
                raise TemporaryProviderError(f"cluster {cid} is not prepared")
            used = set(net["ips"].values())
            if request.address and request.address not in used and netns.assignable(net["subnet"], request.address):
                ip = request.address  # a replaced controller keeps its address (and so its hostname)
            else:
                ip, nxt = netns.allocate_ip(net["subnet"], used, net["next"])
                net["next"] = nxt
            net["ips"][iid] = ip
            rec = InstanceRecord(
                cluster_id=cid, instance_id=iid, group=request.group, instance_type=request.instance_type,
                image_id=request.image_id, image_root=request.image_root,
                volumes=[[v.name, v.path] for v in request.volumes], ip=ip, hostname=hostname_for_ip(ip),
                netns=netns_name(cid, iid), veth=veth_name(ip), labels=dict(request.labels),
                metadata=dict(request.metadata), devices=list(request.devices),
            )
            inst = self.layout.instance(cid, iid)
            for sub in ("upper", "work", "mnt"):
                (inst / sub).mkdir(parents=True, exist_ok=True)
            # the address first: a server killed between the two writes leaves an address without a record (the
            # relaunch of the same id takes it again), never a record whose address another node could be given
            write_json(self.layout.network(cid), net)
            self._write_hosts(cid, net)
            rec.save(inst / "meta.json")
        return rec

    def _count_type(self, instance_type: str, exclude: str) -> int:
        """Instances of ``instance_type`` in every cluster that are running or still launching."""
        count = 0
        for meta in self.layout.clusters.glob("*/instances/*/meta.json"):
            rec = InstanceRecord.load(meta)
            if rec is None or rec.instance_id == exclude or rec.instance_type != instance_type:
                continue
            if rec.holder_pid == 0 or self._alive(rec):
                count += 1
        return count

    def _boot(self, rec: InstanceRecord, files: Sequence[NodeFile] = ()) -> None:
        """Network (idempotent) + a new holder over the record's root volume; waits until the runner works.

        ``files`` (a new root volume's, see ``InstanceRequest.files``) go to nodeinit in a 0600 seed file it
        removes once read; it writes them after pivot_root, before the node's init starts."""
        t0 = time.monotonic()
        net = read_json(self.layout.network(rec.cluster_id), None)
        if net is None:
            raise TemporaryProviderError(f"cluster {rec.cluster_id} has no network")
        self._ensure_bridge(net["bridge"], net["subnet"])
        netns.ensure_instance_net(rec.netns, rec.veth, rec.ip, net["subnet"], net["bridge"], self._alias)
        inst = self.layout.instance(rec.cluster_id, rec.instance_id)
        for sub in ("upper", "work", "mnt"):
            (inst / sub).mkdir(parents=True, exist_ok=True)
        volumes = []
        for name, path in rec.volumes:
            src = self.layout.volume(rec.cluster_id, name)
            src.mkdir(parents=True, exist_ok=True)
            volumes.append([str(src), path])
        cfg: dict[str, object] = {
            "hostname": rec.hostname,
            "lower": rec.image_root,
            "upper": str(inst / "upper"),
            "work": str(inst / "work"),
            "merged": str(inst / "mnt"),
            "hosts": str(self.layout.hosts(rec.cluster_id)),
            "volumes": volumes,
            "hide": [str(self.state_dir)],
            # accelerators: character devices of /dev/null's numbers, one per GPU (Slurm's gres.conf File= needs a
            # character device; nothing in a node can reach a real GPU through them)
            "devices": [[path, 1, 3] for path in rec.devices],
        }
        cgroup = None
        if systemd_image(rec.image_root):
            cgroup = holder.node_cgroup(rec.instance_id)
            if cgroup is None:
                raise PermanentProviderError("this host has no cgroup2 hierarchy (/sys/fs/cgroup or "
                                             "/sys/fs/cgroup/unified): systemd nodes need one")
            cfg["init"] = "systemd"
            for sub, path in NODE_DATA_DIRS:  # container storage: a plain directory of the root volume
                (inst / sub).mkdir(exist_ok=True)
                volumes.append([str(inst / sub), path])
            cfg["files"] = node_files(net["subnet"])
            host_limits_once()
        seed = inst / SEED_FILE
        if files:
            write_seed(seed, files)
            cfg["seed"] = str(seed)
        try:
            boot = holder.start(rec.netns, cfg, inst, cgroup)
        finally:
            seed.unlink(missing_ok=True)  # read (and removed) by nodeinit; never left behind by a failed boot
        self._popens[rec.instance_id] = boot.popen
        rec.holder_pid, rec.holder_start = boot.holder_pid, boot.holder_start
        rec.unshare_pid, rec.unshare_start = boot.unshare_pid, boot.unshare_start
        rec.mntns, rec.netns_inode = boot.mntns, boot.netns_inode
        rec.boots += 1
        rec.save(inst / "meta.json")
        if cgroup is not None:
            wait_started(rec.holder_pid, rec.instance_id, inst / "holder.log")  # its systemctl is the probe
        else:
            probe = subprocess.run([*nsenter_argv(rec.holder_pid), "--", "true"], capture_output=True,
                                   timeout=10, stdin=subprocess.DEVNULL)
            if probe.returncode != 0:
                raise TemporaryProviderError(f"node {rec.instance_id} booted but nsenter failed: "
                                             f"{probe.stderr.decode(errors='replace').strip()}")
        self.last_boot_seconds = time.monotonic() - t0

    def _stop(self, rec: InstanceRecord) -> None:
        systemd = systemd_image(rec.image_root)
        holder.stop(rec.holder_pid, rec.holder_start, rec.unshare_pid, rec.unshare_start, rec.mntns,
                    popen=self._popens.pop(rec.instance_id, None), shutdown=SHUTDOWN_GRACE if systemd else 0.0,
                    upper=str(self.layout.instance(rec.cluster_id, rec.instance_id) / "upper"))
        cgroup = holder.node_cgroup(rec.instance_id)
        if cgroup is not None:
            holder.remove_cgroup(cgroup)
        holder.kill_strays(self.layout.instance(rec.cluster_id, rec.instance_id) / "boot.json")
        rec.holder_pid, rec.holder_start, rec.unshare_pid, rec.unshare_start = 0, "", 0, ""
        rec.mntns, rec.netns_inode = "", 0
        meta = self._meta(rec.cluster_id, rec.instance_id)
        if meta.exists():
            # Stopped, not launching: holder_pid stays 0, so mark the record with a non-zero sentinel.
            rec.holder_pid = -1
            rec.save(meta)

    def _destroy(self, rec: InstanceRecord) -> None:
        """Everything of one instance: processes, namespaces, address, hosts line, root volume."""
        self._imds_detach(rec.instance_id)
        self._stop(rec)
        netns.delete_instance_net(rec.netns, rec.veth)
        with file_lock(self.layout.lock):
            net = read_json(self.layout.network(rec.cluster_id), None)
            if net is not None and rec.instance_id in net["ips"]:
                del net["ips"][rec.instance_id]
                write_json(self.layout.network(rec.cluster_id), net)
                self._write_hosts(rec.cluster_id, net)
            shutil.rmtree(self.layout.instance(rec.cluster_id, rec.instance_id), ignore_errors=True)

    def terminate(self, cluster_id: str, instance_id: str) -> None:
        _check_id("cluster id", cluster_id)
        _check_id("instance id", instance_id)
        with self._instance_lock(instance_id):
            rec = InstanceRecord.load(self._meta(cluster_id, instance_id))
            if rec is None:
                # Unknown, or a launch that died before writing its record: remove what its name implies.
                self._imds_detach(instance_id)
                netns.delete_instance_net(netns_name(cluster_id, instance_id), "")
                shutil.rmtree(self.layout.instance(cluster_id, instance_id), ignore_errors=True)
            else:
                self._destroy(rec)
        self.inflight.forget(instance_id)

    def reboot(self, cluster_id: str, instance_id: str) -> ProviderInstance:
        with self._instance_lock(instance_id):
            rec = self._require(cluster_id, instance_id)
            self._stop(rec)
            self._boot(rec)
            self._imds_attach(rec, required=False)
            return self._describe(rec, True)

    def replace_root_volume(self, request: InstanceRequest) -> ProviderInstance:
        self._check_image(request.image_root)
        with self._instance_lock(request.instance_id):
            rec = self._require(request.cluster_id, request.instance_id)
            self._stop(rec)
            inst = self.layout.instance(rec.cluster_id, rec.instance_id)
            for sub in ("upper", "work", "mnt", *(d for d, _ in NODE_DATA_DIRS)):
                shutil.rmtree(inst / sub, ignore_errors=True)
                (inst / sub).mkdir(parents=True)
            rec.image_id, rec.image_root = request.image_id, request.image_root
            rec.volumes = [[v.name, v.path] for v in request.volumes]
            if request.metadata:
                rec.metadata = dict(request.metadata)
            rec.devices = list(request.devices)
            self._boot(rec, request.files)
            self._imds_attach(rec, required=False)
            return self._describe(rec, True)

    def list_instances(self, cluster_id: str) -> list[ProviderInstance]:
        _check_id("cluster id", cluster_id)
        result = []
        for meta in sorted(self.layout.instances(cluster_id).glob("*/meta.json")):
            rec = InstanceRecord.load(meta)
            if rec is not None:
                result.append(self._describe(rec, self._alive(rec)))
        return result

    def runner(self, cluster_id: str, instance_id: str) -> LocalRunner:
        _check_id("cluster id", cluster_id)
        _check_id("instance id", instance_id)

        def resolve() -> int:
            rec = InstanceRecord.load(self._meta(cluster_id, instance_id))
            if rec is None:
                raise TemporaryProviderError(f"instance {instance_id} does not exist")
            if not self._alive(rec):
                raise TemporaryProviderError(f"instance {instance_id} is not running")
            return rec.holder_pid

        def systemd() -> bool | None:
            rec = InstanceRecord.load(self._meta(cluster_id, instance_id))
            return None if rec is None else systemd_image(rec.image_root)

        return LocalRunner(resolve, systemd, inflight=(self.inflight, instance_id))

    def cancel_commands(self, cluster_id: str, instance_id: str) -> int:
        return self.inflight.cancel(instance_id)

    # ------------------------------------------------------------------ instance metadata (imds.py)

    def _imds_attach(self, rec: InstanceRecord, *, required: bool) -> None:
        self.imds.attach(rec, required=required)

    def _imds_detach(self, instance_id: str) -> None:
        self.imds.detach(instance_id)

    def _live_records(self) -> list[InstanceRecord]:
        recs = (InstanceRecord.load(meta) for meta in sorted(self.layout.clusters.glob("*/instances/*/meta.json")))
        return [rec for rec in recs if rec is not None and self._alive(rec)]

    def start_imds(self) -> None:
        """Serves IMDS from now on: in every live instance of the state dir this process serves (re-adoption
        after a server restart) and in every instance launched, rebooted or given a new root volume later."""
        self.imds.start(self._live_records())

    def close_imds(self) -> None:
        """Stops serving instance metadata (nodes keep running; ``start_imds`` serves them again)."""
        self.imds.close()

    def serve_only(self, owns: Callable[[str], bool]) -> None:
        """Several servers share this state dir's nodes: this one serves their IMDS only in the clusters
        ``owns`` says (its leases); ``sync_services`` follows a change."""
        self.imds.serves = owns

    def sync_services(self) -> None:
        """The clusters this server owns changed: IMDS listeners follow (imds_attach.py)."""
        self.imds.sync(self._live_records())

    # ------------------------------------------------------------------ node services (server start/stop)

    def start_services(self) -> None:
        """Server start: the host-side services of the nodes."""
        self.start_imds()  # instance metadata in every node (imds.py)
        self.services.resume()  # apt/pip for lifecycle scripts, images for containers (bridgeservices.py)
        self.seed_pool.resume()

    def close(self) -> None:
        """Server stop: stops them (the nodes keep running; ``start_services`` serves them again)."""
        self.close_imds()  # instance metadata (imds.py)
        self.services.close()  # package proxy, container registry (bridgeservices.py)
        self.seed_pool.close()  # a copy under way ends first

    def warm_seed(self, image_root: str, seed: str) -> None:
        """``SeedWarming``: a volume seeded from ``seed`` of this image will be asked for; a copy is made ahead, in
        the background, at idle priority (nothing when the image has no such directory)."""
        self.seed_pool.refill_soon(image_root, seed)

    # ------------------------------------------------------------------ helpers

    def _meta(self, cluster_id: str, instance_id: str) -> Path:
        return self.layout.instance(cluster_id, instance_id) / "meta.json"

    def _require(self, cluster_id: str, instance_id: str) -> InstanceRecord:
        _check_id("cluster id", cluster_id)
        _check_id("instance id", instance_id)
        rec = InstanceRecord.load(self._meta(cluster_id, instance_id))
        if rec is None:
            raise PermanentProviderError(f"instance {instance_id} does not exist in cluster {cluster_id}")
        return rec

    def _alive(self, rec: InstanceRecord) -> bool:
        popen = self._popens.get(rec.instance_id)
        if popen is not None and popen.poll() is not None:  # reap an unshare whose node died
            self._popens.pop(rec.instance_id, None)
        if not holder.is_running(rec.holder_pid, rec.holder_start):
            return False
        inode = netns.netns_inode(rec.netns)
        return inode != 0 and inode == rec.netns_inode == holder.ns_inode(rec.holder_pid, "net")

    def _describe(self, rec: InstanceRecord, alive: bool) -> ProviderInstance:
        return ProviderInstance(cluster_id=rec.cluster_id, instance_id=rec.instance_id, group=rec.group,
                                ip=rec.ip, hostname=rec.hostname, alive=alive)

    def _write_hosts(self, cluster_id: str, net: dict) -> None:
        rewrite_hosts(self.layout.hosts(cluster_id), {ip: hostname_for_ip(ip) for ip in net["ips"].values()})

    def _instance_lock(self, instance_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(instance_id, threading.Lock())

    @staticmethod
    def _check_image(image_root: str) -> None:
        if not Path(image_root).is_dir():
            raise PermanentProviderError(f"image root {image_root} is not a directory")
        if _BAD_PATH_CHARS.search(image_root):
            raise PermanentProviderError(
                f"image root {image_root!r} must not contain spaces, ',', ':' or '='")
