"""The holder: PID 1 of a node (``nodeinit.py``), started under ``unshare`` inside the node's netns.

Identity of a running node = holder PID + its ``/proc`` start time (PIDs are reused) + the inode of the
netns it is in. That triple is stored in ``meta.json`` so a new provider object re-adopts nodes.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmpod.providers.base import NodeFile, TemporaryProviderError
from slurmpod.providers.local.netns import netns_path
from slurmpod.providers.local.priority import at_host_priority
from slurmpod.providers.local.procscan import overlay_uppers

NODEINIT = Path(__file__).with_name("nodeinit.py")
READY_FILE = "/run/slurmpod-ready"
BOOT_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
#: a new root volume's files (``InstanceRequest.files``) for nodeinit, next to boot.json; nodeinit removes it
SEED_FILE = "seed.json"


def start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks since boot), or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[1].split()[19]


def proc_state(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[1].split()[0]


def is_running(pid: int, started: str) -> bool:
    """``pid`` exists, is the same process (start time) and is not a zombie."""
    if pid <= 0 or not started:
        return False
    return start_time(pid) == started and proc_state(pid) not in (None, "Z", "X")


def ns_of(pid: int, kind: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def ns_inode(pid: int, kind: str) -> int:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return 0


def pids_in_mntns(mntns: str) -> list[int]:
    """Host PIDs of live processes in mount namespace ``mntns`` (e.g. ``mnt:[4026532249]``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and ns_of(int(entry), "mnt") == mntns:
            found.append(int(entry))
    return found


def of_root_volume(pids: list[int], upper: str) -> list[int]:
    """``pids`` (all in one mount namespace, as ``pids_in_mntns`` finds them) if that namespace has the overlay of
    the root volume whose upper directory is ``upper``, else none. A namespace's inode number is reused once it is
    gone, possibly by another node booting at the same time: the number alone would name that node."""
    for pid in pids:
        try:
            mounts = Path(f"/proc/{pid}/mountinfo").read_text(errors="replace")
        except OSError:
            continue
        return pids if upper in overlay_uppers(mounts) else []
    return []


def kill_strays(boot_file: Path, timeout: float = STOP_TIMEOUT) -> None:
    """Kills holders of ``boot_file`` the record does not know (e.g. slurmpod died mid-launch) and waits until
    they are gone, and with them every process of their mount namespaces that has this root volume's overlay, so
    no second overlay is ever mounted on the same upper dir."""
    needle = f"{NODEINIT} {boot_file}"
    upper = str(boot_file.parent / "upper")
    strays: list[tuple[int, str]] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmd and proc_state(int(entry)) not in (None, "Z", "X"):
            strays.append((int(entry), start_time(int(entry)) or ""))
    namespaces = {ns for ns in (ns_of(pid, "mnt") for pid, _ in strays) if ns}
    for pid, _ in strays:
        _kill(pid)

    def gone() -> bool:
        # and whatever else of that boot still has the overlay: a node's PID 1 that had already exec'd systemd
        # (its command line no longer names the boot file) and missed unshare's parent-death signal (set in the
        # child after the fork: a parent killed in between leaves the child running)
        left = [pid for pid, started in strays if is_running(pid, started)]
        for mntns in namespaces:
            for pid in of_root_volume(pids_in_mntns(mntns), upper):
                _kill(pid)
                left.append(pid)
        return not left

    if not _wait(gone, timeout):
        raise TemporaryProviderError(f"stray node processes of {boot_file.parent.name} still running after "
                                     f"{timeout:.0f}s")


@dataclass(frozen=True)
class Boot:
    """A running holder."""

    popen: subprocess.Popen[bytes]
    holder_pid: int
    holder_start: str
    unshare_pid: int
    unshare_start: str
    mntns: str
    netns_inode: int


def _log_tail(log: Path, n: int = 8) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-n:])
    except OSError:
        return ""


#: moves itself into the cgroup whose ``cgroup.procs`` is $1, then execs the rest (``unshare --cgroup`` then makes
#: that cgroup the node's cgroup-namespace root); sh, not a second Python: ~1 ms instead of ~30 ms CPU per boot
_INTO_CGROUP = 'echo $$ > "$1" && shift && exec "$@"'


def write_seed(path: Path, files: Sequence[NodeFile]) -> None:
    """``files`` as nodeinit reads them (``[[path, base64, mode, owner, link], ...]``), in a file only root reads
    (they may hold the cluster's munge key or a database password)."""
    rows = [[f.path, base64.b64encode(f.content).decode(), f.mode, f.owner, f.link] for f in files]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(rows, fh)


