"""Finding and removing everything the local provider created for one state dir.

Ownership is decided only by what marks a resource as this state dir's: records under
``<state_dir>/local``, the link alias ``slurmpod:<state_dir>`` on bridges/veths (and on ``eth0`` inside a
node's netns), and holder command lines naming a boot file under the state dir. Nothing else is touched.
``cleanup`` removes *all* of it, live clusters included: run it with the slurmpod server stopped.

Which live processes are a node's, even when the server, the records and the netns names are gone, is
decided in ``procscan`` (``scan_processes``; its module doc lists the evidence).
Processes are ended by PID and start time through a pidfd: SIGTERM to the daemons, a bounded wait, then
SIGKILL to whatever is left (holders first: that ends their whole PID namespace).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurmpod.providers.local.commands import host_run
from slurmpod.providers.local.holder import node_cgroup, remove_cgroup
from slurmpod.providers.local.layout import NETNS_PREFIX, Layout, link_alias
from slurmpod.providers.local.netns import netns_inode
from slurmpod.providers.local.pkgproxy import PackageProxy, PackageProxyError
from slurmpod.providers.local.procscan import NodeProcess, NodeRef, ProcFS, alive, scan_processes
from slurmpod.providers.local.registry import ContainerRegistry, RegistryError
from slurmpod.providers.local.state import InstanceRecord, read_json, write_json

TERM_GRACE = 5.0  # seconds the daemons get to exit on SIGTERM
KILL_WAIT = 10.0  # seconds to wait for SIGKILLed processes to be gone


# ---- the scan of everything ----------------------------------------------------------------------------


@dataclass
class Leftovers:
    processes: list[NodeProcess] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)
    cgroups: list[Path] = field(default_factory=list)  # systemd nodes' cgroups in the host's cgroup2 tree
    proxy: str = ""  # the state dir's package proxy, when it runs (pkgproxy.py)

    def describe(self) -> list[str]:
        return ([p.describe() for p in self.processes]
                + [f"netns {n}" for n in self.netns] + [f"link {name}" for name in self.links]
                + [f"mount {m}" for m in self.mounts] + [f"dir {d}" for d in self.dirs]
                + [f"cgroup {c}" for c in self.cgroups]
                + ([self.proxy] if self.proxy else []))


def _records(layout: Layout) -> list[InstanceRecord]:
    recs = []
    for meta in layout.clusters.glob("*/instances/*/meta.json"):
        try:
            rec = InstanceRecord.load(meta)
        except (OSError, ValueError, TypeError):
            rec = None
        if rec is not None:
            recs.append(rec)
    return recs


def _netns_ref(name: str, by_netns: Mapping[str, InstanceRecord]) -> NodeRef:
    rec = by_netns.get(name)
    if rec is not None:
        return NodeRef(rec.cluster_id, rec.instance_id, rec.hostname, name)
    rest = name[len(NETNS_PREFIX):]
    cluster, _, tail = rest.rpartition("-")
    return NodeRef(cluster or "?", f"*{tail}", "", name)


def _scan(state_dir: Path, proc: ProcFS | None = None,
          inode_of: Callable[[str], int] = netns_inode) -> Leftovers:
    state_dir = Path(state_dir).resolve()
    layout = Layout(state_dir)
    alias = link_alias(state_dir)
    found = Leftovers()
    recs = _records(layout)
    by_netns = {r.netns: r for r in recs if r.netns}

    listed = host_run(["ip", "-j", "netns", "list"], check=False)
    all_ns = [i.get("name", "") for i in (json.loads(listed.stdout) if listed.stdout.strip() else [])]
    all_ns = [n for n in all_ns if n.startswith(NETNS_PREFIX)]
    ours: list[str] = []
    for name in all_ns:
        if name in by_netns:
            ours.append(name)
            continue
        link = host_run(["ip", "-n", name, "-j", "link", "show", "dev", "eth0"], check=False)
        if link.returncode == 0 and link.stdout.strip():
            if any(i.get("ifalias") == alias for i in json.loads(link.stdout)):
                ours.append(name)
    ns_inodes = {ino: _netns_ref(n, by_netns) for n in ours if (ino := inode_of(n))}

    found.processes = scan_processes(state_dir, proc, ns_inodes, recs)
    proxy_pid, proxy_bound = PackageProxy(state_dir).status()
    if proxy_pid:
        found.proxy = f"package proxy: apt-cacher-ng {proxy_pid} on {' '.join(proxy_bound) or '?'}"
    registry = ContainerRegistry(state_dir).status()
    if registry:
        found.proxy = "; ".join(filter(None, [found.proxy, "container registry: docker-registry " + " ".join(
            f"{pid} on {ip}" for ip, pid in registry)]))

    # a netns without record or alias (eth0 not configured yet) that a holder of ours is in
    proc = proc or ProcFS()
    holder_nets = {proc.ns(p.pid, "net") for p in found.processes if p.holder}
    for name in all_ns:
        if name not in ours and inode_of(name) in holder_nets:
            ours.append(name)
    found.netns = ours

    recorded_links = {r.veth for r in recs}
    for net_file in layout.clusters.glob("*/network.json"):
        net = read_json(net_file, {})
        if net.get("bridge"):
            recorded_links.add(net["bridge"])
    listed = host_run(["ip", "-j", "link", "show"], check=False)
    for item in json.loads(listed.stdout) if listed.stdout.strip() else []:
        name = item.get("ifname", "")
        if item.get("ifalias") == alias or (name in recorded_links and not item.get("ifalias")):
            found.links.append(name)

    prefix = str(state_dir).rstrip("/") + "/"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mnt = _unescape(line.split()[4])
        if mnt.startswith(prefix) or any(mnt == f"/run/netns/{n}" for n in found.netns):
            found.mounts.append(mnt)

    if layout.clusters.is_dir():
        found.dirs.extend(sorted(p for p in layout.clusters.iterdir()))
        for inst in sorted(layout.clusters.glob("*/instances/*")):
            cgroup = node_cgroup(inst.name)
            if cgroup is not None and cgroup.is_dir():
                found.cgroups.append(cgroup)
    # and those of live nodes whose records are gone (an earlier, partial cleanup): named by their processes
    for p in found.processes:
        cgroup = node_cgroup(p.instance_id) if p.instance_id else None
        if cgroup is not None and cgroup.is_dir() and cgroup not in found.cgroups:
            found.cgroups.append(cgroup)
    return found


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def find_leftovers(state_dir: Path) -> list[str]:
    """Human-readable list of this state dir's local-provider resources still on the host (processes
    first: ``process PID (comm) of node CLUSTER/INSTANCE HOSTNAME netns NS [evidence]``)."""
    return _scan(Path(state_dir)).describe()


# ---- ending processes ----------------------------------------------------------------------------------


def _same(proc: ProcFS, p: NodeProcess) -> bool:
    """``p`` still runs (same PID and start time, not a zombie)."""
    info = proc.info(p.pid)
    return info is not None and alive(info) and info.start == p.start


def _signal(proc: ProcFS, p: NodeProcess, sig: signal.Signals) -> bool:
    """Sends ``sig`` to exactly ``p`` (PID *and* start time, through a pidfd: no reused PID is hit)."""
    try:
        fd = os.pidfd_open(p.pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfd support: check, then kill (a tiny window, as every kill(2) has)
        if not _same(proc, p):
            return False
        try:
            os.kill(p.pid, sig)
            return True
        except ProcessLookupError:
            return False
    try:
        if not _same(proc, p):
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def _wait_gone(proc: ProcFS, procs: Iterable[NodeProcess], timeout: float) -> list[NodeProcess]:
    """Waits until none of ``procs`` runs (zombies count as gone); returns those still running."""
    left = list(procs)
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in left if _same(proc, p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def end_processes(procs: list[NodeProcess], *, rescan: Callable[[], list[NodeProcess]],
                  proc: ProcFS | None = None, grace: float = TERM_GRACE,
                  kill_wait: float = KILL_WAIT) -> tuple[dict[int, str], list[NodeProcess]]:
    """SIGTERM to the non-holder processes, up to ``grace`` seconds for them to exit, then SIGKILL to all
    that are left (holders first), rescanning (``rescan``) for processes that appeared meanwhile.

    Returns ({pid: how it ended}, processes still running at the end).
    """
    proc = proc or ProcFS()
    how: dict[int, str] = {}
    daemons = [p for p in procs if not p.holder]
    for p in daemons:
        if _signal(proc, p, signal.SIGTERM):
            how[p.pid] = "SIGTERM"
    _wait_gone(proc, [p for p in daemons if p.pid in how], grace)
    current = procs
    for _ in range(3):
        left = [p for p in current if _same(proc, p)]
        if not left:
            break
        for p in sorted(left, key=lambda x: not x.holder):
            _signal(proc, p, signal.SIGKILL)
            how[p.pid] = "SIGKILL"  # by our signal, or with its PID namespace when its holder died first
        _wait_gone(proc, left, kill_wait)
        current = rescan()
    survivors = [p for p in current if _same(proc, p)]
    for p in procs:
        how.setdefault(p.pid, "exiting on its own")
    return how, survivors


# ---- cleanup -------------------------------------------------------------------------------------------


@dataclass
class CleanupReport:
    """What ``cleanup`` found and did. ``lines()`` is what ``cleanup()`` returns."""

    found: Leftovers
    ended: list[tuple[NodeProcess, str]] = field(default_factory=list)  # (process, "SIGTERM"/"SIGKILL"/...)
    survivors: list[NodeProcess] = field(default_factory=list)  # still running: nothing else was removed
    remaining: list[str] = field(default_factory=list)  # what a scan after the cleanup still sees

    @property
    def ok(self) -> bool:
        return not self.survivors and not self.remaining

    def lines(self) -> list[str]:
        out = [f"{p.describe()}: ended by {how}" if how in ("SIGTERM", "SIGKILL") else f"{p.describe()}: {how}"
               for p, how in self.ended]
        out += [line for line in self.found.describe() if not line.startswith("process ")]
        out += [f"{p.describe()}: STILL RUNNING after SIGKILL" for p in self.survivors]
        out += [f"{item}: still present after cleanup" for item in self.remaining
                if not item.startswith("process ")]
        return out


def cleanup_report(state_dir: Path, *, dry_run: bool = False, grace: float = TERM_GRACE,
                   kill_wait: float = KILL_WAIT) -> CleanupReport:
    """Removes every local-provider resource of ``state_dir``: processes (see ``end_processes``), then
    mounts under the state dir (deepest first; lazily when busy), network namespaces, veths and bridges,
    and the cluster directories. When a process survives SIGKILL, its state is kept (directories and
    records) so that a later ``cleanup`` still finds it."""
    state_dir = Path(state_dir).resolve()
    found = _scan(state_dir)
    report = CleanupReport(found=found)
    if dry_run:
        return report
    proc = ProcFS()
    by_pid = {p.pid: p for p in found.processes}

    def rescan() -> list[NodeProcess]:
        procs = scan_processes(state_dir, proc, {ino: _netns_ref(n, {}) for n in found.netns
                                                 if (ino := netns_inode(n))}, _records(Layout(state_dir)))
        for p in procs:
            by_pid.setdefault(p.pid, p)
        return procs

    if found.processes:
        how, report.survivors = end_processes(found.processes, rescan=rescan, proc=proc, grace=grace,
                                              kill_wait=kill_wait)
        report.ended = [(by_pid[pid], h) for pid, h in sorted(how.items()) if pid in by_pid]
        surviving = {p.pid for p in report.survivors}
        report.ended = [(p, h) for p, h in report.ended if p.pid not in surviving]

    with contextlib.suppress(RegistryError, OSError):
        ContainerRegistry(state_dir).reset()  # the container registry's processes (ours only, by PID)
    with contextlib.suppress(PackageProxyError):  # a survivor shows in ``remaining``
        PackageProxy(state_dir).reset()  # stops it (ours only, by PID) and forgets the bridges; the cache stays
    for mnt in sorted(found.mounts, key=lambda m: (m.count("/"), len(m)), reverse=True):
        if mnt.startswith("/run/netns/"):
            continue  # `ip netns del` below
        if host_run(["umount", mnt], check=False, timeout=30).returncode != 0:
            host_run(["umount", "-l", mnt], check=False, timeout=30)
    for name in found.netns:
        host_run(["ip", "netns", "del", name], check=False)
        if Path("/run/netns", name).exists():
            host_run(["umount", "-l", f"/run/netns/{name}"], check=False)
            Path("/run/netns", name).unlink(missing_ok=True)
    for name in found.links:
        if Path("/sys/class/net", name).exists():
            host_run(["ip", "link", "del", name], check=False)
    for cgroup in found.cgroups:
        remove_cgroup(cgroup)  # empty once its processes are gone
    if not report.survivors:
        for d in found.dirs:
            shutil.rmtree(d, ignore_errors=True)
        layout = Layout(state_dir)
        if layout.subnets.exists():
            write_json(layout.subnets, {})
    after = _scan(state_dir)
    report.remaining = after.describe()
    surviving = {p.pid for p in report.survivors}
    report.survivors += [p for p in after.processes if p.pid not in surviving]
    return report


def cleanup(state_dir: Path, *, dry_run: bool = False) -> list[str]:
    """Removes every local-provider resource of ``state_dir`` (see module doc); returns what it found (with
    ``dry_run``: exactly ``find_leftovers``), and for processes how they were ended. Lines ending in
    ``STILL RUNNING after SIGKILL`` or ``still present after cleanup`` mean the cleanup is incomplete
    (``cleanup_report(...).ok`` tells the same)."""
    report = cleanup_report(state_dir, dry_run=dry_run)
    return report.found.describe() if dry_run else report.lines()
