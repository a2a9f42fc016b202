"""``holder.kill_strays`` and ``holder.of_root_volume`` against real processes in private mount namespaces with
real overlay mounts (root only)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from slurmpod.providers.local import holder

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (unshare --mount, overlay mounts)")


def _node_like(d: Path, tail: str) -> tuple[subprocess.Popen[bytes], Path]:
    """A private mount namespace with an overlay whose upper dir is ``d/upper`` (as a node's root volume), running
    ``tail`` (sh); the PIDs it writes to ``d/pids``."""
    for sub in ("lower", "upper", "work", "mnt"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    overlay = f"mount -t overlay overlay -o lowerdir={d}/lower,upperdir={d}/upper,workdir={d}/work {d}/mnt"
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                             f"set -e; {overlay}; {tail}"], start_new_session=True)
    return proc, d / "pids"


def _pids(path: Path, n: int) -> list[int]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = [int(x) for x in path.read_text().split()] if path.exists() else []
        if len(got) >= n:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{path}: fewer than {n} pids")


def _end(procs: list[subprocess.Popen[bytes]], pids: list[int]) -> None:
    for pid in [*pids, *(p.pid for p in procs)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs:
        p.wait(10)


def test_kill_strays_ends_the_holder_and_what_else_has_its_overlay(tmp_path: Path) -> None:
    """A holder left by a killed server, and beside it a process of the same boot whose command line no longer
    names the boot file (a node's PID 1 after it exec'd systemd, which missed the parent-death signal): both end,
    and quickly (not after the whole timeout)."""
    node = tmp_path / "i-1"
    boot = node / "boot.json"
    pids_file = node / "pids"
    proc, _ = _node_like(node, f'setsid sleep 300 & echo $! > {pids_file}; '
                               f'exec sh -c "echo \\$\\$ >> {pids_file}; sleep 300" "{holder.NODEINIT}" "{boot}"')
    started: list[int] = []
    try:
        started = _pids(pids_file, 2)
        mntns = holder.ns_of(started[0], "mnt")
        assert mntns and mntns == holder.ns_of(started[1], "mnt") != holder.ns_of(os.getpid(), "mnt")
        assert holder.of_root_volume(holder.pids_in_mntns(mntns), str(node / "upper"))
        t0 = time.monotonic()
        holder.kill_strays(boot, timeout=5)
        assert time.monotonic() - t0 < 3
        assert holder.pids_in_mntns(mntns) == []
    finally:
        _end([proc], started)


def test_a_namespace_is_a_nodes_only_while_it_has_the_nodes_overlay(tmp_path: Path) -> None:
    """A mount namespace number is reused once its namespace is gone: another node's namespace with the same number
    has another overlay, and neither kill_strays nor stop may touch its processes."""
    a, b = tmp_path / "i-a", tmp_path / "i-b"
    proc, pids_file = _node_like(b, f"echo $$ > {b}/pids; exec sleep 300")
    started: list[int] = []
    try:
        started = _pids(pids_file, 1)
        found = holder.pids_in_mntns(holder.ns_of(started[0], "mnt") or "")
        assert started[0] in found
        assert holder.of_root_volume(found, str(a / "upper")) == []
        assert holder.of_root_volume(found, str(b / "upper")) == found
        assert holder.of_root_volume(found, str(b / "up")) == []  # a prefix of the path is not the path
    finally:
        _end([proc], started)
