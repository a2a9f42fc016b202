"""Memory per node, as the recipe's ``mem-report.py`` counts it: PSS of every process of a node.

A local node is a PID namespace whose init (the holder) was started by an ``unshare`` child of the
provider's process (the slurmpod server, or the benchmark itself for the floor). Only those namespaces
count, so other clusters on the same machine are left out. Per node: the PSS (``smaps_rollup``) of every
process in its namespace (holder, munged, slurmd or slurmctld, ...) plus its host-side ``unshare``.
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
    for pid, (comm, _ppid) in procs.items():
        try:
            ns = os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:
            continue
        if ns in node_ns or pid in unshares:
            kib = _pss_kib(pid)
            out.total_pss_kib += kib
            per_cmd[comm] += kib
    out.per_command_kib = dict(sorted(per_cmd.items(), key=lambda kv: -kv[1]))
    return out


def rss_mib(pid: int) -> float:
    """Current RSS of a process (VmRSS), MiB."""
    for line in (_read(f"/proc/{pid}/status") or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0
