"""A node's health checks: what the health agent runs every few seconds and the deep health checks run first.

Each check returns a ``Result``; a failing one names the repair a HyperPod node would get (``replace`` or
``reboot``, written to Slurm as ``Action:Replace``/``Action:Reboot`` by the agent). Checks never raise: a check
that cannot run is a failure with the reason.

GPUs: the devices the node's gres.conf lists (``/etc/slurmpod/gres.conf``, ``File=`` lines) must all exist as
character devices; on a host with NVIDIA's driver ``nvidia-smi`` must list as many GPUs; an injected ``gpu-xid``
or ``gpu-lost`` fault (``faults``) fails the check as the real fault would.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Sequence

from . import faults

NODE_GRES_CONF = "/etc/slurmpod/gres.conf"
NVIDIA_SMI = "/usr/bin/nvidia-smi"
MIN_FREE_DISK_FRACTION = 0.02
MIN_FREE_DISK_BYTES = 128 * 1024 * 1024
MIN_AVAILABLE_MEMORY_FRACTION = 0.02


class Result:
    """One check's outcome. A plain class: the health agent stays resident in every compute node, and
    ``dataclasses`` (through ``inspect``) would add ~1.4 MiB to each."""

    __slots__ = ("name", "ok", "detail", "action", "fault")

    def __init__(self, name: str, ok: bool, detail: str = "", action: str = "", fault: str = "") -> None:
        self.name = name
        self.ok = ok
        self.detail = detail
        self.action = action  # "replace" | "reboot" when not ok
        self.fault = fault  # HyperPod-like fault type, e.g. "NvidiaGPUUnhealthy"

    def _key(self) -> tuple[str, bool, str, str, str]:
        return (self.name, self.ok, self.detail, self.action, self.fault)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Result) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "Result(name={!r}, ok={!r}, detail={!r}, action={!r}, fault={!r})".format(*self._key())


def read_text(path: str) -> str:
    """A file's text (no pathlib: the resident health agent imports as little as it can)."""
    with open(path) as f:
        return f.read()


def _run(argv: Sequence[str], timeout: float, input_: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(argv), input=input_, capture_output=True, timeout=timeout, check=False)  # noqa: S603


def gpu_devices(root: str = "/") -> list[str]:
    """The GPU device paths this node's gres.conf lists (none on a CPU node)."""
    try:
        text = read_text(os.path.join(root, NODE_GRES_CONF.lstrip("/")))
    except OSError:
        return []
    out: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        for token in line.split():
            key, _, value = token.partition("=")
            if key.lower() == "file" and value:
                out.append(value)
    return out


