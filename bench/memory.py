"""Memory per node, as the recipe's ``mem-report.py`` counts it: PSS of every process of a node.

A local node is a PID namespace whose init was started by an ``unshare`` child of the provider's process
(the slurmpod server, or the benchmark itself for the floor). On an image node that init is the image's
systemd (the provider's ``python -c`` cgroup helper execs ``nsenter``, which execs ``unshare --fork``: the
``unshare`` keeps the provider as its parent; its child, nodeinit, execs systemd as the namespace's PID 1);
on a legacy host-root node it is the bash holder. Only those namespaces count, so other clusters on the
same machine are left out. Per node: the PSS (``smaps_rollup``) of every process in its namespace (systemd,
systemd-journald, dbus-daemon, systemd-logind, munged, slurmd or slurmctld, ...; or holder, munged, slurmd
on host-root nodes) plus its host-side ``unshare``. Commands the provider runs in a node through ``nsenter``
(``sinfo`` of a health check) join the node's PID namespace while they run and count too.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class NodeMemory:
    nodes: int = 0
    total_pss_kib: int = 0
    per_command_kib: dict[str, int] = field(default_factory=dict)
    per_command_count: dict[str, int] = field(default_factory=dict)  # processes of each command over all nodes

    @property
    def per_node_mib(self) -> float:
        return self.total_pss_kib / 1024 / self.nodes if self.nodes else 0.0


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _pss_kib(pid: str) -> int:
    text = _read(f"/proc/{pid}/smaps_rollup") or ""
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def _stat(pid: str) -> tuple[str, int] | None:
    """(comm, ppid) from /proc/PID/stat."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    return comm, int(text[text.rindex(")") + 2:].split()[1])


def node_memory(owner_pid: int) -> NodeMemory:
    """PSS of the nodes whose ``unshare`` is a child of ``owner_pid``."""
    procs: dict[str, tuple[str, int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        st = _stat(pid)
        if st is not None:
            procs[pid] = st
    unshares = {pid for pid, (comm, ppid) in procs.items() if comm == "unshare" and ppid == owner_pid}
    node_ns: set[str] = set()
    for pid, (_comm, ppid) in procs.items():
        if str(ppid) in unshares:
            try:
                node_ns.add(os.readlink(f"/proc/{pid}/ns/pid"))
            except OSError:
                pass
    out = NodeMemory(nodes=len(node_ns))
    per_cmd: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    for pid, (comm, _ppid) in procs.items():
        try:
            ns = os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:
            continue
        if ns in node_ns or pid in unshares:
            kib = _pss_kib(pid)
            out.total_pss_kib += kib
            per_cmd[comm] += kib
            count[comm] += 1
    out.per_command_kib = dict(sorted(per_cmd.items(), key=lambda kv: -kv[1]))
    out.per_command_count = {c: count[c] for c in out.per_command_kib}
    return out


def rss_mib(pid: int) -> float:
    """Current RSS of a process (VmRSS), MiB."""
    for line in (_read(f"/proc/{pid}/status") or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0
