"""Finding and removing everything the local provider created for one state dir.

Ownership is decided only by what marks a resource as this state dir's: records under
``<state_dir>/local``, the link alias ``slurmpod:<state_dir>`` on bridges/veths (and on ``eth0`` inside a
node's netns), and holder command lines naming a boot file under the state dir. Nothing else is touched.
``cleanup`` removes *all* of it, live clusters included: run it with the slurmpod server stopped.

Processes of a node are found even when the server, the records and the netns names are gone (a crashed
server, an earlier half-finished cleanup). A live process is a node's when (see ``scan_processes``):

* it is a holder: the node's ``unshare`` or its PID 1 (``nodeinit``, or the bash reaper it becomes),
  whose command line names a ``boot.json`` under this state dir, or the holder a record names (PID and
  start time both match);
* its network, mount or PID namespace is one of the nodes': the netns of the state dir (``/run/netns``),
  or a namespace of a holder that is PID 1 of its own PID namespace (never a namespace of the host's
  PID 1 or of this process);
* its mount namespace holds an overlay whose upper dir is a root volume under this state dir, or its
  root directory is inside the state dir's cluster tree (``<state_dir>/local/clusters/``);
* its parent is one of the above (children of node processes, walked through ``PPid``).

A process's working directory alone is not evidence (an operator's shell may sit in the state dir).
Processes are ended by PID and start time through a pidfd: SIGTERM to the daemons, a bounded wait, then
SIGKILL to whatever is left (holders first: that ends their whole PID namespace).
"""

from __future__ import annotations

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
from slurmpod.providers.local.layout import NETNS_PREFIX, Layout, link_alias
from slurmpod.providers.local.netns import netns_inode
from slurmpod.providers.local.state import InstanceRecord, read_json, write_json

TERM_GRACE = 5.0  # seconds the daemons get to exit on SIGTERM
KILL_WAIT = 10.0  # seconds to wait for SIGKILLed processes to be gone
_NS_RE = re.compile(r"^[a-z_]+:\[(\d+)\]$")


# ---- /proc ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    comm: str
    state: str
    ppid: int
    start: str  # field 22 of stat: with the PID, the identity of a process


class ProcFS:
    """Reads a ``/proc``-like tree (the real one by default; a fake directory tree in tests).

    Namespaces are read with ``readlink`` (``net:[4026531992]``) so a fake tree can hold them as symlinks.
    """

    def __init__(self, root: Path = Path("/proc")) -> None:
        self.root = Path(root)

    def pids(self) -> list[int]:
        try:
            return sorted(int(e) for e in os.listdir(self.root) if e.isdigit())
        except OSError:
            return []

    def _text(self, pid: int | str, name: str) -> str | None:
        try:
            return (self.root / str(pid) / name).read_text(errors="replace")
        except OSError:
            return None

    def info(self, pid: int) -> ProcInfo | None:
        raw = self._text(pid, "stat")
        if not raw or ")" not in raw:
            return None
        head, tail = raw.rsplit(")", 1)
        fields = tail.split()
        if len(fields) < 20:
            return None
        return ProcInfo(pid=pid, comm=head.split("(", 1)[-1], state=fields[0], ppid=int(fields[1]),
                        start=fields[19])

    def argv(self, pid: int) -> list[str]:
        try:
            raw = (self.root / str(pid) / "cmdline").read_bytes()
        except OSError:
            return []
        return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]] if raw else []

    def ns(self, pid: int | str, kind: str) -> int:
        """Inode of the ``kind`` namespace of ``pid`` (0 when unreadable)."""
        try:
            m = _NS_RE.match(os.readlink(self.root / str(pid) / "ns" / kind))
        except OSError:
            return 0
        return int(m.group(1)) if m else 0

    def link(self, pid: int, name: str) -> str:
        try:
            return os.readlink(self.root / str(pid) / name)
        except OSError:
            return ""

    def nspid(self, pid: int) -> list[int]:
        """``NSpid`` of ``/proc/PID/status``: the PID in each nested PID namespace, outermost first."""
        for line in (self._text(pid, "status") or "").splitlines():
            if line.startswith("NSpid:"):
                return [int(x) for x in line.split()[1:] if x.isdigit()]
        return []

    def mountinfo(self, pid: int) -> str:
        return self._text(pid, "mountinfo") or ""

    def self_pid(self) -> int:
        try:
            return int(os.readlink(self.root / "self"))
        except (OSError, ValueError):
            return os.getpid()