def start(netns: str, boot_cfg: dict, instance_dir: Path, cgroup: Path | None = None) -> Boot:
    """Starts the holder for one boot and waits until the node's root is assembled and pivoted.

    With ``cgroup`` (systemd nodes) the node gets its own cgroup namespace rooted there."""
    token = secrets.token_hex(8)
    cfg = dict(boot_cfg, token=token)
    boot_file = instance_dir / "boot.json"
    boot_file.write_text(json.dumps(cfg, indent=1))
    log_path = instance_dir / "holder.log"
    argv = ["nsenter", f"--net={netns_path(netns)}", "unshare", "--uts", "--ipc", "--mount", "--pid",
            *(["--cgroup"] if cgroup is not None else []),
            "--fork", "--kill-child", "--propagation", "private",
            sys.executable, "-I", "-S", str(NODEINIT), str(boot_file)]  # (stdlib only: no site import)
    if cgroup is not None:
        cgroup.mkdir(parents=True, exist_ok=True)
        argv = ["sh", "-c", _INTO_CGROUP, "into-cgroup", str(cgroup / "cgroup.procs"), *argv]
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(at_host_priority(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                                 env=env, start_new_session=True, close_fds=True)
    unshare_start = start_time(popen.pid) or ""
    deadline = time.monotonic() + BOOT_TIMEOUT
    holder = 0
    while time.monotonic() < deadline:
        if not holder:
            try:
                children = Path(f"/proc/{popen.pid}/task/{popen.pid}/children").read_text().split()
                holder = int(children[0]) if children else 0
            except OSError:
                holder = 0
        if holder:
            try:
                if Path(f"/proc/{holder}/root{READY_FILE}").read_text() == token:
                    return Boot(popen=popen, holder_pid=holder, holder_start=start_time(holder) or "",
                                unshare_pid=popen.pid, unshare_start=unshare_start,
                                mntns=ns_of(holder, "mnt") or "", netns_inode=ns_inode(holder, "net"))
            except OSError:
                pass
        if popen.poll() is not None:
            raise TemporaryProviderError(f"node failed to boot: {_log_tail(log_path) or 'no output'}")
        time.sleep(0.005)
    _kill(popen.pid)
    popen.wait(5)
    raise TemporaryProviderError(f"node did not boot within {BOOT_TIMEOUT}s: {_log_tail(log_path)}")


def remove_cgroup(cgroup: Path) -> None:
    """Removes a node's cgroup and every cgroup its systemd made under it (deepest first; empty ones only)."""
    if not cgroup.is_dir():
        return
    dirs = sorted((p for p in cgroup.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
    for d in [*dirs, cgroup]:
        try:
            d.rmdir()
        except OSError:
            pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


def stop(holder_pid: int, holder_start: str, unshare_pid: int, unshare_start: str, mntns: str,
         popen: subprocess.Popen[bytes] | None = None, timeout: float = STOP_TIMEOUT,
         shutdown: float = 0.0, upper: str = "") -> None:
    """Stops the node and waits until its mount namespace, and with it the overlay on the root volume, is gone
    (``upper``: the root volume's upper directory; a process counts only if its namespace has that overlay).

    ``shutdown`` > 0 (systemd nodes): SIGRTMIN+4 asks systemd to power off (units stop in order) for up to
    that many seconds; then, or right away, SIGKILL to PID 1 ends the whole PID namespace."""
    if shutdown > 0 and is_running(holder_pid, holder_start):
        try:
            os.kill(holder_pid, signal.SIGRTMIN + 4)
        except ProcessLookupError:
            pass
        _wait(lambda: not is_running(holder_pid, holder_start), shutdown)
    if is_running(holder_pid, holder_start):
        _kill(holder_pid)
    _wait(lambda: not is_running(holder_pid, holder_start), timeout)
    if popen is not None:
        try:
            popen.wait(timeout)  # reap the unshare parent ourselves: no zombie (pitfall 21)
        except subprocess.TimeoutExpired:
            _kill(popen.pid)
            popen.wait(timeout)
    elif is_running(unshare_pid, unshare_start):
        _wait(lambda: not is_running(unshare_pid, unshare_start), timeout)
        if is_running(unshare_pid, unshare_start):
            _kill(unshare_pid)
    if not mntns:
        return

    def inside() -> list[int]:  # only while the namespace is this node's (its number may be another's by now)
        found = pids_in_mntns(mntns)
        return of_root_volume(found, upper) if upper else found

    if _wait(lambda: not inside(), 2.0):
        return
    for pid in inside():  # e.g. an `nsenter -m` without -p still inside
        _kill(pid)
    if not _wait(lambda: not inside(), timeout):
        raise TemporaryProviderError(f"processes still in the node's mount namespace {mntns}")


def node_cgroup(instance_id: str, root: Path = Path("/sys/fs/cgroup")) -> Path | None:
    """Where a systemd node's cgroup lives in the host's cgroup2 tree (pure v2, or the hybrid ``unified``
    mount); None when this host has no cgroup2 hierarchy."""
    if (root / "cgroup.controllers").exists():
        base = root
    elif (root / "unified" / "cgroup.procs").exists():
        base = root / "unified"
    else:
        return None
    return base / "slurmpod" / instance_id