def check_gpus(root: str = "/") -> Result:
    devices = gpu_devices(root)
    if not devices:
        return Result("gpu", True, "no GPUs")
    marked = faults.active(root)
    if "gpu-xid" in marked:
        m = marked["gpu-xid"]
        return Result("gpu", False, f"GPU {m.get('gpu', 0)}: Xid {m.get('xid', 79)} (GPU has fallen off the bus)",
                      "replace", "NvidiaGPUUnhealthy")
    missing = []
    for dev in devices:
        try:
            if not stat.S_ISCHR(os.stat(os.path.join(root, dev.lstrip("/"))).st_mode):
                missing.append(dev)
        except OSError:
            missing.append(dev)
    if "gpu-lost" in marked or missing:
        gone = missing or [devices[int(marked["gpu-lost"].get("gpu", 0)) % len(devices)]]
        return Result("gpu", False, f"{len(devices) - len(gone)} of {len(devices)} GPUs present "
                      f"(missing {', '.join(gone)})", "replace", "NvidiaGPUCountMismatch")
    if root == "/" and os.path.exists(NVIDIA_SMI) and os.path.exists("/dev/nvidiactl"):
        try:
            r = _run([NVIDIA_SMI, "--query-gpu=index", "--format=csv,noheader"], timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Result("gpu", False, f"nvidia-smi did not answer: {exc}", "replace", "NvidiaGPUUnhealthy")
        seen = len([x for x in r.stdout.decode(errors="replace").splitlines() if x.strip()])
        if r.returncode != 0 or seen != len(devices):
            return Result("gpu", False, f"nvidia-smi lists {seen} GPUs (exit {r.returncode}), gres.conf "
                          f"{len(devices)}", "replace", "NvidiaGPUCountMismatch")
    return Result("gpu", True, f"{len(devices)} GPUs healthy")


def parse_record(line: str) -> dict[str, str]:
    """One ``scontrol -o show job|node`` record: Key=Value pairs (a value may hold spaces only as Reason does)."""
    out: dict[str, str] = {}
    key = None
    for token in line.strip().split(" "):
        k, sep, v = token.partition("=")
        if sep and k and (k[0].isupper() or k[0] == "_") and "/" not in k:
            key = k
            out[k] = v
        elif key is not None:
            out[key] += " " + token
    return out


def slurm_reason(rec: dict[str, str]) -> str:
    """A record's Reason without the ``[user@time]`` Slurm appends."""
    return rec.get("Reason", "").split(" [", 1)[0].strip()


def pids_of(comm: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if read_text(f"/proc/{entry}/comm").strip() == comm:
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def _proc_state(pid: int) -> str:
    try:
        stat_line = read_text(f"/proc/{pid}/stat")
    except OSError:
        return "?"
    return stat_line.rsplit(")", 1)[1].split()[0]


def _daemon(comm: str, fault: str) -> Result | None:
    """A failure when no ``comm`` process runs or one is stopped (SIGSTOP: alive, answering nothing)."""
    pids = pids_of(comm)
    if not pids:
        return Result(comm, False, f"{comm} is not running", "reboot", fault)
    stopped = [p for p in pids if _proc_state(p) in ("T", "t")]
    if stopped:
        return Result(comm, False, f"{comm} (pid {stopped[0]}) is stopped and answers nothing", "reboot", fault)
    return None


def check_slurmd(rpc: bool = True) -> Result:
    """slurmd runs (and, with ``rpc``, answers its own RPC: ``scontrol show slurmd`` asks the local slurmd)."""
    bad = _daemon("slurmd", "SlurmdUnresponsive")
    if bad is not None or not rpc:
        return bad or Result("slurmd", True, "slurmd runs")
    try:
        r = _run(["scontrol", "show", "slurmd"], timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Result("slurmd", False, f"slurmd does not answer: {exc}", "reboot", "SlurmdUnresponsive")
    if r.returncode != 0:
        return Result("slurmd", False, "slurmd does not answer: " + r.stderr.decode(errors="replace").strip()[-200:],
                      "reboot", "SlurmdUnresponsive")
    return Result("slurmd", True, "slurmd answers")


def check_munge(rpc: bool = True) -> Result:
    """munged runs (and, with ``rpc``, a credential it makes decodes)."""
    bad = _daemon("munged", "MungeUnhealthy")
    if bad is not None or not rpc:
        return bad or Result("munged", True, "munged runs")
    try:
        cred = _run(["munge", "-n"], timeout=10)
        if cred.returncode == 0:
            back = _run(["unmunge"], timeout=10, input_=cred.stdout)
            if back.returncode == 0:
                return Result("munged", True, "munge answers")
            return Result("munged", False, "unmunge failed: " + back.stderr.decode(errors="replace").strip()[-200:],
                          "reboot", "MungeUnhealthy")
        return Result("munged", False, "munge failed: " + cred.stderr.decode(errors="replace").strip()[-200:],
                      "reboot", "MungeUnhealthy")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Result("munged", False, f"munge does not answer: {exc}", "reboot", "MungeUnhealthy")


def check_disk(path: str = "/") -> Result:
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return Result("disk", False, f"cannot stat {path}: {exc}", "replace", "DiskUnhealthy")
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    if total and (free < MIN_FREE_DISK_BYTES or free / total < MIN_FREE_DISK_FRACTION):
        return Result("disk", False, f"{path}: {free // (1024 * 1024)} MiB free of {total // (1024 * 1024)} MiB",
                      "replace", "DiskFull")
    return Result("disk", True, f"{path}: {free // (1024 * 1024)} MiB free")


def check_memory(meminfo: str = "/proc/meminfo") -> Result:
    try:
        fields = {}
        for line in read_text(meminfo).splitlines():
            key, _, rest = line.partition(":")
            fields[key] = int(rest.split()[0]) if rest.split() else 0
    except (OSError, ValueError) as exc:
        return Result("memory", False, f"cannot read {meminfo}: {exc}", "reboot", "MemoryUnhealthy")
    total, avail = fields.get("MemTotal", 0), fields.get("MemAvailable", 0)
    if total and avail / total < MIN_AVAILABLE_MEMORY_FRACTION:
        return Result("memory", False, f"{avail // 1024} MiB available of {total // 1024} MiB", "reboot",
                      "MemoryPressure")
    return Result("memory", True, f"{avail // 1024} MiB available")


def run_all(compute: bool, rpc: bool = True, slurmd: Result | None = None) -> list[Result]:
    """Every check that applies to this node (slurmd and GPUs only where slurmd runs); without ``rpc`` only the
    cheap ones (no process is started: the agent's every-pass set). ``slurmd``: slurmd's check, already run."""
    results = [check_munge(rpc), check_disk(), check_memory()]
    if compute:
        results += [slurmd or check_slurmd(rpc), check_gpus()]
    return results