def _alive(info: ProcInfo) -> bool:
    return info.state not in ("Z", "X")


# ---- identification ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeProcess:
    """A live process of one of the state dir's nodes."""

    pid: int
    start: str
    ppid: int
    comm: str
    node: str  # "cluster/instance hostname netns", as much as is known
    why: str  # the evidence: holder, record, netns, mntns, pidns, overlay, root, child of PID
    holder: bool = False  # the node's unshare or its PID 1 (killed last, with SIGKILL)

    def describe(self) -> str:
        return f"process {self.pid} ({self.comm}) of node {self.node} [{self.why}]"


@dataclass(frozen=True)
class NodeRef:
    cluster_id: str
    instance_id: str
    hostname: str = ""
    netns: str = ""

    def label(self) -> str:
        return " ".join(x for x in (f"{self.cluster_id}/{self.instance_id}", self.hostname,
                                    f"netns {self.netns}" if self.netns else "") if x)


def _ref(records: Mapping[tuple[str, str], InstanceRecord], cluster_id: str, instance_id: str) -> NodeRef:
    rec = records.get((cluster_id, instance_id))
    if rec is None:
        return NodeRef(cluster_id, instance_id)
    return NodeRef(cluster_id, instance_id, rec.hostname, rec.netns)


def _holder_node(argv: list[str], clusters: str) -> tuple[str, str, bool] | None:
    """(cluster, instance, is_pid1) if ``argv`` is a holder of a boot file under ``clusters``: the
    ``unshare ... python -I .../nodeinit.py BOOT`` parent, nodeinit itself, or the bash reaper it execs
    (``bash -c LOOP slurmpod-nodeinit .../nodeinit.py BOOT``). ``nsenter`` (not yet exec'd) does not count."""
    if len(argv) < 3 or not argv[-2].endswith("/nodeinit.py"):
        return None
    m = re.fullmatch(re.escape(clusters) + r"/([^/]+)/instances/([^/]+)/boot\.json", argv[-1])
    if m is None:
        return None
    prog = os.path.basename(argv[0])
    if prog == "unshare":
        return m.group(1), m.group(2), False
    if prog == "bash" and len(argv) >= 5 and argv[-3] == "slurmpod-nodeinit":
        return m.group(1), m.group(2), True
    if prog.startswith("python") and argv[-3] == "-I":
        return m.group(1), m.group(2), True
    return None


def _overlay_node(mountinfo: str, clusters: str) -> tuple[str, str] | None:
    """(cluster, instance) of an overlay in ``mountinfo`` whose upper dir is a root volume under ``clusters``."""
    pattern = re.compile(r"(?:^|,)upperdir=" + re.escape(clusters) + r"/([^/,]+)/instances/([^/,]+)/upper(?:,|$)")
    for line in mountinfo.splitlines():
        _, sep, tail = line.partition(" - ")
        parts = tail.split(" ")
        if not sep or len(parts) < 3 or parts[0] != "overlay":
            continue
        m = pattern.search(parts[2])
        if m:
            return m.group(1), m.group(2)
    return None


