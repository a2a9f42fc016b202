"""``SshProvider``: instances are existing machines (bare metal or VMs) of a host pool, reached over SSH.

Launch takes a free host of the request's instance type from the registry (``pool.py``), checks it (OS,
Slurm/munge binaries or ``apt-get install`` when the pool allows it, clock skew, ports 6817/6818 free, no
foreign munged/slurmd), prepares the directories the daemons need and the cluster's ``/etc/hosts`` block,
and hands out an ``SshRunner`` that records every file slurmpod writes (``remote.py``). Terminate stops
the daemons, undoes the manifest and returns the host to the pool. A host that fails is released and
quarantined for a while with its error, so the retry of the instance lands on another host.

Root-volume replacement cannot reimage a machine: it becomes a *reset* (stop daemons, undo the manifest
except volumes, prepare again); the reconciler then reruns baseline and lifecycle scripts. Reboot restarts
slurmpod's daemons, or reboots the machine when the pool has ``allow_reboot``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from slurmpod.providers.base import (
    CommandResult,
    InstanceRequest,
    InsufficientCapacity,
    PermanentProviderError,
    ProviderError,
    ProviderInstance,
    TemporaryProviderError,
)
from slurmpod.providers.inflight import InFlight
from slurmpod.providers.local.nodeinit import NODE_DIRS, RUN_DIRS
from slurmpod.providers.ssh import remote
from slurmpod.providers.ssh.pool import FOREVER, HostPool, HostRecord
from slurmpod.providers.ssh.session import HostKeyChanged, SshError, SshRunner, SshSessions, Target

log = logging.getLogger("slurmpod.ssh")

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_CLOCK_SKEW = 5.0
QUARANTINE = 60.0
#: volumes several instances must see the same files in (HA controllers' StateSaveLocation): ssh hosts
#: share no storage, so a second instance asking for one is refused
UNSHAREABLE_VOLUMES = frozenset({"slurm-state"})
#: files the daemons create themselves: tracked up front so terminate/reset remove (or restore) them
DAEMON_FILES = (
    "/var/log/munge/munged.log", "/var/lib/munge/munge.seed", "/run/munge/munged.pid",
    "/run/munge/munge.socket.2", "/run/munge/munge.socket.2.lock", "/run/slurmd.pid", "/run/slurmctld.pid",
    "/var/log/slurm/slurmd.log", "/var/log/slurm/slurmctld.log", "/var/lib/slurm/slurmd", "/run/slurm",
    "/etc/slurmpod", "/opt/ml", "/opt/slurmpod", "/var/log/slurmpod", "/root/.ssh",
)
REBOOT_TIMEOUT = 600.0
RunFn = Callable[..., CommandResult]


class HostCheckFailed(SshError):
    kind = "check"


class AcceleratorMismatch(HostCheckFailed):
    """The host's GPU (or Trainium) device count is not its instance type's."""

    kind = "accelerators"


def check_devices(rec: HostRecord, request: InstanceRequest, facts: Mapping[str, str]) -> None:
    """Refuses a host whose accelerator devices (``/dev/nvidia<N>``, ``/dev/neuron<N>``: the ``nvidia``/``neuron``
    facts) are not as many as the request's instance type has; Slurm would advertise GPUs it cannot give out."""
    prefix = next((d.rstrip("0123456789") for d in request.devices), "/dev/nvidia")
    kind = prefix.rsplit("/", 1)[-1]
    found = facts.get(kind, "").split()
    want = len(request.devices)
    if len(found) != want:
        what = "Trainium (Neuron)" if kind == "neuron" else "NVIDIA GPU"
        raise AcceleratorMismatch(
            f"host {rec.name} has {len(found)} {what} device{'s' if len(found) != 1 else ''} "
            f"({' '.join(found) or f'no {prefix}<N>'}) but instance type {request.instance_type} has {want}: "
            "register it in a pool of its real instance type (or check its driver)")


def _check_id(kind: str, value: str) -> None:
    if not _ID_RE.match(value):
        raise PermanentProviderError(f"invalid {kind} {value!r} for the ssh provider")


def target_of(rec: HostRecord) -> Target:
    return Target(rec.name, rec.host, rec.port, rec.user, rec.key, rec.host_key)


