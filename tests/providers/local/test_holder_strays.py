"""``holder.kill_strays`` against real processes in a private mount namespace (root only)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from slurmpod.providers.local import holder


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (unshare --mount)")
def test_kill_strays_ends_every_process_of_the_strays_mount_namespace(tmp_path: Path) -> None:
    """A holder left by a killed server, and beside it a process of the same boot whose command line no longer
    names the boot file (a node's PID 1 after it exec'd systemd, which missed the parent-death signal): both end,
    and quickly (not after the whole timeout)."""
    boot = tmp_path / "boot.json"
    pids = tmp_path / "pids"
    script = (f'setsid sleep 300 & echo $! > {pids}; '
              f'exec sh -c "echo $$ >> {pids}; sleep 300" "{holder.NODEINIT}" "{boot}"')
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script],
                            start_new_session=True)
    started: list[int] = []
    try:
        deadline = time.monotonic() + 10
        while len(started) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            started = [int(x) for x in pids.read_text().split()] if pids.exists() else []
        assert len(started) == 2
        mntns = holder.ns_of(started[0], "mnt")
        assert mntns and mntns == holder.ns_of(started[1], "mnt") != holder.ns_of(os.getpid(), "mnt")
        t0 = time.monotonic()
        holder.kill_strays(boot, timeout=5)
        assert time.monotonic() - t0 < 3
        assert holder.pids_in_mntns(mntns) == []
    finally:
        for pid in [*started, proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(10)
