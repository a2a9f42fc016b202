"""Reading ``/proc`` (process table, namespaces, mountinfo) and deciding which live processes belong to the
nodes of one state dir (``scan_processes``). Nothing here ends a process: ``cleanup`` does.

Processes of a node are found even when the server, the records and the netns names are gone (a crashed
server, an earlier half-finished cleanup). A live process is a node's when:

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
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from slurmpod.providers.local.layout import Layout
from slurmpod.providers.local.state import InstanceRecord

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


def alive(info: ProcInfo) -> bool:
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
    instance_id: str = ""  # the node's instance id, when known (its cgroup is named after it)

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
    ``unshare ... python -I [-S] .../nodeinit.py BOOT`` parent, nodeinit itself, or the bash reaper it execs
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
    if prog.startswith("python") and argv[-3] in ("-I", "-S"):  # ``-I -S`` since the boot trims; ``-I`` before
        return m.group(1), m.group(2), True
    return None


def overlay_uppers(mountinfo: str) -> list[str]:
    """The upper directories of the overlay mounts in ``mountinfo`` (``/proc/PID/mountinfo``'s text)."""
    uppers = []
    for line in mountinfo.splitlines():
        _, sep, tail = line.partition(" - ")
        parts = tail.split(" ")
        if not sep or len(parts) < 3 or parts[0] != "overlay":
            continue
        uppers += [opt[len("upperdir="):] for opt in parts[2].split(",") if opt.startswith("upperdir=")]
    return uppers


def _overlay_node(mountinfo: str, clusters: str) -> tuple[str, str] | None:
    """(cluster, instance) of an overlay in ``mountinfo`` whose upper dir is a root volume under ``clusters``."""
    pattern = re.compile(re.escape(clusters) + r"/([^/,]+)/instances/([^/,]+)/upper")
    for upper in overlay_uppers(mountinfo):
        m = pattern.fullmatch(upper)
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
        if info is not None and alive(info):
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
                        node=ref.label(), why=why, holder=holder,
                        instance_id="" if ref.instance_id == "?" else ref.instance_id)
            for pid, (ref, why, holder) in sorted(matched.items())]


def _root_ref(recs: Mapping[tuple[str, str], InstanceRecord], root: str, clusters: str) -> NodeRef:
    m = re.match(re.escape(clusters) + r"/([^/]+)/instances/([^/]+)", root)
    return _ref(recs, m.group(1), m.group(2)) if m else NodeRef("?", "?")
