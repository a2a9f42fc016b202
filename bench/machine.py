"""Facts about the machine a benchmark ran on."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any


def _meminfo_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _os_name() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


def slurm_version() -> str | None:
    """``slurmctld -V`` (prints the version only; reads no slurm.conf, contacts nothing)."""
    exe = shutil.which("slurmctld", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if exe is None:
        return None
    try:
        r = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() or None


def machine_info() -> dict[str, Any]:
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "memory_gib": _meminfo_gib(),
        "kernel": platform.release(),
        "os": _os_name(),
        "slurm_version": slurm_version(),
        "python": platform.python_version(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def tree_cpu_seconds(pid: int | None) -> float:
    """``cpu_seconds`` of ``pid`` and of its live descendants (a server's reconciler process, ``slurmpod
    server --reconciler process``)."""
    if pid is None:
        return cpu_seconds()
    total, todo, seen = 0.0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += cpu_seconds(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(x) for x in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
    return total


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of process ``pid`` (this process when None) so far; 0.0 if unknown. A figure of
    CPU spent is less at the mercy of other load on the machine than a wall-clock one."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0