class SshProvider:
    """Implements ``slurmpod.providers.base.Provider`` on the hosts of ``<state_dir>/ssh/hosts.json``."""

    name = "ssh"

    def __init__(self, state_dir: Path, sessions: SshSessions | None = None, *,
                 quarantine: float = QUARANTINE, max_clock_skew: float = MAX_CLOCK_SKEW) -> None:
        self.pool = HostPool(state_dir)
        self.sessions = sessions or SshSessions()
        self.quarantine = quarantine
        self.max_clock_skew = max_clock_skew
        self.capacity: dict[str, int] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.inflight = InFlight()  # commands running on hosts (cancel_commands)
        self._leaving: set[str] = set()  # hosts being cleaned: no /etc/hosts block may land on them

    # ---- routing helpers (used by the pooled provider) -----------------------------------------

    def handles(self, instance_type: str) -> bool:
        return instance_type in self.pool.instance_types()

    def owns(self, cluster_id: str, instance_id: str) -> bool:
        return self.pool.assigned(cluster_id, instance_id) is not None

    # ---- Provider ------------------------------------------------------------------------------

    def set_capacity(self, table: Mapping[str, int]) -> None:
        """The pool size is each type's capacity; a capacity table entry can only lower it."""
        self.capacity = dict(table)

    def prepare_cluster(self, cluster_id: str) -> None:
        _check_id("cluster id", cluster_id)

    def launch(self, request: InstanceRequest) -> ProviderInstance:
        cid, iid = request.cluster_id, request.instance_id
        _check_id("cluster id", cid)
        _check_id("instance id", iid)
        with self._instance_lock(iid):
            rec = self._claim(request)
            try:
                rec = self._setup(rec, request)
            except ProviderError as exc:
                self._release_failed(rec, exc)
                if isinstance(exc, TemporaryProviderError):
                    raise TemporaryProviderError(f"{exc} (host set aside; the instance is retried on another host)",
                                                 delay=exc.delay) from exc
                raise
            return self._describe(rec, True)

    def _claim(self, request: InstanceRequest) -> HostRecord:
        itype = request.instance_type
        limit = self.capacity.get(itype)
        if limit is not None and self.pool.assigned(request.cluster_id, request.instance_id) is None:
            busy = sum(1 for h in self.pool.hosts() if h.instance_type == itype and not h.free)
            if busy >= limit:
                raise InsufficientCapacity(itype)
        for name in set(request_volumes(request)) & UNSHAREABLE_VOLUMES:
            for h in self.pool.of_cluster(request.cluster_id):
                if h.instance_id != request.instance_id and name in h.volumes:
                    raise PermanentProviderError(
                        f"volume {name} of cluster {request.cluster_id} is already used by instance "
                        f"{h.instance_id} on host {h.name}: ssh hosts share no storage, so a Controller group with "
                        "more than one instance cannot run on an ssh host pool")
        rec, typed = self.pool.claim(request.cluster_id, request.instance_id, request.group, itype)
        if rec is not None:
            return rec
        if not typed:
            raise PermanentProviderError(f"no ssh host pool serves instance type {itype}")
        now = time.time()
        if all(not h.free or h.quarantine_until <= now for h in typed):
            raise InsufficientCapacity(itype)
        resting = "; ".join(
            f"{h.name}: {_rest(h, now)} after: {h.last_error}" for h in typed if h.free and h.quarantined(now))
        raise TemporaryProviderError(f"no usable {itype} host is free in pool {typed[0].pool} ({resting})",
                                     delay=10.0)

    def _release_failed(self, rec: HostRecord, exc: ProviderError) -> None:
        quarantine = FOREVER if isinstance(exc, HostKeyChanged) else self.quarantine
        log.warning("ssh host %s failed for instance %s: %s", rec.name, rec.instance_id, exc)
        self.pool.release(rec.name, error=str(exc).splitlines()[0][:400], quarantine=quarantine)
        self.sessions.forget(rec.name)

    def _setup(self, rec: HostRecord, request: InstanceRequest) -> HostRecord:
        """Checks and prepares the host for ``request``; idempotent (a relaunch redoes it harmlessly)."""
        t = target_of(rec)
        key, ip = self.sessions.pin(t)
        if not rec.host_key:
            self.pool.update(rec.name, host_key=key)
            rec.host_key = key
            t = target_of(rec)
        run = self._raw(t)
        t0 = time.time()
        res = run(["bash", "-c", remote.FACTS], 30)
        t1 = time.time()
        facts = remote.parse_facts(res.stdout)
        try:
            skew = float(facts.get("time", "0")) - (t0 + t1) / 2
        except ValueError:
            skew = 0.0
        if abs(skew) > self.max_clock_skew + (t1 - t0) / 2:
            raise HostCheckFailed(f"host {rec.name}: clock is {skew:+.1f} s off ours (munge credentials expire): "
                                  "enable time sync (chrony/systemd-timesyncd)")
        missing = facts.get("missing", "").split()
        if missing:
            if not rec.apt_install or facts.get("apt") != "yes":
                raise HostCheckFailed(
                    f"host {rec.name} ({facts.get('os', '?')}) lacks {', '.join(missing)}: install them with "
                    f"`apt-get install -y {' '.join(remote.APT_PACKAGES)}`, or register the pool with "
                    "--apt-install to let slurmpod do it")
            inst = run(["bash", "-c", remote.APT_INSTALL], 900)
            if inst.returncode != 0:
                tail = "\n".join((inst.stdout + inst.stderr).splitlines()[-5:])
                raise HostCheckFailed(f"host {rec.name}: apt-get install of Slurm/munge failed: {tail}")
            facts = remote.parse_facts(run(["bash", "-c", remote.FACTS], 30).stdout)
            if facts.get("missing"):
                raise HostCheckFailed(f"host {rec.name} still lacks {facts['missing']} after apt-get install")
        check_devices(rec, request, facts)
        ours = f"{request.cluster_id} {request.instance_id}"
        if facts.get("ours") and facts["ours"] != ours:
            log.info("ssh host %s holds leftovers of %s: cleaning before reuse", rec.name, facts["ours"])
            self._undo(t, "terminate")
            facts = remote.parse_facts(run(["bash", "-c", remote.FACTS], 30).stdout)
        if facts.get("ours") != ours:  # a fresh host: nothing of Slurm may run or listen there
            if facts.get("daemons"):
                raise HostCheckFailed(
                    f"host {rec.name} already runs {facts['daemons'].strip()} not started by slurmpod: stop and "
                    "disable them (systemctl disable --now munge slurmd slurmctld) before pooling the host")
            if facts.get("ports"):
                raise HostCheckFailed(f"host {rec.name}: Slurm ports are in use ({facts['ports'].strip()}); "
                                      "ports 6817 and 6818 must be free")
            w = run(["install", "-D", "-m", "0600", "/dev/stdin", remote.INSTANCE_FILE], 30, ours.encode())
            if w.returncode != 0:
                raise HostCheckFailed(f"host {rec.name}: cannot write {remote.INSTANCE_FILE}: {w.stderr.strip()}")
        self._prepare_dirs(t, request)
        hostname = facts.get("hostname") or rec.host
        volumes = [v.name for v in request.volumes]
        self.pool.update(rec.name, ip=ip, hostname=hostname, last_error="", quarantine_until=0.0,
                         volumes=volumes, group=request.group)
        rec.ip, rec.hostname, rec.volumes = ip, hostname, volumes
        self._sync_hosts_blocks(request.cluster_id)
        return rec

    def _prepare_dirs(self, t: Target, request: InstanceRequest) -> None:
        """The directories the daemons expect (nodeinit's list), tracked; volumes as plain directories."""
        run = self._tracked(t)
        paths = [v.path for v in request.volumes]
        if paths:  # first: a volume inside a daemon directory (StateSaveLocation) must be kept by a reset
            r = run(["bash", "-c", remote.TRACK_VOLUMES, "slurmpod-volumes", *paths], 30)
            if r.returncode != 0:
                raise HostCheckFailed(f"host {t.name}: creating volumes failed: {r.stderr.strip()}")
        res = run(["bash", "-c", remote.TRACK_AND_EXEC, "slurmpod-track", str(len(DAEMON_FILES)),
                   *DAEMON_FILES, "true"], 60)
        if res.returncode != 0:
            raise HostCheckFailed(f"host {t.name}: tracking failed: {res.stderr.strip()[-300:]}")
        groups: dict[tuple[str, int], list[str]] = {}
        for path, owner, mode in NODE_DIRS + RUN_DIRS:
            groups.setdefault((owner, mode), []).append(path)
        for (owner, mode), paths in groups.items():
            r = run(["install", "-d", "-m", f"{mode:04o}", "-o", owner, "-g", owner, *paths], 30)
            if r.returncode != 0:
                raise HostCheckFailed(f"host {t.name}: creating {', '.join(paths)} failed: {r.stderr.strip()}")
        r = run(["bash", "-c", "[ -e /opt/slurm/etc ] || { mkdir -p /opt/slurm && ln -s /etc/slurm /opt/slurm/etc; }"],
                30)

    def _sync_hosts_blocks(self, cluster_id: str, gone: str | None = None) -> None:
        """Every host of the cluster gets an /etc/hosts block with every host of the cluster (serialised per
        cluster, so a block computed from an older host list never lands last)."""
        with self._instance_lock(f"hosts-block:{cluster_id}"):
            self._push_hosts_blocks(cluster_id, gone)

    def _push_hosts_blocks(self, cluster_id: str, gone: str | None) -> None:
        hosts = [h for h in self.pool.of_cluster(cluster_id)
                 if h.ip and h.instance_id != gone and h.name not in self._leaving]
        lines = "".join(f"{h.ip} {h.hostname}\n" for h in sorted(hosts, key=lambda h: h.ip))

        def push(h: HostRecord) -> None:
            try:
                r = self._raw(target_of(h))(["bash", "-c", remote.HOSTS_BLOCK, "slurmpod-hosts", cluster_id], 30,
                                            lines.encode())
                if r.returncode != 0:
                    log.warning("ssh host %s: /etc/hosts update failed: %s", h.name, r.stderr.strip())
            except ProviderError as exc:
                log.warning("ssh host %s: /etc/hosts update failed: %s", h.name, exc)

        if hosts:
            with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as ex:
                list(ex.map(push, hosts))

    def terminate(self, cluster_id: str, instance_id: str) -> None:
        _check_id("cluster id", cluster_id)
        _check_id("instance id", instance_id)
        try:
            self._terminate(cluster_id, instance_id)
        finally:
            self.inflight.forget(instance_id)

    def _terminate(self, cluster_id: str, instance_id: str) -> None:
        with self._instance_lock(instance_id):
            rec = self.pool.assigned(cluster_id, instance_id)
            if rec is None:
                return
            t = target_of(rec)
            with self._instance_lock(f"hosts-block:{cluster_id}"):  # waits for a push to it in flight
                self._leaving.add(rec.name)
            try:
                self._stop_daemons(t)
                self._undo(t, "terminate")
            except ProviderError as exc:
                # released anyway: the next launch on it finds the leftovers (instance file) and cleans first
                self.pool.release(rec.name, error=f"cleanup after {instance_id} failed: {exc}",
                                  quarantine=self.quarantine)
                self._sync_hosts_blocks(cluster_id)
                self._leaving.discard(rec.name)
                return
            self.pool.release(rec.name)
            self._sync_hosts_blocks(cluster_id)
            self._leaving.discard(rec.name)

    def reboot(self, cluster_id: str, instance_id: str) -> ProviderInstance:
        with self._instance_lock(instance_id):
            rec = self._require(cluster_id, instance_id)
            t = target_of(rec)
            if rec.allow_reboot:
                self._real_reboot(t)
            else:
                self._stop_daemons(t)
            return self._describe(rec, True)

    def replace_root_volume(self, request: InstanceRequest) -> ProviderInstance:
        """A *reset*: the machine cannot be reimaged, so everything slurmpod put there (except volumes) is
        removed and the host is prepared again; the reconciler reruns baseline and lifecycle scripts."""
        with self._instance_lock(request.instance_id):
            rec = self._require(request.cluster_id, request.instance_id)
            t = target_of(rec)
            self._stop_daemons(t)
            self._undo(t, "reset")
            rec = self._setup(rec, request)
            return self._describe(rec, True)

    def list_instances(self, cluster_id: str) -> list[ProviderInstance]:
        hosts = self.pool.of_cluster(cluster_id)
        if not hosts:
            return []

        def probe(h: HostRecord) -> ProviderInstance:
            try:
                ok = self._raw(target_of(h))(["true"], 10).returncode == 0
            except ProviderError:
                ok = False
            return self._describe(h, ok)

        with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as ex:
            return sorted(ex.map(probe, hosts), key=lambda i: i.instance_id)

    def runner(self, cluster_id: str, instance_id: str) -> SshRunner:
        _check_id("cluster id", cluster_id)
        _check_id("instance id", instance_id)

        def resolve() -> Target:
            rec = self.pool.assigned(cluster_id, instance_id)
            if rec is None:
                raise TemporaryProviderError(f"instance {instance_id} has no ssh host")
            return target_of(rec)

        def known_hosts() -> str:
            rec = self.pool.assigned(cluster_id, instance_id)
            return str(self.pool.known_hosts_file(rec)) if rec is not None else ""

        user = self.pool.assigned(cluster_id, instance_id)
        login = user.user if user is not None else "root"
        return SshRunner(self.sessions, resolve, lambda argv: remote.tracked_argv(argv, login), known_hosts,
                         inflight=(self.inflight, instance_id))

    def cancel_commands(self, cluster_id: str, instance_id: str) -> int:
        return self.inflight.cancel(instance_id)

    def teardown_cluster(self, cluster_id: str) -> None:
        _check_id("cluster id", cluster_id)
        for h in self.pool.of_cluster(cluster_id):
            if h.instance_id:
                self.terminate(cluster_id, h.instance_id)

    # ---- helpers ---------------------------------------------------------------------------------

    def _raw(self, t: Target) -> RunFn:
        def run(argv: Sequence[str], timeout: float, input: bytes | None = None) -> CommandResult:
            return self.sessions.run(t, argv, timeout=timeout, input=input)
        return run

    def _tracked(self, t: Target) -> RunFn:
        def run(argv: Sequence[str], timeout: float, input: bytes | None = None) -> CommandResult:
            return self.sessions.run(t, remote.tracked_argv(argv, t.user), timeout=timeout, input=input)
        return run

    def _stop_daemons(self, t: Target) -> None:
        r = self._raw(t)(["bash", "-c", remote.STOP_DAEMONS], 60)
        if r.returncode != 0:
            raise TemporaryProviderError(f"host {t.name}: stopping daemons failed: {r.stderr.strip()[-300:]}")

    def _undo(self, t: Target, mode: str) -> None:
        r = self._raw(t)(["bash", "-c", remote.UNDO, "slurmpod-undo", mode], 300)
        if r.returncode != 0:
            raise TemporaryProviderError(f"host {t.name}: cleanup failed: {r.stderr.strip()[-300:]}")

    def _boot_id(self, t: Target) -> str:
        return remote.parse_facts(self._raw(t)(["bash", "-c", remote.FACTS], 30).stdout).get("boot_id", "")

    def _real_reboot(self, t: Target) -> None:
        before = self._boot_id(t)
        try:
            self._raw(t)(["bash", "-c", "(sleep 1; systemctl reboot || reboot) >/dev/null 2>&1 &"], 30)
        except ProviderError:
            pass
        self.sessions.forget(t.name)
        deadline = time.monotonic() + REBOOT_TIMEOUT
        while time.monotonic() < deadline:
            time.sleep(3)
            try:
                if self._boot_id(t) not in ("", before):
                    return
            except ProviderError:
                self.sessions.forget(t.name)
        raise TemporaryProviderError(f"host {t.name} did not come back within {REBOOT_TIMEOUT:.0f}s of a reboot")

    def _require(self, cluster_id: str, instance_id: str) -> HostRecord:
        _check_id("cluster id", cluster_id)
        _check_id("instance id", instance_id)
        rec = self.pool.assigned(cluster_id, instance_id)
        if rec is None:
            raise PermanentProviderError(f"instance {instance_id} has no ssh host in cluster {cluster_id}")
        return rec

    def _describe(self, rec: HostRecord, alive: bool) -> ProviderInstance:
        return ProviderInstance(cluster_id=rec.cluster_id or "", instance_id=rec.instance_id or "", group=rec.group,
                                ip=rec.ip, hostname=rec.hostname, alive=alive)

    def _instance_lock(self, instance_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(instance_id, threading.Lock())


def _rest(h: HostRecord, now: float) -> str:
    return "out of service" if h.quarantine_until == FOREVER else f"resting {h.quarantine_until - now:.0f} s"


def request_volumes(request: InstanceRequest) -> list[str]:
    return [v.name for v in request.volumes]