def scan_processes(state_dir: Path, proc: ProcFS | None = None,
                   netns: Mapping[int, NodeRef] | None = None,
                   records: Iterable[InstanceRecord] = ()) -> list[NodeProcess]:
    """Every live process of the nodes of ``state_dir`` (see the module doc for the evidence used).

    ``netns`` maps inodes of the state dir's network namespaces to their node; ``records`` are the
    instance records (``meta.json``) still on disk.
    """
    proc = proc or ProcFS()
    state = str(Path(state_dir).resolve()).rstrip("/")
    clusters = str(Layout(Path(state)).clusters)
    recs = {(r.cluster_id, r.instance_id): r for r in records}
    me = proc.self_pid()
    host = {kind: {proc.ns(p, kind) for p in ("1", "self")} | {0} for kind in ("net", "mnt", "pid")}

    infos: dict[int, ProcInfo] = {}
    for pid in proc.pids():
        info = proc.info(pid)
        if info is not None and _alive(info):
            infos[pid] = info
    protected = {1, 2, me}  # init, kthreadd, this process and its ancestors are never touched
    p = me
    while p in infos and infos[p].ppid not in protected and infos[p].ppid > 0:
        p = infos[p].ppid
        protected.add(p)

    known: dict[str, dict[int, NodeRef]] = {"net": dict(netns or {}), "mnt": {}, "pid": {}}
    matched: dict[int, tuple[NodeRef, str, bool]] = {}

    def harvest(pid: int, ref: NodeRef) -> None:
        """Namespaces of a node's PID 1 are the node's (unless, defensively, they are the host's)."""
        if proc.nspid(pid)[-1:] != [1]:
            return
        for kind in ("net", "mnt", "pid"):
            ino = proc.ns(pid, kind)
            if ino not in host[kind]:
                known[kind].setdefault(ino, ref)

    for pid, pinfo in infos.items():
        if pid in protected or pinfo.ppid == 2:
            continue
        found = _holder_node(proc.argv(pid), clusters)
        if found is not None:
            ref = _ref(recs, found[0], found[1])
            matched[pid] = (ref, "holder", True)
            if found[2]:
                harvest(pid, ref)
    for rec in recs.values():
        info = infos.get(rec.holder_pid)
        if rec.holder_pid > 0 and info is not None and info.start == rec.holder_start and \
                rec.holder_pid not in protected:
            ref = _ref(recs, rec.cluster_id, rec.instance_id)
            matched.setdefault(rec.holder_pid, (ref, "record", True))
            harvest(rec.holder_pid, ref)
        info = infos.get(rec.unshare_pid)
        if rec.unshare_pid > 0 and info is not None and info.start == rec.unshare_start and \
                rec.unshare_pid not in protected:
            matched.setdefault(rec.unshare_pid, (_ref(recs, rec.cluster_id, rec.instance_id), "record", True))

    for kind, inos in host.items():  # defensively: a host namespace is never a node's
        for ino in inos:
            known[kind].pop(ino, None)
    overlay_checked: dict[int, NodeRef | None] = {}
    root_prefix = clusters + "/"
    for pid, info in infos.items():
        if pid in matched or pid in protected or info.ppid == 2:
            continue
        hit: tuple[NodeRef, str] | None = None
        for kind in ("net", "mnt", "pid"):
            ino = proc.ns(pid, kind)
            if ino in known[kind]:
                hit = (known[kind][ino], f"{kind}ns" if kind != "net" else "netns")
                break
        if hit is None:
            mnt = proc.ns(pid, "mnt")
            if mnt not in host["mnt"]:
                if mnt not in overlay_checked:
                    on = _overlay_node(proc.mountinfo(pid), clusters)
                    overlay_checked[mnt] = _ref(recs, on[0], on[1]) if on else None
                over = overlay_checked[mnt]
                if over is not None:
                    hit = (over, "overlay")
        if hit is None:
            root = proc.link(pid, "root")
            if root.startswith(root_prefix):
                hit = (_root_ref(recs, root, clusters), "root")
        if hit is not None:
            matched[pid] = (hit[0], hit[1], False)

    # children of node processes (e.g. a re-parented daemon outside every namespace above)
    changed = True
    while changed:
        changed = False
        for pid, info in infos.items():
            if pid not in matched and pid not in protected and info.ppid in matched:
                matched[pid] = (matched[info.ppid][0], f"child of {info.ppid}", False)
                changed = True

    return [NodeProcess(pid=pid, start=infos[pid].start, ppid=infos[pid].ppid, comm=infos[pid].comm,
                        node=ref.label(), why=why, holder=holder)
            for pid, (ref, why, holder) in sorted(matched.items())]


def _root_ref(recs: Mapping[tuple[str, str], InstanceRecord], root: str, clusters: str) -> NodeRef:
    m = re.match(re.escape(clusters) + r"/([^/]+)/instances/([^/]+)", root)
    return _ref(recs, m.group(1), m.group(2)) if m else NodeRef("?", "?")


# ---- the scan of everything ----------------------------------------------------------------------------


@dataclass
class Leftovers:
    processes: list[NodeProcess] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)

    def describe(self) -> list[str]:
        return ([p.describe() for p in self.processes]
                + [f"netns {n}" for n in self.netns] + [f"link {name}" for name in self.links]
                + [f"mount {m}" for m in self.mounts] + [f"dir {d}" for d in self.dirs])


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
    return info is not None and _alive(info) and info.start == p.start


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
